// Micro-kernels of the f32 forward / backward-data passes (implicit GEMM over
// an indirection buffer). Declarations only: the definitions live in the ISA
// files (conv_f32_avx512.cpp, conv_f32_avx2.cpp), compiled with their own
// -m flags, and must only be called when the CPU supports that ISA. Plain C
// structs and functions, so nothing inline is shared across ISA objects.
#pragma once

#include <cstdint>

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
  // (row m's input of the tap) + prefetch floats (a later tile's).
  int64_t prefetch = 0;
};

// Depthwise tile (ICg = OCg = 1): vectorized over the channels of all groups.
//   out[m][c] = bias[c] + sum_{t < ntaps} a[t*MR + m][c] * w[(wtap ? wtap[t] : t)*ncols + c],  c < ncols
// with MR = kDwRowsAvx512 (AVX-512) or kDwRowsAvx2; a's pointers (or row
// mode's rows[m] + tapoff[t]) point at the pixel's channel 0.
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
struct ConvGroupedArgs {
  const float* const* a;
  const float* w;
  const float* bias;  // ncols_pad floats
  float* const* out;
  const int32_t* idx;
  const int32_t* base;
  int64_t ntaps, cred, ncols, ncols_pad, in_c;
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
void conv_f32_avx512_dw(const ConvTileArgs* args);
void conv_f32_avx512_grouped(const ConvGroupedArgs* args);

// AVX2 register tiles.
void conv_f32_avx2_6x16(const ConvTileArgs* args);
void conv_f32_avx2_12x8(const ConvTileArgs* args);
void conv_f32_avx2_4x24(const ConvTileArgs* args);
void conv_f32_avx2_dw(const ConvTileArgs* args);
void conv_f32_avx2_dot1(const ConvTileArgs* args);
void conv_f32_avx2_dot2(const ConvTileArgs* args);
void conv_f32_avx2_dot3(const ConvTileArgs* args);
void conv_f32_avx2_dot4(const ConvTileArgs* args);

// The GEMM tile `full` (one of the register tiles above) computing only its
// first m rows (1 <= m; the row pointers keep full's stride of MR per tap):
// tiles whose last rows are dummies (the end of a phase or of a row group)
// skip their multiply-adds. full itself for m >= its rows or another tile.
ConvTileFn conv_f32_avx512_partial(ConvTileFn full, int m);
ConvTileFn conv_f32_avx2_partial(ConvTileFn full, int m);

}  // namespace x86
}  // namespace tct
