// AVX-512 micro-kernels of the f32 forward / backward-data passes. Compiled
// with -mavx512f/bw/vl/dq: only leaf functions over raw pointers here (no
// std templates, no shared inline functions), see conv_f32_kernels.h.
#include <immintrin.h>

#include <cstdint>

#include "conv_f32_kernels.h"

namespace tct {
namespace x86 {
namespace {

// Columns [16v, 16v+16) of a tile with ncols valid columns.
inline __mmask16 col_mask(int64_t ncols, int v) {
  const int64_t rem = ncols - 16 * v;
  if (rem >= 16) return static_cast<__mmask16>(0xFFFF);
  if (rem <= 0) return 0;
  return static_cast<__mmask16>((1u << rem) - 1u);
}

// A compile-time lane index (for immediates in unrolled code).
template <int K>
struct Lane {
  static constexpr int value = K;
};

// MR x (16*NV) register tile. The accumulator arrays are indexed only with
// compile-time constants inside fully unrolled loops, so GCC keeps them in
// zmm registers (checked with objdump: no stack traffic in the c loop).
template <int MR, int NV, int M = MR>
inline __attribute__((always_inline)) void gemm_tile(const ConvTileArgs* args) {
  constexpr int NR = 16 * NV;
  __m512 acc[M][NV];
  const int64_t col_off = args->col_off;
  __mmask16 k[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) k[v] = col_mask(args->ncols, v);
  if (args->accumulate) {
#pragma GCC unroll 32
    for (int m = 0; m < M; ++m) {
      const float* o = args->out[m] + col_off;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_maskz_loadu_ps(k[v], o + 16 * v);
    }
  } else {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __m512 b = _mm512_loadu_ps(args->bias + 16 * v);
#pragma GCC unroll 32
      for (int m = 0; m < M; ++m) acc[m][v] = b;
    }
  }
  const float* const* a = args->a;
  const int64_t cred = args->cred, a_off = args->a_off;
  const int32_t* wtap = args->wtap;
  const float* const* rows = args->rows;
  const int64_t* tapoff = args->tapoff;
  for (int64_t t = 0; t < args->ntaps; ++t, a += MR) {
    const float* w = args->w + (wtap ? wtap[t] : t) * cred * NR;
    const float* p[M];
    if (rows) {
      const int64_t o = tapoff[t] + a_off;
#pragma GCC unroll 32
      for (int m = 0; m < M; ++m) p[m] = rows[m] + o;
    } else {
#pragma GCC unroll 32
      for (int m = 0; m < M; ++m) p[m] = a[m] + a_off;
    }
    if (args->prefetch) {
#pragma GCC unroll 32
      for (int m = 0; m < M; ++m)
        _mm_prefetch(reinterpret_cast<const char*>(p[m] + args->prefetch), _MM_HINT_T0);
    }
    auto step = [&](int64_t c) __attribute__((always_inline)) {
      __m512 wv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) wv[v] = _mm512_load_ps(w + 16 * v);
      w += NR;
#pragma GCC unroll 32
      for (int m = 0; m < M; ++m) {
        const __m512 x = _mm512_set1_ps(p[m][c]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_fmadd_ps(x, wv[v], acc[m][v]);
      }
    };
    if constexpr (NV == 1) {
      // One vector of columns: one broadcast load per FMA, so the loop is
      // load-bound (Zen 5 sustains about two loads a cycle: M/(M+1) of the
      // FMA rate at best). Unrolled 4x and counting up to zero, so that the
      // M row pointers, w and the index stay in registers (with 14 rows GCC
      // kept some pointers in xmm registers, moved back every step: 80 % of
      // the peak in cache; 12 rows this way 86-89 %). The first S rows load
      // their 4 inputs of the group at once (one 16-byte load, copied to the
      // four 128-bit lanes) and broadcast each with an in-lane permute,
      // which trades loads for shuffles (Zen 5, 12 rows in cache, standalone
      // loop: 2 rows 95 %, 4 rows 97 %, 8 rows 95 %, all 12 85 %, none 89 %;
      // this tile in bench_conv_f32: 4 rows 94-98 %, was 83-87 %).
      constexpr int S = M >= 12 ? 4 : M / 3;
      auto step4 = [&](int64_t c) __attribute__((always_inline)) {
        __m512 q[S > 0 ? S : 1];
#pragma GCC unroll 32
        for (int m = 0; m < S; ++m) q[m] = _mm512_broadcast_f32x4(_mm_loadu_ps(p[m] + c));
        auto fma_k = [&](auto kc) __attribute__((always_inline)) {
          constexpr int kk = decltype(kc)::value;
          const __m512 wv = _mm512_load_ps(w + 16 * kk);
#pragma GCC unroll 32
          for (int m = 0; m < M; ++m) {
            const __m512 x = m < S ? _mm512_permute_ps(q[m < S ? m : 0], kk * 0x55)
                                   : _mm512_set1_ps(p[m][c + kk]);
            acc[m][0] = _mm512_fmadd_ps(x, wv, acc[m][0]);
          }
        };
        fma_k(Lane<0>());
        fma_k(Lane<1>());
        fma_k(Lane<2>());
        fma_k(Lane<3>());
        w += 4 * NR;
      };
      const int64_t head = cred % 4;
      for (int64_t c = 0; c < head; ++c) step(c);
#pragma GCC unroll 32
      for (int m = 0; m < M; ++m) p[m] += cred;
      for (int64_t c = head - cred; c != 0; c += 4) step4(c);
    } else {
      for (int64_t c = 0; c < cred; ++c) step(c);
    }
  }
  if (args->stream) {
    // Streaming stores: whole 64-byte lines only. Rows that follow each
    // other in memory (ncols is the output's row length) are staged in L1
    // and written as M * ncols / 16 lines; otherwise each full vector that
    // is a whole aligned line is streamed and the others stored as usual.
    const int64_t ncols = args->ncols;
    float* const o0 = args->out[0] + col_off;
    bool packed = (M * ncols) % 16 == 0 && (reinterpret_cast<uintptr_t>(o0) & 63) == 0;
#pragma GCC unroll 32
    for (int m = 1; m < M; ++m) packed = packed && args->out[m] + col_off == o0 + m * ncols;
    if (packed) {
      alignas(64) float buf[M * NR];
#pragma GCC unroll 32
      for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v)
          _mm512_mask_storeu_ps(buf + m * ncols + 16 * v, k[v], acc[m][v]);
      for (int64_t i = 0; i < M * ncols; i += 16)
        _mm512_stream_ps(o0 + i, _mm512_load_ps(buf + i));
      return;
    }
#pragma GCC unroll 32
    for (int m = 0; m < M; ++m) {
      float* o = args->out[m] + col_off;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        if (k[v] == 0xFFFF && (reinterpret_cast<uintptr_t>(o + 16 * v) & 63) == 0)
          _mm512_stream_ps(o + 16 * v, acc[m][v]);
        else
          _mm512_mask_storeu_ps(o + 16 * v, k[v], acc[m][v]);
      }
    }
    return;
  }
  if (args->ncols >= NR) {
#pragma GCC unroll 32
    for (int m = 0; m < M; ++m) {
      float* o = args->out[m] + col_off;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) _mm512_storeu_ps(o + 16 * v, acc[m][v]);
    }
  } else {
#pragma GCC unroll 32
    for (int m = 0; m < M; ++m) {
      float* o = args->out[m] + col_off;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(o + 16 * v, k[v], acc[m][v]);
    }
  }
}

