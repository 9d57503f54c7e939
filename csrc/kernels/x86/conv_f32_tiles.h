// The register tiles of the f32 forward / backward-data passes, written once
// over the vector traits V of an ISA (vec_avx512.h, vec_avx2.h) and
// instantiated by each ISA file (conv_f32_avx512.cpp, conv_f32_avx2.cpp),
// which exports them under ISA names. Contracts: conv_f32_kernels.h.
// Internal linkage (an unnamed namespace), as the traits.
//
// Accumulators are arrays indexed only with compile-time constants inside
// fully unrolled loops, so GCC keeps them in registers (checked with
// objdump: no stack traffic in the reduction loops).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "conv_f32_kernels.h"
#include "vec_in.h"

namespace tct {
namespace x86 {
namespace {

// A compile-time lane index (for immediates in unrolled code).
template <int K>
struct Lane {
  static constexpr int value = K;
};

// Writes an M x (W*NV) accumulator tile with streaming stores, whole 64-byte
// lines only. Rows that follow each other in memory (ncols is the output's
// row length) are staged in L1 and written as M * ncols / 16 lines;
// otherwise each full vector aligned to its size is streamed (V::store_tail:
// a line with AVX-512; half of one with AVX2, whose plans stream whole lines
// only) and the others stored as usual.
template <class V, int M, int NV>
inline __attribute__((always_inline)) void store_tile_streaming(
    const ConvTileArgs* args, typename V::Reg (&acc)[M][NV], const typename V::Mask (&k)[NV]) {
  constexpr int W = V::W, NR = W * NV;
  const int64_t ncols = args->ncols, col_off = args->col_off;
  float* const o0 = args->out[0] + col_off;
  bool packed = (M * ncols) % 16 == 0 && (reinterpret_cast<uintptr_t>(o0) & 63) == 0;
#pragma GCC unroll 32
  for (int m = 1; m < M; ++m) packed = packed && args->out[m] + col_off == o0 + m * ncols;
  if (packed) {
    alignas(64) float buf[M * NR];
#pragma GCC unroll 32
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) V::store_part(buf + m * ncols + W * v, acc[m][v], k[v], ncols - W * v);
    for (int64_t i = 0; i < M * ncols; i += W) V::stream(o0 + i, V::load(buf + i));
    return;
  }
#pragma GCC unroll 32
  for (int m = 0; m < M; ++m) {
    float* o = args->out[m] + col_off;
    // (half-line vectors: only rows that start a line, whose lines the row's
    // vectors then fill in pairs; a view starting mid-line stores as usual)
    const bool lines = W * sizeof(float) >= 64 || (reinterpret_cast<uintptr_t>(o) & 63) == 0;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) V::store_tail(o + W * v, acc[m][v], k[v], ncols - W * v, lines);
  }
}

// MR x (W*NV) GEMM register tile computing its first M rows. IN: the
// inputs' storage as in dw_tile (0 f32; 1 bf16, 2 f16: the a / rows pointers
// point at 16-bit elements, each broadcast widened as loaded, no in-lane
// permute rows). DIAG (NV = 2): block-diagonal weights, two groups merged
// (heuristics C28): the first half of the reduction feeds only the first
// vector of columns, the second half only the second; the zero blocks of
// the packed weights are never read.
template <class V, int MR, int NV, int M = MR, int IN = 0, bool DIAG = false>
inline __attribute__((always_inline)) void gemm_tile(const ConvTileArgs* args) {
  using Reg = typename V::Reg;
  using T = std::conditional_t<IN == 0, float, uint16_t>;
  constexpr int W = V::W, NR = W * NV;
  Reg acc[M][NV];
  const int64_t col_off = args->col_off;
  typename V::Mask k[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) k[v] = V::first(args->ncols - W * v);
  if (args->accumulate) {
#pragma GCC unroll 32
    for (int m = 0; m < M; ++m) {
      const float* o = args->out[m] + col_off;
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[m][v] = V::load_part(k[v], o + W * v);
    }
  } else {
    if (args->prefetch_out) {  // (plans set it for f32 outputs only)
      // (addresses as integers: a later tile's rows may lie past the tensor)
      const uintptr_t ahead = static_cast<uintptr_t>(args->prefetch_out) * sizeof(float);
#pragma GCC unroll 32
      for (int m = 0; m < M; ++m) {
        const uintptr_t q = reinterpret_cast<uintptr_t>(args->out[m] + col_off) + ahead;
        asm volatile("prefetchw (%0)" ::"r"(q));
      }
    }
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const Reg b = V::loadu(args->bias + W * v);
#pragma GCC unroll 32
      for (int m = 0; m < M; ++m) acc[m][v] = b;
    }
  }
  const T* const* a = reinterpret_cast<const T* const*>(args->a);
  const int64_t cred = args->cred, a_off = args->a_off;
  const int32_t* wtap = args->wtap;
  const T* const* rows = reinterpret_cast<const T* const*>(args->rows);
  const int64_t* tapoff = args->tapoff;
  for (int64_t t = 0; t < args->ntaps; ++t, a += MR) {
    const float* w = args->w + (wtap ? wtap[t] : t) * cred * NR;
    const T* p[M];
    if (rows) {
      const int64_t o = tapoff[t] + a_off;
#pragma GCC unroll 32
      for (int m = 0; m < M; ++m) p[m] = rows[m] + o;
    } else {
#pragma GCC unroll 32
      for (int m = 0; m < M; ++m) p[m] = a[m] + a_off;
    }
    if (args->prefetch) {  // the line there, or every line of the run (prefetch_run)
      const uintptr_t ahead = static_cast<uintptr_t>(args->prefetch) * sizeof(T);
      const uintptr_t bytes = args->prefetch_run ? static_cast<uintptr_t>(args->cred) * sizeof(T) : 1;
#pragma GCC unroll 32
      for (int m = 0; m < M; ++m) prefetch_lines(reinterpret_cast<uintptr_t>(p[m]) + ahead, bytes);
    }
    auto step = [&](int64_t c) __attribute__((always_inline)) {
      Reg wv[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) wv[v] = V::load(w + W * v);
      w += NR;
#pragma GCC unroll 32
      for (int m = 0; m < M; ++m) {
        const Reg x = bcast_in<V, IN>(p[m] + c);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[m][v] = V::fmadd(x, wv[v], acc[m][v]);
      }
    };
    if constexpr (NV == 1) {
      // One vector of columns: one broadcast load per FMA, so the loop is
      // load-bound (Zen 5 sustains about two loads a cycle: M/(M+1) of the
      // FMA rate at best). Unrolled 4x and counting up to zero, so that the
      // M row pointers, w and the index stay in registers (with 14 rows GCC
      // kept some pointers in xmm registers, moved back every step: 80 % of
      // the peak in cache; 12 rows this way 86-89 % with AVX-512, 85-87 %
      // with AVX2 where 8 rows gave 81-84 %). The first S rows take their
      // inputs 4 at a time, broadcast by in-lane permutes (V::permute_rows).
      constexpr int S = V::kPermuteBcast && IN == 0 ? V::permute_rows(M) : 0;
      auto step4 = [&](int64_t c) __attribute__((always_inline)) {
        Reg q[S > 0 ? S : 1];
#pragma GCC unroll 32
        for (int m = 0; m < S; ++m) q[m] = V::bcast4(reinterpret_cast<const float*>(p[m] + c));
        auto fma_k = [&](auto kc) __attribute__((always_inline)) {
          constexpr int kk = decltype(kc)::value;
          const Reg wv = V::load(w + W * kk);
#pragma GCC unroll 32
          for (int m = 0; m < M; ++m) {
            const Reg x = m < S ? V::template lane<kk>(q[m < S ? m : 0])
                                : bcast_in<V, IN>(p[m] + c + kk);
            acc[m][0] = V::fmadd(x, wv, acc[m][0]);
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
    } else if constexpr (DIAG) {
      static_assert(NV == 2, "two diagonal blocks of one vector each");
      auto half = [&](auto vc, int64_t c0, int64_t c1) __attribute__((always_inline)) {
        constexpr int v = decltype(vc)::value;
        for (int64_t c = c0; c < c1; ++c) {
          const Reg wv = V::load(w + W * v);
          w += NR;
#pragma GCC unroll 32
          for (int m = 0; m < M; ++m) acc[m][v] = V::fmadd(bcast_in<V, IN>(p[m] + c), wv, acc[m][v]);
        }
      };
      half(Lane<0>(), 0, cred / 2);
      half(Lane<1>(), cred / 2, cred);
    } else {
      for (int64_t c = 0; c < cred; ++c) step(c);
    }
  }
  // acc is indexed by compile-time constants only, here as in the loops
  // above: one index known only at run time (a loop resuming at a run-time
  // v) makes GCC keep acc in memory and store every accumulator it updates
  // in the reduction loop (the 3-vector tiles, AVX2 4x24 and AVX-512 8x48,
  // fell to 40 % of the peak in cache, Zen 3).
  if (args->out16) {  // a 16-bit result, rounded once (route convert16, direct)
    const int64_t kind = args->out16;
    if (args->ncols >= NR) {
#pragma GCC unroll 32
      for (int m = 0; m < M; ++m) {
        uint16_t* o = reinterpret_cast<uint16_t*>(args->out[m]) + col_off;
#pragma GCC unroll 8
        for (int v = 0; v + 2 <= NV; v += 2) V::store16x2(o + W * v, acc[m][v], acc[m][v + 1], kind);
        if constexpr (NV % 2 == 1) V::store16(o + W * (NV - 1), acc[m][NV - 1], W, kind);
      }
    } else {
#pragma GCC unroll 32
      for (int m = 0; m < M; ++m) {
        uint16_t* o = reinterpret_cast<uint16_t*>(args->out[m]) + col_off;
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) V::store16(o + W * v, acc[m][v], args->ncols - W * v, kind);
      }
    }
    return;
  }
  if (args->stream) {
    store_tile_streaming<V, M, NV>(args, acc, k);
    return;
  }
  if (args->ncols >= NR) {
#pragma GCC unroll 32
    for (int m = 0; m < M; ++m) {
      float* o = args->out[m] + col_off;
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) V::storeu(o + W * v, acc[m][v]);
    }
  } else {
#pragma GCC unroll 32
    for (int m = 0; m < M; ++m) {
      float* o = args->out[m] + col_off;
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) V::store_part(o + W * v, acc[m][v], k[v], args->ncols - W * v);
    }
  }
}

