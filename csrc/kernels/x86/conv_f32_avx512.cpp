// AVX-512 micro-kernels of the f32 forward / backward-data passes: the
// shared tiles of conv_f32_tiles.h over VecAvx512, plus the small-groups
// kernel (vpermt2ps, AVX-512 only). Compiled with -mavx512f/bw/vl/dq: only
// leaf functions over raw pointers are exported (everything inline has
// internal linkage), see conv_f32_kernels.h.
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "conv_f32_kernels.h"
#include "conv_f32_tiles.h"
#include "transpose.h"
#include "vec_avx512.h"

namespace tct {
namespace x86 {
namespace {

using V = VecAvx512;

}  // namespace

void conv_f32_avx512_dot1(const ConvTileArgs* args) { dot_tile<V, kDotRows[1], 1>(args); }
void conv_f32_avx512_dot2(const ConvTileArgs* args) { dot_tile<V, kDotRows[2], 2>(args); }
void conv_f32_avx512_dot3(const ConvTileArgs* args) { dot_tile<V, kDotRows[3], 3>(args); }
void conv_f32_avx512_dot4(const ConvTileArgs* args) { dot_tile<V, kDotRows[4], 4>(args); }

void conv_f32_avx512_6x64(const ConvTileArgs* args) { gemm_tile<V, 6, 4>(args); }
void conv_f32_avx512_8x48(const ConvTileArgs* args) { gemm_tile<V, 8, 3>(args); }
void conv_f32_avx512_12x32(const ConvTileArgs* args) { gemm_tile<V, 12, 2>(args); }
void conv_f32_avx512_12x16(const ConvTileArgs* args) { gemm_tile<V, 12, 1>(args); }

void conv_f32_avx512_dw(const ConvTileArgs* args) { dw_tile<V, kDwRowsAvx512>(args); }
void conv_f32_avx512_dw_bf16(const ConvTileArgs* args) { dw_tile<V, kDwRowsAvx512, 1>(args); }
void conv_f32_avx512_dw_f16(const ConvTileArgs* args) { dw_tile<V, kDwRowsAvx512, 2>(args); }

namespace {
// Small groups: per 16-channel block, the 32 input channels its lanes need
// are loaded once per row and tap, and each reduction step permutes them into
// place (vpermt2ps) before the FMA. Four rows in flight hide the latency.
// IN: the inputs' storage (0 f32; 1 bf16, 2 f16: widened as loaded).
template <int IN>
void grouped_tile(const ConvGroupedArgs* args) {
  static_assert(kDwRows == 4, "four accumulator chains");
  using In = std::conditional_t<IN == 0, float, uint16_t>;
  const int64_t T = args->ntaps, cred = args->cred, ncp = args->ncols_pad;
  const auto* const* a = reinterpret_cast<const In* const*>(args->a);
  // (as load_in_part, with the mask alone bounding the read: the high half
  // may hold no channel at all)
  auto load = [](__mmask16 k, const In* p) {
    if constexpr (IN == 0) return _mm512_maskz_loadu_ps(k, p);
    else return V::widen16<IN>(_mm256_maskz_loadu_epi16(k, p));
  };
  for (int64_t v = 0; v * 16 < args->ncols; ++v) {
    const int64_t base = args->base[v];
    const __mmask16 klo = V::first(args->in_c - base), khi = V::first(args->in_c - base - 16);
    const __m512 b = _mm512_loadu_ps(args->bias + 16 * v);
    __m512 acc0 = b, acc1 = b, acc2 = b, acc3 = b;
    const int32_t* idx_v = args->idx + v * cred * 16;
    for (int64_t t = 0; t < T; ++t) {
      const In* r0 = a[t * 4 + 0] + base;
      const In* r1 = a[t * 4 + 1] + base;
      const In* r2 = a[t * 4 + 2] + base;
      const In* r3 = a[t * 4 + 3] + base;
      const __m512 lo0 = load(klo, r0), hi0 = load(khi, r0 + 16);
      const __m512 lo1 = load(klo, r1), hi1 = load(khi, r1 + 16);
      const __m512 lo2 = load(klo, r2), hi2 = load(khi, r2 + 16);
      const __m512 lo3 = load(klo, r3), hi3 = load(khi, r3 + 16);
      const float* w = args->w + t * cred * ncp + 16 * v;
      for (int64_t c = 0; c < cred; ++c, w += ncp) {
        const __m512i idx = _mm512_loadu_si512(idx_v + c * 16);
        const __m512 wv = _mm512_loadu_ps(w);
        acc0 = _mm512_fmadd_ps(_mm512_permutex2var_ps(lo0, idx, hi0), wv, acc0);
        acc1 = _mm512_fmadd_ps(_mm512_permutex2var_ps(lo1, idx, hi1), wv, acc1);
        acc2 = _mm512_fmadd_ps(_mm512_permutex2var_ps(lo2, idx, hi2), wv, acc2);
        acc3 = _mm512_fmadd_ps(_mm512_permutex2var_ps(lo3, idx, hi3), wv, acc3);
      }
    }
    if (args->out16) {  // rounded once, as the GEMM tiles' 16-bit results
      const int64_t n = args->ncols - 16 * v;
      V::store16(reinterpret_cast<uint16_t*>(args->out[0]) + 16 * v, acc0, n, args->out16);
      V::store16(reinterpret_cast<uint16_t*>(args->out[1]) + 16 * v, acc1, n, args->out16);
      V::store16(reinterpret_cast<uint16_t*>(args->out[2]) + 16 * v, acc2, n, args->out16);
      V::store16(reinterpret_cast<uint16_t*>(args->out[3]) + 16 * v, acc3, n, args->out16);
      continue;
    }
    const __mmask16 ko = V::first(args->ncols - 16 * v);
    _mm512_mask_storeu_ps(args->out[0] + 16 * v, ko, acc0);
    _mm512_mask_storeu_ps(args->out[1] + 16 * v, ko, acc1);
    _mm512_mask_storeu_ps(args->out[2] + 16 * v, ko, acc2);
    _mm512_mask_storeu_ps(args->out[3] + 16 * v, ko, acc3);
  }
}
}  // namespace

void conv_f32_avx512_grouped(const ConvGroupedArgs* args) { grouped_tile<0>(args); }
void conv_f32_avx512_grouped_bf16(const ConvGroupedArgs* args) { grouped_tile<1>(args); }
void conv_f32_avx512_grouped_f16(const ConvGroupedArgs* args) { grouped_tile<2>(args); }

void conv_f32_avx512_12x16_loads(const ConvTileArgs* args) {
  gemm_tile<VecAvx512Loads, 12, 1>(args);
}

namespace {
// intel: the one-vector tile without in-lane permutes (VecAvx512Loads), for
// avx512_broadcast_loads() (heuristics K3).
const ConvTable* avx512_table(bool intel) {
  struct Partials {
    ConvTileFn t6x64[6];
    ConvTileFn t8x48[8];
    ConvTileFn t12x32[12];
    ConvTileFn t12x16[12];
    ConvTileFn t12x16_loads[12];
  };
  static constexpr Partials partials = []() constexpr {
    Partials t{};
    t.t6x64[0] = conv_f32_avx512_6x64;
    t.t8x48[0] = conv_f32_avx512_8x48;
    t.t12x32[0] = conv_f32_avx512_12x32;
    t.t12x16[0] = conv_f32_avx512_12x16;
    t.t12x16_loads[0] = conv_f32_avx512_12x16_loads;
    fill_partial<V, 6, 4>(t.t6x64);
    fill_partial<V, 8, 3>(t.t8x48);
    fill_partial<V, 12, 2>(t.t12x32);
    fill_partial<V, 12, 1>(t.t12x16);
    fill_partial<VecAvx512Loads, 12, 1>(t.t12x16_loads);
    return t;
  }();
  // Speeds: bench_conv_f32's in-cache micro runs on Zen 5 (12x16 86-89 %,
  // the others 96-99 %); on the SPR VM the 12x16 tile without permutes runs
  // at 74-86 % against 85-100 % for the others: 0.85 of them.
  auto make = [](const ConvGemmTile& one_vector) constexpr -> ConvTable {
    ConvTable t = {
        "avx512",
        16,
        {{"avx512_6x64", conv_f32_avx512_6x64, 6, 64, 1.0, partials.t6x64},
         {"avx512_8x48", conv_f32_avx512_8x48, 8, 48, 0.97, partials.t8x48},
         {"avx512_12x32", conv_f32_avx512_12x32, 12, 32, 0.95, partials.t12x32},
         one_vector},
        4,
        conv_f32_avx512_dw,
        kDwRowsAvx512,
        conv_f32_avx512_grouped,
        kDwRows,
        {nullptr, conv_f32_avx512_dot1, conv_f32_avx512_dot2, conv_f32_avx512_dot3,
         conv_f32_avx512_dot4},
        {0, kDotRows[1], kDotRows[2], kDotRows[3], kDotRows[4]},
        // (the 64 -> 3 k7 s2 d2 layer ran 4 % slower at 0.97)
        0.85,
        16.0 * (1 << 20),
        transpose_rows_avx512,
        transpose_rows_stream_avx512,
    };
    t.dw16[1] = conv_f32_avx512_dw_bf16;
    t.dw16[2] = conv_f32_avx512_dw_f16;
    fill_dot16<V, kDotRows, 1>(t.dot16[1], std::make_integer_sequence<int, kMaxDotColumns>{});
    fill_dot16<V, kDotRows, 2>(t.dot16[2], std::make_integer_sequence<int, kMaxDotColumns>{});
    t.grouped16[1] = conv_f32_avx512_grouped_bf16;
    t.grouped16[2] = conv_f32_avx512_grouped_f16;
    t.widen16[1] = bf16_to_f32_avx512;
    t.widen16[2] = f16_to_f32_avx512;
    t.narrow16[1] = f32_to_bf16_avx512;
    t.narrow16[2] = f32_to_f16_avx512;
    fill_gemm16<V, 6, 4, 1>(t.gemm16[1][0]);
    fill_gemm16<V, 6, 4, 2>(t.gemm16[2][0]);
    fill_gemm16<V, 8, 3, 1>(t.gemm16[1][1]);
    fill_gemm16<V, 8, 3, 2>(t.gemm16[2][1]);
    fill_gemm16<V, 12, 2, 1>(t.gemm16[1][2]);
    fill_gemm16<V, 12, 2, 2>(t.gemm16[2][2]);
    // (16-bit inputs take no permute rows: the one-vector forms are alike.)
    fill_gemm16<VecAvx512Loads, 12, 1, 1>(t.gemm16[1][3]);
    fill_gemm16<VecAvx512Loads, 12, 1, 2>(t.gemm16[2][3]);
    return t;
  };
  static constexpr ConvTable table =
      make({"avx512_12x16", conv_f32_avx512_12x16, 12, 16, 0.87, partials.t12x16});
  static constexpr ConvTable intel_table = make(
      {"avx512_12x16l", conv_f32_avx512_12x16_loads, 12, 16, 0.85, partials.t12x16_loads});
  return intel ? &intel_table : &table;
}
}  // namespace

const ConvTable* conv_f32_table_avx512() { return avx512_table(false); }
const ConvTable* conv_f32_table_avx512_intel() { return avx512_table(true); }

}  // namespace x86
}  // namespace tct
