// AVX-512 tiles of the planar (NCX) f32 passes; see planar_f32.h.
// Every loop over a tile's rows or vectors is unrolled in full (pragmas), so
// that GCC keeps the accumulators in registers: without it they are stored to
// the stack on every iteration.
#include <immintrin.h>

#include <cstdint>

#include "planar_f32.h"
#include "transpose.h"

namespace tct {
namespace x86 {
namespace {

// The first n lanes (none when n <= 0, all 16 when n >= 16).
__mmask16 lanes(int64_t n) {
  return n <= 0 ? 0 : n >= 16 ? 0xffff : static_cast<__mmask16>((1u << n) - 1);
}

template <int M, int NV>
void tile(const PlanarTileArgs* a) {
  __m512 acc[M][NV];
  const int64_t nx = a->nx;
  #pragma GCC unroll 32
  for (int r = 0; r < M; ++r) {
    if (a->accumulate) {
      const float* o = a->out + r * a->out_stride;
      #pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) {
        const int64_t left = nx - 16 * v;
        acc[r][v] = left >= 16 ? _mm512_loadu_ps(o + 16 * v)
                               : _mm512_maskz_loadu_ps(lanes(left), o + 16 * v);
      }
      continue;
    }
    const __m512 b = a->bias ? _mm512_set1_ps(a->bias[r]) : _mm512_setzero_ps();
    #pragma GCC unroll 32
    for (int v = 0; v < NV; ++v) acc[r][v] = b;
  }
  const int64_t cin = a->cin, ntap = a->ntap, cis = a->c_in_stride, cws = a->c_w_stride;
  for (int64_t s = 0; s < a->nseg; ++s) {
    const float* ib = a->in + a->in_off + a->seg_in[s];
    const float* wb = a->w + a->seg_w[s];
    for (int64_t c = 0; c < cin; ++c, ib += cis, wb += cws) {
      for (int64_t t = 0; t < ntap; ++t) {
        const float* ip = ib + a->tap_in[t];
        const float* wp = wb + a->tap_w[t];
        __m512 x[NV];
        #pragma GCC unroll 32
        for (int v = 0; v < NV; ++v) x[v] = _mm512_loadu_ps(ip + 16 * v);
        #pragma GCC unroll 32
        for (int r = 0; r < M; ++r) {
          const __m512 b = _mm512_set1_ps(wp[r]);
          #pragma GCC unroll 32
          for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(b, x[v], acc[r][v]);
        }
      }
    }
  }
  #pragma GCC unroll 32
  for (int r = 0; r < M; ++r) {
    float* o = a->out + r * a->out_stride;
    #pragma GCC unroll 32
    for (int v = 0; v < NV; ++v) {
      const int64_t left = nx - 16 * v;
      if (left >= 16) {
        if (a->stream && (reinterpret_cast<uintptr_t>(o + 16 * v) & 63) == 0)
          _mm512_stream_ps(o + 16 * v, acc[r][v]);
        else
          _mm512_storeu_ps(o + 16 * v, acc[r][v]);
      } else if (left > 0) {
        _mm512_mask_storeu_ps(o + 16 * v, lanes(left), acc[r][v]);
      }
    }
  }
}

// Tiles: 16 floats per vector, m * nv <= kAccs accumulators, m <= kM, nv <= kNV.
constexpr int kAccs = 24, kM = 16, kNV = 8;
static_assert(kM <= kPlanarTileMaxM && kNV <= kPlanarTileMaxNV, "PlanarF32Table::tile");

template <int M, int NV>
void fill(PlanarF32Table& t) {
  if constexpr (M * NV <= kAccs) t.tile[M][NV] = &tile<M, NV>;
  if constexpr (NV < kNV) {
    fill<M, NV + 1>(t);
  } else if constexpr (M < kM) {
    fill<M + 1, 1>(t);
  }
}

template <int M, int N>
void dot(const PlanarDotArgs* a) {
  __m512 acc[M][N];
  #pragma GCC unroll 32
  for (int i = 0; i < M; ++i)
    #pragma GCC unroll 32
    for (int j = 0; j < N; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t r = 0; r < a->nrows; ++r) {
    const float* pa = a->a[r];
    const float* pb = a->b[r];
    for (int64_t v = 0; v < a->nvec; ++v, pa += 16, pb += 16) {
      __m512 x[M], y[N];
      #pragma GCC unroll 32
      for (int i = 0; i < M; ++i) x[i] = _mm512_loadu_ps(pa + i * a->a_stride);
      #pragma GCC unroll 32
      for (int j = 0; j < N; ++j) y[j] = _mm512_loadu_ps(pb + j * a->b_stride);
      #pragma GCC unroll 32
      for (int i = 0; i < M; ++i)
        #pragma GCC unroll 32
        for (int j = 0; j < N; ++j) acc[i][j] = _mm512_fmadd_ps(x[i], y[j], acc[i][j]);
    }
  }
  #pragma GCC unroll 32
  for (int i = 0; i < M; ++i)
    #pragma GCC unroll 32
    for (int j = 0; j < N; ++j) a->out[i * a->out_m + j * a->out_n] += _mm512_reduce_add_ps(acc[i][j]);
}

template <int M, int N>
void fill_dot(PlanarF32Table& t) {
  t.dot[M][N] = &dot<M, N>;
  if constexpr (N < kPlanarDotMaxN) {
    fill_dot<M, N + 1>(t);
  } else if constexpr (M < kPlanarDotMaxM) {
    fill_dot<M + 1, 1>(t);
  }
}

// NV vectors per row (NV = 2: up to 32 columns; NV = 1: up to 16, where a
// second vector would only multiply zeros).
template <int M, int NV>
void gemm_nv(const PlanarGemmArgs* a) {
  // Arguments in locals, accumulators set without branches: keeps GCC from
  // spilling the tile to the stack in the loop.
  __mmask16 k[NV], l[NV];
  #pragma GCC unroll 2
  for (int v = 0; v < NV; ++v) {
    k[v] = lanes(a->n - 16 * v);
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
void fill_gemm(PlanarF32Table& t) {
  t.gemm[M] = &gemm<M>;
  if constexpr (M < kPlanarGemmMaxM) fill_gemm<M + 1>(t);
}

// NV vectors of one depthwise row from x (the last one stored in its first
// `last` lanes).
template <int NV>
void dw_chunk(const float* in, const int64_t* off, const float* w, int64_t ntap, float* out,
              int64_t last) {
  __m512 acc[NV];
  #pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) acc[v] = _mm512_setzero_ps();
  for (int64_t t = 0; t < ntap; ++t) {
    const __m512 b = _mm512_set1_ps(w[t]);
    const float* ip = in + off[t];
    #pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[v] = _mm512_fmadd_ps(b, _mm512_loadu_ps(ip + 16 * v), acc[v]);
  }
  #pragma GCC unroll 8
  for (int v = 0; v < NV - 1; ++v) _mm512_storeu_ps(out + 16 * v, acc[v]);
  _mm512_mask_storeu_ps(out + 16 * (NV - 1), lanes(last), acc[NV - 1]);
}

}  // namespace

void planar_f32_avx512_dw_rows(const PlanarDwArgs* a) {
  const int64_t n = a->n, ntap = a->ntap;
  for (int64_t r = 0; r < a->rows; ++r) {
    const float* in = a->in + r * a->in_step;
    float* out = a->out + r * a->out_step;
    int64_t x = 0;
    for (; x + 64 <= n; x += 64) dw_chunk<4>(in + x, a->off, a->w, ntap, out + x, 16);
    const int64_t rest = n - x;
    if (rest > 48) dw_chunk<4>(in + x, a->off, a->w, ntap, out + x, rest - 48);
    else if (rest > 32) dw_chunk<3>(in + x, a->off, a->w, ntap, out + x, rest - 32);
    else if (rest > 16) dw_chunk<2>(in + x, a->off, a->w, ntap, out + x, rest - 16);
    else if (rest > 0) dw_chunk<1>(in + x, a->off, a->w, ntap, out + x, rest);
  }
}

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
    const __m512 a = _mm512_maskz_loadu_ps(lanes(2 * r), src + 2 * j);
    const __m512 b = _mm512_maskz_loadu_ps(lanes(2 * r - 16), src + 2 * j + 16);
    _mm512_mask_storeu_ps(even + j, lanes(r), _mm512_permutex2var_ps(a, ie, b));
    _mm512_mask_storeu_ps(odd + j, lanes(r), _mm512_permutex2var_ps(a, io, b));
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
    const __m512 a = _mm512_maskz_loadu_ps(lanes(m), s);
    const __m512 b = _mm512_maskz_loadu_ps(lanes(m - 16), s + 16);
    const __m512 c = _mm512_maskz_loadu_ps(lanes(m - 32), s + 32);
    for (int q = 0; q < 3; ++q)
      _mm512_mask_storeu_ps(dst[q] + j, lanes(r),
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
    const __mmask16 k = lanes(n - j);
    _mm512_mask_storeu_ps(dst + j, k,
                          _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, idx, src, 4));
  }
}

const PlanarF32Table* planar_f32_table_avx512() {
  static const PlanarF32Table table = [] {
    PlanarF32Table t{};
    t.isa = "avx512";
    t.vl = 16;
    t.tile_accs = kAccs;
    t.tile_max_m = kM;
    t.tile_max_nv = kNV;
    t.tile_deep_nv = 4;
    fill<1, 1>(t);
    fill_dot<1, 1>(t);
    t.dot_by_cost = false;  // 4 x 4: 16 accumulators and 8 loads fit the 32 registers
    fill_gemm<1>(t);
    t.dw_rows = planar_f32_avx512_dw_rows;
    t.split2 = planar_f32_avx512_split2;
    t.split3 = planar_f32_avx512_split3;
    t.strided_copy = planar_f32_avx512_strided_copy;
    t.transpose16 = transpose_block16_avx512;
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