// Sums of the 16 lanes of v0..v3, as the 4 floats of the result.
inline __attribute__((always_inline)) __m128 hsum4(__m512 v0, __m512 v1, __m512 v2, __m512 v3) {
  const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(v2, v3, _MM_SHUFFLE(3, 2, 3, 2)));
  // 128-bit block k: 4 partial sums of v_k.
  __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
  u = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(2, 3, 0, 1)));
  u = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512i idx = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(idx, u));
}

// Dot-product tile: MR rows x NC columns, vectorized over the reduction.
template <int MR, int NC>
inline __attribute__((always_inline)) void dot_tile(const ConvTileArgs* args) {
  static_assert((MR * NC) % 4 == 0, "whole groups of 4 sums");
  __m512 acc[MR][NC];
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int j = 0; j < NC; ++j) acc[m][j] = _mm512_setzero_ps();
  const float* const* a = args->a;
  const int64_t cred = args->cred, a_off = args->a_off;
  const int64_t cfull = cred / 16 * 16, credp = (cred + 15) / 16 * 16;
  const __mmask16 kt = static_cast<__mmask16>((1u << (cred - cfull)) - 1u);
  const int32_t* wtap = args->wtap;
  for (int64_t t = 0; t < args->ntaps; ++t, a += MR) {
    const float* w = args->w + (wtap ? wtap[t] : t) * credp * NC;
    const float* p[MR];
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) p[m] = a[m] + a_off;
    int64_t c = 0;
    for (; c < cfull; c += 16, w += 16 * NC) {
      __m512 wv[NC];
#pragma GCC unroll 4
      for (int j = 0; j < NC; ++j) wv[j] = _mm512_load_ps(w + 16 * j);
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) {
        const __m512 x = _mm512_loadu_ps(p[m] + c);
#pragma GCC unroll 4
        for (int j = 0; j < NC; ++j) acc[m][j] = _mm512_fmadd_ps(x, wv[j], acc[m][j]);
      }
    }
    if (c < cred) {
      __m512 wv[NC];
#pragma GCC unroll 4
      for (int j = 0; j < NC; ++j) wv[j] = _mm512_load_ps(w + 16 * j);
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) {
        const __m512 x = _mm512_maskz_loadu_ps(kt, p[m] + c);
#pragma GCC unroll 4
        for (int j = 0; j < NC; ++j) acc[m][j] = _mm512_fmadd_ps(x, wv[j], acc[m][j]);
      }
    }
  }
  float res[MR * NC];
