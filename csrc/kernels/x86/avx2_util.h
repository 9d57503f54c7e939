// Small helpers of the AVX2 kernel files (lane masks, partial stores,
// horizontal sums, 8x8 transposes). Internal linkage (an anonymous
// namespace): each file that includes this compiles its own copy with its
// own -m flags, so no inline code is shared across ISA objects.
#pragma once

#include <immintrin.h>

#include <cstdint>

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
