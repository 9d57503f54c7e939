// The AVX-512 BW helpers of the bf16 pair tiles (AMX and VDPBF16PS alike):
// the weight packing into bf16 pairs, the backward-weights pair panels and
// gathers, and the 16-bit 32 x 32 transposes of the routes' layout changes.
// Compiled with the AVX-512 flags only (no AMX or BF16 instruction), so
// they run on every CPU of either pair ISA. Contracts: conv_f32_kernels.h.
#include <immintrin.h>

#include <algorithm>
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

// dst[j] = (s0[j], s1[j]) for j < n, zeros to the next multiple of 16 (every
// s_h[j], j < n, readable).
inline void pairs_of_runs(const uint16_t* s0, const uint16_t* s1, int64_t n, uint32_t* dst) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512i x0 =
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s0 + j)));
    const __m512i x1 =
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s1 + j)));
    _mm512_storeu_si512(dst + j, interleave16(x0, x1));
  }
  if (j < n) {
    const __mmask32 k = lanes32(n - j);
    _mm512_storeu_si512(dst + j, interleave16(_mm512_maskz_loadu_epi16(k, s0 + j),
                                              _mm512_maskz_loadu_epi16(k, s1 + j)));
  }
}

}  // namespace

BwwFusedGeom bww_fused_geom(int64_t K2, int64_t OCg, int64_t tap_stride) {
  BwwFusedGeom g{K2, OCg, tap_stride, false, {}};
  g.window = tap_stride != OCg && K2 * OCg <= 32 && (K2 - 1) * tap_stride + OCg <= 64;
  for (int64_t c = 0; c < std::min<int64_t>(32, K2 * OCg); ++c)
    g.window_at[c] = static_cast<uint16_t>((c / OCg) * tap_stride + c % OCg);
  return g;
}

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
    _mm512_store_si512(dst + 32 * m,
                       m >= rows      ? _mm512_setzero_si512()
                       : valid == ~0u ? _mm512_loadu_si512(base + m * row_stride)
                                      : _mm512_maskz_loadu_epi16(valid, base + m * row_stride));
}

void bww_bf16_fused_pairs_avx512(const BwwFusedRow* rows, int64_t nrows, const BwwFusedGeom& g,
                                 uint32_t* dst) {
  const int64_t OCg = g.OCg, run = g.K2 * OCg, T = g.tap_stride;
  const __m512i zero = _mm512_setzero_si512();
  // Dilated or grouped taps (g.window): the column (k2, oc) is window element
  // (k2 - a) * T + oc of a window from tap a; compacted by one permute.
  const __m512i base_idx = _mm512_loadu_si512(g.window_at);
  for (int64_t r = 0; r < nrows; ++r, dst += run) {
    const BwwFusedRow& w = rows[r];
    if (T == OCg && w.p[0] && w.p[1] && (w.a[0] | w.a[1]) == 0 && w.b[0] == g.K2 &&
        w.b[1] == g.K2) {  // consecutive, every tap inside (most pixels)
      pairs_of_runs(w.p[0], w.p[1], run, dst);
    } else if (T == OCg) {  // consecutive: element j of the row at p - a*OCg + j
      for (int64_t j = 0; j < run; j += 16) {
        __m512i v[2];
        for (int h = 0; h < 2; ++h) {
          const int64_t lo = w.a[h] * OCg - j, hi = w.b[h] * OCg - j;
          const __mmask32 k = lanes32(hi < 16 ? hi : 16) & ~lanes32(lo);
          v[h] = w.p[h] && k ? _mm512_maskz_loadu_epi16(k, w.p[h] - w.a[h] * OCg + j) : zero;
        }
        _mm512_storeu_si512(dst + j, interleave16(v[0], v[1]));
      }
    } else if (g.window) {
      __m512i v[2];
      for (int h = 0; h < 2; ++h) {
        v[h] = zero;
        if (!w.p[h] || w.a[h] >= w.b[h]) continue;
        const int64_t span = (w.b[h] - 1 - w.a[h]) * T + OCg;
        const __m512i lo = _mm512_maskz_loadu_epi16(lanes32(span), w.p[h]);
        const __m512i hi = span > 32 ? _mm512_maskz_loadu_epi16(lanes32(span - 32), w.p[h] + 32) : zero;
        const __m512i idx =
            _mm512_sub_epi16(base_idx, _mm512_set1_epi16(static_cast<short>(w.a[h] * T)));
        const __mmask32 k = lanes32(w.b[h] * OCg) & ~lanes32(w.a[h] * OCg);
        v[h] = _mm512_maskz_permutex2var_epi16(k, lo, idx, hi);
      }
      _mm512_storeu_si512(dst, interleave16(v[0], v[1], 0));
      if (run > 16) _mm512_storeu_si512(dst + 16, interleave16(v[0], v[1], 1));
    } else {  // tap by tap
      for (int64_t k2 = 0; k2 < g.K2; ++k2)
        for (int64_t j = 0; j < OCg; j += 16) {
          __m512i v[2];
          for (int h = 0; h < 2; ++h) {
            const bool in = w.p[h] && w.a[h] <= k2 && k2 < w.b[h];
            v[h] = in ? _mm512_maskz_loadu_epi16(lanes32(OCg - j) & 0xffff,
                                                 w.p[h] + (k2 - w.a[h]) * T + j)
                      : zero;
          }
          _mm512_storeu_si512(dst + k2 * OCg + j, interleave16(v[0], v[1]));
        }
    }
  }
  _mm512_storeu_si512(dst, zero);  // zeros from the last column on (the padding)
}

