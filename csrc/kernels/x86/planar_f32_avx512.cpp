// AVX-512 tiles of the planar (NCX) f32 passes; see planar_f32.h.
// Every loop over a tile's rows or vectors is unrolled in full (pragmas), so
// that GCC keeps the accumulators in registers: without it they are stored to
// the stack on every iteration.
#include <immintrin.h>

#include <cstdint>

#include "convert.h"
#include "planar_f32.h"
#include "planar_f32_tiles.h"
#include "transpose.h"
#include "vec_avx512.h"

namespace tct {
namespace x86 {
namespace {

using V = VecAvx512;

// Tiles: 16 floats per vector, m * nv <= kAccs accumulators, m <= kM, nv <= kNV.
constexpr int kAccs = 24, kM = 16, kNV = 8;
static_assert(kM <= kPlanarTileMaxM && kNV <= kPlanarTileMaxNV, "PlanarF32Table::tile");

// NV vectors per row (NV = 2: up to 32 columns; NV = 1: up to 16, where a
// second vector would only multiply zeros).
template <int M, int NV>
void gemm_nv(const PlanarGemmArgs* a) {
  // Arguments in locals, accumulators set without branches: keeps GCC from
  // spilling the tile to the stack in the loop.
  __mmask16 k[NV], l[NV];
  #pragma GCC unroll 2
  for (int v = 0; v < NV; ++v) {
    k[v] = V::first(a->n - 16 * v);
    l[v] = a->accumulate ? k[v] : 0;
  }
  const int64_t kc = a->kc, as = a->a_stride, bs = a->b_stride, cs = a->c_stride;
  float* const c = a->c;
  __m512 acc[M][NV];
  #pragma GCC unroll 32
  for (int i = 0; i < M; ++i)
    #pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_maskz_loadu_ps(l[v], c + i * cs + 16 * v);
  const float* pa = a->a;
  const float* pb = a->b;
  for (int64_t r = 0; r < kc; ++r, ++pa, pb += bs) {
    __m512 b[NV];
    #pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) b[v] = _mm512_maskz_loadu_ps(k[v], pb + 16 * v);
    #pragma GCC unroll 32
    for (int i = 0; i < M; ++i) {
      const __m512 x = _mm512_set1_ps(pa[i * as]);
      #pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(x, b[v], acc[i][v]);
    }
  }
  #pragma GCC unroll 32
  for (int i = 0; i < M; ++i)
    #pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(c + i * cs + 16 * v, k[v], acc[i][v]);
}

template <int M>
void gemm(const PlanarGemmArgs* a) {
  if (a->n <= 16)
    gemm_nv<M, 1>(a);
  else
    gemm_nv<M, 2>(a);
}

template <int M>
constexpr void fill_gemm(PlanarF32Table& t) {
  t.gemm[M] = &gemm<M>;
  if constexpr (M < kPlanarGemmMaxM) fill_gemm<M + 1>(t);
}

}  // namespace

void planar_f32_avx512_dw_rows(const PlanarDwArgs* a) { planar_dw_rows<V>(a); }

void planar_f32_avx512_split2(const float* src, int64_t n, float* even, float* odd) {
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 a = _mm512_loadu_ps(src + 2 * j), b = _mm512_loadu_ps(src + 2 * j + 16);
    _mm512_storeu_ps(even + j, _mm512_permutex2var_ps(a, ie, b));
    _mm512_storeu_ps(odd + j, _mm512_permutex2var_ps(a, io, b));
  }
  if (j < n) {  // 2 * (n - j) < 32 floats left
    const int64_t r = n - j;
    const __m512 a = _mm512_maskz_loadu_ps(V::first(2 * r), src + 2 * j);
    const __m512 b = _mm512_maskz_loadu_ps(V::first(2 * r - 16), src + 2 * j + 16);
    _mm512_mask_storeu_ps(even + j, V::first(r), _mm512_permutex2var_ps(a, ie, b));
    _mm512_mask_storeu_ps(odd + j, V::first(r), _mm512_permutex2var_ps(a, io, b));
  }
}

void planar_f32_avx512_split3(const float* src, int64_t n, float* d0, float* d1, float* d2) {
  // Phase q, lane j: element 3j + q of 48 = a (0-15), b (16-31), c (32-47):
  // lanes below 32 from (a, b), then the rest from c over them.
  __m512i lo[3], hi[3];
  float* const dst[3] = {d0, d1, d2};
  for (int q = 0; q < 3; ++q) {
    alignas(64) int32_t l[16], h[16];
    for (int j = 0; j < 16; ++j) {
      const int i = 3 * j + q;
      l[j] = i < 32 ? i : 0;
      h[j] = i < 32 ? j : 16 + (i - 32);
    }
    lo[q] = _mm512_load_si512(l);
    hi[q] = _mm512_load_si512(h);
  }
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const float* s = src + 3 * j;
    const __m512 a = _mm512_loadu_ps(s), b = _mm512_loadu_ps(s + 16), c = _mm512_loadu_ps(s + 32);
    for (int q = 0; q < 3; ++q)
      _mm512_storeu_ps(dst[q] + j,
                       _mm512_permutex2var_ps(_mm512_permutex2var_ps(a, lo[q], b), hi[q], c));
  }
  if (j < n) {  // 3 * (n - j) < 48 floats left
    const int64_t r = n - j, m = 3 * r;
    const float* s = src + 3 * j;
    const __m512 a = _mm512_maskz_loadu_ps(V::first(m), s);
    const __m512 b = _mm512_maskz_loadu_ps(V::first(m - 16), s + 16);
    const __m512 c = _mm512_maskz_loadu_ps(V::first(m - 32), s + 32);
    for (int q = 0; q < 3; ++q)
      _mm512_mask_storeu_ps(dst[q] + j, V::first(r),
                            _mm512_permutex2var_ps(_mm512_permutex2var_ps(a, lo[q], b), hi[q], c));
  }
}

