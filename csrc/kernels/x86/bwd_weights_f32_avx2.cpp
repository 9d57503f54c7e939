// AVX2 micro-kernels of the f32 backward-weights pass (see bwd_weights_f32.h).
// Leaf functions over raw pointers only: this file is compiled with AVX2
// flags, so it must not instantiate anything that other files also define.
#include <immintrin.h>

#include <cstdint>

#include "avx2_util.h"
#include "bwd_weights_f32.h"

namespace tct {
namespace x86 {
namespace bww {
namespace {

// The last vector of a tail tile is masked so that no lane past the channel
// range is read or written.
template <int J, int NV, bool MASK>
inline __m256 load_vec(const float* p, __m256i tail) {
  if constexpr (MASK && J == NV - 1) return _mm256_maskload_ps(p + 8 * J, tail);
  else return _mm256_loadu_ps(p + 8 * J);
}

template <int J, int NV, bool MASK>
inline void store_vec(float* p, __m256 v, int tail_n) {
  if constexpr (MASK && J == NV - 1) store_first_lanes(p + 8 * J, v, tail_n);
  else _mm256_storeu_ps(p + 8 * J, v);
}

// Individually named accumulators (c<row>_<vec>): GCC 12 spills arrays of
// vectors in this loop. Unused names are dead code for small tiles.
#define BWW_FOR_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

#define BWW_DECL(i) \
  __m256 c##i##_0 = _mm256_setzero_ps(), c##i##_1 = _mm256_setzero_ps(), c##i##_2 = _mm256_setzero_ps();

#define BWW_LOAD(i)                                                   \
  if constexpr (i < MR) {                                             \
    const float* cr = t.c + (i) * t.ldc;                              \
    c##i##_0 = load_vec<0, NV, MASK>(cr, tail);                       \
    if constexpr (NV > 1) c##i##_1 = load_vec<1, NV, MASK>(cr, tail); \
    if constexpr (NV > 2) c##i##_2 = load_vec<2, NV, MASK>(cr, tail); \
  }

#define BWW_FMA(i)                                                      \
  if constexpr (i < MR) {                                               \
    const __m256 av = i < kQ ? _mm256_permute_ps(q, ((i) & 3) * 0x55) : _mm256_broadcast_ss(a + (i)); \
    c##i##_0 = _mm256_fmadd_ps(av, b0, c##i##_0);                       \
    if constexpr (NV > 1) c##i##_1 = _mm256_fmadd_ps(av, b1, c##i##_1); \
    if constexpr (NV > 2) c##i##_2 = _mm256_fmadd_ps(av, b2, c##i##_2); \
  }

#define BWW_STORE(i)                                                  \
  if constexpr (i < MR) {                                             \
    float* cr = t.c + (i) * t.ldc;                                    \
    store_vec<0, NV, MASK>(cr, c##i##_0, tail_n);                     \
    if constexpr (NV > 1) store_vec<1, NV, MASK>(cr, c##i##_1, tail_n); \
    if constexpr (NV > 2) store_vec<2, NV, MASK>(cr, c##i##_2, tail_n); \
  }

// MR x (8*NV) tile: per pixel, NV vector loads of B and MR broadcasts of A.
template <int MR, int NV, bool MASK, bool PK>
void gemm_kernel(const TileArgs& t) {
  const int tail_n = t.cols - 8 * (NV - 1);
  const __m256i tail = first_lanes(tail_n);
  BWW_FOR_ROWS(BWW_DECL)
  if (!t.fresh) {
    BWW_FOR_ROWS(BWW_LOAD)
  }
  const Pix* px = t.pix;
  constexpr bool LM = MASK && !PK;  // packed B rows are padded: no load masks
  // Locals, so that the loop keeps them in registers (GCC re-read t's
  // fields every pixel, two loads more per pixel).
  const int64_t npix = t.npix, lda = t.lda, ldb = t.ldb, a_off = t.a_off, b_off = t.b_off;
  constexpr int kQ = NV == 1 && MR >= 12 ? 4 : 0;
  const float* pa = t.pa;
  const float* pb = t.pb;
  for (int64_t i = 0; i < npix; ++i, pa += lda, pb += ldb) {
    const float* a = PK ? pa : px[i].a + a_off;
    const float* b = PK ? pb : px[i].b + b_off;
    const __m256 b0 = load_vec<0, NV, LM>(b, tail);
    __m256 b1, b2;
    if constexpr (NV > 1) b1 = load_vec<1, NV, LM>(b, tail);
    if constexpr (NV > 2) b2 = load_vec<2, NV, LM>(b, tail);
    // One column vector: the first kQ rows' A values from one 16-byte load
    // (see the AVX-512 file). Zen 5 in cache, 12x8 tile: pixel lists
    // 79 -> 98-99 % of the peak (2 rows: 84 %).
    __m256 q = _mm256_setzero_ps();
    if constexpr (kQ > 0) q = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(a));
    BWW_FOR_ROWS(BWW_FMA)
  }
  BWW_FOR_ROWS(BWW_STORE)
}

template <int NV>
void gemm_by_rows(const TileArgs& t, bool mask) {
  constexpr int kMax = kAvx2Rows[NV];
  switch (t.rows) {
#define BWW_CASE(r)                                                         \
  case r + 1:                                                               \
    if constexpr (r + 1 <= kMax) {                                          \
      if (!t.pix) {                                                         \
        if (mask) gemm_kernel<r + 1, NV, true, true>(t);                    \
        else gemm_kernel<r + 1, NV, false, true>(t);                        \
      } else if (mask) gemm_kernel<r + 1, NV, true, false>(t);              \
      else gemm_kernel<r + 1, NV, false, false>(t);                         \
    }                                                                       \
    return;
    BWW_FOR_ROWS(BWW_CASE)
#undef BWW_CASE
    default: return;
  }
}

// Depthwise: C[n] += sum A[n] * B[n] over NV vectors of channels. Named
// accumulators d<j> (no array, see above).
#define BWW_DW_VECS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define BWW_DW_DECL(j) __m256 d##j = _mm256_setzero_ps();
#define BWW_DW_LOAD(j) \
  if constexpr (j < NV) d##j = load_vec<j, NV, MASK>(t.c, tail);
#define BWW_DW_FMA(j)                                                                      \
  if constexpr (j < NV)                                                                    \
    d##j = _mm256_fmadd_ps(load_vec<j, NV, MASK>(a, tail), load_vec<j, NV, MASK>(b, tail), d##j);
#define BWW_DW_STORE(j) \
  if constexpr (j < NV) store_vec<j, NV, MASK>(t.c, d##j, tail_n);

template <int NV, bool MASK>
void dw_kernel(const TileArgs& t) {
  const int tail_n = t.cols - 8 * (NV - 1);
  const __m256i tail = first_lanes(tail_n);
  BWW_DW_VECS(BWW_DW_DECL)
  BWW_DW_VECS(BWW_DW_LOAD)
  const Pix* px = t.pix;
  for (int64_t i = 0; i < t.npix; ++i) {
    const float* a = px[i].a + t.b_off;
    const float* b = px[i].b + t.b_off;
    BWW_DW_VECS(BWW_DW_FMA)
  }
  BWW_DW_VECS(BWW_DW_STORE)
}

// Grouped with few channels: MG rows (A channels per group), ng = cols B
// channels per group, 8/ng groups in one vector. Lane l belongs to group
// l/ng; its A value for row j is chunk[(l/ng)*MG + j], brought in by a
// permute. Accumulators g<j>.
template <int MG>
void grouped_kernel(const TileArgs& t) {
  const int ng = t.cols;
  const int shift = ng == 2 ? 1 : 2;
  const __m256i bm = first_lanes(t.groups * ng), am = first_lanes(t.groups * MG);
  const __m256i grp = _mm256_mullo_epi32(
      _mm256_srli_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), shift), _mm256_set1_epi32(MG));
  const __m256i idx0 = grp, idx1 = _mm256_add_epi32(grp, _mm256_set1_epi32(1)),
                idx2 = _mm256_add_epi32(grp, _mm256_set1_epi32(2)),
                idx3 = _mm256_add_epi32(grp, _mm256_set1_epi32(3));
  __m256 g0 = _mm256_setzero_ps(), g1 = _mm256_setzero_ps(), g2 = _mm256_setzero_ps(),
         g3 = _mm256_setzero_ps();
  const Pix* px = t.pix;
  for (int64_t i = 0; i < t.npix; ++i) {
    const __m256 av = _mm256_maskload_ps(px[i].a + t.a_off, am);
    const __m256 bv = _mm256_maskload_ps(px[i].b + t.b_off, bm);
    g0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(av, idx0), bv, g0);
    if constexpr (MG > 1) g1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(av, idx1), bv, g1);
    if constexpr (MG > 2) g2 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(av, idx2), bv, g2);
    if constexpr (MG > 3) g3 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(av, idx3), bv, g3);
  }
  _mm256_storeu_ps(t.c, g0);
  if constexpr (MG > 1) _mm256_storeu_ps(t.c + 8, g1);
  if constexpr (MG > 2) _mm256_storeu_ps(t.c + 16, g2);
  if constexpr (MG > 3) _mm256_storeu_ps(t.c + 24, g3);
}

// Packed rows are far apart (strided layers: one page per row), out of reach
// of the hardware prefetcher: the packing fetches the row kAhead ahead.
constexpr int64_t kAhead = 8;
inline void prefetch_row(const float* row, int64_t floats) {
  const char* f = reinterpret_cast<const char*>(row);
  for (int64_t j = 0; j < floats * 4; j += 64) _mm_prefetch(f + j, _MM_HINT_T0);
  _mm_prefetch(f + floats * 4 - 1, _MM_HINT_T0);
}

}  // namespace

