// AVX2 micro-kernels of the f32 forward / backward-data passes. Compiled with
// -mavx2 -mfma: only leaf functions over raw pointers here (no std templates,
// no shared inline functions), see conv_f32_kernels.h.
#include <immintrin.h>

#include <cstdint>

#include "avx2_util.h"
#include "conv_f32_kernels.h"

namespace tct {
namespace x86 {
namespace {

// A compile-time lane index (for immediates in unrolled code).
template <int K>
struct Lane {
  static constexpr int value = K;
};

// MR x (8*NV) register tile; the accumulators stay in ymm registers (the
// arrays are only indexed by constants inside fully unrolled loops).
template <int MR, int NV, int M = MR>
inline __attribute__((always_inline)) void gemm_tile(const ConvTileArgs* args) {
  constexpr int NR = 8 * NV;
  __m256 acc[M][NV];
  const int64_t col_off = args->col_off;
  __m256i k[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) k[v] = first_lanes(args->ncols - 8 * v);
  if (args->accumulate) {
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      const float* o = args->out[m] + col_off;
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[m][v] = _mm256_maskload_ps(o + 8 * v, k[v]);
    }
  } else {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const __m256 b = _mm256_loadu_ps(args->bias + 8 * v);
#pragma GCC unroll 16
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
#pragma GCC unroll 16
      for (int m = 0; m < M; ++m) p[m] = rows[m] + o;
    } else {
#pragma GCC unroll 16
      for (int m = 0; m < M; ++m) p[m] = a[m] + a_off;
    }
    if (args->prefetch) {
#pragma GCC unroll 32
      for (int m = 0; m < M; ++m)
        _mm_prefetch(reinterpret_cast<const char*>(p[m] + args->prefetch), _MM_HINT_T0);
    }
    auto step = [&](int64_t c) __attribute__((always_inline)) {
      __m256 wv[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) wv[v] = _mm256_load_ps(w + 8 * v);
      w += NR;
#pragma GCC unroll 16
      for (int m = 0; m < M; ++m) {
        const __m256 x = _mm256_broadcast_ss(p[m] + c);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[m][v] = _mm256_fmadd_ps(x, wv[v], acc[m][v]);
      }
    };
    if constexpr (NV == 1) {
      // One vector of columns: as the AVX-512 tile (conv_f32_avx512.cpp),
      // unrolled 4x and counting up to zero; 12 rows (8 gave 81-84 % of the
      // peak in cache on Zen 5, 12 gives 85-87 %). The first 2 rows take
      // their inputs 4 at a time, broadcast by in-lane permutes (Zen 5 in
      // cache: 92-96 %; 1 row 87-89 %, 3 rows spill registers: 70 %).
      constexpr int S = M >= 12 ? 2 : 0;
      auto step4 = [&](int64_t c) __attribute__((always_inline)) {
        __m256 q[S > 0 ? S : 1];
#pragma GCC unroll 16
        for (int m = 0; m < S; ++m) q[m] = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(p[m] + c));
        auto fma_k = [&](auto kc) __attribute__((always_inline)) {
          constexpr int kk = decltype(kc)::value;
          const __m256 wv = _mm256_load_ps(w + 8 * kk);
#pragma GCC unroll 16
          for (int m = 0; m < M; ++m) {
            const __m256 x = m < S ? _mm256_permute_ps(q[m < S ? m : 0], kk * 0x55)
                                   : _mm256_broadcast_ss(p[m] + c + kk);
            acc[m][0] = _mm256_fmadd_ps(x, wv, acc[m][0]);
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
#pragma GCC unroll 16
      for (int m = 0; m < M; ++m) p[m] += cred;
      for (int64_t c = head - cred; c != 0; c += 4) step4(c);
    } else {
      for (int64_t c = 0; c < cred; ++c) step(c);
    }
  }
  if (args->ncols >= NR) {
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      float* o = args->out[m] + col_off;
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) _mm256_storeu_ps(o + 8 * v, acc[m][v]);
    }
  } else {  // the columns left, no masked stores (avx2_util.h)
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      float* o = args->out[m] + col_off;
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) store_first_lanes(o + 8 * v, acc[m][v], args->ncols - 8 * v);
    }
  }
}

