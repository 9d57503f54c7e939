// The GEMM and depthwise tiles of the f32 backward-weights pass, written
// once over the vector traits V of an ISA (vec_avx512.h, vec_avx2.h) and a
// geometry G (rows per tile by vector count, vector counts), instantiated by
// each ISA file (bwd_weights_f32_avx512.cpp, bwd_weights_f32_avx2.cpp), which
// exports gemm_tile_<isa> and dw_tile_<isa>. Contracts: bwd_weights_f32.h.
// Internal linkage (an unnamed namespace), as the traits.
//
// The accumulators are individually named variables (c<row>_<vec>,
// d<vec>), not arrays: GCC 12 spills arrays of vectors in these loops.
// Names beyond a tile's rows / vectors are dead code.
#pragma once

#include <cstdint>
#include <type_traits>

#include "bwd_weights_f32.h"
#include "vec_in.h"

namespace tct {
namespace x86 {
namespace bww {
namespace {

// Vector J of a row; the last vector of a tail tile (MASK) under the mask, so
// that no lane past the channel range is read or written.
template <class V, int J, int NV, bool MASK>
inline typename V::Reg load_vec(const float* p, typename V::Mask tail) {
  if constexpr (MASK && J == NV - 1) return V::load_part(tail, p + V::W * J);
  else return V::loadu(p + V::W * J);
}

// load_vec over the activations' storage IN (vec_in.h): 0 f32, 1 bf16, 2 f16
// (T uint16_t, widened as loaded; a masked tail reads tail_n elements only).
template <class V, int IN, int J, int NV, bool MASK, class T>
inline typename V::Reg load_vec_in(const T* p, typename V::Mask tail, int tail_n) {
  if constexpr (IN == 0) return load_vec<V, J, NV, MASK>(p, tail);
  else if constexpr (MASK && J == NV - 1) return load_in_part<V, IN>(tail, p + V::W * J, tail_n);
  else return load_in<V, IN>(p + V::W * J);
}

template <class V, int J, int NV, bool MASK>
inline void store_vec(float* p, typename V::Reg v, typename V::Mask tail, int tail_n) {
  if constexpr (MASK && J == NV - 1) V::store_part(p + V::W * J, v, tail, tail_n);
  else V::storeu(p + V::W * J, v);
}

#define BWW_FOR_ROWS(X) \
  X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)

#define BWW_DECL(i) Reg c##i##_0 = V::zero(), c##i##_1 = V::zero(), c##i##_2 = V::zero(), c##i##_3 = V::zero();

#define BWW_LOAD(i)                                                          \
  if constexpr (i < MR) {                                                    \
    const float* cr = t.c + (i) * t.ldc;                                     \
    c##i##_0 = load_vec<V, 0, NV, MASK>(cr, tail);                           \
    if constexpr (NV > 1) c##i##_1 = load_vec<V, 1, NV, MASK>(cr, tail);     \
    if constexpr (NV > 2) c##i##_2 = load_vec<V, 2, NV, MASK>(cr, tail);     \
    if constexpr (NV > 3) c##i##_3 = load_vec<V, 3, NV, MASK>(cr, tail);     \
  }

#define BWW_FMA(i)                                                                   \
  if constexpr (i < MR) {                                                            \
    const Reg av = i < kQ ? V::template lane<(i) & 3>(q) : bcast_in<V, IN>(a + (i)); \
    c##i##_0 = V::fmadd(av, b0, c##i##_0);                                           \
    if constexpr (NV > 1) c##i##_1 = V::fmadd(av, b1, c##i##_1);                     \
    if constexpr (NV > 2) c##i##_2 = V::fmadd(av, b2, c##i##_2);                     \
    if constexpr (NV > 3) c##i##_3 = V::fmadd(av, b3, c##i##_3);                     \
  }

#define BWW_STORE(i)                                                              \
  if constexpr (i < MR) {                                                         \
    float* cr = t.c + (i) * t.ldc;                                                \
    store_vec<V, 0, NV, MASK>(cr, c##i##_0, tail, tail_n);                        \
    if constexpr (NV > 1) store_vec<V, 1, NV, MASK>(cr, c##i##_1, tail, tail_n);  \
    if constexpr (NV > 2) store_vec<V, 2, NV, MASK>(cr, c##i##_2, tail, tail_n);  \
    if constexpr (NV > 3) store_vec<V, 3, NV, MASK>(cr, c##i##_3, tail, tail_n);  \
  }

// MR x (W*NV) tile: per pixel, NV vector loads of B and MR broadcasts of A.
// IN: the pixel rows' storage (0 f32; 1 bf16, 2 f16: pixel lists only, the
// Pix pointers then point at 16-bit elements, each widened as loaded).
template <class V, int MR, int NV, bool MASK, bool PK, int IN = 0>
void gemm_kernel(const TileArgs& t) {
  using Reg = typename V::Reg;
  using T = std::conditional_t<IN == 0, float, uint16_t>;
  static_assert(MR <= 14 && NV <= 4, "named accumulators: 14 rows x 4 vectors");
  static_assert(IN == 0 || !PK, "packed panels are f32");
  const int tail_n = t.cols - V::W * (NV - 1);  // lanes of the last vector, 1..W
  const typename V::Mask tail = V::tail(tail_n);
  BWW_FOR_ROWS(BWW_DECL)
  if (!t.fresh) {
    BWW_FOR_ROWS(BWW_LOAD)
  }
  const Pix* px = t.pix;
  constexpr bool LM = MASK && !PK;  // packed B rows are padded: no load masks
  // Locals, so that the loop keeps them in registers (GCC re-read t's
  // fields every pixel, two loads more per pixel).
  const int64_t npix = t.npix, lda = t.lda, ldb = t.ldb, a_off = t.a_off, b_off = t.b_off;
  // One column vector: the first kQ rows' A values come from one 16-byte
  // load copied to every 128-bit lane, each broadcast by an in-lane permute
  // (fewer loads, the loop's limit; see conv_f32_tiles.h). Zen 5 in cache:
  // AVX-512 14x16 tile, pixel lists 80 -> 96-98 % of the peak, packed
  // 93 -> 97 %; AVX2 12x8, pixel lists 79 -> 98-99 % (2 rows: 84 %).
  constexpr int kQ = V::kPermuteBcast && NV == 1 && MR >= 12 ? 4 : 0;
  const float* pa = t.pa;
  const float* pb = t.pb;
  for (int64_t i = 0; i < npix; ++i, pa += lda, pb += ldb) {
    const T* a;
    const T* b;
    if constexpr (PK) a = pa, b = pb;
    else a = reinterpret_cast<const T*>(px[i].a) + a_off, b = reinterpret_cast<const T*>(px[i].b) + b_off;
    const Reg b0 = load_vec_in<V, IN, 0, NV, LM>(b, tail, tail_n);
    Reg b1, b2, b3;
    if constexpr (NV > 1) b1 = load_vec_in<V, IN, 1, NV, LM>(b, tail, tail_n);
    if constexpr (NV > 2) b2 = load_vec_in<V, IN, 2, NV, LM>(b, tail, tail_n);
    if constexpr (NV > 3) b3 = load_vec_in<V, IN, 3, NV, LM>(b, tail, tail_n);
    Reg q = V::zero();
    if constexpr (kQ > 0) {
      if constexpr (IN == 0) q = V::bcast4(a);
      else q = V::template bcast4_16<IN>(a);
    }
    BWW_FOR_ROWS(BWW_FMA)
  }
  BWW_FOR_ROWS(BWW_STORE)
}

// The tile for t.rows rows (at most G::rows(NV)), packed or on pixel lists
// (IN != 0: pixel lists of 16-bit rows only).
template <class V, class G, int NV, int IN = 0>
void gemm_by_rows(const TileArgs& t, bool mask) {
  constexpr int kMax = G::rows(NV);
  switch (t.rows) {
#define BWW_CASE(r)                                                          \
  case r + 1:                                                                \
    if constexpr (r + 1 <= kMax) {                                           \
      if (IN == 0 && !t.pix) {                                               \
        if constexpr (IN == 0) {                                             \
          if (mask) gemm_kernel<V, r + 1, NV, true, true>(t);                \
          else gemm_kernel<V, r + 1, NV, false, true>(t);                    \
        }                                                                    \
      } else if (mask) gemm_kernel<V, r + 1, NV, true, false, IN>(t);        \
      else gemm_kernel<V, r + 1, NV, false, false, IN>(t);                   \
    }                                                                        \
    return;
    BWW_FOR_ROWS(BWW_CASE)
#undef BWW_CASE
    default: return;
  }
}

// Panel packing (BwdWeightsF32Table::pack, pack16): row i of the pixel list
// (side b or a, at element off) copied into dst + i*ld as `width` floats,
// then zeros up to ld; a null row packs zeros. IN: the rows' storage, 0 f32,
// 1 bf16, 2 f16 (widened as copied; the Pix pointers then point at 16-bit
// elements). Packed rows are far apart (strided layers: one page per row),
// out of reach of the hardware prefetcher: each row is fetched 8 ahead.
template <class V, int IN>
void pack_rows(const Pix* pix, int64_t n, bool side_b, int64_t off, int width, int64_t ld,
               float* dst) {
  using T = std::conditional_t<IN == 0, float, uint16_t>;
  constexpr int W = V::W;
  constexpr int64_t kAhead = 8;
  auto row = [&](int64_t i) -> const T* {
    const float* r = side_b ? pix[i].b : pix[i].a;
    return r ? reinterpret_cast<const T*>(r) + off : nullptr;
  };
  for (int64_t i = 0; i < n; ++i) {
    if (i + kAhead < n) {
      if (const T* r = row(i + kAhead))
        prefetch_lines(reinterpret_cast<uintptr_t>(r), static_cast<uintptr_t>(width) * sizeof(T));
    }
    const T* s = row(i);
    float* d = dst + i * ld;
    if (!s) {  // no pixel: a row of zeros
      for (int64_t j = 0; j < ld; ++j) d[j] = 0.f;
      continue;
    }
    int64_t j = 0;
    for (; j + W <= width; j += W) {
      V::storeu(d + j, load_in<V, IN>(s + j));
    }
    for (; j < ld; j += W) {  // tail of the row, then zeros up to ld
      const int64_t left = width - j, room = ld - j < W ? ld - j : W;
      typename V::Reg v = V::zero();
      if (left > 0) v = load_in_part<V, IN>(V::first(left), s + j, left);
      V::store_part(d + j, v, V::first(room), room);
    }
  }
}

// GEMM tile: cols <= W * G::kMaxVecs, rows <= G::rows(ceil(cols / W)).
// IN != 0: pixel lists of 16-bit rows (BwdWeightsF32Table::gemm16).
template <class V, class G, int IN = 0>
void gemm_tile(const TileArgs& t) {
  if (t.rows <= 0 || t.cols <= 0) return;
  const int nv = (t.cols + V::W - 1) / V::W;
  const bool mask = (t.cols % V::W) != 0;
  switch (nv) {
    case 1: gemm_by_rows<V, G, 1, IN>(t, mask); break;
    case 2: gemm_by_rows<V, G, 2, IN>(t, mask); break;
    case 3: if constexpr (G::kMaxVecs >= 3) gemm_by_rows<V, G, 3, IN>(t, mask); break;
    case 4: if constexpr (G::kMaxVecs >= 4) gemm_by_rows<V, G, 4, IN>(t, mask); break;
    default: break;
  }
}

// Depthwise: C[n] += sum A[n] * B[n] over NV vectors of channels.
#define BWW_DW_VECS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define BWW_DW_DECL(j) Reg d##j = V::zero();
#define BWW_DW_LOAD(j) \
  if constexpr (j < NV) d##j = load_vec<V, j, NV, MASK>(t.c, tail);
#define BWW_DW_FMA(j)                                                              \
  if constexpr (j < NV)                                                            \
    d##j = V::fmadd(load_vec_in<V, IN, j, NV, MASK>(a, tail, tail_n),              \
                    load_vec_in<V, IN, j, NV, MASK>(b, tail, tail_n), d##j);
#define BWW_DW_STORE(j) \
  if constexpr (j < NV) store_vec<V, j, NV, MASK>(t.c, d##j, tail, tail_n);

// IN: the pixel rows' storage, as gemm_kernel's.
template <class V, int NV, bool MASK, int IN = 0>
void dw_kernel(const TileArgs& t) {
  using Reg = typename V::Reg;
  using T = std::conditional_t<IN == 0, float, uint16_t>;
  static_assert(NV <= 16, "named accumulators: 16 vectors");
  const int tail_n = t.cols - V::W * (NV - 1);
  const typename V::Mask tail = V::tail(tail_n);
  BWW_DW_VECS(BWW_DW_DECL)
  BWW_DW_VECS(BWW_DW_LOAD)
  const Pix* px = t.pix;
  for (int64_t i = 0; i < t.npix; ++i) {
    const T* a = reinterpret_cast<const T*>(px[i].a) + t.b_off;
    const T* b = reinterpret_cast<const T*>(px[i].b) + t.b_off;
    BWW_DW_VECS(BWW_DW_FMA)
  }
  BWW_DW_VECS(BWW_DW_STORE)
}

// Depthwise (ICg == OCg == 1): cols <= W * G::kDwVecs channels (IN != 0:
// 16-bit rows, BwdWeightsF32Table::dw16).
template <class V, class G, int IN = 0>
void dw_tile(const TileArgs& t) {
  if (t.cols <= 0) return;
  const int nv = (t.cols + V::W - 1) / V::W;
  const bool mask = (t.cols % V::W) != 0;
#define BWW_DW(n)                                        \
  case n + 1:                                            \
    if constexpr (n + 1 <= G::kDwVecs) {                 \
      if (mask) dw_kernel<V, n + 1, true, IN>(t);        \
      else dw_kernel<V, n + 1, false, IN>(t);            \
    }                                                    \
    break;
  switch (nv) {
    BWW_DW_VECS(BWW_DW)
    default: break;
  }
#undef BWW_DW
}

#undef BWW_FOR_ROWS
#undef BWW_DECL
#undef BWW_LOAD
#undef BWW_FMA
#undef BWW_STORE
#undef BWW_DW_VECS
#undef BWW_DW_DECL
#undef BWW_DW_LOAD
#undef BWW_DW_FMA
#undef BWW_DW_STORE

}  // namespace
}  // namespace bww
}  // namespace x86
}  // namespace tct
