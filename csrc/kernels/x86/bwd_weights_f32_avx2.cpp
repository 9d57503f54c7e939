// AVX2 micro-kernels of the f32 backward-weights pass (see bwd_weights_f32.h).
// Leaf functions over raw pointers only: this file is compiled with AVX2
// flags, so it must not instantiate anything that other files also define.
#include <immintrin.h>

#include <cstdint>

#include "avx2_util.h"
#include "bwd_weights_f32.h"
#include "bwd_weights_f32_tiles.h"
#include "vec_avx2.h"

namespace tct {
namespace x86 {
namespace bww {
namespace {

using V = VecAvx2;
struct Geometry {
  static constexpr int rows(int nv) { return kAvx2Rows[nv]; }
  static constexpr int kMaxVecs = kAvx2MaxVecs;
  static constexpr int kDwVecs = kAvx2DwVecs;
};

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
template <class T>
inline void prefetch_row(const T* row, int64_t n) {
  prefetch_lines(reinterpret_cast<uintptr_t>(row), static_cast<uintptr_t>(n) * sizeof(T));
}

// pack_panels_avx2 over 16-bit rows.
template <int KIND>
void pack_panels16_kind(const Pix* pix, int64_t n, int64_t off, int64_t readable,
                        const int64_t* starts, int64_t nblocks, int64_t block, float* dst) {
  const int64_t width = starts[nblocks];
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t* s = reinterpret_cast<const uint16_t*>(pix[i].a) + off;
    if (i + kAhead < n) prefetch_row(reinterpret_cast<const uint16_t*>(pix[i + kAhead].a) + off, width);
    for (int64_t j = 0; j < nblocks; ++j) {
      const int64_t m0 = starts[j], r = starts[j + 1] - m0;
      float* d = dst + m0 * block + j * kPanelSlack + i * r;
      for (int64_t c = 0; c < r; c += 8) {
        if (m0 + c + 8 <= readable) {
          _mm256_storeu_ps(d + c, V::load16<KIND>(s + m0 + c));
        } else {
          const int64_t left = r - c;
          store_first_lanes(d + c, V::load16_part<KIND>(first_lanes(left), s + m0 + c, left), left);
        }
      }
    }
  }
}

}  // namespace

void pack16_avx2(const Pix* pix, int64_t n, bool side_b, int64_t off, int width, int64_t ld,
                 float* dst, int kind) {
  if (kind == 2) pack_rows<V, 2>(pix, n, side_b, off, width, ld, dst);
  else pack_rows<V, 1>(pix, n, side_b, off, width, ld, dst);
}

void pack_panels16_avx2(const Pix* pix, int64_t n, int64_t off, int64_t readable,
                        const int64_t* starts, int64_t nblocks, int64_t block, float* dst,
                        int kind) {
  if (kind == 2) pack_panels16_kind<2>(pix, n, off, readable, starts, nblocks, block, dst);
  else pack_panels16_kind<1>(pix, n, off, readable, starts, nblocks, block, dst);
}

void gemm_tile_avx2(const TileArgs& t) { gemm_tile<V, Geometry>(t); }

void pack_avx2(const Pix* pix, int64_t n, bool side_b, int64_t off, int width, int64_t ld,
               float* dst) {
  pack_rows<V, 0>(pix, n, side_b, off, width, ld, dst);
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
  // A contiguous run (ld_n == taps: IOX / OIX) of up to kMaxStagedTaps taps,
  // other than 16 (whole lines from registers already): the chunks into a
  // buffer in L1, then the run out as whole vectors, its whole lines
  // streamed when asked. Taps > 16: fewer partial stores; streamed, the
  // output lines are not read for ownership first (2D 512 -> 512 k3 s2 on
  // 4x4, 9.4 MB: the 9-tap runs took 24 % of the call with plain stores).
  const bool staged =
      ld_n == taps && taps <= kMaxStagedTaps && taps != 16 && (taps > 16 || stream);
  alignas(64) float buf[16 * kMaxStagedTaps + 8];  // + 8: the tail's whole-vector load
  float* const to = staged ? buf : dst;
  for (int64_t t0 = 0; t0 < taps; t0 += 16)
    transpose_avx2(src + t0 * ld_t, ld_t, ld_q, nq, static_cast<int>(taps - t0 < 16 ? taps - t0 : 16),
                   nn, to + t0, ld_n, stream && !staged);
  if (!staged) return;
  const int64_t total = nn * taps;
  // Streamed: plain stores up to the first line boundary and after the last.
  int64_t i = 0, lines_end = 0;
  if (stream) {
    i = static_cast<int64_t>((64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63) / 4;
    if (i > total) i = total;
    lines_end = i + (total - i) / 16 * 16;
    for (int64_t j = 0; j < i; ++j) dst[j] = buf[j];
  }
  for (; i < lines_end; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(buf + i));
  for (; i + 8 <= total; i += 8) _mm256_storeu_ps(dst + i, _mm256_loadu_ps(buf + i));
  if (i < total) store_first_lanes(dst + i, _mm256_loadu_ps(buf + i), total - i);
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

void dw_tile_avx2(const TileArgs& t) { dw_tile<V, Geometry>(t); }

void dw16_tile_avx2(const TileArgs& t, int kind) {
  if (kind == 2) dw_tile<V, Geometry, 2>(t);
  else dw_tile<V, Geometry, 1>(t);
}

void gemm16_tile_avx2(const TileArgs& t, int kind) {
  if (kind == 2) gemm_tile<V, Geometry, 2>(t);
  else gemm_tile<V, Geometry, 1>(t);
}

const BwdWeightsF32Table* bwd_weights_f32_table_avx2() {
  static constexpr BwdWeightsF32Table table = {
      "avx2",
      kAvx2Lanes,
      kAvx2MaxVecs,
      {kAvx2Rows[0], kAvx2Rows[1], kAvx2Rows[2], kAvx2Rows[3], 0},
      kAvx2DwVecs,
      4,  // grouped: 2 or 4 channels per group on the vector side
      1,  // grouped: one vector per call
      1,
      4,  // pixel blocks: the B rows of up to four n-blocks in L1 (Zen 3, 1-7 %)
      gemm_tile_avx2,
      grouped_tile_avx2,
      dw_tile_avx2,
      pack_avx2,
      pack_panels_avx2,  // the A panels of all m-blocks in one pass over each pixel row
      transpose_taps_avx2,
      store_fence_avx2,
      pack16_avx2,
      pack_panels16_avx2,
      gemm16_tile_avx2,
      nullptr,  // grouped tiles: f32 rows only (no masked 16-bit loads in AVX2)
      dw16_tile_avx2,
  };
  return &table;
}

}  // namespace bww
}  // namespace x86
}  // namespace tct