// Dot-product tile: MR rows x NC columns, vectorized over the reduction;
// the packed weights are [c/16][j][16] whatever the vector width (W = 8:
// each 16-float unit as two vectors), the reduction tail under a mask.
// IN: the inputs' storage as in dw_tile (0 f32; 1 bf16, 2 f16: the a pointers
// point at 16-bit elements, widened as loaded: one conversion per vector
// load, shared by the NC columns' FMAs). out16 as the GEMM tiles'.
template <class V, int MR, int NC, int IN = 0>
inline __attribute__((always_inline)) void dot_tile(const ConvTileArgs* args) {
  using Reg = typename V::Reg;
  using T = std::conditional_t<IN == 0, float, uint16_t>;
  constexpr int W = V::W;
  static_assert((MR * NC) % 4 == 0, "whole groups of 4 sums");
  Reg acc[MR][NC];
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int j = 0; j < NC; ++j) acc[m][j] = V::zero();
  const auto* const* a = reinterpret_cast<const T* const*>(args->a);
  const int64_t cred = args->cred, a_off = args->a_off;
  const int64_t cfull = cred / W * W, credp = (cred + 15) / 16 * 16;
  const typename V::Mask kt = V::first(cred - cfull);
  const int32_t* wtap = args->wtap;
  auto fma_row = [&](const float* wc, auto load_x) __attribute__((always_inline)) {
    Reg wv[NC];
#pragma GCC unroll 4
    for (int j = 0; j < NC; ++j) wv[j] = V::load(wc + 16 * j);
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      const Reg x = load_x(m);
#pragma GCC unroll 4
      for (int j = 0; j < NC; ++j) acc[m][j] = V::fmadd(x, wv[j], acc[m][j]);
    }
  };
  for (int64_t t = 0; t < args->ntaps; ++t, a += MR) {
    const float* w = args->w + (wtap ? wtap[t] : t) * credp * NC;
    const T* p[MR];
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) p[m] = a[m] + a_off;
    // Element c of column j: w[(c / 16) * 16 * NC + 16 * j + c % 16]; with
    // W = 16 a pointer stepping by whole units (the index form costs GCC
    // extra address arithmetic in the loop).
    int64_t c = 0;
    if constexpr (W == 16) {
      for (; c < cfull; c += W, w += 16 * NC) fma_row(w, [&](int m) { return load_in<V, IN>(p[m] + c); });
    } else {
      for (; c < cfull; c += W)
        fma_row(w + (c / 16) * 16 * NC + c % 16, [&](int m) { return load_in<V, IN>(p[m] + c); });
      w += (c / 16) * 16 * NC + c % 16;
    }
    if (c < cred) fma_row(w, [&](int m) { return load_in_part<V, IN>(kt, p[m] + c, cred - cfull); });
  }
  float res[MR * NC];
