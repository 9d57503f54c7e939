// Backward-weights f32 micro-kernels (AVX-512, AVX2), their per-ISA table and
// the driver's plan. The driver (bwd_weights_f32_common.cpp) turns the problem
// into GEMM tiles per kernel tap: C[m][n] += sum over pixels p of A[p][m] *
// B[p][n], where A and B are rows of the channels-last activations (src or
// diff_dst). Only plain data and function declarations here: the ISA files
// must not share inline code.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../dispatch.h"

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
// The same two over 16-bit rows (kind 1 bf16, 2 f16; BwdWeightsF32Table::pack16).
void pack16_avx512(const Pix* pix, int64_t n, bool side_b, int64_t off, int width, int64_t ld,
                   float* dst, int kind);
void pack16_avx2(const Pix* pix, int64_t n, bool side_b, int64_t off, int width, int64_t ld,
                 float* dst, int kind);
void pack_panels16_avx2(const Pix* pix, int64_t n, int64_t off, int64_t readable,
                        const int64_t* starts, int64_t nblocks, int64_t block, float* dst,
                        int kind);
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
// taps, into dst + t0. A contiguous run (ld_n == taps, 17 to kMaxStagedTaps
// taps: 3D k3) goes through a buffer in L1 and out as whole vectors instead
// of 16 runs of 16 and of 11 floats per chunk pair (AVX-512, Zen 5, rotated
// A/B: 3D U-Net k3 backward-weights 1.05x, its dilated layer 1.12x). AVX2
// stages streamed runs of 1-15 taps too, so that their whole lines are
// streamed (no read for ownership; Zen 3: U-Net 1024 -> 512 k2 s2 NXC
// 1.23x, 3D U-Net k3 1.03-1.09x, 512 -> 512 k3 s2 on 4x4 1.05x).
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
// The tiles on pixel lists over 16-bit rows (kind 1 bf16, 2 f16): the Pix
// pointers point at 16-bit elements and a_off / b_off count them; each
// element is widened as it is loaded (BwdWeightsF32Table::gemm16 ...).
void gemm16_tile_avx512(const TileArgs& t, int kind);
void gemm16_tile_avx512_loads(const TileArgs& t, int kind);
void grouped16_tile_avx512(const TileArgs& t, int kind);
void dw16_tile_avx512(const TileArgs& t, int kind);
void gemm16_tile_avx2(const TileArgs& t, int kind);
void dw16_tile_avx2(const TileArgs& t, int kind);

// The micro-kernels of one ISA and the constants measured with them, filled
// once in its ISA file; the plan reads every ISA-specific number from here.
constexpr int kMaxTileVecs = 4;  // widest GEMM tile of any ISA, in vectors
struct BwdWeightsF32Table {
  const char* isa;  // in the tile names of describe(): "avx512", "avx512l", "avx2"
  int lanes;        // floats per vector
  int max_vecs;     // widest GEMM tile, in vectors
  int rows[kMaxTileVecs + 1];  // rows of a GEMM tile of v vectors (index v; 0 past max_vecs)
  int dw_vecs;                 // depthwise tiles: vectors of channels
  int grouped_max_cols;        // grouped tiles: most channels per group on the vector side
  int grouped_vecs_few_rows;   // grouped tiles: vectors per call for rows <= 4 ...
  int grouped_vecs;            // ... and for more rows
  // Pixel blocks keep the B rows of this many n-blocks in L1 (1: one tile's
  // columns; AVX2, Zen 3: four, so that the block's src rows stay in L1
  // across the n-blocks of a tap, 1-7 %).
  int l1_b_blocks;
  void (*gemm)(const TileArgs&);
  void (*grouped)(const TileArgs&);
  void (*dw)(const TileArgs&);
  void (*pack)(const Pix*, int64_t, bool, int64_t, int, int64_t, float*);
  // The A panels of all m-blocks at once (pack_panels_avx2); nullptr: each
  // m-block's panel is packed when its first tile needs it.
  void (*pack_panels)(const Pix*, int64_t, int64_t, int64_t, const int64_t*, int64_t, int64_t,
                      float*);
  void (*transpose_taps)(const float*, int64_t, int64_t, int, int64_t, int, float*, int64_t, bool);
  void (*store_fence)();
  // pack / pack_panels over 16-bit rows (kind 1 bf16, 2 f16), widened as
  // they are copied: the Pix pointers then point at 16-bit elements and off
  // counts them (plans with in16, packed GEMM tiles only).
  void (*pack16)(const Pix*, int64_t, bool, int64_t, int, int64_t, float*, int) = nullptr;
  void (*pack_panels16)(const Pix*, int64_t, int64_t, int64_t, const int64_t*, int64_t, int64_t,
                        float*, int) = nullptr;
  // gemm (on pixel lists), grouped and dw over 16-bit rows (kind 1 bf16, 2
  // f16), widened as loaded; nullptr: that kernel takes f32 rows only.
  void (*gemm16)(const TileArgs&, int) = nullptr;
  void (*grouped16)(const TileArgs&, int) = nullptr;
  void (*dw16)(const TileArgs&, int) = nullptr;
};
const BwdWeightsF32Table* bwd_weights_f32_table_avx512();
// The same with the one-vector GEMM tiles' permute-free form, "avx512l" (for
// active_uarch() Intel*; gemm_tile_avx512_loads).
const BwdWeightsF32Table* bwd_weights_f32_table_avx512_intel();
void gemm_tile_avx512_loads(const TileArgs& t);
const BwdWeightsF32Table* bwd_weights_f32_table_avx2();