void bww_bf16_fused_segment_avx512(const uint16_t* const* rowp, int64_t nrows,
                                   const BwwFusedGeom& g, int64_t stride, int64_t npairs,
                                   int64_t ldd, uint32_t* dst) {
  const __m512i zero = _mm512_setzero_si512();
  const int64_t run = g.K2 * g.OCg;
  if (g.tap_stride != g.OCg) {  // a window of taps, compacted by one permute (run <= 32)
    const int64_t span = (g.K2 - 1) * g.tap_stride + g.OCg;
    const __mmask32 klo = lanes32(span), khi = lanes32(span - 32), kc = lanes32(run);
    const __m512i idx = _mm512_loadu_si512(g.window_at);
    for (int64_t q = 0; q < npairs; ++q, dst += ldd) {
      uint32_t* d = dst;
      for (int64_t r = 0; r < nrows; ++r, d += run) {
        __m512i v[2] = {zero, zero};
        if (rowp[r])
          for (int h = 0; h < 2; ++h) {
            const uint16_t* const w = rowp[r] + (2 * q + h) * stride;
            const __m512i lo = span >= 32 ? _mm512_loadu_si512(w) : _mm512_maskz_loadu_epi16(klo, w);
            const __m512i hi =
                !khi ? zero
                : span <= 48 ? _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(khi, w + 32))
                             : _mm512_maskz_loadu_epi16(khi, w + 32);
            v[h] = _mm512_maskz_permutex2var_epi16(kc, lo, idx, hi);
          }
        _mm512_storeu_si512(d, interleave16(v[0], v[1], 0));
        if (run > 16) _mm512_storeu_si512(d + 16, interleave16(v[0], v[1], 1));
      }
      _mm512_storeu_si512(d, zero);  // the padding
    }
    return;
  }
  for (int64_t q = 0; q < npairs; ++q, dst += ldd) {
    uint32_t* d = dst;
    for (int64_t r = 0; r < nrows; ++r, d += run) {
      if (!rowp[r]) {
        for (int64_t j = 0; j < run; j += 16) _mm512_storeu_si512(d + j, zero);
        continue;
      }
      const uint16_t* const s0 = rowp[r] + 2 * q * stride;
      pairs_of_runs(s0, s0 + stride, run, d);
    }
    _mm512_storeu_si512(d, zero);  // the padding
  }
}