#pragma GCC unroll 16
  for (int i = 0; i < MR * NC; i += 4)
    V::hsum4(acc[i / NC][i % NC], acc[(i + 1) / NC][(i + 1) % NC],
             acc[(i + 2) / NC][(i + 2) % NC], acc[(i + 3) / NC][(i + 3) % NC], res + i);
  const float* bias = args->bias;
  const int64_t col_off = args->col_off;
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
    for (int j = 0; j < NC; ++j) res[m * NC + j] += bias[j];
    if (args->out16) {  // a 16-bit result, rounded once (route convert16, direct)
      uint16_t* o = reinterpret_cast<uint16_t*>(args->out[m]) + col_off;
      V::store16(o, V::load_part(V::first(NC), res + m * NC), NC, args->out16);
    } else {
      float* o = args->out[m] + col_off;
#pragma GCC unroll 4
      for (int j = 0; j < NC; ++j) o[j] = res[m * NC + j];
    }
  }
}

// An ISA table's 16-bit input dot tiles: dot16[n] = dot_tile<V, ROWS[n], n, KIND>
// for n = 1..kMaxDotColumns (ROWS: the ISA's rows per column count).
template <class V, int MR, int NC, int IN>
void dot_tile_fn(const ConvTileArgs* args) {
  dot_tile<V, MR, NC, IN>(args);
}
template <class V, const int* ROWS, int KIND, int... I>
constexpr void fill_dot16(ConvTileFn* dot16, std::integer_sequence<int, I...>) {
  ((dot16[I + 1] = dot_tile_fn<V, ROWS[I + 1], I + 1, KIND>), ...);
}

