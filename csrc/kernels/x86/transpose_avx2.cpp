// f32 block transposes in registers (AVX2), as 8x8 transposes: 16x16 blocks
// for the NCX <-> NXC layout changes and the planar packing, masked blocks
// into row pointers for the weight packing of the channels-last kernels.
// Leaf functions over raw pointers (ISA-file rule).
#include <immintrin.h>

#include <cstdint>

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

void transpose_rows_avx2(const float* src, int64_t src_stride, int rows, int cols,
                         float* const* dst) {
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

}  // namespace x86
}  // namespace tct