bool bww_bf16_nonfinite_avx512(const uint16_t* base, int64_t row_stride, uint32_t lanes,
                               uint32_t readable, int rows, uint32_t* out) {
  const __m512i exp = _mm512_set1_epi16(0x7f80);
  uint32_t any = 0;
  for (int m = 0; m < rows; ++m) {
    // Unmasked where all 32 are readable: a masked 16-bit load took about
    // 13 cycles on Zen 5.
    const uint16_t* const r = base + m * row_stride;
    const __m512i x = readable == ~0u ? _mm512_loadu_si512(r) : _mm512_maskz_loadu_epi16(lanes, r);
    out[m] = _mm512_mask_cmpeq_epi16_mask(lanes, _mm512_and_si512(x, exp), exp);
    any |= out[m];
  }
  return any != 0;
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

namespace {
// transpose_u16_few_avx512's permute indices and blend masks per row count
// r = 2..4 and destination vector k: element t of vector k is e = 32k + t,
// row e % r, column e / r (computed once, at compile time: per call they
// cost more than a short run's permutes).
struct FewIdx {
  alignas(64) uint16_t a[3][4][32], b[3][4][32];
  uint32_t hi[3][4];
};
constexpr FewIdx make_few_idx() {
  FewIdx f{};
  for (int r = 2; r <= 4; ++r)
    for (int k = 0; k < 4; ++k) {
      f.hi[r - 2][k] = 0;
      for (int t = 0; t < 32; ++t) {
        const int e = 32 * k + t, i = e % r, j = e / r;
        f.a[r - 2][k][t] = static_cast<uint16_t>(j + (i == 1 ? 32 : 0));
        f.b[r - 2][k][t] = static_cast<uint16_t>(j + (i == 3 ? 32 : 0));
        if (i >= 2) f.hi[r - 2][k] |= uint32_t{1} << t;
      }
    }
  return f;
}
constexpr FewIdx kFewIdx = make_few_idx();
}  // namespace

void transpose_u16_few_avx512(const uint16_t* src, int64_t lds, int rows, int64_t n, uint16_t* dst) {
  // Per 32 columns the rows' vectors x0..x3 give rows * 32 destination
  // elements (kFewIdx): rows 0 / 1 by one two-source permute, rows 2 / 3 by
  // another, blended by the row.
  const int r = rows;
  const FewIdx& f = kFewIdx;
  __mmask32 hi[4];
  for (int k = 0; k < 4; ++k) hi[k] = f.hi[r - 2][k];
  __m512i va[4], vb[4];
  for (int k = 0; k < r; ++k) {
    va[k] = _mm512_loadu_si512(f.a[r - 2][k]);
    vb[k] = _mm512_loadu_si512(f.b[r - 2][k]);
  }
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    const __m512i x0 = _mm512_loadu_si512(src + j), x1 = _mm512_loadu_si512(src + lds + j);
    const __m512i x2 = r > 2 ? _mm512_loadu_si512(src + 2 * lds + j) : _mm512_setzero_si512();
    const __m512i x3 = r > 3 ? _mm512_loadu_si512(src + 3 * lds + j) : _mm512_setzero_si512();
    for (int k = 0; k < r; ++k) {
      __m512i v = _mm512_permutex2var_epi16(x0, va[k], x1);
      if (r > 2) v = _mm512_mask_blend_epi16(hi[k], v, _mm512_permutex2var_epi16(x2, vb[k], x3));
      _mm512_storeu_si512(dst + j * r + 32 * k, v);
    }
  }
  for (; j < n; ++j)
    for (int i = 0; i < r; ++i) dst[j * r + i] = src[i * lds + j];
}

}  // namespace x86
}  // namespace tct
