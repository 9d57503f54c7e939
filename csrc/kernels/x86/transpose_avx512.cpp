// 16x16 f32 block transpose in registers (AVX-512): the NCX <-> NXC layout
// changes of the fast paths. Leaf function over raw pointers (ISA-file rule).
#include <immintrin.h>

#include <cstdint>

#include "transpose.h"

namespace tct {
namespace x86 {

void transpose_block16_avx512(const float* src, int64_t src_stride, float* dst,
                              int64_t dst_stride) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * src_stride);
  // Interleave 32-bit pairs, then 64-bit pairs: each 128-bit lane L of u[4q+c]
  // holds column 4L+c of rows 4q..4q+3.
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int q = 0; q < 4; ++q) {
    const __m512d a = _mm512_castps_pd(t[4 * q]), b = _mm512_castps_pd(t[4 * q + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * q + 2]), d = _mm512_castps_pd(t[4 * q + 3]);
    r[4 * q + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // Gather the 128-bit lanes: column 4L+c = lanes L of r[c], r[4+c], r[8+c], r[12+c].
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);   // L0, L2 of rows 0-7
    const __m512 v1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);   // L1, L3 of rows 0-7
    const __m512 w0 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    const __m512 w1 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
    _mm512_storeu_ps(dst + (c + 0) * dst_stride, _mm512_shuffle_f32x4(v0, w0, 0x88));
    _mm512_storeu_ps(dst + (c + 8) * dst_stride, _mm512_shuffle_f32x4(v0, w0, 0xdd));
    _mm512_storeu_ps(dst + (c + 4) * dst_stride, _mm512_shuffle_f32x4(v1, w1, 0x88));
    _mm512_storeu_ps(dst + (c + 12) * dst_stride, _mm512_shuffle_f32x4(v1, w1, 0xdd));
  }
}

}  // namespace x86
}  // namespace tct
