// Small helpers of the AVX2 kernel files (lane masks, partial stores,
// horizontal sums, 8x8 transposes). Internal linkage (an anonymous
// namespace): each file that includes this compiles its own copy with its
// own -m flags, so no inline code is shared across ISA objects.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace tct {
namespace x86 {
namespace {

// Mask of the first n lanes (none for n <= 0, all 8 for n >= 8), for masked loads.
inline __m256i first_lanes(int64_t n) {
  const int k = n <= 0 ? 0 : n >= 8 ? 8 : static_cast<int>(n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// p[0..n) = the first n lanes of v (nothing for n <= 0, all 8 for n >= 8), in
// 4-, 2- and 1-float pieces: masked stores (vmaskmovps) are slow on AMD's
// cores (Zen 3: the layers with column tails ran 6-9 % faster this way).
inline void store_first_lanes(float* p, __m256 v, int64_t n) {
  if (n >= 8) {
    _mm256_storeu_ps(p, v);
    return;
  }
  __m128 x = _mm256_castps256_ps128(v);
  if (n >= 4) {
    _mm_storeu_ps(p, x);
    x = _mm256_extractf128_ps(v, 1);
    p += 4;
    n -= 4;
  }
  if (n >= 2) {
    _mm_storel_pi(reinterpret_cast<__m64*>(p), x);
    x = _mm_movehl_ps(x, x);
    p += 2;
    n -= 2;
  }
  if (n > 0) _mm_store_ss(p, x);
}

// The first n 16-bit elements at p in the low lanes, zeros above (nothing read
// for n <= 0, all 8 for n >= 8), reading no further: pieces of 8, 4 and 2
// bytes put together in registers. (Copying them through a stack buffer, as
// before, made each tail load wait for a failed store-to-load forward: the
// 17-channel depthwise layers ran at half our f32 speed on Zen 3.)
inline __m128i load_first16(const uint16_t* p, int64_t n) {
  const auto u32 = [](const uint16_t* q) {
    int32_t v;
    std::memcpy(&v, q, 4);
    return v;
  };
  const auto u64 = [](const uint16_t* q) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)); };
  switch (n <= 0 ? 0 : n >= 8 ? 8 : n) {
    case 0: return _mm_setzero_si128();
    case 1: return _mm_cvtsi32_si128(p[0]);
    case 2: return _mm_cvtsi32_si128(u32(p));
    case 3: return _mm_insert_epi16(_mm_cvtsi32_si128(u32(p)), p[2], 2);
    case 4: return u64(p);
    case 5: return _mm_insert_epi16(u64(p), p[4], 4);
    case 6: return _mm_insert_epi32(u64(p), u32(p + 4), 2);
    case 7: return _mm_insert_epi16(_mm_insert_epi32(u64(p), u32(p + 4), 2), p[6], 6);
    default: return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
}

// p[0..n) = the first n 16-bit lanes of h (nothing for n <= 0, all 8 for n >= 8),
// in 8-, 4- and 2-byte pieces.
inline void store_first16(uint16_t* p, __m128i h, int64_t n) {
  if (n >= 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
    return;
  }
  if (n >= 4) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), h);
    h = _mm_srli_si128(h, 8);
    p += 4;
    n -= 4;
  }
  if (n >= 2) {
    const int32_t v = _mm_cvtsi128_si32(h);
    std::memcpy(p, &v, 4);
    h = _mm_srli_si128(h, 4);
    p += 2;
    n -= 2;
  }
  if (n > 0) p[0] = static_cast<uint16_t>(_mm_cvtsi128_si32(h));
}

// The sum of v's 8 lanes.
inline float hsum(__m256 v) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

// In-register 8x8 transpose: rows r[0..7] in, columns r[0..7] out.
inline void transpose8x8(__m256 r[8]) {
  __m256 t[8];
  // t[2q], t[2q+1]: rows 2q, 2q+1 interleaved (columns 0,1,4,5 / 2,3,6,7).
  for (int q = 0; q < 4; ++q) {
    t[2 * q] = _mm256_unpacklo_ps(r[2 * q], r[2 * q + 1]);
    t[2 * q + 1] = _mm256_unpackhi_ps(r[2 * q], r[2 * q + 1]);
  }
  // r[c + 4h]: column c (lane 0) and c + 4 (lane 1) of rows 4h..4h+3.
  for (int h = 0; h < 2; ++h) {
    const __m256* u = t + 4 * h;
    r[4 * h + 0] = _mm256_shuffle_ps(u[0], u[2], 0x44);
    r[4 * h + 1] = _mm256_shuffle_ps(u[0], u[2], 0xee);
    r[4 * h + 2] = _mm256_shuffle_ps(u[1], u[3], 0x44);
    r[4 * h + 3] = _mm256_shuffle_ps(u[1], u[3], 0xee);
  }
  for (int c = 0; c < 4; ++c) {
    t[c] = _mm256_permute2f128_ps(r[c], r[4 + c], 0x20);
    t[c + 4] = _mm256_permute2f128_ps(r[c], r[4 + c], 0x31);
  }
  for (int c = 0; c < 8; ++c) r[c] = t[c];
}

}  // namespace
}  // namespace x86
}  // namespace tct
