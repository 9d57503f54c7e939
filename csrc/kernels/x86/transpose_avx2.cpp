// 16x16 f32 block transpose in registers (AVX2), as four 8x8 transposes: the
// NCX <-> NXC layout changes and the planar packing. Leaf function over raw
// pointers (ISA-file rule).
#include <immintrin.h>

#include <cstdint>

#include "transpose.h"

namespace tct {
namespace x86 {
namespace {

// dst[j * ds + i] = src[i * ss + j] for i, j < 8.
inline void transpose8(const float* src, int64_t ss, float* dst, int64_t ds) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ss);
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
    _mm256_storeu_ps(dst + c * ds, _mm256_permute2f128_ps(r[c], r[4 + c], 0x20));
    _mm256_storeu_ps(dst + (c + 4) * ds, _mm256_permute2f128_ps(r[c], r[4 + c], 0x31));
  }
}

}  // namespace

void transpose_block16_avx2(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 16; j += 8)
      transpose8(src + i * src_stride + j, src_stride, dst + j * dst_stride + i, dst_stride);
}

}  // namespace x86
}  // namespace tct