void gemm_tile_avx2(const TileArgs& t) {
  if (t.rows <= 0 || t.cols <= 0) return;
  const int nv = (t.cols + 7) / 8;
  const bool mask = (t.cols % 8) != 0;
  switch (nv) {
    case 1: gemm_by_rows<1>(t, mask); break;
    case 2: gemm_by_rows<2>(t, mask); break;
    case 3: gemm_by_rows<3>(t, mask); break;
    default: break;
  }
}

void pack_avx2(const Pix* pix, int64_t n, bool side_b, int64_t off, int width, int64_t ld,
               float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n) {
      const float* r = side_b ? pix[i + kAhead].b : pix[i + kAhead].a;
      if (r) prefetch_row(r + off, width);
    }
    const float* r = side_b ? pix[i].b : pix[i].a;
    float* d = dst + i * ld;
    if (!r) {  // no pixel: a row of zeros
      for (int64_t j = 0; j < ld; ++j) d[j] = 0.f;
      continue;
    }
    const float* s = r + off;
    int64_t j = 0;
    for (; j + 8 <= width; j += 8) _mm256_storeu_ps(d + j, _mm256_loadu_ps(s + j));
    for (; j < ld; j += 8) {  // tail of the row, then zeros up to ld
      const int64_t left = width - j;
      const int64_t room = ld - j < 8 ? ld - j : 8;
      const __m256i lm = first_lanes(left);
      store_first_lanes(d + j, _mm256_maskload_ps(s + j, lm), room);
    }
  }
}

