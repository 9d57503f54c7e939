// bf16 register tiles on AVX512_BF16 (VDPBF16PS: 16 lanes, each the sum of
// a pair of bf16 products added to an f32 accumulator), for CPUs with the
// instruction and no AMX (Zen 4, Zen 5, Cooper Lake). The plan takes them on
// AMD's cores only (heuristics A12); elsewhere, tests force the ISA and an
// AMD uarch (set_isa("avx512_bf16"), set_uarch("zen4")). Compiled with
// -mavx512bf16 and the AVX-512 flags; only called when
// isa_supported(Avx512Bf16).
//
// Forward / backward-data: the GEMM tiles of the implicit-GEMM driver
// (conv_f32_common.cpp) with the AMX tiles' VNNI contract (conv_bf16_amx.cpp:
// bf16 activations, weights packed as bf16 pairs, nq column blocks, bf16
// results rounded once with out16), MR rows x NR = 16 * NV columns, init
// (bias or the f32 outputs) loaded into the accumulators first (so a
// denormal bias or partial sum is flushed, see below; the AMX tiles add init
// after the reduction); prefetch as the f32 GEMM tiles (each tap, per row,
// the line prefetch elements on; the AMX tiles ignore it). An odd
// reduction's last pair takes its one input alone (a 16-bit load): the
// element after it may be another group's channel or past the tensor, and
// a NaN there times the pair's zero weight would be a NaN.
//
// Backward-weights: the AMX block's contract (BwwPairsBlockArgs), 32 rows in
// groups of register rows.
//
// VDPBF16PS treats denormal inputs (and accumulators) as zero and flushes
// denormal results, as TDPBF16PS (and oneDNN's bf16 kernels) do.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "conv_f32_kernels.h"
#include "transpose.h"

namespace tct {
namespace x86 {
namespace {

inline __mmask16 first16(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
}

// The pair (p[0], p[1]) in every 32-bit lane; with one = true, (p[0], 0).
inline __m512i bcast_pair(const uint16_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(static_cast<int>(v));
}
inline __m512i bcast_one(const uint16_t* p) { return _mm512_set1_epi32(p[0]); }

inline __m512 dp(__m512 acc, __m512i x, __m512i w) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(x), reinterpret_cast<__m512bh>(w));
}

// Row m's input of tap t (at the reduction's first channel).
template <int MR>
inline const uint16_t* input_row(const ConvTileArgs* args, int64_t t, int m) {
  const auto* const* rows = reinterpret_cast<const uint16_t* const*>(args->rows);
  const auto* const* a = reinterpret_cast<const uint16_t* const*>(args->a);
  return (rows ? rows[m] + args->tapoff[t] : a[t * MR + m]) + args->a_off;
}

// One column block: the first M rows of an MR-row tile (row pointers MR
// apart per tap), weights wq, bias, columns [col_off, col_off + ncols).
template <int MR, int NV, int M>
inline __attribute__((always_inline)) void gemm_block(const ConvTileArgs* args, const float* wq,
                                                      const float* bias, int64_t col_off,
                                                      int64_t ncols) {
  constexpr int NR = 16 * NV;
  __m512 acc[M][NV];
  __mmask16 k[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) k[v] = first16(ncols - 16 * v);
  if (args->accumulate) {
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v)
        acc[m][v] = _mm512_maskz_loadu_ps(k[v], args->out[m] + col_off + 16 * v);
  } else {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __m512 b = _mm512_loadu_ps(bias + 16 * v);
#pragma GCC unroll 16
      for (int m = 0; m < M; ++m) acc[m][v] = b;
    }
  }
  const int64_t cred = args->cred, pairs = cred / 2;
  for (int64_t t = 0; t < args->ntaps; ++t) {
    const float* w = wq + (args->wtap ? args->wtap[t] : t) * cred * NR;
    const uint16_t* p[M];
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) p[m] = input_row<MR>(args, t, m);
    if (args->prefetch)  // (as an integer: a later tile's input may lie past the tensor)
#pragma GCC unroll 16
      for (int m = 0; m < M; ++m)
        _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p[m]) +
                                                   sizeof(uint16_t) * args->prefetch),
                     _MM_HINT_T0);
    // One pair step: weights pair row wr, row m's input pair from in(p[m]).
    auto step = [&](const float* wr, auto in) __attribute__((always_inline)) {
      __m512i wv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) wv[v] = _mm512_load_si512(wr + 16 * v);
#pragma GCC unroll 16
      for (int m = 0; m < M; ++m) {
        const __m512i x = in(p[m]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[m][v] = dp(acc[m][v], x, wv[v]);
      }
    };
    for (int64_t i = 0; i < pairs; ++i, w += NR)
      step(w, [i](const uint16_t* r) __attribute__((always_inline)) {
        return bcast_pair(r + 2 * i);
      });
    if (cred & 1)  // the last pair holds one input (its weight pair's high half is 0)
      step(w, [pairs](const uint16_t* r) __attribute__((always_inline)) {
        return bcast_one(r + 2 * pairs);
      });
  }
  if (args->out16) {
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      uint16_t* o = reinterpret_cast<uint16_t*>(args->out[m]) + col_off;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v)
        _mm256_mask_storeu_epi16(o + 16 * v, k[v],
                                 reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(acc[m][v])));
    }
    return;
  }
#pragma GCC unroll 16
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      _mm512_mask_storeu_ps(args->out[m] + col_off + 16 * v, k[v], acc[m][v]);
}

