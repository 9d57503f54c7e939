// 16x16 f32 block transposes in registers (AVX-512): the NCX <-> NXC layout
// changes of the fast paths and the weight packing of the channels-last
// kernels. Leaf functions over raw pointers (ISA-file rule).
#include <immintrin.h>

#include <cstdint>

#include "transpose.h"

namespace tct {
namespace x86 {
namespace {

// In place: on return r[j] holds column j of the 16 rows given.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  // Interleave 32-bit pairs, then 64-bit pairs: each 128-bit lane L of t[4q+c]
  // holds column 4L+c of rows 4q..4q+3.
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    const __m512d a = _mm512_castps_pd(t[4 * q]), b = _mm512_castps_pd(t[4 * q + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * q + 2]), d = _mm512_castps_pd(t[4 * q + 3]);
    t[4 * q + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    t[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    t[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    t[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // Gather the 128-bit lanes: column 4L+c = lanes L of t[c], t[4+c], t[8+c], t[12+c].
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(t[c], t[4 + c], 0x88);   // L0, L2 of rows 0-7
    const __m512 v1 = _mm512_shuffle_f32x4(t[c], t[4 + c], 0xdd);   // L1, L3 of rows 0-7
    const __m512 w0 = _mm512_shuffle_f32x4(t[8 + c], t[12 + c], 0x88);
    const __m512 w1 = _mm512_shuffle_f32x4(t[8 + c], t[12 + c], 0xdd);
    r[c] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    r[c + 8] = _mm512_shuffle_f32x4(v0, w0, 0xdd);
    r[c + 4] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    r[c + 12] = _mm512_shuffle_f32x4(v1, w1, 0xdd);
  }
}

}  // namespace

void transpose_block16_avx512(const float* src, int64_t src_stride, float* dst,
                              int64_t dst_stride) {
  __m512 r[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * src_stride);
  transpose16(r);
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) _mm512_storeu_ps(dst + j * dst_stride, r[j]);
}

namespace {

// transpose_rows (STREAM: whole lines with non-temporal stores, see transpose.h).
template <bool STREAM>
inline void transpose_rows(const float* src, int64_t src_stride, int rows, int cols,
                           float* const* dst) {
  const __mmask16 cm = static_cast<__mmask16>((1u << cols) - 1u);
  const __mmask16 rm = static_cast<__mmask16>((1u << rows) - 1u);
  __m512 r[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    r[i] = i < rows ? _mm512_maskz_loadu_ps(cm, src + i * src_stride) : _mm512_setzero_ps();
  transpose16(r);
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    if (j >= cols) continue;
    if constexpr (STREAM) _mm512_stream_ps(dst[j], r[j]);
    else _mm512_mask_storeu_ps(dst[j], rm, r[j]);
  }
}

}  // namespace

void transpose_rows_avx512(const float* src, int64_t src_stride, int rows, int cols,
                           float* const* dst) {
  transpose_rows<false>(src, src_stride, rows, cols, dst);
}

void transpose_rows_stream_avx512(const float* src, int64_t src_stride, int rows, int cols,
                                  float* const* dst) {
  transpose_rows<true>(src, src_stride, rows, cols, dst);
}

}  // namespace x86
}  // namespace tct
