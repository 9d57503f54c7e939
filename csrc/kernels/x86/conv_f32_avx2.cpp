// AVX2 micro-kernels of the f32 forward / backward-data passes: the shared
// tiles of conv_f32_tiles.h over VecAvx2. Compiled with -mavx2 -mfma: only
// leaf functions over raw pointers are exported (everything inline has
// internal linkage), see conv_f32_kernels.h.
#include <immintrin.h>

#include <cstdint>

#include "conv_f32_kernels.h"
#include "conv_f32_tiles.h"
#include "vec_avx2.h"

namespace tct {
namespace x86 {
namespace {

using V = VecAvx2;

}  // namespace

void conv_f32_avx2_dot1(const ConvTileArgs* args) { dot_tile<V, kDotRowsAvx2[1], 1>(args); }
void conv_f32_avx2_dot2(const ConvTileArgs* args) { dot_tile<V, kDotRowsAvx2[2], 2>(args); }
void conv_f32_avx2_dot3(const ConvTileArgs* args) { dot_tile<V, kDotRowsAvx2[3], 3>(args); }
void conv_f32_avx2_dot4(const ConvTileArgs* args) { dot_tile<V, kDotRowsAvx2[4], 4>(args); }

void conv_f32_avx2_6x16(const ConvTileArgs* args) { gemm_tile<V, 6, 2>(args); }
void conv_f32_avx2_12x8(const ConvTileArgs* args) { gemm_tile<V, 12, 1>(args); }
void conv_f32_avx2_4x24(const ConvTileArgs* args) { gemm_tile<V, 4, 3>(args); }

void conv_f32_avx2_dw(const ConvTileArgs* args) { dw_tile<V, kDwRowsAvx2>(args); }

ConvTileFn conv_f32_avx2_partial(ConvTileFn full, int m) {
  struct Tables {
    ConvTileFn t6x16[6];
    ConvTileFn t4x24[4];
    ConvTileFn t12x8[12];
  };
  static const Tables tables = [] {
    Tables t{};
    fill_partial<V, 6, 2>(t.t6x16);
    fill_partial<V, 4, 3>(t.t4x24);
    fill_partial<V, 12, 1>(t.t12x8);
    return t;
  }();
  if (m < 1) return full;
  if (full == conv_f32_avx2_6x16) return m < 6 ? tables.t6x16[m] : full;
  if (full == conv_f32_avx2_4x24) return m < 4 ? tables.t4x24[m] : full;
  if (full == conv_f32_avx2_12x8) return m < 12 ? tables.t12x8[m] : full;
  return full;
}

}  // namespace x86
}  // namespace tct