#pragma GCC unroll 16
  for (int i = 0; i < MR * NC; i += 4)
    _mm_storeu_ps(res + i, hsum4(acc[i / NC][i % NC], acc[(i + 1) / NC][(i + 1) % NC],
                                 acc[(i + 2) / NC][(i + 2) % NC], acc[(i + 3) / NC][(i + 3) % NC]));
  const float* bias = args->bias;
  const int64_t col_off = args->col_off;
  for (int m = 0; m < MR; ++m) {
    float* o = args->out[m] + col_off;
#pragma GCC unroll 4
    for (int j = 0; j < NC; ++j) o[j] = res[m * NC + j] + bias[j];
  }
}

// The first M rows of an MR-row tile (row pointers still MR apart per tap).
template <int MR, int NV, int M>
void partial_tile(const ConvTileArgs* args) {
  gemm_tile<MR, NV, M>(args);
}

template <int MR, int NV, int M = 1>
void fill_partial(ConvTileFn* t) {
  if constexpr (M < MR) {
    t[M] = &partial_tile<MR, NV, M>;
    fill_partial<MR, NV, M + 1>(t);
  }
}

}  // namespace

void conv_f32_avx512_dot1(const ConvTileArgs* args) { dot_tile<kDotRows[1], 1>(args); }
void conv_f32_avx512_dot2(const ConvTileArgs* args) { dot_tile<kDotRows[2], 2>(args); }
void conv_f32_avx512_dot3(const ConvTileArgs* args) { dot_tile<kDotRows[3], 3>(args); }
void conv_f32_avx512_dot4(const ConvTileArgs* args) { dot_tile<kDotRows[4], 4>(args); }

void conv_f32_avx512_6x64(const ConvTileArgs* args) { gemm_tile<6, 4>(args); }
void conv_f32_avx512_8x48(const ConvTileArgs* args) { gemm_tile<8, 3>(args); }
void conv_f32_avx512_12x32(const ConvTileArgs* args) { gemm_tile<12, 2>(args); }
void conv_f32_avx512_12x16(const ConvTileArgs* args) { gemm_tile<12, 1>(args); }

namespace {

// Depthwise: elementwise multiply-adds over the channels. The R rows share
// each weight load; R rows x 2 vectors = 2R independent FMA chains. (In the
// unnamed namespace like every template here: an instance with external
// linkage could be merged with the other ISA file's and run on a CPU that
// lacks this file's instructions.)
template <int R>
void dw_tile(const ConvTileArgs* args) {
  const int64_t C = args->ncols, T = args->ntaps;
  const float* const* a = args->a;
  const float* const* rows = args->rows;  // row mode: rows[m] + tapoff[t]
  const int64_t* tapoff = args->tapoff;
  auto in = [&](int64_t t, int m) { return rows ? rows[m] + tapoff[t] : a[t * R + m]; };
  const int32_t* wtap = args->wtap;  // (null: tap t's weights are row t)
  auto wrow = [&](int64_t t) { return args->w + (wtap ? wtap[t] : t) * C; };
  int64_t c = 0;
  for (; c + 32 <= C; c += 32) {
    __m512 acc[R][2];
    const __m512 b0 = _mm512_loadu_ps(args->bias + c), b1 = _mm512_loadu_ps(args->bias + c + 16);
#pragma GCC unroll 16
    for (int m = 0; m < R; ++m) {
      acc[m][0] = b0;
      acc[m][1] = b1;
    }
    for (int64_t t = 0; t < T; ++t) {
      const float* w = wrow(t) + c;
      const __m512 w0 = _mm512_loadu_ps(w), w1 = _mm512_loadu_ps(w + 16);
#pragma GCC unroll 16
      for (int m = 0; m < R; ++m) {
        const float* x = in(t, m) + c;
        acc[m][0] = _mm512_fmadd_ps(_mm512_loadu_ps(x), w0, acc[m][0]);
        acc[m][1] = _mm512_fmadd_ps(_mm512_loadu_ps(x + 16), w1, acc[m][1]);
      }
    }
#pragma GCC unroll 16
    for (int m = 0; m < R; ++m) {
      float* o = args->out[m] + c;
      if (args->stream && (reinterpret_cast<uintptr_t>(o) & 63) == 0) {  // two whole lines
        _mm512_stream_ps(o, acc[m][0]);
        _mm512_stream_ps(o + 16, acc[m][1]);
      } else {
        _mm512_storeu_ps(o, acc[m][0]);
        _mm512_storeu_ps(o + 16, acc[m][1]);
      }
    }
  }
  for (; c < C; c += 16) {
    const __mmask16 k = col_mask(C - c, 0);
    __m512 acc[R];
    const __m512 b = _mm512_maskz_loadu_ps(k, args->bias + c);
#pragma GCC unroll 16
    for (int m = 0; m < R; ++m) acc[m] = b;
    for (int64_t t = 0; t < T; ++t) {
      const __m512 w = _mm512_maskz_loadu_ps(k, wrow(t) + c);
#pragma GCC unroll 16
      for (int m = 0; m < R; ++m)
        acc[m] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, in(t, m) + c), w, acc[m]);
    }
#pragma GCC unroll 16
    for (int m = 0; m < R; ++m) {
      float* o = args->out[m] + c;
      if (args->stream && k == 0xffff && (reinterpret_cast<uintptr_t>(o) & 63) == 0)
        _mm512_stream_ps(o, acc[m]);
      else
        _mm512_mask_storeu_ps(o, k, acc[m]);
    }
  }
}

}  // namespace

