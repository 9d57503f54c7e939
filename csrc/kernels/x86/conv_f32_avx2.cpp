// AVX2 micro-kernels of the f32 forward / backward-data passes: the shared
// tiles of conv_f32_tiles.h over VecAvx2. Compiled with -mavx2 -mfma: only
// leaf functions over raw pointers are exported (everything inline has
// internal linkage), see conv_f32_kernels.h.
#include <immintrin.h>

#include <cstdint>

#include "conv_f32_kernels.h"
#include "conv_f32_tiles.h"
#include "transpose.h"
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
void conv_f32_avx2_6x16d(const ConvTileArgs* args) { gemm_tile<V, 6, 2, 6, 0, true>(args); }
void conv_f32_avx2_12x8(const ConvTileArgs* args) { gemm_tile<V, 12, 1>(args); }
void conv_f32_avx2_4x24(const ConvTileArgs* args) { gemm_tile<V, 4, 3>(args); }

void conv_f32_avx2_dw(const ConvTileArgs* args) { dw_tile<V, kDwRowsAvx2>(args); }
void conv_f32_avx2_dw_bf16(const ConvTileArgs* args) { dw_tile<V, kDwRowsAvx2, 1>(args); }
void conv_f32_avx2_dw_f16(const ConvTileArgs* args) { dw_tile<V, kDwRowsAvx2, 2>(args); }

namespace {
const ConvTable* avx2_table(bool zen3) {
  struct Partials {
    ConvTileFn t6x16[6];
    ConvTileFn t6x16d[6];
    ConvTileFn t4x24[4];
    ConvTileFn t12x8[12];
  };
  static constexpr Partials partials = []() constexpr {
    Partials t{};
    t.t6x16[0] = conv_f32_avx2_6x16;
    t.t6x16d[0] = conv_f32_avx2_6x16d;
    t.t4x24[0] = conv_f32_avx2_4x24;
    t.t12x8[0] = conv_f32_avx2_12x8;
    fill_partial<V, 6, 2>(t.t6x16);
    fill_partial<V, 6, 2, 1, 0, true>(t.t6x16d);
    fill_partial<V, 4, 3>(t.t4x24);
    fill_partial<V, 12, 1>(t.t12x8);
    return t;
  }();
  static constexpr ConvGemmTile diag2{"avx2_6x16d", conv_f32_avx2_6x16d, 6, 16, 1.0,
                                      partials.t6x16d};
  // Speeds: bench_conv_f32's in-cache micro runs on Zen 5 (12x8 82-89 %, 8
  // rows x 8 80-86 %, 6x16 and 4x24 97-99 %; on Zen 3, where 12x8 was not
  // measured, 6x16 and 4x24 95 %, 8 rows x 8 73 %). (A 2x40 tile, 89 % in
  // cache, lost 1.3x on the 36-column layer it would serve: two pixels per
  // tile.) Zen 3 (#23: 12x8 at 65-69 % in cache, 4x24 at 93-94 %, one core):
  // 12x8 at 0.72 of the others, so that 40 columns run as 4x24 / 6x16 tiles
  // (5/6 of their lanes) rather than five 12x8 tiles. Zen 3's reduction
  // chunks from 1 MiB of packed weights per column block (heuristics C12:
  // the 3D U-Net k3 512 -> 256 forwards, 884 KB in one chunk against two of
  // 497 KB, 1.10x).
  auto make = [](double eff_12x8, int64_t chunk_bytes) constexpr -> ConvTable {
    ConvTable t = {
        "avx2",
        8,
        {{"avx2_6x16", conv_f32_avx2_6x16, 6, 16, 1.0, partials.t6x16},
         {"avx2_4x24", conv_f32_avx2_4x24, 4, 24, 1.0, partials.t4x24},
         {"avx2_12x8", conv_f32_avx2_12x8, 12, 8, eff_12x8, partials.t12x8},
         {nullptr, nullptr, 0, 0, 0.0, nullptr}},
        3,
        conv_f32_avx2_dw,
        kDwRowsAvx2,
        nullptr,  // no small-groups kernel: the groups run as GEMMs
        0,
        {nullptr, conv_f32_avx2_dot1, conv_f32_avx2_dot2, conv_f32_avx2_dot3, conv_f32_avx2_dot4},
        {0, kDotRowsAvx2[1], kDotRowsAvx2[2], kDotRowsAvx2[3], kDotRowsAvx2[4]},
        0.9,
        4.0 * (1 << 20),
        transpose_rows_avx2,
        transpose_rows_stream_avx2,
    };
    t.chunk_bytes = chunk_bytes;
    t.dw_prefetch = true;
    t.prefetch_out = true;
    t.prefetch_runs = true;
    t.merge_cols = 16;
    t.diag2 = &diag2;
    t.dw16[1] = conv_f32_avx2_dw_bf16;
    t.dw16[2] = conv_f32_avx2_dw_f16;
    t.widen16[1] = bf16_to_f32_avx2;
    t.widen16[2] = f16_to_f32_avx2;
    t.narrow16[1] = f32_to_bf16_avx2;
    t.narrow16[2] = f32_to_f16_avx2;
    fill_gemm16<V, 6, 2, 1>(t.gemm16[1][0]);
    fill_gemm16<V, 6, 2, 2>(t.gemm16[2][0]);
    fill_gemm16<V, 4, 3, 1>(t.gemm16[1][1]);
    fill_gemm16<V, 4, 3, 2>(t.gemm16[2][1]);
    fill_gemm16<V, 12, 1, 1>(t.gemm16[1][2]);
    fill_gemm16<V, 12, 1, 2>(t.gemm16[2][2]);
    fill_dot16<V, kDotRowsAvx2, 1>(t.dot16[1], std::make_integer_sequence<int, kMaxDotColumns>{});
    fill_dot16<V, kDotRowsAvx2, 2>(t.dot16[2], std::make_integer_sequence<int, kMaxDotColumns>{});
    return t;
  };
  static constexpr ConvTable table = make(0.85, 512 << 10), zen3_table = make(0.72, 1 << 20);
  return zen3 ? &zen3_table : &table;
}
}  // namespace

const ConvTable* conv_f32_table_avx2() { return avx2_table(false); }
const ConvTable* conv_f32_table_avx2_zen3() { return avx2_table(true); }

}  // namespace x86
}  // namespace tct
