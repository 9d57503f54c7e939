// f32 block transposes in registers (AVX2), as 8x8 transposes: 16x16 blocks
// for the NCX <-> NXC layout changes and the planar packing, masked blocks
// into row pointers for the weight packing of the channels-last kernels.
// Leaf functions over raw pointers (ISA-file rule).
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <utility>

#include "avx2_util.h"
#include "transpose.h"

namespace tct {
namespace x86 {
namespace {

// dst[j * ds + i] = src[i * ss + j] for i, j < 8.
inline void transpose8(const float* src, int64_t ss, float* dst, int64_t ds) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ss);
  transpose8x8(r);
  for (int c = 0; c < 8; ++c) _mm256_storeu_ps(dst + c * ds, r[c]);
}

}  // namespace

void transpose_block16_avx2(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 16; j += 8)
      transpose8(src + i * src_stride + j, src_stride, dst + j * dst_stride + i, dst_stride);
}

namespace {

// transpose_rows for 16 rows and NC columns, every bound known when compiled:
// the weight packing's common case (16 columns of a channel, NC taps).
template <int NC>
void rows16(const float* src, int64_t ss, float* const* dst) {
#pragma GCC unroll 2
  for (int j0 = 0; j0 < NC; j0 += 8) {
    const int nj = NC - j0 < 8 ? NC - j0 : 8;
    const __m256i cm = first_lanes(nj);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i)
        r[i] = nj == 8 ? _mm256_loadu_ps(src + (8 * h + i) * ss + j0)
                       : _mm256_maskload_ps(src + (8 * h + i) * ss + j0, cm);
      transpose8x8(r);
#pragma GCC unroll 8
      for (int j = 0; j < nj; ++j) _mm256_storeu_ps(dst[j0 + j] + 8 * h, r[j]);
    }
  }
}

template <int... I>
constexpr auto rows16_table(std::integer_sequence<int, I...>) {
  return std::array<void (*)(const float*, int64_t, float* const*), sizeof...(I)>{rows16<I + 1>...};
}
constexpr auto kRows16 = rows16_table(std::make_integer_sequence<int, 16>{});

}  // namespace

void transpose_rows_avx2(const float* src, int64_t src_stride, int rows, int cols,
                         float* const* dst) {
  if (rows == 16 && cols >= 1 && cols <= 16) return kRows16[cols - 1](src, src_stride, dst);
  // 8x8 blocks: rows i0.. of columns j0.., loaded masked, stored masked.
  for (int j0 = 0; j0 < cols; j0 += 8) {
    const __m256i cm = first_lanes(cols - j0);
    for (int i0 = 0; i0 < rows; i0 += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i)
        r[i] = i0 + i < rows ? _mm256_maskload_ps(src + (i0 + i) * src_stride + j0, cm)
                             : _mm256_setzero_ps();
      transpose8x8(r);  // r[j]: column j0 + j over rows i0..
      for (int j = 0; j < 8 && j0 + j < cols; ++j)
        store_first_lanes(dst[j0 + j] + i0, r[j], rows - i0);
    }
  }
}

void transpose_rows_stream_avx2(const float* src, int64_t src_stride, int rows, int cols,
                                float* const* dst) {
  // Both halves of a line stored back to back (one write-combining buffer).
  for (int j0 = 0; j0 < cols; j0 += 8) {
    const __m256i cm = first_lanes(cols - j0);
    __m256 r[2][8];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i)
        r[h][i] = 8 * h + i < rows ? _mm256_maskload_ps(src + (8 * h + i) * src_stride + j0, cm)
                                   : _mm256_setzero_ps();
      transpose8x8(r[h]);  // r[h][j]: column j0 + j over rows 8h..
    }
    for (int j = 0; j < 8 && j0 + j < cols; ++j) {
      _mm256_stream_ps(dst[j0 + j], r[0][j]);
      _mm256_stream_ps(dst[j0 + j] + 8, r[1][j]);
    }
  }
}

// --- 16-bit transposes (ncx16's layout changes, heuristics A24) ---

// dst[c * ldd + r] = src[r * lds + c] for r < 8, c < 16: the 8 x 16 block as
// two 8 x 8 transposes side by side (one per 128-bit lane) in three rounds of
// interleaves (16-, 32-, 64-bit).
static inline void transpose_u16_8x16(const uint16_t* src, int64_t lds, uint16_t* dst, int64_t ldd) {
  __m256i r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * lds));
  for (int i = 0; i < 4; ++i) {  // rows 2i, 2i + 1: columns 0-3 (lo), 4-7 (hi) as pairs
    t[2 * i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // rows 4h..4h+3: columns (0,1) (2,3) (4,5) (6,7) as quads
    r[4 * h] = _mm256_unpacklo_epi32(t[4 * h], t[4 * h + 2]);
    r[4 * h + 1] = _mm256_unpackhi_epi32(t[4 * h], t[4 * h + 2]);
    r[4 * h + 2] = _mm256_unpacklo_epi32(t[4 * h + 1], t[4 * h + 3]);
    r[4 * h + 3] = _mm256_unpackhi_epi32(t[4 * h + 1], t[4 * h + 3]);
  }
  for (int q = 0; q < 4; ++q) {  // columns 2q, 2q + 1: rows 0-3 from r[q], 4-7 from r[4 + q]
    const __m256i lo = _mm256_unpacklo_epi64(r[q], r[4 + q]), hi = _mm256_unpackhi_epi64(r[q], r[4 + q]);
    for (int l = 0; l < 2; ++l) {  // lane l: columns 8l + 2q, 8l + 2q + 1
      const __m128i a = l ? _mm256_extracti128_si256(lo, 1) : _mm256_castsi256_si128(lo);
      const __m128i b = l ? _mm256_extracti128_si256(hi, 1) : _mm256_castsi256_si128(hi);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (8 * l + 2 * q) * ldd), a);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (8 * l + 2 * q + 1) * ldd), b);
    }
  }
}

void transpose_u16_block32_avx2(const uint16_t* src, int64_t lds, uint16_t* dst, int64_t ldd) {
  for (int r = 0; r < 32; r += 8)
    for (int c = 0; c < 32; c += 16) transpose_u16_8x16(src + r * lds + c, lds, dst + c * ldd + r, ldd);
}

}  // namespace x86
}  // namespace tct