// Dot-product tile: MR rows x NC columns, vectorized over the reduction
// (conv_f32_kernels.h); each 16-float unit of the packed weights as two
// vectors, the reduction tail under masks.
template <int MR, int NC>
inline __attribute__((always_inline)) void dot_tile(const ConvTileArgs* args) {
  __m256 acc[MR][NC];
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) acc[m][j] = _mm256_setzero_ps();
  const float* const* a = args->a;
  const int64_t cred = args->cred, a_off = args->a_off;
  const int64_t cfull = cred / 8 * 8, credp = (cred + 15) / 16 * 16;
  const __m256i kt = first_lanes(cred - cfull);
  const int32_t* wtap = args->wtap;
  for (int64_t t = 0; t < args->ntaps; ++t, a += MR) {
    const float* w = args->w + (wtap ? wtap[t] : t) * credp * NC;
    const float* p[MR];
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) p[m] = a[m] + a_off;
    // Element c of column j: w[(c / 16) * 16 * NC + 16 * j + c % 16].
    for (int64_t c = 0; c < cred; c += 8) {
      const float* wc = w + (c / 16) * 16 * NC + (c % 16);
      __m256 wv[NC];
#pragma GCC unroll 8
      for (int j = 0; j < NC; ++j) wv[j] = _mm256_load_ps(wc + 16 * j);
      if (c < cfull) {
#pragma GCC unroll 16
        for (int m = 0; m < MR; ++m) {
          const __m256 x = _mm256_loadu_ps(p[m] + c);
#pragma GCC unroll 8
          for (int j = 0; j < NC; ++j) acc[m][j] = _mm256_fmadd_ps(x, wv[j], acc[m][j]);
        }
      } else {
#pragma GCC unroll 16
        for (int m = 0; m < MR; ++m) {
          const __m256 x = _mm256_maskload_ps(p[m] + c, kt);
#pragma GCC unroll 8
          for (int j = 0; j < NC; ++j) acc[m][j] = _mm256_fmadd_ps(x, wv[j], acc[m][j]);
        }
      }
    }
  }
  const float* bias = args->bias;
  const int64_t col_off = args->col_off;
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m) {
    float* o = args->out[m] + col_off;
#pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) o[j] = hsum(acc[m][j]) + bias[j];
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

void conv_f32_avx2_dot1(const ConvTileArgs* args) { dot_tile<kDotRowsAvx2[1], 1>(args); }
void conv_f32_avx2_dot2(const ConvTileArgs* args) { dot_tile<kDotRowsAvx2[2], 2>(args); }
void conv_f32_avx2_dot3(const ConvTileArgs* args) { dot_tile<kDotRowsAvx2[3], 3>(args); }
void conv_f32_avx2_dot4(const ConvTileArgs* args) { dot_tile<kDotRowsAvx2[4], 4>(args); }

void conv_f32_avx2_6x16(const ConvTileArgs* args) { gemm_tile<6, 2>(args); }
void conv_f32_avx2_12x8(const ConvTileArgs* args) { gemm_tile<12, 1>(args); }
void conv_f32_avx2_4x24(const ConvTileArgs* args) { gemm_tile<4, 3>(args); }

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
  for (; c + 16 <= C; c += 16) {
    __m256 acc[R][2];
    const __m256 b0 = _mm256_loadu_ps(args->bias + c), b1 = _mm256_loadu_ps(args->bias + c + 8);
#pragma GCC unroll 8
    for (int m = 0; m < R; ++m) {
      acc[m][0] = b0;
      acc[m][1] = b1;
    }
    for (int64_t t = 0; t < T; ++t) {
      const float* w = wrow(t) + c;
      const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
#pragma GCC unroll 8
      for (int m = 0; m < R; ++m) {
        const float* x = in(t, m) + c;
        acc[m][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x), w0, acc[m][0]);
        acc[m][1] = _mm256_fmadd_ps(_mm256_loadu_ps(x + 8), w1, acc[m][1]);
      }
    }
#pragma GCC unroll 8
    for (int m = 0; m < R; ++m) {
      float* o = args->out[m] + c;
      if (args->stream && (reinterpret_cast<uintptr_t>(o) & 63) == 0) {  // a whole line
        _mm256_stream_ps(o, acc[m][0]);
        _mm256_stream_ps(o + 8, acc[m][1]);
      } else {
        _mm256_storeu_ps(o, acc[m][0]);
        _mm256_storeu_ps(o + 8, acc[m][1]);
      }
    }
  }
  for (; c < C; c += 8) {
    const __m256i k = first_lanes(C - c);
    __m256 acc[R];
    const __m256 b = _mm256_maskload_ps(args->bias + c, k);
#pragma GCC unroll 8
    for (int m = 0; m < R; ++m) acc[m] = b;
    for (int64_t t = 0; t < T; ++t) {
      const __m256 w = _mm256_maskload_ps(wrow(t) + c, k);
#pragma GCC unroll 8
      for (int m = 0; m < R; ++m)
        acc[m] = _mm256_fmadd_ps(_mm256_maskload_ps(in(t, m) + c, k), w, acc[m]);
    }
#pragma GCC unroll 8
    for (int m = 0; m < R; ++m) store_first_lanes(args->out[m] + c, acc[m], C - c);
  }
}

}  // namespace

void conv_f32_avx2_dw(const ConvTileArgs* args) { dw_tile<kDwRowsAvx2>(args); }

ConvTileFn conv_f32_avx2_partial(ConvTileFn full, int m) {
  struct Tables {
    ConvTileFn t6x16[6];
    ConvTileFn t4x24[4];
    ConvTileFn t12x8[12];
  };
  static const Tables tables = [] {
    Tables t{};
    fill_partial<6, 2>(t.t6x16);
    fill_partial<4, 3>(t.t4x24);
    fill_partial<12, 1>(t.t12x8);
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