// One work item of the driver: an accumulator tile of the weight gradient
// (packed layers: a run of m-blocks; fused taps: fk taps).
struct Item {
  int64_t tap, g, m0, n0;
  int rows, cols;
  double cost;
  int groups = 1;      // grouped kernel: consecutive groups g.. in one vector
  int64_t mj = 0;      // GEMM: index of the m-block
  int64_t mj_end = 0;  // GEMM: > mj + 1: the item is m-blocks mj .. mj_end - 1 (m0, rows: mj's)
  int fk = 1;          // GEMM with fused taps: taps tap .. tap+fk-1
};

// Every decision of one backward_weights_f32 call (bwd_weights_f32_common.cpp
// explains them): built by plan_bwd_weights from the problem, the gradient's
// strides, the ISA's table and the thread count; the execution reads only this.
struct BwdWeightsPlan {
  // reference: no table for the ISA (the caller runs the reference); empty: no
  // element to write; zeros: no tap ever inside diff_dst; tiles: the tiles.
  enum class Route { Reference, Empty, Zeros, Tiles };
  enum class Kernel { Gemm, Grouped, Depthwise };
  // How the pieces' copies reach the output: none (piece 0 is the output),
  // transpose (taps innermost: register transposes), sum (16^3 tiles in L1).
  enum class Final { None, Transpose, Sum };
  Route route = Route::Reference;
  const BwdWeightsF32Table* tab = nullptr;
  // The activations' storage: 0 f32; 1 bf16, 2 f16 (read by the table's
  // pack16 / pack_panels16 and its 16-bit tiles on pixel lists, gemm16 /
  // dw16 / grouped16: the plan is the f32 plan where the table has its
  // kernels in that form; else Route::Reference, which the caller replaces).
  int in16 = 0;
  // in16 on pixel lists: the tiles' widening loads per element of src and
  // diff_dst (list_widen_ratio); 0 otherwise.
  double widen_ratio = 0;
  int nt = 1;
  ConvProblem p;
  // Output: strides of ic and oc, offset of each tap.
  int64_t si = 0, so = 0;
  std::vector<int64_t> koff;
  // Per axis and tap, the src positions whose tapped dst position lies inside diff_dst.
  std::vector<int64_t> lo[kAxes], hi[kAxes];
  int64_t taps = 0, F = 0;  // F: flat src pixels (n, i0, i1, i2)
  double all_pixels = 0;    // (tap, src pixel) pairs inside
  bool low_waste = false, share_ok = false;
  // The GEMMs: vec_b: n = diff_dst channel (A = src), else n = src channel;
  // direct: piece 0 accumulates in the output.
  Kernel kernel = Kernel::Gemm;
  bool vec_b = true, direct = false;
  int64_t Mg = 0, Ng = 0;
  bool a_is_src = true;
  int64_t a_len = 0, a_gstride = 0, b_gstride = 0, src_step = 0, dst_step = 0;
  bool packed = false, shared_a = false;
  int kf = 1;  // fused innermost taps per tile
  int gemm_vecs = 0, rows_main = 0;
  int64_t mblocks = 0, mper = 1;
  std::vector<int64_t> m_starts;
  std::vector<Item> items;
  int max_cols = 0;
  // Reduction pieces, pixel blocks, tasks.
  int P = 1, per_part = 1;
  int64_t block = 0;
  int nchunks = 1;
  std::vector<int64_t> chunk;
  int64_t ntasks = 0, max_span = 1;
  bool prefetch = false;
  // Local n-blocks.
  bool taps_inner = false, local = false, local_shared_a = false, local_stream = false;
  int64_t run_mb = 0, ln_cols = 0, local_rows = 0;
  // Scratch copies: taps planes of `plane` floats each.
  int64_t plane = 0, wstride = 0;
  int nbuf = 0;
  Final final = Final::None;
  bool final_stream = false, final_n_outer = false;
  int final_ord[3] = {0, 1, 2};  // sum: dims (0 tap, 1 m, 2 n) by output stride, innermost first
  bool final_rows = false;       // sum: n contiguous in the output too, summed row by row
  // Packed, not local: floats of a B panel row, the n-blocks of one (tap,
  // group) packed at once from each pixel row.
  int64_t b_span = 0;
  // Buffers, in floats (per thread: times nt).
  int64_t pack_floats = 0, local_floats = 0, gbuf_floats = 0, shared_a_floats = 0;
  int64_t scratch_bytes() const;     // the pieces' gradient copies
  int64_t shared_bytes() const;      // shared A panels and their row list
  int64_t per_thread_bytes() const;  // pixel lists, panels, local buffers, per thread
};

// The plan (kept among the thread's recent ones: plan_memo.h).
std::shared_ptr<const BwdWeightsPlan> plan_bwd_weights(Isa isa, const ConvProblem& p,
                                                       const WeightsView& diff_w, int nthreads,
                                                       int in16 = 0);
std::string describe(const BwdWeightsPlan& plan);
// False when the plan routes to the reference or a buffer is not there (or
// its in16 is not the call's: 0 for run_bwd_weights, 1 / 2 for run_bwd_weights16).
bool run_bwd_weights(const BwdWeightsPlan& plan, const float* src, const float* diff_dst,
                     float* diff_w);
bool run_bwd_weights16(const BwdWeightsPlan& plan, const uint16_t* src, const uint16_t* diff_dst,
                       float* diff_w);

}  // namespace bww
}  // namespace x86
}  // namespace tct
