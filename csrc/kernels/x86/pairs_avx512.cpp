// The AVX-512 BW helpers of the bf16 pair tiles (AMX and VDPBF16PS alike):
// the weight packing into bf16 pairs, the backward-weights pair panels and
// gathers, and the 16-bit 32 x 32 transposes of the routes' layout changes.
// Compiled with the AVX-512 flags only (no AMX or BF16 instruction), so
// they run on every CPU of either pair ISA. Contracts: conv_f32_kernels.h.
#include <immintrin.h>

#include <cstdint>

#include "conv_f32_kernels.h"
#include "transpose.h"

namespace tct {
namespace x86 {
namespace {

// The first n of 32 lanes (none for n <= 0, all for n >= 32).
inline __mmask32 lanes32(int64_t n) {
  return n >= 32 ? ~__mmask32{0} : n <= 0 ? __mmask32{0} : (__mmask32{1} << n) - 1;
}

// Words 2j, 2j + 1 of the result: a[16 * half + j], b[16 * half + j], j < 16
// (pairs of 16-bit values in 32-bit slots).
inline __m512i interleave16(__m512i a, __m512i b, int half = 0) {
  const __m512i idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                       40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1,
                                       32, 0);
  return _mm512_permutex2var_epi16(
      a, half ? _mm512_add_epi16(idx, _mm512_set1_epi16(16)) : idx, b);
}

}  // namespace

void bww_bf16_pairs_avx512(const uint16_t* r0, const uint16_t* r1, int64_t n, int64_t npad,
                        uint32_t* dst) {
  for (int64_t j = 0; j < npad; j += 16) {
    const __mmask32 k = lanes32(n - j < 16 ? n - j : 16);
    const __m512i a = r0 ? _mm512_maskz_loadu_epi16(k, r0 + j) : _mm512_setzero_si512();
    const __m512i b = r1 ? _mm512_maskz_loadu_epi16(k, r1 + j) : _mm512_setzero_si512();
    _mm512_store_si512(dst + j, interleave16(a, b));
  }
}

void bww_bf16_gather_avx512(const uint16_t* base, int64_t row_stride, uint32_t valid, int rows,
                         uint16_t* dst) {
  for (int m = 0; m < 16; ++m)
    _mm512_store_si512(dst + 32 * m, m < rows ? _mm512_maskz_loadu_epi16(valid, base + m * row_stride)
                                              : _mm512_setzero_si512());
}

// --- weight packing into bf16 pairs (the driver's pack_pairs) ---

void pack_pairs_taps_avx512(const uint16_t* s0, const uint16_t* s1, int64_t cs, int64_t ntaps,
                         int64_t jn, uint32_t* const* rows) {
  alignas(64) uint32_t buf[16 * 16];
  float* dst[16];
  for (int64_t t0 = 0; t0 < ntaps; t0 += 16) {
    const int64_t tn = ntaps - t0 < 16 ? ntaps - t0 : 16;
    const __mmask32 k = lanes32(tn);
    for (int64_t j0 = 0; j0 < jn; j0 += 16) {
      const int64_t n = jn - j0 < 16 ? jn - j0 : 16;
      // buf[j][t] = (s0[j][t0 + t], s1[j][t0 + t]): a column's taps, interleaved.
      for (int64_t j = 0; j < n; ++j) {
        const int64_t o = (j0 + j) * cs + t0;
        const __m512i a = _mm512_maskz_loadu_epi16(k, s0 + o);
        const __m512i b = s1 ? _mm512_maskz_loadu_epi16(k, s1 + o) : _mm512_setzero_si512();
        _mm512_store_si512(buf + 16 * j, interleave16(a, b));
      }
      for (int64_t t = 0; t < tn; ++t) dst[t] = reinterpret_cast<float*>(rows[t0 + t] + j0);
      transpose_rows_avx512(reinterpret_cast<const float*>(buf), 16, static_cast<int>(n),
                            static_cast<int>(tn), dst);
    }
  }
}

void pack_pairs_row_avx512(const uint16_t* s0, const uint16_t* s1, int64_t jn, uint32_t* dst) {
  for (int64_t j = 0; j < jn; j += 16) {
    const int64_t n = jn - j < 16 ? jn - j : 16;
    const __mmask32 k = lanes32(n);
    const __m512i a = _mm512_maskz_loadu_epi16(k, s0 + j);
    const __m512i b = s1 ? _mm512_maskz_loadu_epi16(k, s1 + j) : _mm512_setzero_si512();
    _mm512_mask_storeu_epi32(dst + j, static_cast<__mmask16>(k), interleave16(a, b));
  }
}

// --- 16-bit transposes (the pair-tile routes' layout changes) ---

void transpose_u16_block32_avx512(const uint16_t* src, int64_t lds, uint16_t* dst, int64_t ldd) {
  // Rows 2r and 2r + 1 interleaved into 32-bit pairs (r < 16, columns 0-15
  // and 16-31), then the 16 x 32 matrix of pairs transposed as floats: row c
  // of the result is the pairs (x[2r][c], x[2r+1][c]), r < 16.
  alignas(64) uint32_t pairs[16 * 32];
  for (int r = 0; r < 16; ++r) {
    const __m512i a = _mm512_loadu_si512(src + 2 * r * lds);
    const __m512i b = _mm512_loadu_si512(src + (2 * r + 1) * lds);
    _mm512_store_si512(pairs + 32 * r, interleave16(a, b, 0));
    _mm512_store_si512(pairs + 32 * r + 16, interleave16(a, b, 1));
  }
  float* rows[16];
  for (int h = 0; h < 2; ++h) {
    for (int c = 0; c < 16; ++c) rows[c] = reinterpret_cast<float*>(dst + (16 * h + c) * ldd);
    transpose_rows_avx512(reinterpret_cast<const float*>(pairs + 16 * h), 32, 16, 16, rows);
  }
}

}  // namespace x86
}  // namespace tct
