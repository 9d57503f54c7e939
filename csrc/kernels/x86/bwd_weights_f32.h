// Backward-weights f32 micro-kernels (AVX-512, AVX2) and their common data.
// The driver (bwd_weights_f32_common.cpp) turns the problem into GEMM tiles per
// kernel tap: C[m][n] += sum over pixels p of A[p][m] * B[p][n], where A and B
// are rows of the channels-last activations (src or diff_dst). Only plain data
// and function declarations here: the ISA files must not share inline code.
#pragma once

#include <cstdint>

namespace tct {
namespace x86 {
namespace bww {

// One reduction step: the A and B pixel rows (pointers at channel 0) of a
// src pixel and the diff_dst pixel it taps. A flat list of these, rather
// than runs along rows, keeps the inner loop free of short trip counts.
struct Pix {
  const float* a;
  const float* b;
};

// One accumulator tile, accumulated in place (C must hold valid sums):
//   C[m*ldc + n] += sum_i pix[i].a[a_off + m] * pix[i].b[b_off + n],
//   for m < rows, n < cols.
// Depthwise kernels ignore rows/a_off: C[n] += sum pix[i].a[b_off + n] * pix[i].b[b_off + n].
// The driver packs the A and B panels of a pixel block into contiguous
// buffers (pix == nullptr) when the pixel rows are far apart in memory.
struct TileArgs {
  const Pix* pix;
  int64_t npix;
  int64_t a_off, b_off;  // channel offsets added to every pixel pointer
  float* c;
  int64_t ldc;
  int rows, cols;
  int groups;  // grouped kernels only
  // GEMM tiles only, pix == nullptr: packed panels instead of the pixel list,
  //   C[m*ldc + n] += sum_{i < npix} pa[i*lda + m] * pb[i*ldb + n];
  // B rows are readable (zero-padded) up to cols rounded up to whole vectors.
  const float* pa;
  const float* pb;
  int64_t lda, ldb;
  // GEMM tiles only: start from zero instead of C's contents (C is written).
  int fresh;
};

// Register tiles: rows per tile for a tile of v vectors (index v, 1..kMaxVecs).
// One-vector tiles take one broadcast load per FMA (load-bound); AVX2 runs 12
// rows there: on Zen 5, in cache, on pixel pointer lists (the mode they run
// in: layers with <= 8 channels a side are not packed) 8 rows 69-70 % of the
// peak, 12 rows 77-80 % (packed panels: 67 % and 90-92 %).
constexpr int kAvx512Lanes = 16;
constexpr int kAvx512MaxVecs = 4;
constexpr int kAvx512Rows[kAvx512MaxVecs + 1] = {0, 14, 14, 8, 6};
constexpr int kAvx2Lanes = 8;
constexpr int kAvx2MaxVecs = 3;
constexpr int kAvx2Rows[kAvx2MaxVecs + 1] = {0, 12, 6, 4};
// Depthwise kernels take up to this many vectors of channels: whole pixel
// rows of up to 256 (AVX-512) / 64 (AVX2) channels stream through in order.
constexpr int kAvx512DwVecs = 16;
constexpr int kAvx2DwVecs = 8;

// GEMM tile: cols <= lanes*kMaxVecs, rows <= Rows[ceil(cols/lanes)].
void gemm_tile_avx512(const TileArgs& t);
void gemm_tile_avx2(const TileArgs& t);
// Grouped, few channels per group: cols in {2, 4, 8} (AVX2: {2, 4})
// channels per group on the n side, rows <= cols on the m side; a vector
// holds the n side of L/cols consecutive groups (L = lanes), and a call takes
// `groups` groups (AVX-512: at most 4 vectors for rows <= 4, else 2; AVX2:
// 1). Per pixel one load brings a vector's worth of groups' A channels and a
// lane permute lines them up with their B channels, so all lanes work.
// Writes fresh sums (c is not accumulated): group gl, row m, column n at
// c[(v*rows + m)*L + l] with v = gl / (L/cols), l = (gl % (L/cols))*cols + n.
// a_off/b_off point at the first group's channels.
void grouped_tile_avx512(const TileArgs& t);
void grouped_tile_avx2(const TileArgs& t);
// Panel packing for the packed GEMM tiles: for i < n, copies `width` floats
// from (side_b ? pix[i].b : pix[i].a) + off to dst + i*ld and zeros
// dst[i*ld + width, i*ld + ld) (ld >= width). A null row pointer packs a row
// of zeros (a pixel whose tapped position is outside, see shared panels).
void pack_avx512(const Pix* pix, int64_t n, bool side_b, int64_t off, int width, int64_t ld,
                 float* dst);
void pack_avx2(const Pix* pix, int64_t n, bool side_b, int64_t off, int width, int64_t ld,
               float* dst);
// The A panels of all m-blocks in one pass over each pixel row (AVX2; the
// rows of a tile are a few floats, so per-block copies would cost a call per
// row and tile): block j (rows starts[j] .. starts[j+1]) at
//   dst + starts[j]*block + j*kPanelSlack, row i of it at + i*(its rows),
// copied from pix[i].a + off + starts[j] (i < n <= block, starts[0] = 0).
// Reads stay below pix[i].a + off + readable; writes may run up to 8 floats
// past a block's last row, into its slack. Rows n.. of a block and its slack
// hold garbage afterwards: tiles read rows < npix only.
constexpr int64_t kPanelSlack = 8;
void pack_panels_avx2(const Pix* pix, int64_t n, int64_t off, int64_t readable,
                      const int64_t* starts, int64_t nblocks, int64_t block, float* dst);
// Final pass, output with the taps innermost (IOX, OIX): a tile of nt <= 16
// taps x nn <= 16 channels, summed over nq scratch copies and transposed:
//   dst[n*ld_n + t] = sum_{q < nq} src[q*ld_q + t*ld_t + n].
// stream: whole aligned 64-byte runs may be written with streaming stores
// (no read for ownership; for outputs far larger than the caches); a thread
// then calls store_fence_* after its last call, before others read dst.
// AVX-512: a contiguous run (ld_n == nt, 2 <= nt <= 9: IOX/OIX with up to 9
// taps) is interleaved with vpermt2ps into nt whole vectors instead (3D U-Net
// k2 s2 320 -> 320 1.14-1.18x, 2D 512 -> 512 k3 s2 on 4x4 1.25-1.48x, Zen 5).
void transpose_avx512(const float* src, int64_t ld_t, int64_t ld_q, int nq, int nt, int nn,
                      float* dst, int64_t ld_n, bool stream);
void transpose_avx2(const float* src, int64_t ld_t, int64_t ld_q, int nq, int nt, int nn,
                    float* dst, int64_t ld_n, bool stream);
// Every tap of such a tile (taps of any count): transpose_* per chunk of 16
// taps, into dst + t0. AVX-512, a contiguous run (ld_n == taps, 17 to
// kMaxStagedTaps taps: 3D k3) goes through a buffer in L1 and out as whole
// vectors instead of 16 runs of 16 and of 11 floats per chunk pair (Zen 5,
// rotated A/B: 3D U-Net k3 backward-weights 1.05x, its dilated layer 1.12x).
constexpr int64_t kMaxStagedTaps = 64;
void transpose_taps_avx512(const float* src, int64_t ld_t, int64_t ld_q, int nq, int64_t taps,
                           int nn, float* dst, int64_t ld_n, bool stream);
void transpose_taps_avx2(const float* src, int64_t ld_t, int64_t ld_q, int nq, int64_t taps,
                         int nn, float* dst, int64_t ld_n, bool stream);
void store_fence_avx512();
void store_fence_avx2();
// Depthwise (ICg == OCg == 1): cols <= lanes*k*DwVecs channels.
void dw_tile_avx512(const TileArgs& t);
void dw_tile_avx2(const TileArgs& t);

}  // namespace bww
}  // namespace x86
}  // namespace tct
