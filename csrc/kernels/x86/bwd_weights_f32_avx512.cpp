// AVX-512 micro-kernels of the f32 backward-weights pass (see bwd_weights_f32.h).
// Leaf functions over raw pointers only: this file is compiled with AVX-512
// flags, so it must not instantiate anything that other files also define.
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "bwd_weights_f32.h"
#include "bwd_weights_f32_tiles.h"
#include "vec_avx512.h"
#include "vec_in.h"

namespace tct {
namespace x86 {
namespace bww {
namespace {

using V = VecAvx512;
struct Geometry {
  static constexpr int rows(int nv) { return kAvx512Rows[nv]; }
  static constexpr int kMaxVecs = kAvx512MaxVecs;
  static constexpr int kDwVecs = kAvx512DwVecs;
};

// Grouped with few channels: MG rows (A channels per group), ng = cols B
// channels per group, gpv = 16/ng groups per vector, NVG vectors of groups.
// Lane l of vector v belongs to group v*gpv + l/ng; its A value for row j is
// chunk_v[(l/ng)*MG + j], brought in by a permute. Accumulators g<j>_<v>.
#define BWW_G_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
// IN: the pixel rows' storage (vec_in.h; 16-bit rows widened as loaded).
template <int MG, int NVG, int IN>
void grouped_kernel(const TileArgs& t) {
  using T = std::conditional_t<IN == 0, float, uint16_t>;
  const int ng = t.cols, gpv = 16 / ng;
  const int shift = ng == 2 ? 1 : ng == 4 ? 2 : 3;
  __mmask16 am[4], bm[4];  // per vector of groups; read-only in the loop
  for (int v = 0; v < 4; ++v) {
    const int gv = t.groups - v * gpv < 0 ? 0 : t.groups - v * gpv > gpv ? gpv : t.groups - v * gpv;
    bm[v] = static_cast<__mmask16>((1u << (gv * ng)) - 1u);
    am[v] = static_cast<__mmask16>((1u << (gv * MG)) - 1u);
  }
  const __mmask16 am0 = am[0], am1 = am[1], am2 = am[2], am3 = am[3];
  const __mmask16 bm0 = bm[0], bm1 = bm[1], bm2 = bm[2], bm3 = bm[3];
  const __m512i grp = _mm512_mullo_epi32(
      _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                        shift),
      _mm512_set1_epi32(MG));
#define BWW_G_DECL(j)                                                              \
  const __m512i idx##j = _mm512_add_epi32(grp, _mm512_set1_epi32(j < MG ? j : 0)); \
  __m512 g##j##_0 = _mm512_setzero_ps(), g##j##_1 = _mm512_setzero_ps(),           \
         g##j##_2 = _mm512_setzero_ps(), g##j##_3 = _mm512_setzero_ps();
  BWW_G_ROWS(BWW_G_DECL)
  const int64_t a_step = static_cast<int64_t>(gpv) * MG;  // A floats per vector of groups
  const Pix* px = t.pix;
  for (int64_t i = 0; i < t.npix; ++i) {
    const T* a = reinterpret_cast<const T*>(px[i].a) + t.a_off;
    const T* b = reinterpret_cast<const T*>(px[i].b) + t.b_off;
    auto ld = [](__mmask16 k, const T* p) { return load_in_part<V, IN>(k, p, 16); };
    const __m512 a0 = ld(am0, a), b0 = ld(bm0, b);
    __m512 a1, b1, a2, b2, a3, b3;
    if constexpr (NVG > 1) a1 = ld(am1, a + a_step), b1 = ld(bm1, b + 16);
    if constexpr (NVG > 2) a2 = ld(am2, a + 2 * a_step), b2 = ld(bm2, b + 32);
    if constexpr (NVG > 3) a3 = ld(am3, a + 3 * a_step), b3 = ld(bm3, b + 48);
#define BWW_G_FMA(j)                                                                           \
  if constexpr (j < MG) {                                                                      \
    g##j##_0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx##j, a0), b0, g##j##_0);               \
    if constexpr (NVG > 1) g##j##_1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx##j, a1), b1, g##j##_1); \
    if constexpr (NVG > 2) g##j##_2 = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx##j, a2), b2, g##j##_2); \
    if constexpr (NVG > 3) g##j##_3 = _mm512_fmadd_ps(_mm512_permutexvar_ps(idx##j, a3), b3, g##j##_3); \
  }
    BWW_G_ROWS(BWW_G_FMA)
  }
#define BWW_G_STORE(j)                                                              \
  if constexpr (j < MG) {                                                           \
    _mm512_storeu_ps(t.c + 16 * j, g##j##_0);                                       \
    if constexpr (NVG > 1) _mm512_storeu_ps(t.c + 16 * (MG + j), g##j##_1);         \
    if constexpr (NVG > 2) _mm512_storeu_ps(t.c + 16 * (2 * MG + j), g##j##_2);     \
    if constexpr (NVG > 3) _mm512_storeu_ps(t.c + 16 * (3 * MG + j), g##j##_3);     \
  }
  BWW_G_ROWS(BWW_G_STORE)
}

template <int MG, int IN>
void grouped_by_vectors(const TileArgs& t) {
  const int nvg = (t.groups * t.cols + 15) / 16;
  if constexpr (MG <= 4) {
    switch (nvg) {
      case 1: grouped_kernel<MG, 1, IN>(t); break;
      case 2: grouped_kernel<MG, 2, IN>(t); break;
      case 3: grouped_kernel<MG, 3, IN>(t); break;
      default: grouped_kernel<MG, 4, IN>(t); break;
    }
  } else {
    if (nvg == 1) grouped_kernel<MG, 1, IN>(t);
    else grouped_kernel<MG, 2, IN>(t);
  }
}

template <int IN>
void grouped_tile_in(const TileArgs& t) {
  switch (t.rows) {
#define BWW_G_CASE(j) \
  case j + 1: grouped_by_vectors<j + 1, IN>(t); break;
    BWW_G_ROWS(BWW_G_CASE)
#undef BWW_G_CASE
    default: break;
  }
}

}  // namespace

void gemm_tile_avx512(const TileArgs& t) { gemm_tile<V, Geometry>(t); }

void pack_avx512(const Pix* pix, int64_t n, bool side_b, int64_t off, int width, int64_t ld,
                 float* dst) {
  pack_rows<V, 0>(pix, n, side_b, off, width, ld, dst);
}

void pack16_avx512(const Pix* pix, int64_t n, bool side_b, int64_t off, int width, int64_t ld,
                   float* dst, int kind) {
  if (kind == 2) pack_rows<V, 2>(pix, n, side_b, off, width, ld, dst);
  else pack_rows<V, 1>(pix, n, side_b, off, width, ld, dst);
}

namespace {

// Interleave tables for T taps (2 <= T <= kMaxInterleave): output vector v
// of the contiguous run dst[n*T + t] holds the flat positions 16v .. 16v+15;
// position j is row t = j % T, channel n = j / T. With the rows in pairs
// (2k, 2k+1) as the two tables of vpermt2ps, the index of lane e is
// n + 16 * (t & 1) whichever the pair, and pair_mask[v][k] marks the lanes
// whose row is in pair k.
constexpr int kMaxInterleave = 9;
struct InterleaveTables {
  int idx[kMaxInterleave + 1][kMaxInterleave][16];
  uint16_t pair_mask[kMaxInterleave + 1][kMaxInterleave][(kMaxInterleave + 1) / 2];
};
constexpr InterleaveTables make_interleave_tables() {
  InterleaveTables tb{};
  for (int T = 2; T <= kMaxInterleave; ++T)
    for (int v = 0; v < T; ++v)
      for (int e = 0; e < 16; ++e) {
        const int j = 16 * v + e, n = j / T, t = j % T;
        tb.idx[T][v][e] = n + 16 * (t & 1);
        tb.pair_mask[T][v][t / 2] = static_cast<uint16_t>(tb.pair_mask[T][v][t / 2] | (1u << e));
      }
  return tb;
}
constexpr InterleaveTables kInterleave = make_interleave_tables();

// transpose_avx512 where the output run is contiguous (ld_n == nt == T):
// T whole vectors, each merged from the row pairs with one vpermt2ps per
// pair, instead of a 16x16 transpose (64 shuffles) and 16 partial stores.
template <int T>
void interleave_taps(const float* src, int64_t ld_t, int64_t ld_q, int nq, int nn, float* dst,
                     bool stream) {
  const __mmask16 nm = static_cast<__mmask16>((1u << nn) - 1u);
  __m512 r[T + (T & 1)];
#pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    __m512 v = _mm512_maskz_loadu_ps(nm, src + t * ld_t);
    for (int q = 1; q < nq; ++q)
      v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(nm, src + q * ld_q + t * ld_t));
    r[t] = v;
  }
  if constexpr (T & 1) r[T] = _mm512_setzero_ps();
  const int total = nn * T;  // floats of the run
  stream = stream && nn == 16 && (reinterpret_cast<uintptr_t>(dst) & 63) == 0;
#pragma GCC unroll 16
  for (int v = 0; v < T; ++v) {
    if (16 * v >= total) break;
    const __m512i idx = _mm512_loadu_si512(kInterleave.idx[T][v]);
    __m512 acc = _mm512_permutex2var_ps(r[0], idx, r[1]);
#pragma GCC unroll 8
    for (int k = 1; 2 * k < T; ++k)
      acc = _mm512_mask_mov_ps(acc, kInterleave.pair_mask[T][v][k],
                               _mm512_permutex2var_ps(r[2 * k], idx, r[2 * k + 1]));
    if (stream) _mm512_stream_ps(dst + 16 * v, acc);
    else if (total - 16 * v >= 16) _mm512_storeu_ps(dst + 16 * v, acc);
    else _mm512_mask_storeu_ps(dst + 16 * v, static_cast<__mmask16>((1u << (total - 16 * v)) - 1u), acc);
  }
}

}  // namespace

void transpose_avx512(const float* src, int64_t ld_t, int64_t ld_q, int nq, int nt, int nn,
                      float* dst, int64_t ld_n, bool stream) {
  if (ld_n == nt && nt >= 2 && nt <= kMaxInterleave) {
    switch (nt) {
      case 2: return interleave_taps<2>(src, ld_t, ld_q, nq, nn, dst, stream);
      case 3: return interleave_taps<3>(src, ld_t, ld_q, nq, nn, dst, stream);
      case 4: return interleave_taps<4>(src, ld_t, ld_q, nq, nn, dst, stream);
      case 5: return interleave_taps<5>(src, ld_t, ld_q, nq, nn, dst, stream);
      case 6: return interleave_taps<6>(src, ld_t, ld_q, nq, nn, dst, stream);
      case 7: return interleave_taps<7>(src, ld_t, ld_q, nq, nn, dst, stream);
      case 8: return interleave_taps<8>(src, ld_t, ld_q, nq, nn, dst, stream);
      default: return interleave_taps<9>(src, ld_t, ld_q, nq, nn, dst, stream);
    }
  }
  const __mmask16 nm = static_cast<__mmask16>((1u << nn) - 1u);
  const __mmask16 tm = static_cast<__mmask16>((1u << nt) - 1u);
  __m512 r[16], a[16], b[16];
#pragma GCC unroll 16
  for (int t = 0; t < 16; ++t) {
    if (t < nt) {
      __m512 v = _mm512_maskz_loadu_ps(nm, src + t * ld_t);
      for (int q = 1; q < nq; ++q)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(nm, src + q * ld_q + t * ld_t));
      r[t] = v;
    } else {
      r[t] = _mm512_setzero_ps();
    }
  }
  // 16x16 transpose: pairs of rows, 4x4 blocks within 128-bit lanes, then
  // the lanes across rows 4 apart and 8 apart.
#pragma GCC unroll 16
  for (int i = 0; i < 16; i += 2) {
    a[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    a[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; i += 4) {
    b[i] = _mm512_shuffle_ps(a[i], a[i + 2], 0x44);
    b[i + 1] = _mm512_shuffle_ps(a[i], a[i + 2], 0xEE);
    b[i + 2] = _mm512_shuffle_ps(a[i + 1], a[i + 3], 0x44);
    b[i + 3] = _mm512_shuffle_ps(a[i + 1], a[i + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    a[k] = _mm512_shuffle_f32x4(b[k], b[4 + k], 0x88);
    a[4 + k] = _mm512_shuffle_f32x4(b[k], b[4 + k], 0xDD);
    a[8 + k] = _mm512_shuffle_f32x4(b[8 + k], b[12 + k], 0x88);
    a[12 + k] = _mm512_shuffle_f32x4(b[8 + k], b[12 + k], 0xDD);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm512_shuffle_f32x4(a[k], a[8 + k], 0x88);
    r[4 + k] = _mm512_shuffle_f32x4(a[4 + k], a[12 + k], 0x88);
    r[8 + k] = _mm512_shuffle_f32x4(a[k], a[8 + k], 0xDD);
    r[12 + k] = _mm512_shuffle_f32x4(a[4 + k], a[12 + k], 0xDD);
  }
  // Whole aligned lines (IOX with 16 taps): streaming stores, no read for
  // ownership of output lines that are entirely overwritten.
  if (stream && nt == 16 && (reinterpret_cast<uintptr_t>(dst) & 63) == 0 && (ld_n & 15) == 0) {
#pragma GCC unroll 16
    for (int n = 0; n < 16; ++n)
      if (n < nn) _mm512_stream_ps(dst + n * ld_n, r[n]);
    return;
  }
#pragma GCC unroll 16
  for (int n = 0; n < 16; ++n)
    if (n < nn) _mm512_mask_storeu_ps(dst + n * ld_n, tm, r[n]);
}

void transpose_taps_avx512(const float* src, int64_t ld_t, int64_t ld_q, int nq, int64_t taps,
                           int nn, float* dst, int64_t ld_n, bool stream) {
  // A contiguous run of 17-64 taps: the chunks into a buffer in L1 (partial
  // stores stay there), then the run out as whole vectors: aligned full
  // lines, streamed when asked. Otherwise each chunk straight to dst.
  const bool staged = ld_n == taps && taps > 16 && taps <= kMaxStagedTaps;
  alignas(64) float buf[16 * kMaxStagedTaps];
  float* const to = staged ? buf : dst;
  for (int64_t t0 = 0; t0 < taps; t0 += 16)
    transpose_avx512(src + t0 * ld_t, ld_t, ld_q, nq, static_cast<int>(taps - t0 < 16 ? taps - t0 : 16),
                     nn, to + t0, ld_n, stream && !staged);
  if (!staged) return;
  const int64_t total = nn * taps;
  stream = stream && nn == 16 && (reinterpret_cast<uintptr_t>(dst) & 63) == 0;
  int64_t i = 0;
  for (; i + 16 <= total; i += 16) {
    const __m512 v = _mm512_load_ps(buf + i);
    if (stream) _mm512_stream_ps(dst + i, v);
    else _mm512_storeu_ps(dst + i, v);
  }
  if (i < total)
    _mm512_mask_storeu_ps(dst + i, static_cast<__mmask16>((1u << (total - i)) - 1u),
                          _mm512_load_ps(buf + i));
}

void store_fence_avx512() { _mm_sfence(); }

void grouped_tile_avx512(const TileArgs& t) { grouped_tile_in<0>(t); }

void grouped16_tile_avx512(const TileArgs& t, int kind) {
  if (kind == 2) grouped_tile_in<2>(t);
  else grouped_tile_in<1>(t);
}

void dw_tile_avx512(const TileArgs& t) { dw_tile<V, Geometry>(t); }

void dw16_tile_avx512(const TileArgs& t, int kind) {
  if (kind == 2) dw_tile<V, Geometry, 2>(t);
  else dw_tile<V, Geometry, 1>(t);
}

void gemm16_tile_avx512(const TileArgs& t, int kind) {
  if (kind == 2) gemm_tile<V, Geometry, 2>(t);
  else gemm_tile<V, Geometry, 1>(t);
}

// One column vector without in-lane permutes (VecAvx512Loads: Intel's AMX
// cores; SPR VM in cache, the 14x16 tile: see heuristics K3).
void gemm_tile_avx512_loads(const TileArgs& t) {
  if (t.rows > 0 && t.cols > 0 && t.cols <= 16)
    gemm_by_rows<VecAvx512Loads, Geometry, 1>(t, t.cols % 16 != 0);
  else
    gemm_tile_avx512(t);
}

void gemm16_tile_avx512_loads(const TileArgs& t, int kind) {
  if (t.rows <= 0 || t.cols <= 0 || t.cols > 16) return gemm16_tile_avx512(t, kind);
  if (kind == 2) gemm_by_rows<VecAvx512Loads, Geometry, 1, 2>(t, t.cols % 16 != 0);
  else gemm_by_rows<VecAvx512Loads, Geometry, 1, 1>(t, t.cols % 16 != 0);
}

namespace {
const BwdWeightsF32Table* avx512_table(bool intel) {
  auto make = [](const char* name, void (*gemm)(const TileArgs&),
                 void (*gemm16)(const TileArgs&, int)) constexpr -> BwdWeightsF32Table {
    BwdWeightsF32Table t = {
        name,
        kAvx512Lanes,
        kAvx512MaxVecs,
        {kAvx512Rows[0], kAvx512Rows[1], kAvx512Rows[2], kAvx512Rows[3], kAvx512Rows[4]},
        kAvx512DwVecs,
        8,  // grouped: 2, 4 or 8 channels per group on the vector side
        4,  // grouped: 4 vectors per call for rows <= 4,
        2,  // else 2
        1,  // pixel blocks: one tile's B columns in L1
        gemm,
        grouped_tile_avx512,
        dw_tile_avx512,
        pack_avx512,
        nullptr,  // each m-block's A panel packed when its first tile needs it
        transpose_taps_avx512,
        store_fence_avx512,
    };
    t.pack16 = pack16_avx512;
    t.gemm16 = gemm16;
    t.grouped16 = grouped16_tile_avx512;
    t.dw16 = dw16_tile_avx512;
    return t;
  };
  static constexpr BwdWeightsF32Table table = make("avx512", gemm_tile_avx512, gemm16_tile_avx512);
  static constexpr BwdWeightsF32Table intel_table =
      make("avx512l", gemm_tile_avx512_loads, gemm16_tile_avx512_loads);
  return intel ? &intel_table : &table;
}
}  // namespace

const BwdWeightsF32Table* bwd_weights_f32_table_avx512() { return avx512_table(false); }
const BwdWeightsF32Table* bwd_weights_f32_table_avx512_intel() { return avx512_table(true); }

}  // namespace bww
}  // namespace x86
}  // namespace tct