// The 2W-channel blocks of dw_tile, the way of finding each row's input
// fixed: ROWS (rows[m] + tapoff[t], copied to registers once) or a[t*R + m];
// PF: prefetch set. bf16 inputs (IN 1) load by pair-splitting (V::split_bf16):
// the accumulators, weights and bias hold the even and the odd channels of
// the block, put back in order before the stores (the same multiply-adds in
// the same order: the same bits).
template <class V, int R, int IN, bool ROWS, bool PF>
inline __attribute__((always_inline)) int64_t dw_blocks(const ConvTileArgs* args) {
  using Reg = typename V::Reg;
  using T16 = std::conditional_t<IN == 0, float, uint16_t>;
  constexpr int W = V::W;
  const int64_t C = args->ncols, T = args->ntaps, pf = args->prefetch;
  const T16* rp[R];
  if constexpr (ROWS) {
    const auto* const* rows = reinterpret_cast<const T16* const*>(args->rows);
#pragma GCC unroll 16
    for (int m = 0; m < R; ++m) rp[m] = rows[m];
  }
  const auto* const* a = reinterpret_cast<const T16* const*>(args->a);
  const int64_t* const tapoff = args->tapoff;
  const int32_t* const wtap = args->wtap;  // (null: tap t's weights are row t)
  const float* const wb = args->w;
  int64_t c = 0;
  for (; c + 2 * W <= C; c += 2 * W) {
    Reg acc[R][2];
    Reg b0 = V::loadu(args->bias + c), b1 = V::loadu(args->bias + c + W);
    if constexpr (IN == 1) {
      const Reg e = V::evens(b0, b1);
      b1 = V::odds(b0, b1);
      b0 = e;
    }
#pragma GCC unroll 16
    for (int m = 0; m < R; ++m) {
      acc[m][0] = b0;
      acc[m][1] = b1;
    }
    for (int64_t t = 0; t < T; ++t) {
      const float* w = wb + (wtap ? wtap[t] : t) * C + c;
      Reg w0 = V::loadu(w), w1 = V::loadu(w + W);
      if constexpr (IN == 1) {
        const Reg e = V::evens(w0, w1);
        w1 = V::odds(w0, w1);
        w0 = e;
      }
      const int64_t off = ROWS ? tapoff[t] + c : c;
#pragma GCC unroll 16
      for (int m = 0; m < R; ++m) {
        const T16* x = (ROWS ? rp[m] : a[t * R + m]) + off;
        if constexpr (PF)  // (as an integer: the next tile may lie past the tensor)
          _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(x) +
                                                     pf * sizeof(T16)),
                       _MM_HINT_T0);
        if constexpr (IN == 1) {
          Reg xe, xo;
          V::split_bf16(x, xe, xo);
          acc[m][0] = V::fmadd(xe, w0, acc[m][0]);
          acc[m][1] = V::fmadd(xo, w1, acc[m][1]);
        } else {
          acc[m][0] = V::fmadd(load_in<V, IN>(x), w0, acc[m][0]);
          acc[m][1] = V::fmadd(load_in<V, IN>(x + W), w1, acc[m][1]);
        }
      }
    }
    if constexpr (IN == 1) {
#pragma GCC unroll 16
      for (int m = 0; m < R; ++m) V::interleave(acc[m][0], acc[m][1], acc[m][0], acc[m][1]);
    }
    if (args->out16) {  // a 16-bit result, rounded once (route convert16, direct)
#pragma GCC unroll 16
      for (int m = 0; m < R; ++m) {
        uint16_t* o = reinterpret_cast<uint16_t*>(args->out[m]) + c;
        // (rows that start on a line: with whole lines a pixel (the plan's
        // rule), each of its lines is then streamed whole, by this row's
        // consecutive stores: AVX2 writes half a line a store)
        if (args->stream && (reinterpret_cast<uintptr_t>(args->out[m]) & 63) == 0)
          V::stream16x2(o, acc[m][0], acc[m][1], args->out16);
        else
          V::store16x2(o, acc[m][0], acc[m][1], args->out16);
      }
      continue;
    }
