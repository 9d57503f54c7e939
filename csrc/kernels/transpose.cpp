// Batched f32 transpose for the layout changes between NCX and the
// channels-last buffers of the fast kernels: cache-sized tiles in parallel,
// 16x16 register blocks on AVX-512 and AVX2, scalar loops elsewhere and on the edges.
//
// A 16x16 block reads 16 source lines `cols` floats apart and writes 16
// destination lines `rows` floats apart. The order of the blocks in a tile
// decides which side walks in long runs: by source rows (blocks along j)
// the source is read in runs and every block writes 16 new destination
// lines; by columns (blocks along i) the 16 destination rows are written in
// runs and the source is read 16 floats a row. A destination stride that is a
// multiple of 512 floats (2 KiB) puts the lines a block writes in few cache
// sets, and the row order then ran at a third of the speed of the column
// order on Zen 5 (2 x 4096 x 128, the forward output of a 3D U-Net layer:
// 40 -> 90 GB/s; 4 x 512 x 784: 45 -> 160 GB/s); the column order reads the
// source at stride cols and loses where that is the power of two instead
// (2 x 128 x 4096: 155 -> 80 GB/s).
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dispatch.h"
#include "x86/transpose.h"

namespace tct {
namespace {

// Tiles of 64 x 64 floats (16 KiB) walked by source rows, or 128 x 64 walked
// by columns (see above).
struct TileOrder {
  int64_t rows, cols;
  bool by_columns;
};

TileOrder tile_order(int64_t rows, int64_t cols) {
  auto trailing_zeros = [](int64_t v) { return v > 0 ? __builtin_ctzll(static_cast<uint64_t>(v)) : 0; };
  const int zr = trailing_zeros(rows), zc = trailing_zeros(cols);
  if (zr >= 8 && zr > zc) return {128, 64, true};
  return {64, 64, false};
}

void transpose_scalar(const float* src, int64_t ss, float* dst, int64_t ds, int64_t nr,
                      int64_t nc) {
  if (nr < 16) {  // few source rows (few channels): write the destination in order
    for (int64_t j = 0; j < nc; ++j)
      for (int64_t i = 0; i < nr; ++i) dst[j * ds + i] = src[i * ss + j];
    return;
  }
  for (int64_t i = 0; i < nr; ++i)
    for (int64_t j = 0; j < nc; ++j) dst[j * ds + i] = src[i * ss + j];
}

}  // namespace

TransposeF32Kernels transpose_f32_kernels(Isa isa) {
  TransposeF32Kernels k;
  switch (vector_isa(isa)) {
    case Isa::Avx512: k = {x86::transpose_block16_avx512, x86::transpose_rows_avx512}; break;
    case Isa::Avx2: k = {x86::transpose_block16_avx2, x86::transpose_rows_avx2}; break;
    case Isa::Reference:
    case Isa::Avx512Bf16:
    case Isa::Avx512Amx: break;
  }
  return k;
}

void transpose_f32(const TransposeF32Kernels& k, const float* src, float* dst, int64_t batch,
                   int64_t rows, int64_t cols, int nthreads, int64_t src_ld, int64_t src_batch,
                   int64_t dst_ld, int64_t dst_batch) {
  const int64_t lds = src_ld < 0 ? cols : src_ld;  // source row stride
  const int64_t sb = src_batch < 0 ? rows * lds : src_batch;
  const int64_t ldd = dst_ld < 0 ? rows : dst_ld;  // destination row stride
  const int64_t db = dst_batch < 0 ? cols * ldd : dst_batch;
  void (*const block)(const float*, int64_t, float*, int64_t) = k.block16;
  // Edges (fewer than 16 rows or columns left) of 8 and more on both sides:
  // masked register blocks into row pointers (AlexNet's 1D 384 -> 256 on 13
  // pixels, NCX, all passes 1.02-1.035x on Zen 5); narrower ones, a few
  // channels or pixels, stay scalar (the vector blocks were no faster there).
  void (*const edge)(const float*, int64_t, int, int, float* const*) = k.rows;
  // dst[(j0 + j) * ldd + i0 + i] = src[(i0 + i) * lds + j0 + j], i < ni, j < nj.
  auto edges = [&](const float* s, float* d, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    if (!edge || std::min(i1 - i0, j1 - j0) < 8) {
      transpose_scalar(s + i0 * lds + j0, lds, d + j0 * ldd + i0, ldd, i1 - i0, j1 - j0);
      return;
    }
    float* dst_rows[16];
    for (int64_t j = j0; j < j1; j += 16) {
      const int nj = static_cast<int>(std::min<int64_t>(16, j1 - j));
      for (int64_t i = i0; i < i1; i += 16) {
        for (int jj = 0; jj < nj; ++jj) dst_rows[jj] = d + (j + jj) * ldd + i;
        edge(s + i * lds + j, lds, static_cast<int>(std::min<int64_t>(16, i1 - i)), nj, dst_rows);
      }
    }
  };
  const TileOrder order = tile_order(ldd, cols);  // (by the destination's row stride)
  const int64_t tr = (rows + order.rows - 1) / order.rows,
                tc = (cols + order.cols - 1) / order.cols;
#pragma omp parallel for collapse(3) schedule(static) num_threads(nthreads)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t bi = 0; bi < tr; ++bi)
      for (int64_t bj = 0; bj < tc; ++bj) {
        const float* s = src + b * sb;
        float* d = dst + b * db;
        const int64_t i0 = bi * order.rows, i1 = std::min(rows, i0 + order.rows);
        const int64_t j0 = bj * order.cols, j1 = std::min(cols, j0 + order.cols);
        int64_t i_full = i0, j_full = j0;
        if (block) {
          i_full = i0 + (i1 - i0) / 16 * 16;
          j_full = j0 + (j1 - j0) / 16 * 16;
          if (order.by_columns) {
            for (int64_t j = j0; j < j_full; j += 16)
              for (int64_t i = i0; i < i_full; i += 16)
                block(s + i * lds + j, lds, d + j * ldd + i, ldd);
          } else {
            for (int64_t i = i0; i < i_full; i += 16)
              for (int64_t j = j0; j < j_full; j += 16)
                block(s + i * lds + j, lds, d + j * ldd + i, ldd);
          }
        } else {
          i_full = j_full = -1;  // everything below
        }
        if (i_full < 0) {
          transpose_scalar(s + i0 * lds + j0, lds, d + j0 * ldd + i0, ldd, i1 - i0, j1 - j0);
          continue;
        }
        // Edges the 16x16 blocks left: columns j_full.. of all rows, rows i_full.. of the rest.
        if (j_full < j1) edges(s, d, i0, i1, j_full, j1);
        if (i_full < i1) edges(s, d, i_full, i1, j0, j_full);
      }
}

void expand_strided_1x1_f32(const ConvProblem& p, const float* y, const float* bias, float* dst,
                            int nthreads) {
  const int64_t planes = p.N * p.OC(), OC = p.OC();
  const int64_t I0 = p.I[0], I1 = p.I[1], I2 = p.I[2], O0 = p.O[0], O1 = p.O[1], O2 = p.O[2];
  // Per axis, the src position of output o, or -1 (bias only).
  std::vector<int64_t> src_of[kAxes];
  for (int a = 0; a < kAxes; ++a) {
    const TapAxis ax = p.axis(a);  // (a 1x1 kernel: tap 0 only)
    src_of[a].resize(static_cast<size_t>(ax.O));
    for (int64_t o = 0; o < ax.O; ++o) src_of[a][o] = ax.src_at(o, 0);
  }
  // Innermost axis with s = 2 and no padding: output pairs (y, bias).
  const bool pairs = p.s[2] == 2 && p.pb[2] == 0;
  const int64_t npairs = std::min(I2, O2 / 2);
  const int64_t *m0 = src_of[0].data(), *m1 = src_of[1].data(), *m2 = src_of[2].data();
#pragma omp parallel for collapse(2) schedule(static) num_threads(nthreads)
  for (int64_t c = 0; c < planes; ++c)
    for (int64_t r = 0; r < O0 * O1; ++r) {
      const int64_t o0 = r / O1, o1 = r % O1;
      const float b = bias ? bias[c % OC] : 0.f;
      float* d = dst + (c * O0 * O1 + r) * O2;
      if (m0[o0] < 0 || m1[o1] < 0) {
        std::fill(d, d + O2, b);
        continue;
      }
      const float* yr = y + ((c * I0 + m0[o0]) * I1 + m1[o1]) * I2;
      int64_t o2 = 0;
      if (pairs) {
        int64_t x = 0;
#if defined(__SSE2__)
        const __m128 bv = _mm_set1_ps(b);
        for (; x + 4 <= npairs; x += 4) {
          const __m128 v = _mm_loadu_ps(yr + x);
          _mm_storeu_ps(d + 2 * x, _mm_unpacklo_ps(v, bv));
          _mm_storeu_ps(d + 2 * x + 4, _mm_unpackhi_ps(v, bv));
        }
#endif
        for (; x < npairs; ++x) d[2 * x] = yr[x], d[2 * x + 1] = b;
        o2 = 2 * npairs;
      }
      for (; o2 < O2; ++o2) d[o2] = m2[o2] >= 0 ? yr[m2[o2]] : b;
    }
}

void gather_strided_1x1_f32(const ConvProblem& p, const float* diff_dst, float* dst,
                            int nthreads) {
  const int64_t planes = p.N * p.OC();
  const int64_t I0 = p.I[0], I1 = p.I[1], I2 = p.I[2], O0 = p.O[0], O1 = p.O[1], O2 = p.O[2];
  const int64_t s0 = p.s[0], s1 = p.s[1], s2 = p.s[2];
  // Stride 2 innermost: even elements of 8-float runs that stay inside the row.
  const int64_t quads = s2 == 2 && O2 >= 8 ? std::min(I2, (O2 - 8) / 2 + 1) / 4 * 4 : 0;
#pragma omp parallel for collapse(2) schedule(static) num_threads(nthreads)
  for (int64_t c = 0; c < planes; ++c)
    for (int64_t r = 0; r < I0 * I1; ++r) {
      const int64_t i0 = r / I1, i1 = r % I1;
      const float* s = diff_dst + ((c * O0 + i0 * s0) * O1 + i1 * s1) * O2;
      float* d = dst + (c * I0 * I1 + r) * I2;
      int64_t x = 0;
      if (s2 == 1) {
        std::copy(s, s + I2, d);
        continue;
      }
#if defined(__SSE2__)
      for (; x < quads; x += 4)
        _mm_storeu_ps(d + x, _mm_shuffle_ps(_mm_loadu_ps(s + 2 * x), _mm_loadu_ps(s + 2 * x + 4),
                                            _MM_SHUFFLE(2, 0, 2, 0)));
#endif
      for (; x < I2; ++x) d[x] = s[x * s2];
    }
}

void subsample_nxc_f32(const ConvProblem& p, const ConvProblem& q,
                       const std::array<int64_t, kAxes>& g, const std::array<int64_t, kAxes>& r,
                       const float* diff_dst, float* dst, int nthreads) {
  const int64_t C = p.OC(), rows = q.N * q.O[0] * q.O[1], J2 = q.O[2];
  const int64_t line = p.O[2] * C, plane = p.O[1] * line, image = p.O[0] * plane;
#pragma omp parallel for schedule(static) num_threads(nthreads) if (rows * J2 * C >= 65536)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t n = row / (q.O[0] * q.O[1]), j0 = row / q.O[1] % q.O[0], j1 = row % q.O[1];
    const float* s = diff_dst + n * image + (g[0] * j0 + r[0]) * plane +
                     (g[1] * j1 + r[1]) * line + r[2] * C;
    float* d = dst + row * J2 * C;
    for (int64_t j2 = 0; j2 < J2; ++j2, d += C) std::copy(s + g[2] * j2 * C, s + (g[2] * j2 + 1) * C, d);
  }
}

}  // namespace tct
