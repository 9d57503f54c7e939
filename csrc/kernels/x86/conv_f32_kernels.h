// Micro-kernels of the f32 forward / backward-data passes (implicit GEMM over
// an indirection buffer). Declarations only: the definitions live in the ISA
// files (conv_f32_avx512.cpp, conv_f32_avx2.cpp), compiled with their own
// -m flags, and must only be called when the CPU supports that ISA. Plain C
// structs and functions, so nothing inline is shared across ISA objects.
#pragma once

#include <cstdint>

#include "convert.h"

namespace tct {
namespace x86 {

// One register tile: MR output rows x NR output columns (NR = the kernel's
// packed column width), over one chunk of the reduction:
//   out[m][col_off + j] = init[m][j]
//       + sum_{t < ntaps} sum_{c < cred} a[t*MR + m][a_off + c] * w[(t*cred + c)*NR + j]
// for j < ncols (the other columns are not written), where init is bias[j]
// or, when accumulate != 0, the current out[m][col_off + j] (later chunks).
// a holds MR row pointers per tap (a pointer to a zero vector where the tap
// falls on padding, an inserted zero or a dummy row). bias holds NR floats
// (zero padded). w is 64-byte aligned. When wtap is not null, tap t's weights
// are at w + wtap[t]*cred*NR instead of w + t*cred*NR (taps that only hit
// padding for every row of the tile are left out).
// Row mode (GEMM and depthwise tiles): when rows is not null, a is not read and row
// m's input of tap t is rows[m] + tapoff[t] (tiles whose every tap is inside
// the input, where the pointers are a row base plus a per-tap offset).
struct ConvTileArgs {
  const float* const* a = nullptr;
  const float* w = nullptr;
  const int32_t* wtap = nullptr;
  const float* bias = nullptr;
  float* const* out = nullptr;
  int64_t ntaps = 0;
  int64_t cred = 0;
  int64_t a_off = 0;
  int64_t col_off = 0;
  int64_t ncols = 0;
  int64_t accumulate = 0;
  const float* const* rows = nullptr;
  const int64_t* tapoff = nullptr;
  // Depthwise and AVX-512 GEMM tiles (not accumulating): write whole 64-byte
  // output lines with streaming stores (the caller fences before the outputs
  // are read).
  int64_t stream = 0;
  // GEMM tiles: when not 0, each tap prefetches, per row m, the input at
  // (row m's input of the tap) + prefetch elements (a later tile's): the
  // line there, or with prefetch_run every line its run of cred inputs
  // touches.
  int64_t prefetch = 0;
  int64_t prefetch_run = 0;
  // GEMM tiles writing f32 (not accumulating): when not 0, each output row m
  // is prefetched for writing (PREFETCHW) at out[m] + col_off + prefetch_out
  // floats (a later tile's) before the tile computes.
  int64_t prefetch_out = 0;
  // GEMM, depthwise and dot tiles: when not 0, out's rows hold 16-bit values (uint16_t),
  // accumulate is 0, stream too except for the depthwise tiles (whole 64-byte
  // lines of rows that start on a line), and each result (sum plus bias) is rounded
  // once, to nearest even: 1 = bf16 (NaN kept a NaN), 2 = f16 (2: not the
  // VNNI tiles, which are bf16 only).
  int64_t out16 = 0;
  // VNNI tiles only: nq >= 1 consecutive column blocks of one group, block
  // q's packed weights at w + q*wq, its bias at bias + q*NR, its columns
  // from col_off + q*NR, min(NR, ncols - q*NR) of them (the tile's inputs
  // gathered once for all of them).
  int64_t nq = 1;
  int64_t wq = 0;
  // VNNI tiles with nq > 1: a 64-byte aligned scratch of stage_bytes for the
  // gathered inputs (the tile runs block by block when they do not fit).
  void* stage = nullptr;
  int64_t stage_bytes = 0;
};

// Depthwise tile (ICg = OCg = 1): vectorized over the channels of all groups.
//   out[m][c] = bias[c] + sum_{t < ntaps} a[t*MR + m][c] * w[(wtap ? wtap[t] : t)*ncols + c],  c < ncols
// with MR = kDwRowsAvx512 (AVX-512) or kDwRowsAvx2; a's pointers (or row
// mode's rows[m] + tapoff[t]) point at the pixel's channel 0.
// 8 pixels on AVX-512 (16 FMA chains, the weight loads shared by twice the
// rows of 4; Zen 5, rotated A/B: the small depthwise layers 1.03-1.15x, the
// k4 s2 upsampler about even; 12 rows no better), 4 on AVX2 (6 made the
// upsampler 7-15 % slower with the ISA forced to AVX2 on Zen 5).
constexpr int kDwRowsAvx512 = 8;
constexpr int kDwRowsAvx2 = 4;

using ConvTileFn = void (*)(const ConvTileArgs*);

// Small groups (few channels per group): kDwRows pixels, vectorized over 16
// output channels of several groups at once. For the 16-channel block v, the
// inputs of the lanes lie in the 32 channels from base[v] on, and the input of
// lane l for reduction index c is channel base[v] + idx[(v*cred + c)*16 + l]:
//   out[m][o] = bias[o] + sum_{t < ntaps, c < cred} a[t*kDwRows + m][base + idx] * w[(t*cred + c)*ncols_pad + o]
// for o < ncols; the inputs are read only below channel in_c.
constexpr int kDwRows = 4;
// (The 16-bit forms, ConvTable::grouped16: the a pointers point at bf16 /
// f16 elements, widened as loaded.) out16: 16-bit results (1 bf16, 2 f16),
// each rounded once, as the GEMM tiles'.
struct ConvGroupedArgs {
  const float* const* a;
  const float* w;
  const float* bias;  // ncols_pad floats
  float* const* out;
  const int32_t* idx;
  const int32_t* base;
  int64_t ntaps, cred, ncols, ncols_pad, in_c;
  int64_t out16 = 0;
};

// Few output columns (ncols = NC <= 4), long reduction: vectorized over the
// reduction instead, one accumulator per (row, column), horizontal sums at
// the end. Same ConvTileArgs; MR rows (kDotRows[NC], AVX2 kDotRowsAvx2[NC]:
// at most 12 accumulators in its 16 registers); the weights of tap t
// are w + (wtap ? wtap[t] : t) * credp * NC with credp = cred rounded up to
// 16, laid out [c/16][j < NC][16] (zero past cred). accumulate must be 0;
// bias holds NC floats.
constexpr int kDotRows[5] = {0, 8, 8, 8, 6};
constexpr int kDotRowsAvx2[5] = {0, 8, 6, 4, 3};
void conv_f32_avx512_dot1(const ConvTileArgs* args);
void conv_f32_avx512_dot2(const ConvTileArgs* args);
void conv_f32_avx512_dot3(const ConvTileArgs* args);
void conv_f32_avx512_dot4(const ConvTileArgs* args);

// AVX-512 register tiles (rows x columns).
void conv_f32_avx512_6x64(const ConvTileArgs* args);
void conv_f32_avx512_8x48(const ConvTileArgs* args);
void conv_f32_avx512_12x32(const ConvTileArgs* args);
void conv_f32_avx512_12x16(const ConvTileArgs* args);
// The 12x16 tile with every broadcast a load (no in-lane permutes): Intel's cores.
void conv_f32_avx512_12x16_loads(const ConvTileArgs* args);
void conv_f32_avx512_dw(const ConvTileArgs* args);
void conv_f32_avx512_dw_bf16(const ConvTileArgs* args);  // (ConvTable::dw16)
void conv_f32_avx512_dw_f16(const ConvTileArgs* args);
void conv_f32_avx512_grouped(const ConvGroupedArgs* args);
void conv_f32_avx512_grouped_bf16(const ConvGroupedArgs* args);
void conv_f32_avx512_grouped_f16(const ConvGroupedArgs* args);

// AVX2 register tiles.
void conv_f32_avx2_6x16(const ConvTileArgs* args);
void conv_f32_avx2_12x8(const ConvTileArgs* args);
// 6x16 over block-diagonal weights of two 8-column groups (ConvTable::diag2).
void conv_f32_avx2_6x16d(const ConvTileArgs* args);
void conv_f32_avx2_4x24(const ConvTileArgs* args);
void conv_f32_avx2_dw(const ConvTileArgs* args);
void conv_f32_avx2_dw_bf16(const ConvTileArgs* args);
void conv_f32_avx2_dw_f16(const ConvTileArgs* args);
void conv_f32_avx2_dot1(const ConvTileArgs* args);
void conv_f32_avx2_dot2(const ConvTileArgs* args);
void conv_f32_avx2_dot3(const ConvTileArgs* args);
void conv_f32_avx2_dot4(const ConvTileArgs* args);

using ConvGroupedFn = void (*)(const ConvGroupedArgs* args);
using ConvPairsTapsFn = void (*)(const uint16_t* s0, const uint16_t* s1, int64_t cs,
                                 int64_t ntaps, int64_t jn, uint32_t* const* rows);
using ConvPairsRowFn = void (*)(const uint16_t* s0, const uint16_t* s1, int64_t jn,
                                uint32_t* dst);
// Row-pointer register transposes (transpose.h), which pack the weights.
using ConvTransposeRowsFn = void (*)(const float* src, int64_t src_stride, int rows, int cols,
                                     float* const* dst);

// One GEMM register tile of an ISA: MR rows x NR columns, its relative speed
// (to trade it against column padding), and partial[m] for m < MR: the same
// tile computing only its first m rows (the row pointers keep the stride of
// MR per tap; tiles whose last rows are dummies skip their multiply-adds);
// partial[0] is fn itself.
struct ConvGemmTile {
  const char* name;  // dtype-less tile name, e.g. "avx512_12x32"
  ConvTileFn fn;
  int mr, nr;
  double eff;
  const ConvTileFn* partial;
};

constexpr int kMaxConvGemmTiles = 4;
constexpr int kMaxGemmRows = 12;  // the f32 GEMM tiles' largest MR
constexpr int kMaxDotColumns = 4;

// The forward / backward-data micro-kernels of one (ISA, dtype) and the
// constants measured for it (each ISA file fills one: conv_f32_table_<isa>(),
// conv_bf16_table_amx()), looked up once per call by the driver's plan. A null GEMM / depthwise / dot
// kernel (or ngemm 0): the plan routes to the reference (the entry point
// returns false); a null grouped kernel: the small groups run as GEMMs.
struct ConvTable {
  const char* isa;  // "avx512", "avx2"
  int lanes;        // floats per vector (the patch route: OCg below one vector)
  ConvGemmTile gemm[kMaxConvGemmTiles];
  int ngemm;
  ConvTileFn dw;
  int dw_rows;
  ConvGroupedFn grouped;
  int grouped_rows;
  ConvTileFn dot[kMaxDotColumns + 1];  // [ncols], ncols <= 4
  int dot_rows[kMaxDotColumns + 1];
  // Dot tiles regroup a phase's rows by valid taps when that leaves at most
  // this share of the natural multiply-adds (group_rows_by_taps).
  double regroup_dot_share;
  // GEMM tiles write f32 outputs of this many bytes and more with streaming
  // stores (0: never; plan_schedule, heuristics C20).
  double stream_gemm_bytes;
  ConvTransposeRowsFn transpose_rows, transpose_rows_stream;
  // The activations' element bytes: 4 (f32), or 2 (bf16: the tiles read the
  // activations as uint16_t; pairs16: the weights are bf16 too, packed as
  // pairs, see the VNNI contract in conv_bf16_amx.cpp).
  int in_bytes = 4;
  bool pairs16 = false;
  ConvPairsTapsFn pairs_taps = nullptr;  // pairs16: the packing's vector forms
  ConvPairsRowFn pairs_row = nullptr;
  // Called by each thread of a call before its first tile and after its
  // last (AMX: the tile configuration), where not null.
  void (*thread_begin)() = nullptr;
  void (*thread_end)() = nullptr;
  // VNNI tiles that gather their inputs once into ConvTileArgs::stage for
  // nq > 1 column blocks (AMX); else the plan allocates no stage.
  bool stage_inputs = false;
  // The depthwise tile over 16-bit inputs, [1] bf16, [2] f16 ([0] unused):
  // the a / rows pointers point at 16-bit elements, widened as loaded (f32
  // weights and bias; out16 as dw). Null: the inputs are widened first.
  ConvTileFn dw16[3] = {nullptr, nullptr, nullptr};
  // The dot tiles over 16-bit inputs, [1] bf16 / [2] f16, [ncols]: as dw16.
  ConvTileFn dot16[3][kMaxDotColumns + 1] = {};
  // VNNI tiles: 16-bit results of at least this many bytes, written to the
  // caller's tensor, go out with streaming stores (whole rows of NR = 32
  // columns, one 64-byte line each); 0: never.
  double stream16_bytes = 0;
  // GEMM tiles regroup a phase's rows by valid taps when that leaves less
  // than this share of the natural multiply-adds (group_rows_by_taps).
  double regroup_gemm_share = 0.97;
  // f32 tiles: the reduction is cut into chunks only where a column block's
  // packed weights exceed this many bytes (plan_packing, heuristics C12).
  int64_t chunk_bytes = 512 << 10;
  // f32 depthwise tiles prefetch the next tile's input lines (plan_schedule,
  // heuristics C21: measured on Zen 3, AVX2; off where not measured).
  bool dw_prefetch = false;
  // GEMM tiles line by line prefetch their large f32 outputs for writing
  // (plan_schedule, heuristics C21; Zen 3, AVX2; off where not measured).
  bool prefetch_out = false;
  // GEMM tiles' input prefetch (heuristics C21; Zen 3, AVX2; off where not
  // measured): by rows, only the first pass over a row block's column blocks
  // prefetches; runs read once (ConvPlan::prefetch_run) get every line.
  bool prefetch_runs = false;
  // Small groups as super-groups (heuristics C28; 0: off, where not
  // measured): a channels-last forward / backward-data with G > 1 groups of
  // ICg = OCg > 1 channels runs as G / f groups of f consecutive groups
  // each, with block-diagonal weights (zeros between the groups), where a
  // divisor f of G makes f x ICg = merge_cols: whole tile columns and dense
  // input runs, at f times the multiply-adds.
  int merge_cols = 0;
  // The block-diagonal form of a GEMM tile of two vectors of columns, for
  // super-groups of two groups of one vector each (gemm_tile's DIAG; null:
  // the plain tile multiplies the zeros too).
  const ConvGemmTile* diag2 = nullptr;
  // The GEMM tiles over 16-bit inputs, [1] bf16 / [2] f16, [i] as gemm[i]:
  // [0] the whole tile, [m] its first m rows (m < MR); the a / rows
  // pointers point at 16-bit elements, each broadcast widened as loaded
  // (f32 weights and bias; out16 as dw16). Null: the inputs are widened first.
  ConvTileFn gemm16[3][kMaxConvGemmTiles][kMaxGemmRows] = {};
  // The small-groups kernel over 16-bit inputs, [1] bf16 / [2] f16 (null:
  // the inputs are widened first).
  ConvGroupedFn grouped16[3] = {};
  // Widening [1] bf16 / [2] f16 to f32 and rounding f32 to them (the patch
  // route's input rows and tile buffers).
  Widen16Fn widen16[3] = {};
  Narrow16Fn narrow16[3] = {};
};

const ConvTable* conv_f32_table_avx512();
// The same with the one-vector tile's permute-free form (for active_uarch() Intel*).
const ConvTable* conv_f32_table_avx512_intel();
const ConvTable* conv_f32_table_avx2();
// The same kernels with the tile speeds measured on Zen 3 (for active_uarch() Zen3).
const ConvTable* conv_f32_table_avx2_zen3();

// bf16 on AMX (conv_bf16_amx.cpp): GEMM tiles of 32 rows x 32 / 16 columns
// (TDPBF16PS, 2 x 2 / 2 x 1 accumulator tiles), the contract above with the
// differences stated there; no depthwise, grouped or dot tiles.
void conv_bf16_amx_32x32(const ConvTileArgs* args);
void conv_bf16_amx_32x16(const ConvTileArgs* args);
void tiles_begin_amx();
void tiles_end_amx();
const ConvTable* conv_bf16_table_amx();

// bf16 on AVX512_BF16 (conv_bf16_avx512bf16.cpp): VDPBF16PS register tiles
// of the f32 table's shapes under the same VNNI contract (MR rows, partial
// tiles as the f32 ones'; the packed weights 64-byte aligned at w and at
// every w + q*wq, as the driver packs them; stage unused); no depthwise,
// grouped or dot tiles.
void conv_bf16_avx512bf16_6x64(const ConvTileArgs* args);
void conv_bf16_avx512bf16_8x48(const ConvTileArgs* args);
void conv_bf16_avx512bf16_12x32(const ConvTileArgs* args);
void conv_bf16_avx512bf16_12x16(const ConvTileArgs* args);
const ConvTable* conv_bf16_table_avx512bf16();

// The pair tiles' AVX-512 BW helpers (pairs_avx512.cpp; both pair ISAs):
// Weight packing into bf16 pairs: for the columns j < jn of one pair of
// reduction rows, s0 (row 2i) and s1 (row 2i + 1, or null: 0),
//   taps: element (j, t) at s[j*cs + t], t < ntaps; rows[t][j] = (s0, s1) pair;
//   row:  element j at s[j]; dst[j] = (s0[j], s1[j]).
void pack_pairs_taps_avx512(const uint16_t* s0, const uint16_t* s1, int64_t cs, int64_t ntaps,
                            int64_t jn, uint32_t* const* rows);
void pack_pairs_row_avx512(const uint16_t* s0, const uint16_t* s1, int64_t jn, uint32_t* dst);
// (transpose_u16_block32_avx512: x86/transpose.h)

// bf16 backward-weights on the pair tiles (bwd_weights_bf16_common.cpp). One
// block of 32 rows (input channels) x ncols <= 32 columns (output channels)
// of an f32 gradient c (row stride ldc floats), accumulated over nks steps
// of 32 pixels: step k's A halves (16 rows x 32 bf16 pixels) at a[2k],
// a[2k + 1] with row strides lda[2k], lda[2k + 1] bytes; its B at
// b + k*16*ldb: 16 rows (pixel pairs) of ldb 32-bit slots, each column's pair
// (pixel 2q, pixel 2q + 1); b 64-byte aligned and ldb a multiple of 16.
// Columns past ncols (to 16 or 32) of c are computed too. zero: the sums
// start from zero (c is only written: the first chunk of a reduction).
struct BwwPairsBlockArgs {
  const void* const* a;
  const int64_t* lda;
  const uint32_t* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  int64_t nks;
  int64_t ncols;
  bool zero;
};
void bww_bf16_amx_block(const BwwPairsBlockArgs* args);
// The same block on AVX512_BF16 (VDPBF16PS register tiles, in groups of rows).
void bww_bf16_avx512bf16_block(const BwwPairsBlockArgs* args);
// dst[j] = (r0[j], r1[j]) for j < npad (a multiple of 16, 64-byte aligned
// dst), zero for j >= n or a null row (pairs_avx512.cpp).
void bww_bf16_pairs_avx512(const uint16_t* r0, const uint16_t* r1, int64_t n, int64_t npad,
                           uint32_t* dst);
// 16 rows x 32 bf16 into dst (dense): row m < rows at base + m*row_stride,
// its element l where bit l of valid is set, else zero; rows >= rows zero
// (pairs_avx512.cpp).
void bww_bf16_gather_avx512(const uint16_t* base, int64_t row_stride, uint32_t valid, int rows,
                            uint16_t* dst);
// A pair row of a fused-taps B panel (bwd_weights_bf16_common.cpp): per tap
// row, pixel h's taps inside [a[h], b[h]) of K2, the first channel of tap
// a[h] at p[h] (null: no tap inside), tap k2's at p[h] + (k2 - a[h]) *
// tap_stride; OCg channels a tap.
struct BwwFusedRow {
  const uint16_t* p[2];
  int64_t a[2], b[2];
};
struct BwwFusedGeom {
  int64_t K2, OCg, tap_stride;
  // Taps not consecutive (tap_stride != OCg) whose columns (K2*OCg <= 32) one
  // permute compacts from a window of K2 taps ((K2-1)*tap_stride + OCg <= 64).
  bool window;
  uint16_t window_at[32];  // column c < K2*OCg <= 32: (c / OCg) * tap_stride + c % OCg
};
// The geometry of K2 taps of OCg channels, tap_stride elements apart.
BwwFusedGeom bww_fused_geom(int64_t K2, int64_t OCg, int64_t tap_stride);
// dst[r * K2*OCg + k2*OCg + oc] = (x0, x1), x_h pixel h's element of tap
// row r, tap k2, channel oc, or zero outside its taps; then 16 zeros (past
// the last row; dst has room for them). Reads only from the first channel
// of tap a[h] to the last of tap b[h] - 1 (pairs_avx512.cpp).
void bww_bf16_fused_pairs_avx512(const BwwFusedRow* rows, int64_t nrows, const BwwFusedGeom& g,
                                 uint32_t* dst);
// Pairs q < npairs of consecutive pixels 2q, 2q + 1 of one src row, every
// tap of theirs inside: pixel j's tap 0 of tap row r at rowp[r] + j*stride
// (a null rowp[r]: zeros), its taps as bww_bf16_fused_pairs_avx512's (with
// tap_stride != OCg: g.window).
// dst + q*ldd as bww_bf16_fused_pairs_avx512 writes a pair row (pairs_avx512.cpp).
void bww_bf16_fused_segment_avx512(const uint16_t* const* rowp, int64_t nrows,
                                   const BwwFusedGeom& g, int64_t stride, int64_t npairs,
                                   int64_t ldd, uint32_t* dst);
// Bit l of out[m], m < rows: whether element l of row m (at base +
// m*row_stride, l a set bit of lanes) is an Inf or a NaN (bf16); returns
// whether any is. readable: the lanes that may be read, lanes among them
// (pairs_avx512.cpp).
bool bww_bf16_nonfinite_avx512(const uint16_t* base, int64_t row_stride, uint32_t lanes,
                               uint32_t readable, int rows, uint32_t* out);

}  // namespace x86
}  // namespace tct
