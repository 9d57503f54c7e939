// The direct-convolution tiles, dot tiles and depthwise rows of the planar
// (NCX) f32 passes, written once over the vector traits V of an ISA
// (vec_avx512.h, vec_avx2.h) and instantiated by each ISA file
// (planar_f32_avx512.cpp, planar_f32_avx2.cpp) into its PlanarF32Table.
// Contracts: planar_f32.h. Internal linkage (an unnamed namespace).
// Every loop over a tile's rows or vectors is unrolled in full (pragmas), so
// that GCC keeps the accumulators in registers: without it they are stored to
// the stack on every iteration.
#pragma once

#include <cstdint>

#include "planar_f32.h"

namespace tct {
namespace x86 {
namespace {

template <class V, int M, int NV>
void planar_tile(const PlanarTileArgs* a) {
  using Reg = typename V::Reg;
  constexpr int W = V::W;
  Reg acc[M][NV];
  const int64_t nx = a->nx;
  #pragma GCC unroll 32
  for (int r = 0; r < M; ++r) {
    if (a->accumulate) {
      const float* o = a->out + r * a->out_stride;
      #pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) {
        const int64_t left = nx - W * v;
        acc[r][v] = left >= W ? V::loadu(o + W * v) : V::load_part(V::first(left), o + W * v);
      }
      continue;
    }
    const Reg b = a->bias ? V::bcast(a->bias + r) : V::zero();
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
        Reg x[NV];
        #pragma GCC unroll 32
        for (int v = 0; v < NV; ++v) x[v] = V::loadu(ip + W * v);
        #pragma GCC unroll 32
        for (int r = 0; r < M; ++r) {
          const Reg b = V::bcast(wp + r);
          #pragma GCC unroll 32
          for (int v = 0; v < NV; ++v) acc[r][v] = V::fmadd(b, x[v], acc[r][v]);
        }
      }
    }
  }
  #pragma GCC unroll 32
  for (int r = 0; r < M; ++r) {
    float* o = a->out + r * a->out_stride;
    #pragma GCC unroll 32
    for (int v = 0; v < NV; ++v) {
      const int64_t left = nx - W * v;
      if (left >= W) {
        if (a->stream && (reinterpret_cast<uintptr_t>(o + W * v) & (V::kStreamAlign - 1)) == 0)
          V::stream(o + W * v, acc[r][v]);
        else
          V::storeu(o + W * v, acc[r][v]);
      } else if (left > 0) {
        V::store_part(o + W * v, acc[r][v], V::first(left), left);
      }
    }
  }
}

// Fills t.tile[M][NV] for M <= MaxM, NV <= MaxNV, M * NV <= MaxAccs.
template <class V, int MaxAccs, int MaxM, int MaxNV, int M = 1, int NV = 1>
constexpr void fill_planar_tiles(PlanarF32Table& t) {
  if constexpr (M * NV <= MaxAccs) t.tile[M][NV] = &planar_tile<V, M, NV>;
  if constexpr (NV < MaxNV) {
    fill_planar_tiles<V, MaxAccs, MaxM, MaxNV, M, NV + 1>(t);
  } else if constexpr (M < MaxM) {
    fill_planar_tiles<V, MaxAccs, MaxM, MaxNV, M + 1, 1>(t);
  }
}

