// AVX2 tiles of the planar (NCX) f32 passes; see planar_f32.h.
// Loops over a tile's rows and vectors are unrolled in full (pragmas) so that
// GCC keeps the accumulators in registers.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "avx2_util.h"
#include "convert.h"
#include "planar_f32.h"
#include "planar_f32_tiles.h"
#include "transpose.h"
#include "vec_avx2.h"

namespace tct {
namespace x86 {
namespace {

using V = VecAvx2;

// Tiles: 8 floats per vector, m * nv <= kAccs accumulators, m <= kM, nv <= kNV.
constexpr int kAccs = 12, kM = 12, kNV = 4;
static_assert(kM <= kPlanarTileMaxM && kNV <= kPlanarTileMaxNV, "PlanarF32Table::tile");

// Dot tiles of at most kDotAccs accumulators: with one loaded vector per
// tile row and column they fill the 16 registers.
constexpr int kDotAccs = 9;

// GEMM (planar_f32.h) as sub-tiles of R <= 6 rows x NV <= 2 vectors (16
// columns): 2R accumulators, NV B vectors and a broadcast in the 16 ymm
// registers. Full: all NV*8 columns are inside n (no masks).
template <int R, int NV, bool Full>
void gemm_sub(const PlanarGemmArgs* a, int64_t row0, int64_t col0) {
  const int64_t left = a->n - col0;
  const __m256i k0 = first_lanes(left), k1 = first_lanes(left - 8);
  const int64_t kc = a->kc, as = a->a_stride, bs = a->b_stride, cs = a->c_stride;
  float* const c = a->c + row0 * cs + col0;
  __m256 acc[R][NV];
  #pragma GCC unroll 32
  for (int i = 0; i < R; ++i)
    #pragma GCC unroll 32
    for (int v = 0; v < NV; ++v) {
      const float* o = c + i * cs + 8 * v;
      acc[i][v] = !a->accumulate ? _mm256_setzero_ps()
                  : Full         ? _mm256_loadu_ps(o)
                                 : _mm256_maskload_ps(o, v == 0 ? k0 : k1);
    }
  const float* pa = a->a + row0 * as;
  const float* pb = a->b + col0;
  for (int64_t r = 0; r < kc; ++r, ++pa, pb += bs) {
    __m256 b[NV];
    #pragma GCC unroll 32
    for (int v = 0; v < NV; ++v)
      b[v] = Full ? _mm256_loadu_ps(pb + 8 * v) : _mm256_maskload_ps(pb + 8 * v, v == 0 ? k0 : k1);
    #pragma GCC unroll 32
    for (int i = 0; i < R; ++i) {
      const __m256 x = _mm256_broadcast_ss(pa + i * as);
      #pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(x, b[v], acc[i][v]);
    }
  }
  #pragma GCC unroll 32
  for (int i = 0; i < R; ++i)
    #pragma GCC unroll 32
    for (int v = 0; v < NV; ++v) {
      float* o = c + i * cs + 8 * v;
      if (Full) {
        _mm256_storeu_ps(o, acc[i][v]);
      } else {
        store_first_lanes(o, acc[i][v], left - 8 * v);
      }
    }
}

using GemmSub = void (*)(const PlanarGemmArgs*, int64_t, int64_t);
constexpr int kSubRows = 6;

template <int R>
void fill_sub(std::array<std::array<GemmSub, 3>, kSubRows + 1>& t) {
  t[R][0] = &gemm_sub<R, 1, false>;
  t[R][1] = &gemm_sub<R, 2, false>;
  t[R][2] = &gemm_sub<R, 2, true>;
  if constexpr (R < kSubRows) fill_sub<R + 1>(t);
}

void gemm(const PlanarGemmArgs* a, int m) {
  static const auto subs = [] {
    std::array<std::array<GemmSub, 3>, kSubRows + 1> t{};
    fill_sub<1>(t);
    return t;
  }();
  // Even row chunks (7 rows: 4 + 3), columns in 16-wide halves.
  const int chunks = (m + kSubRows - 1) / kSubRows, rows = (m + chunks - 1) / chunks;
  for (int64_t col0 = 0; col0 < a->n; col0 += 16) {
    const int64_t nc = std::min<int64_t>(16, a->n - col0);
    const int kind = nc == 16 ? 2 : nc > 8 ? 1 : 0;
    for (int row0 = 0; row0 < m; row0 += rows) subs[std::min(rows, m - row0)][kind](a, row0, col0);
  }
}

template <int M>
void gemm_m(const PlanarGemmArgs* a) {
  gemm(a, M);
}

template <int M>
constexpr void fill_gemm(PlanarF32Table& t) {
  t.gemm[M] = &gemm_m<M>;
  if constexpr (M < kPlanarGemmMaxM) fill_gemm<M + 1>(t);
}

}  // namespace

void planar_f32_avx2_dw_rows(const PlanarDwArgs* a) { planar_dw_rows<V>(a); }

void planar_f32_avx2_split2(const float* src, int64_t n, float* even, float* odd) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    // Per 128-bit lane, the shuffles give pairs 0 1 4 5 | 2 3 6 7; the
    // 64-bit permute puts them in order.
    const __m256 a = _mm256_loadu_ps(src + 2 * j), b = _mm256_loadu_ps(src + 2 * j + 8);
    const __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 o = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    _mm256_storeu_ps(even + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xd8)));
    _mm256_storeu_ps(odd + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xd8)));
  }
  for (; j < n; ++j) {
    even[j] = src[2 * j];
    odd[j] = src[2 * j + 1];
  }
}

