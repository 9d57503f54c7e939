// Micro-kernels of the planar (NCX) f32 forward / backward-data passes:
// direct convolution vectorized along the innermost spatial axis, over
// zero-padded, stride-phase-split input rows (planar_f32_common.cpp builds
// them). Declarations only; the definitions live in the ISA files
// (planar_f32_avx512.cpp, planar_f32_avx2.cpp), compiled with their own -m
// flags, each of which fills a PlanarF32Table (below) that the plans read.
// Plain C structs and functions, nothing inline shared across ISAs.
#pragma once

#include <cstdint>

#include "convert.h"

namespace tct {
namespace x86 {

// One register tile: m output channels x nv vectors of consecutive positions.
//   out[r*out_stride + x] = (accumulate ? out[r*out_stride + x] : bias ? bias[r] : 0)
//     + sum_{s < nseg} sum_{c < cin} sum_{t < ntap}
//         w[seg_w[s] + c*c_w_stride + tap_w[t] + r]
//       * in[in_off + seg_in[s] + c*c_in_stride + tap_in[t] + x]
// for r < m and x < nx (nx <= nv * vector width; the other positions are not
// written). Every input position the full vectors touch must be readable.
// stream: full vectors at 32-byte aligned addresses (AVX-512: 64) are
// written with streaming stores (the caller fences before the outputs are
// read).
struct PlanarTileArgs {
  const float* in;
  const float* w;
  const int64_t* seg_in;
  const int64_t* seg_w;
  const int64_t* tap_in;
  const int64_t* tap_w;
  const float* bias;
  float* out;
  int64_t in_off, nseg, cin, c_in_stride, c_w_stride, ntap, out_stride, nx, accumulate;
  int64_t stream = 0;
};

using PlanarTileFn = void (*)(const PlanarTileArgs*);

// Tiles of m rows x nv vectors exist for m <= kPlanarTileMaxM, nv <=
// kPlanarTileMaxNV at most (each ISA: PlanarF32Table::tile_*).
constexpr int kPlanarTileMaxM = 16, kPlanarTileMaxNV = 8;

// Backward-weights dot tile: m src channels x n diff_dst channels, reduced
// along rows of positions (vectorized along the rows):
//   out[i*out_m + j*out_n] += sum_{r < nrows} sum_{x < nvec * 16}
//                             a[r][i*a_stride + x] * b[r][j*b_stride + x]
// The rows are zero past their length (padded buffers), so no tails.
struct PlanarDotArgs {
  const float* const* a;
  const float* const* b;
  float* out;
  int64_t nrows, nvec, a_stride, b_stride, out_m, out_n;
};
using PlanarDotFn = void (*)(const PlanarDotArgs*);
// m <= kPlanarDotMaxM, n <= kPlanarDotMaxN (AVX2: also m * n <= 9, null past
// it: the accumulators and one loaded vector per tile row and column fill the
// 16 registers).
constexpr int kPlanarDotMaxM = 4, kPlanarDotMaxN = 4;

// GEMM tile: m rows x up to 32 columns, reduced over kc:
//   c[i*c_stride + j] = (accumulate ? c[i*c_stride + j] : 0)
//                       + sum_{r < kc} a[i*a_stride + r] * b[r*b_stride + j]
// for i < m, j < n (n <= 32; b rows are readable for n floats); a is read one
// broadcast per element, b as vectors (AVX2: sub-tiles of up to 6 rows x 16
// columns, each reading its rows of a and columns of b). Used by the backward-weights
// GEMMs (a = src rows, b = packed im2col of diff_dst), the backward-data
// GEMMs (a = weights rows, b = im2col slices) and the one-pixel forward
// (a = src pixels, b = weights rows).
struct PlanarGemmArgs {
  const float* a;
  const float* b;
  float* c;
  int64_t kc, a_stride, b_stride, c_stride, n, accumulate;
};
using PlanarGemmFn = void (*)(const PlanarGemmArgs*);
constexpr int kPlanarGemmMaxM = 12, kPlanarGemmN = 32;

// Depthwise rows (one channel in, one out):
//   out[r*out_step + x] = sum_{t < ntap} w[t] * in[r*in_step + off[t] + x]
// for r < rows, x < n (zeros when ntap is 0); every input row a full vector
// touches (n rounded up to the vector width: 16 AVX-512, 8 AVX2) readable.
struct PlanarDwArgs {
  const float* in;
  const int64_t* off;
  const float* w;
  float* out;
  int64_t in_step, out_step, ntap, rows, n;
};
void planar_f32_avx512_dw_rows(const PlanarDwArgs* a);
void planar_f32_avx2_dw_rows(const PlanarDwArgs* a);

// even[j] = src[2j], odd[j] = src[2j + 1] for j < n (src readable for 2n).
void planar_f32_avx512_split2(const float* src, int64_t n, float* even, float* odd);
void planar_f32_avx2_split2(const float* src, int64_t n, float* even, float* odd);
// dq[j] = src[3j + q] for q < 3, j < n (src readable for 3n).
void planar_f32_avx512_split3(const float* src, int64_t n, float* d0, float* d1, float* d2);
void planar_f32_avx2_split3(const float* src, int64_t n, float* d0, float* d1, float* d2);

// dst[j] = src[j * step] for j < n (gathers; any step >= 1 with 15 * step
// within int32).
void planar_f32_avx512_strided_copy(const float* src, int64_t step, int64_t n, float* dst);
void planar_f32_avx2_strided_copy(const float* src, int64_t step, int64_t n, float* dst);

using PlanarDwRowsFn = void (*)(const PlanarDwArgs*);
using PlanarSplit2Fn = void (*)(const float* src, int64_t n, float* even, float* odd);
using PlanarSplit3Fn = void (*)(const float* src, int64_t n, float* d0, float* d1, float* d2);
using PlanarStridedCopyFn = void (*)(const float* src, int64_t step, int64_t n, float* dst);
// A 16x16 block transpose (transpose.h).
using PlanarTranspose16Fn = void (*)(const float* src, int64_t src_stride, float* dst,
                                     int64_t dst_stride);
// 16-bit storage (convert on copy): dst[i] = src[i] widened to f32, or
// rounded from f32 (nearest even), i < n (x86/convert.h).
using PlanarWiden16Fn = Widen16Fn;
using PlanarNarrow16Fn = Narrow16Fn;

// The thresholds of the planar rules that were measured per ISA
// (planar_f32_common.cpp: gemm_preferred and planar_preferred, where each
// is explained with its evidence).
struct PlanarF32Rules {
  // Backward-weights GEMMs over im2col chunks (gemm_preferred): at least
  // this many src positions per image, rows of at least gemm_min_row (1x1
  // kernels exempt), src channels x row length (1x1: x positions) of at
  // least gemm_min_channel_run, and at least gemm_min_inside of the (tap,
  // position) pairs inside diff_dst (0: not checked).
  int64_t gemm_min_positions;
  int64_t gemm_min_row;
  int64_t gemm_min_channel_run;
  double gemm_min_inside;
  // planar_preferred, backward-weights: few diff_dst channels whose taps the
  // channels-last kernel fuses go channels-last (when they do much work per
  // element or fit in the caches); deep layers with at least
  // deep_channels_last_macs multiply-adds per element go channels-last (0:
  // never); depthwise layers may take the dot tiles.
  bool fused_taps_channels_last;
  double deep_channels_last_macs;
  bool depthwise_dots;
  // planar_preferred, forward / backward-data: AMD's cores of this ISA take
  // their own rule; on the others, little work per element on lines of at
  // least little_work_min_line with at most little_work_max_macs per
  // element goes planar (0: the rule of narrow vectors instead).
  bool amd_rules;
  int64_t little_work_min_line;
  double little_work_max_macs;
};

// The planar micro-kernels of one ISA, their geometry and the rules
// measured with them, filled once by the ISA file. A null entry has no
// kernel (the plans never pick one).
struct PlanarF32Table {
  const char* isa;  // names the kernels in the plans: planar_f32_<isa>_...
  int vl;           // floats per vector
  // Direct-convolution tiles tile[m][nv]: m <= tile_max_m, nv <= tile_max_nv,
  // m * nv <= tile_accs accumulators; tiles over 4+ output channels use
  // tile_deep_nv vectors a row (fewer where the line is shorter).
  int tile_accs, tile_max_m, tile_max_nv, tile_deep_nv;
  PlanarTileFn tile[kPlanarTileMaxM + 1][kPlanarTileMaxNV + 1];
  // Dot tiles dot[m][n]; dot_by_cost: the shape with the least work over the
  // whole result (else always the largest).
  PlanarDotFn dot[kPlanarDotMaxM + 1][kPlanarDotMaxN + 1];
  bool dot_by_cost;
  PlanarGemmFn gemm[kPlanarGemmMaxM + 1];  // gemm[m], 1 <= m <= kPlanarGemmMaxM
  PlanarDwRowsFn dw_rows;
  PlanarSplit2Fn split2;
  PlanarSplit3Fn split3;
  PlanarStridedCopyFn strided_copy;
  PlanarTranspose16Fn transpose16;
  // The 16-bit storage types' conversions: [0] bf16, [1] f16.
  PlanarWiden16Fn widen16[2];
  PlanarNarrow16Fn narrow16[2];
  PlanarF32Rules rules;
};

// The table of each ISA (a static table; never null).
const PlanarF32Table* planar_f32_table_avx512();
const PlanarF32Table* planar_f32_table_avx2();

}  // namespace x86
}  // namespace tct