void planar_f32_avx512_strided_copy(const float* src, int64_t step, int64_t n, float* dst) {
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                           12, 13, 14, 15),
                                         _mm512_set1_epi32(static_cast<int>(step)));
  int64_t j = 0;
  for (; j + 16 <= n; j += 16, src += 16 * step)
    _mm512_storeu_ps(dst + j, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xffff, idx, src, 4));
  if (j < n) {  // only the lanes in the mask are read
    const __mmask16 k = V::first(n - j);
    _mm512_mask_storeu_ps(dst + j, k,
                          _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, idx, src, 4));
  }
}

const PlanarF32Table* planar_f32_table_avx512() {
  static constexpr PlanarF32Table table = []() constexpr {
    PlanarF32Table t{};
    t.isa = "avx512";
    t.vl = 16;
    t.tile_accs = kAccs;
    t.tile_max_m = kM;
    t.tile_max_nv = kNV;
    t.tile_deep_nv = 4;
    fill_planar_tiles<V, kAccs, kM, kNV>(t);
    fill_planar_dots<V, kPlanarDotMaxM * kPlanarDotMaxN>(t);  // every shape
    t.dot_by_cost = false;  // 4 x 4: 16 accumulators and 8 loads fit the 32 registers
    fill_gemm<1>(t);
    t.dw_rows = planar_f32_avx512_dw_rows;
    t.split2 = planar_f32_avx512_split2;
    t.split3 = planar_f32_avx512_split3;
    t.strided_copy = planar_f32_avx512_strided_copy;
    t.transpose16 = transpose_block16_avx512;
    t.widen16[0] = bf16_to_f32_avx512;
    t.widen16[1] = f16_to_f32_avx512;
    t.narrow16[0] = f32_to_bf16_avx512;
    t.narrow16[1] = f32_to_f16_avx512;
    // Measured on Sapphire Rapids (Intel) and Zen 4/5 (AMD): planar_f32_common.cpp.
    t.rules.gemm_min_positions = 128;
    t.rules.gemm_min_row = 48;
    t.rules.gemm_min_channel_run = 0;
    t.rules.gemm_min_inside = 0;
    t.rules.fused_taps_channels_last = true;
    t.rules.deep_channels_last_macs = 400;
    t.rules.depthwise_dots = true;
    t.rules.amd_rules = true;
    t.rules.little_work_min_line = 24;
    t.rules.little_work_max_macs = 130;
    return t;
  }();
  return &table;
}

}  // namespace x86
}  // namespace tct