void planar_f32_avx2_split3(const float* src, int64_t n, float* d0, float* d1, float* d2) {
  // Phase q, lane j: element 3j + q of 24 = a (0-7), b (8-15), c (16-23):
  // each vector's elements permuted into their lanes, then blended.
  __m256i pa[3], pb[3], pc[3];
  int mb[3] = {0, 0, 0}, mc[3] = {0, 0, 0};
  float* const dst[3] = {d0, d1, d2};
  for (int q = 0; q < 3; ++q) {
    alignas(32) int32_t ia[8], ib[8], ic[8];
    for (int j = 0; j < 8; ++j) {
      const int i = 3 * j + q;
      ia[j] = i < 8 ? i : 0;
      ib[j] = i >= 8 && i < 16 ? i - 8 : 0;
      ic[j] = i >= 16 ? i - 16 : 0;
      if (i >= 8 && i < 16) mb[q] |= 1 << j;
      if (i >= 16) mc[q] |= 1 << j;
    }
    pa[q] = _mm256_load_si256(reinterpret_cast<const __m256i*>(ia));
    pb[q] = _mm256_load_si256(reinterpret_cast<const __m256i*>(ib));
    pc[q] = _mm256_load_si256(reinterpret_cast<const __m256i*>(ic));
  }
  auto mask = [](int bits) {
    alignas(32) int32_t m[8];
    for (int j = 0; j < 8; ++j) m[j] = (bits >> j) & 1 ? -1 : 0;
    return _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(m)));
  };
  __m256 kb[3], kc[3];
  for (int q = 0; q < 3; ++q) kb[q] = mask(mb[q]), kc[q] = mask(mc[q]);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const float* s = src + 3 * j;
    const __m256 a = _mm256_loadu_ps(s), b = _mm256_loadu_ps(s + 8), c = _mm256_loadu_ps(s + 16);
    for (int q = 0; q < 3; ++q) {
      __m256 v = _mm256_permutevar8x32_ps(a, pa[q]);
      v = _mm256_blendv_ps(v, _mm256_permutevar8x32_ps(b, pb[q]), kb[q]);
      v = _mm256_blendv_ps(v, _mm256_permutevar8x32_ps(c, pc[q]), kc[q]);
      _mm256_storeu_ps(dst[q] + j, v);
    }
  }
  for (; j < n; ++j) {
    d0[j] = src[3 * j];
    d1[j] = src[3 * j + 1];
    d2[j] = src[3 * j + 2];
  }
}

void planar_f32_avx2_strided_copy(const float* src, int64_t step, int64_t n, float* dst) {
  const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                         _mm256_set1_epi32(static_cast<int>(step)));
  int64_t j = 0;
  for (; j + 8 <= n; j += 8, src += 8 * step) _mm256_storeu_ps(dst + j, _mm256_i32gather_ps(src, idx, 4));
  if (j < n) {  // only the lanes in the mask are read
    const __m256i k = first_lanes(n - j);
    store_first_lanes(dst + j,
                      _mm256_mask_i32gather_ps(_mm256_setzero_ps(), src, idx,
                                               _mm256_castsi256_ps(k), 4),
                      n - j);
  }
}

const PlanarF32Table* planar_f32_table_avx2() {
  static constexpr PlanarF32Table table = []() constexpr {
    PlanarF32Table t{};
    t.isa = "avx2";
    t.vl = 8;
    t.tile_accs = kAccs;
    t.tile_max_m = kM;
    t.tile_max_nv = kNV;
    t.tile_deep_nv = 3;
    fill_planar_tiles<V, kAccs, kM, kNV>(t);
    fill_planar_dots<V, kDotAccs>(t);
    t.dot_by_cost = true;  // no 4 x 4: the shape with the least work
    fill_gemm<1>(t);
    t.dw_rows = planar_f32_avx2_dw_rows;
    t.split2 = planar_f32_avx2_split2;
    t.split3 = planar_f32_avx2_split3;
    t.strided_copy = planar_f32_avx2_strided_copy;
    t.transpose16 = transpose_block16_avx2;
    t.widen16[0] = bf16_to_f32_avx2;
    t.widen16[1] = f16_to_f32_avx2;
    t.narrow16[0] = f32_to_bf16_avx2;
    t.narrow16[1] = f32_to_f16_avx2;
    // Measured on Zen 3: planar_f32_common.cpp.
    t.rules.gemm_min_positions = 16;
    t.rules.gemm_min_row = 0;
    t.rules.gemm_min_channel_run = 1024;
    t.rules.gemm_min_inside = 0.75;
    t.rules.fused_taps_channels_last = false;
    t.rules.deep_channels_last_macs = 1000;
    t.rules.depthwise_dots = false;
    t.rules.amd_rules = false;
    t.rules.little_work_min_line = 0;
    t.rules.little_work_max_macs = 0;
    return t;
  }();
  return &table;
}

}  // namespace x86
}  // namespace tct