void pack_panels_avx2(const Pix* pix, int64_t n, int64_t off, int64_t readable,
                      const int64_t* starts, int64_t nblocks, int64_t block, float* dst) {
  const int64_t width = starts[nblocks];
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n) prefetch_row(pix[i + kAhead].a + off, width);
    const float* s = pix[i].a + off;
    for (int64_t j = 0; j < nblocks; ++j) {
      const int64_t m0 = starts[j], r = starts[j + 1] - m0;
      float* d = dst + m0 * block + j * kPanelSlack + i * r;
      // Whole vectors where the row has them; a store past the row's r
      // floats lands on the next row (written after it) or in the slack.
      for (int64_t c = 0; c < r; c += 8) {
        if (m0 + c + 8 <= readable) {
          _mm256_storeu_ps(d + c, _mm256_loadu_ps(s + m0 + c));
        } else {
          const int64_t left = r - c;
          store_first_lanes(d + c, _mm256_maskload_ps(s + m0 + c, first_lanes(left)), left);
        }
      }
    }
  }
}

void transpose_avx2(const float* src, int64_t ld_t, int64_t ld_q, int nq, int nt, int nn,
                    float* dst, int64_t ld_n, bool stream) {
  // Per 8 channels nb..: the 8x8 blocks of taps 0-7 and 8-15, then each
  // channel's run of taps written at once, so that a streamed 64-byte line
  // is filled by two adjacent stores (half-written lines left open in the
  // write-combining buffers go to memory as partial writes: 2x slower).
  const bool whole = stream && nt == 16 && (reinterpret_cast<uintptr_t>(dst) & 63) == 0 &&
                     (ld_n & 15) == 0;
  for (int nb = 0; nb < nn; nb += 8) {
    const __m256i nm = first_lanes(nn - nb);
    __m256 r[2][8];
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        const int tap = 8 * h + t;
        if (tap < nt) {
          const float* sp = src + tap * ld_t + nb;
          __m256 v = _mm256_maskload_ps(sp, nm);
          for (int q = 1; q < nq; ++q) v = _mm256_add_ps(v, _mm256_maskload_ps(sp + q * ld_q, nm));
          r[h][t] = v;
        } else {
          r[h][t] = _mm256_setzero_ps();
        }
      }
      transpose8x8(r[h]);  // r[h][n]: channel nb + n over taps 8h..
    }
    for (int n = 0; n < 8 && nb + n < nn; ++n) {
      float* d = dst + (nb + n) * ld_n;
      if (whole) {
        _mm256_stream_ps(d, r[0][n]);
        _mm256_stream_ps(d + 8, r[1][n]);
      } else {
        store_first_lanes(d, r[0][n], nt);
        if (nt > 8) store_first_lanes(d + 8, r[1][n], nt - 8);
      }
    }
  }
}