// The tile: nq column blocks of one group, each from its own weights.
template <int MR, int NV, int M = MR>
void gemm_tile(const ConvTileArgs* args) {
  constexpr int NR = 16 * NV;
  for (int64_t q = 0; q < args->nq; ++q) {
    const int64_t ncols = args->ncols - q * NR;
    gemm_block<MR, NV, M>(args, args->w + q * args->wq, args->bias + q * NR,
                          args->col_off + q * NR, ncols < NR ? ncols : NR);
  }
}

// t[m] = the tile computing its first m rows, 1 <= m < MR.
template <int MR, int NV, int M = 1>
constexpr void fill_partial(ConvTileFn* t) {
  if constexpr (M < MR) {
    t[M] = &gemm_tile<MR, NV, M>;
    fill_partial<MR, NV, M + 1>(t);
  }
}

// Backward-weights: rows r0 .. r0 + R of the 32-row block, NV vectors of columns.
template <int R, int NV>
inline __attribute__((always_inline)) void bww_rows(const BwwPairsBlockArgs* args, int r0) {
  __m512 acc[R][NV];
  float* const c = args->c + r0 * args->ldc;
#pragma GCC unroll 16
  for (int m = 0; m < R; ++m)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      acc[m][v] = args->zero ? _mm512_setzero_ps() : _mm512_loadu_ps(c + m * args->ldc + 16 * v);
  for (int64_t k = 0; k < args->nks; ++k) {
    const uint16_t* a[R];
#pragma GCC unroll 16
    for (int m = 0; m < R; ++m) {
      const int r = r0 + m, h = r / 16;
      a[m] = static_cast<const uint16_t*>(args->a[2 * k + h]) +
             (r % 16) * (args->lda[2 * k + h] / 2);
    }
    const uint32_t* b = args->b + k * 16 * args->ldb;
#pragma GCC unroll 2
    for (int q = 0; q < 16; ++q, b += args->ldb) {
      __m512i bv[NV];
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_si512(b + 16 * v);
#pragma GCC unroll 16
      for (int m = 0; m < R; ++m) {
        const __m512i x = bcast_pair(a[m] + 2 * q);
#pragma GCC unroll 2
        for (int v = 0; v < NV; ++v) acc[m][v] = dp(acc[m][v], x, bv[v]);
      }
    }
  }
#pragma GCC unroll 16
  for (int m = 0; m < R; ++m)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + m * args->ldc + 16 * v, acc[m][v]);
}

}  // namespace

void conv_bf16_avx512bf16_6x64(const ConvTileArgs* args) { gemm_tile<6, 4>(args); }
void conv_bf16_avx512bf16_8x48(const ConvTileArgs* args) { gemm_tile<8, 3>(args); }
void conv_bf16_avx512bf16_12x32(const ConvTileArgs* args) { gemm_tile<12, 2>(args); }
void conv_bf16_avx512bf16_12x16(const ConvTileArgs* args) { gemm_tile<12, 1>(args); }

const ConvTable* conv_bf16_table_avx512bf16() {
  struct Partials {
    ConvTileFn t6x64[6];
    ConvTileFn t8x48[8];
    ConvTileFn t12x32[12];
    ConvTileFn t12x16[12];
  };
  static constexpr Partials partials = []() constexpr {
    Partials t{};
    t.t6x64[0] = conv_bf16_avx512bf16_6x64;
    t.t8x48[0] = conv_bf16_avx512bf16_8x48;
    t.t12x32[0] = conv_bf16_avx512bf16_12x32;
    t.t12x16[0] = conv_bf16_avx512bf16_12x16;
    fill_partial<6, 4>(t.t6x64);
    fill_partial<8, 3>(t.t8x48);
    fill_partial<12, 2>(t.t12x32);
    fill_partial<12, 1>(t.t12x16);
    return t;
  }();
  // The f32 table's shapes (24 accumulators, one broadcast per row and
  // pair), and its speeds: on Zen 5, in cache, 6x64 194-201 % of the f32
  // FMA peak, 8x48 189-217 %, 12x32 185-200 %, 12x16 161-174 %
  // (benchmarks/results/zen5_cpp.txt), within 5 % of these ratios.
  static constexpr ConvTable table = {
      "avx512_bf16",
      16,
      {{"avx512bf16_bf16_6x64", conv_bf16_avx512bf16_6x64, 6, 64, 1.0, partials.t6x64},
       {"avx512bf16_bf16_8x48", conv_bf16_avx512bf16_8x48, 8, 48, 0.97, partials.t8x48},
       {"avx512bf16_bf16_12x32", conv_bf16_avx512bf16_12x32, 12, 32, 0.95, partials.t12x32},
       {"avx512bf16_bf16_12x16", conv_bf16_avx512bf16_12x16, 12, 16, 0.87, partials.t12x16}},
      4,
      nullptr,  // no depthwise, grouped or dot tiles: those problems go to the f32 kernels
      0,
      nullptr,
      0,
      {nullptr, nullptr, nullptr, nullptr, nullptr},
      {0, 0, 0, 0, 0},
      1.0,
      0,
      transpose_rows_avx512,
      transpose_rows_stream_avx512,
      2,
      true,
      pack_pairs_taps_avx512,
      pack_pairs_row_avx512,
      nullptr,
      nullptr,
      false,
  };
  return &table;
}

void bww_bf16_avx512bf16_block(const BwwPairsBlockArgs* args) {
  if (args->ncols > 16) {  // 12 + 12 + 8 rows of two vectors
    bww_rows<12, 2>(args, 0);
    bww_rows<12, 2>(args, 12);
    bww_rows<8, 2>(args, 24);
  } else {
    bww_rows<16, 1>(args, 0);
    bww_rows<16, 1>(args, 16);
  }
}

}  // namespace x86
}  // namespace tct