#pragma GCC unroll 16
    for (int m = 0; m < R; ++m) {
      float* o = args->out[m] + c;
      if (args->stream && (reinterpret_cast<uintptr_t>(o) & 63) == 0) {  // whole lines
        V::stream(o, acc[m][0]);
        V::stream(o + W, acc[m][1]);
      } else {
        V::storeu(o, acc[m][0]);
        V::storeu(o + W, acc[m][1]);
      }
    }
  }
  return c;
}

// Depthwise: elementwise multiply-adds over the channels. The R rows share
// each weight load; R rows x 2 vectors = 2R independent FMA chains.
// IN: the inputs' storage, 0 f32, 1 bf16, 2 f16 (the pointers in a / rows
// then point at 16-bit elements, converted as they are loaded: route
// convert16 with in16, no f32 copy of the activations).
template <class V, int R, int IN = 0>
void dw_tile(const ConvTileArgs* args) {
  using Reg = typename V::Reg;
  using T16 = std::conditional_t<IN == 0, float, uint16_t>;
  constexpr int W = V::W;
  const int64_t C = args->ncols, T = args->ntaps;
  const auto* const* a = reinterpret_cast<const T16* const*>(args->a);
  const auto* const* rows = reinterpret_cast<const T16* const*>(args->rows);  // rows[m] + tapoff[t]
  const int64_t* tapoff = args->tapoff;
  auto in = [&](int64_t t, int m) { return rows ? rows[m] + tapoff[t] : a[t * R + m]; };
  const int32_t* wtap = args->wtap;  // (null: tap t's weights are row t)
  auto wrow = [&](int64_t t) { return args->w + (wtap ? wtap[t] : t) * C; };
  int64_t c = 0;
  if (C >= 2 * W) {
    if (rows)
      c = args->prefetch ? dw_blocks<V, R, IN, true, true>(args)
                         : dw_blocks<V, R, IN, true, false>(args);
    else
      c = args->prefetch ? dw_blocks<V, R, IN, false, true>(args)
                         : dw_blocks<V, R, IN, false, false>(args);
  }
  // The last channels: where C >= W, whole vectors, the last one ending at C
  // (it recomputes some channels of the one before it with the same FMAs in
  // the same order, so it rewrites them with the same values): plain loads
  // and stores instead of masked or pieced ones (Zen 3, 17 channels: ...).
  for (; c < C && C >= W; c += W) {
    const int64_t c0 = c < C - W ? c : C - W;
    Reg acc[R];
    const Reg b = V::loadu(args->bias + c0);
#pragma GCC unroll 16
    for (int m = 0; m < R; ++m) acc[m] = b;
    for (int64_t t = 0; t < T; ++t) {
      const Reg w = V::loadu(wrow(t) + c0);
#pragma GCC unroll 16
      for (int m = 0; m < R; ++m) acc[m] = V::fmadd(load_in<V, IN>(in(t, m) + c0), w, acc[m]);
    }
    if (args->out16) {
#pragma GCC unroll 16
      for (int m = 0; m < R; ++m)
        V::store16(reinterpret_cast<uint16_t*>(args->out[m]) + c0, acc[m], W, args->out16);
      continue;
    }
    // (a vector that does not overlap the one before may stream, as in the
    // masked loop: AVX-512, whole aligned lines; AVX2 never gets here with
    // stream set, since dw_streams asks for whole lines a pixel)
#pragma GCC unroll 16
    for (int m = 0; m < R; ++m)
      V::store_tail(args->out[m] + c0, acc[m], V::first(W), W, args->stream != 0 && c0 == c);
  }
  for (; c < C; c += W) {  // fewer than W channels in all
    const typename V::Mask k = V::first(C - c);
    Reg acc[R];
    const Reg b = V::load_part(k, args->bias + c);
#pragma GCC unroll 16
    for (int m = 0; m < R; ++m) acc[m] = b;
    for (int64_t t = 0; t < T; ++t) {
      const Reg w = V::load_part(k, wrow(t) + c);
#pragma GCC unroll 16
      for (int m = 0; m < R; ++m) acc[m] = V::fmadd(load_in_part<V, IN>(k, in(t, m) + c, C - c), w, acc[m]);
    }
    if (args->out16) {
#pragma GCC unroll 16
      for (int m = 0; m < R; ++m)
        V::store16(reinterpret_cast<uint16_t*>(args->out[m]) + c, acc[m], C - c, args->out16);
      continue;
    }
#pragma GCC unroll 16
    for (int m = 0; m < R; ++m) V::store_tail(args->out[m] + c, acc[m], k, C - c, args->stream != 0);
  }
}

// The first M rows of an MR-row GEMM tile (row pointers still MR apart per tap).
template <class V, int MR, int NV, int M, int IN = 0, bool DIAG = false>
void partial_tile(const ConvTileArgs* args) {
  gemm_tile<V, MR, NV, M, IN, DIAG>(args);
}

// t[m] = the tile computing the first m rows, for 1 <= m < MR.
template <class V, int MR, int NV, int M = 1, int IN = 0, bool DIAG = false>
constexpr void fill_partial(ConvTileFn* t) {
  if constexpr (M < MR) {
    t[M] = &partial_tile<V, MR, NV, M, IN, DIAG>;
    fill_partial<V, MR, NV, M + 1, IN, DIAG>(t);
  }
}

// The 16-bit input (IN 1 bf16, 2 f16) form of an MR x (W*NV) GEMM tile and
// its partials: t[0] the whole tile, t[m] its first m rows.
template <class V, int MR, int NV, int IN>
constexpr void fill_gemm16(ConvTileFn* t) {
  t[0] = &partial_tile<V, MR, NV, MR, IN>;
  fill_partial<V, MR, NV, 1, IN>(t);
}

}  // namespace
}  // namespace x86
}  // namespace tct