// Dot tile (planar_f32.h): rows of 16-float units, W floats per vector.
template <class V, int M, int N>
void planar_dot(const PlanarDotArgs* a) {
  using Reg = typename V::Reg;
  constexpr int W = V::W;
  Reg acc[M][N];
  #pragma GCC unroll 32
  for (int i = 0; i < M; ++i)
    #pragma GCC unroll 32
    for (int j = 0; j < N; ++j) acc[i][j] = V::zero();
  const int64_t as = a->a_stride, bs = a->b_stride;
  auto step = [&](const float* pa, const float* pb) __attribute__((always_inline)) {
    Reg u[M], v[N];
    #pragma GCC unroll 32
    for (int i = 0; i < M; ++i) u[i] = V::loadu(pa + i * as);
    #pragma GCC unroll 32
    for (int j = 0; j < N; ++j) v[j] = V::loadu(pb + j * bs);
    #pragma GCC unroll 32
    for (int i = 0; i < M; ++i)
      #pragma GCC unroll 32
      for (int j = 0; j < N; ++j) acc[i][j] = V::fmadd(u[i], v[j], acc[i][j]);
  };
  for (int64_t r = 0; r < a->nrows; ++r) {
    const float* pa = a->a[r];
    const float* pb = a->b[r];
    // (Pointers stepping by a vector with W = 16; the index form with W = 8,
    // each 16-float unit as two vectors: the forms GCC compiles best for each.)
    if constexpr (W == 16) {
      for (int64_t v = 0; v < a->nvec; ++v, pa += 16, pb += 16) step(pa, pb);
    } else {
      for (int64_t x = 0, nf = a->nvec * 16; x < nf; x += W) step(pa + x, pb + x);
    }
  }
  #pragma GCC unroll 32
  for (int i = 0; i < M; ++i)
    #pragma GCC unroll 32
    for (int j = 0; j < N; ++j) a->out[i * a->out_m + j * a->out_n] += V::hsum(acc[i][j]);
}

// Fills t.dot[M][N] for M * N <= MaxAccs.
template <class V, int MaxAccs, int M = 1, int N = 1>
constexpr void fill_planar_dots(PlanarF32Table& t) {
  if constexpr (M * N <= MaxAccs) t.dot[M][N] = &planar_dot<V, M, N>;
  if constexpr (N < kPlanarDotMaxN) {
    fill_planar_dots<V, MaxAccs, M, N + 1>(t);
  } else if constexpr (M < kPlanarDotMaxM) {
    fill_planar_dots<V, MaxAccs, M + 1, 1>(t);
  }
}

// NV vectors of one depthwise row from x (the last one stored in its first
// `last` lanes).
template <class V, int NV>
void dw_chunk(const float* in, const int64_t* off, const float* w, int64_t ntap, float* out,
              int64_t last) {
  using Reg = typename V::Reg;
  constexpr int W = V::W;
  Reg acc[NV];
  #pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) acc[v] = V::zero();
  for (int64_t t = 0; t < ntap; ++t) {
    const Reg b = V::bcast(w + t);
    const float* ip = in + off[t];
    #pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[v] = V::fmadd(b, V::loadu(ip + W * v), acc[v]);
  }
  #pragma GCC unroll 8
  for (int v = 0; v < NV - 1; ++v) V::storeu(out + W * v, acc[v]);
  V::store_part(out + W * (NV - 1), acc[NV - 1], V::first(last), last);
}

// Depthwise rows (planar_f32.h): 4 vectors at a time, the rest in 1-4.
template <class V>
void planar_dw_rows(const PlanarDwArgs* a) {
  constexpr int W = V::W;
  const int64_t n = a->n, ntap = a->ntap;
  for (int64_t r = 0; r < a->rows; ++r) {
    const float* in = a->in + r * a->in_step;
    float* out = a->out + r * a->out_step;
    int64_t x = 0;
    for (; x + 4 * W <= n; x += 4 * W) dw_chunk<V, 4>(in + x, a->off, a->w, ntap, out + x, W);
    const int64_t rest = n - x;
    if (rest > 3 * W) dw_chunk<V, 4>(in + x, a->off, a->w, ntap, out + x, rest - 3 * W);
    else if (rest > 2 * W) dw_chunk<V, 3>(in + x, a->off, a->w, ntap, out + x, rest - 2 * W);
    else if (rest > W) dw_chunk<V, 2>(in + x, a->off, a->w, ntap, out + x, rest - W);
    else if (rest > 0) dw_chunk<V, 1>(in + x, a->off, a->w, ntap, out + x, rest);
  }
}

}  // namespace
}  // namespace x86
}  // namespace tct
