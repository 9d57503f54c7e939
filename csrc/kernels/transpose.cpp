// Batched f32 transpose for the layout changes between NCX and the
// channels-last buffers of the fast kernels: cache-sized tiles in parallel,
// 16x16 register blocks on AVX-512 and AVX2, scalar loops elsewhere and on the edges.
#include <algorithm>

#include "dispatch.h"
#include "x86/transpose.h"

namespace tct {
namespace {

// 16 rows x 512 columns: long contiguous reads (prefetch-friendly), 32 KiB.
constexpr int64_t kTileRows = 16, kTileCols = 512;

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

void transpose_f32(const float* src, float* dst, int64_t batch, int64_t rows, int64_t cols,
                   int nthreads) {
  const Isa isa = active_isa();
  void (*const block)(const float*, int64_t, float*, int64_t) =
      isa == Isa::Avx512 ? x86::transpose_block16_avx512
      : isa == Isa::Avx2 ? x86::transpose_block16_avx2
                         : nullptr;
  const int64_t tr = (rows + kTileRows - 1) / kTileRows,
                tc = (cols + kTileCols - 1) / kTileCols;
#pragma omp parallel for collapse(3) schedule(static) num_threads(nthreads)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t bi = 0; bi < tr; ++bi)
      for (int64_t bj = 0; bj < tc; ++bj) {
        const float* s = src + b * rows * cols;
        float* d = dst + b * rows * cols;
        const int64_t i0 = bi * kTileRows, i1 = std::min(rows, i0 + kTileRows);
        const int64_t j0 = bj * kTileCols, j1 = std::min(cols, j0 + kTileCols);
        int64_t i_full = i0, j_full = j0;
        if (block) {
          i_full = i0 + (i1 - i0) / 16 * 16;
          j_full = j0 + (j1 - j0) / 16 * 16;
          for (int64_t i = i0; i < i_full; i += 16)
            for (int64_t j = j0; j < j_full; j += 16)
              block(s + i * cols + j, cols, d + j * rows + i, rows);
        } else {
          i_full = j_full = -1;  // everything below
        }
        if (i_full < 0) {
          transpose_scalar(s + i0 * cols + j0, cols, d + j0 * rows + i0, rows, i1 - i0, j1 - j0);
          continue;
        }
        // Edges the 16x16 blocks left: columns j_full.. of all rows, rows i_full.. of the rest.
        transpose_scalar(s + i0 * cols + j_full, cols, d + j_full * rows + i0, rows, i1 - i0,
                         j1 - j_full);
        transpose_scalar(s + i_full * cols + j0, cols, d + j0 * rows + i_full, rows, i1 - i_full,
                         j_full - j0);
      }
}

}  // namespace tct