void conv_f32_avx512_dw(const ConvTileArgs* args) { dw_tile<kDwRowsAvx512>(args); }

// Small groups: per 16-channel block, the 32 input channels its lanes need
// are loaded once per row and tap, and each reduction step permutes them into
// place (vpermt2ps) before the FMA. Four rows in flight hide the latency.
void conv_f32_avx512_grouped(const ConvGroupedArgs* args) {
  static_assert(kDwRows == 4, "four accumulator chains");
  const int64_t T = args->ntaps, cred = args->cred, ncp = args->ncols_pad;
  const float* const* a = args->a;
  for (int64_t v = 0; v * 16 < args->ncols; ++v) {
    const int64_t base = args->base[v];
    const __mmask16 klo = col_mask(args->in_c - base, 0), khi = col_mask(args->in_c - base, 1);
    const __m512 b = _mm512_loadu_ps(args->bias + 16 * v);
    __m512 acc0 = b, acc1 = b, acc2 = b, acc3 = b;
    const int32_t* idx_v = args->idx + v * cred * 16;
    for (int64_t t = 0; t < T; ++t) {
      const float* r0 = a[t * 4 + 0] + base;
      const float* r1 = a[t * 4 + 1] + base;
      const float* r2 = a[t * 4 + 2] + base;
      const float* r3 = a[t * 4 + 3] + base;
      const __m512 lo0 = _mm512_maskz_loadu_ps(klo, r0), hi0 = _mm512_maskz_loadu_ps(khi, r0 + 16);
      const __m512 lo1 = _mm512_maskz_loadu_ps(klo, r1), hi1 = _mm512_maskz_loadu_ps(khi, r1 + 16);
      const __m512 lo2 = _mm512_maskz_loadu_ps(klo, r2), hi2 = _mm512_maskz_loadu_ps(khi, r2 + 16);
      const __m512 lo3 = _mm512_maskz_loadu_ps(klo, r3), hi3 = _mm512_maskz_loadu_ps(khi, r3 + 16);
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
    const __mmask16 ko = col_mask(args->ncols - 16 * v, 0);
    _mm512_mask_storeu_ps(args->out[0] + 16 * v, ko, acc0);
    _mm512_mask_storeu_ps(args->out[1] + 16 * v, ko, acc1);
    _mm512_mask_storeu_ps(args->out[2] + 16 * v, ko, acc2);
    _mm512_mask_storeu_ps(args->out[3] + 16 * v, ko, acc3);
  }
}

ConvTileFn conv_f32_avx512_partial(ConvTileFn full, int m) {
  struct Tables {
    ConvTileFn t6x64[6];
    ConvTileFn t8x48[8];
    ConvTileFn t12x32[12];
    ConvTileFn t12x16[12];
  };
  static const Tables tables = [] {
    Tables t{};
    fill_partial<6, 4>(t.t6x64);
    fill_partial<8, 3>(t.t8x48);
    fill_partial<12, 2>(t.t12x32);
    fill_partial<12, 1>(t.t12x16);
    return t;
  }();
  if (m < 1) return full;
  if (full == conv_f32_avx512_6x64) return m < 6 ? tables.t6x64[m] : full;
  if (full == conv_f32_avx512_8x48) return m < 8 ? tables.t8x48[m] : full;
  if (full == conv_f32_avx512_12x32) return m < 12 ? tables.t12x32[m] : full;
  if (full == conv_f32_avx512_12x16) return m < 12 ? tables.t12x16[m] : full;
  return full;
}

}  // namespace x86
}  // namespace tct