void transpose_taps_avx2(const float* src, int64_t ld_t, int64_t ld_q, int nq, int64_t taps,
                         int nn, float* dst, int64_t ld_n, bool stream) {
  for (int64_t t0 = 0; t0 < taps; t0 += 16)
    transpose_avx2(src + t0 * ld_t, ld_t, ld_q, nq, static_cast<int>(taps - t0 < 16 ? taps - t0 : 16),
                   nn, dst + t0, ld_n, stream);
}

void store_fence_avx2() { _mm_sfence(); }

void grouped_tile_avx2(const TileArgs& t) {
  switch (t.rows) {
    case 1: grouped_kernel<1>(t); break;
    case 2: grouped_kernel<2>(t); break;
    case 3: grouped_kernel<3>(t); break;
    case 4: grouped_kernel<4>(t); break;
    default: break;
  }
}

void dw_tile_avx2(const TileArgs& t) {
  if (t.cols <= 0) return;
  const int nv = (t.cols + 7) / 8;
  const bool mask = (t.cols % 8) != 0;
#define BWW_DW(n)                    \
  case n:                            \
    if (mask) dw_kernel<n, true>(t); \
    else dw_kernel<n, false>(t);     \
    break;
  switch (nv) {
    BWW_DW(1) BWW_DW(2) BWW_DW(3) BWW_DW(4) BWW_DW(5) BWW_DW(6) BWW_DW(7) BWW_DW(8)
    default: break;
  }
#undef BWW_DW
}

}  // namespace bww
}  // namespace x86
}  // namespace tct
