// bf16 forward / backward-data register tiles on AMX (TDPBF16PS), for the
// implicit-GEMM driver (conv_f32_common.cpp) when the plan's ISA is
// avx512_amx and the activations are bf16 (the pair packing, the 16-bit
// transposes and the backward-weights panels: pairs_avx512.cpp). Compiled with -mamx-tile
// -mamx-bf16 and the AVX-512 flags; only called when isa_supported(Avx512Amx).
//
// Contract (ConvTileArgs, conv_f32_kernels.h), with these differences:
// - the activation pointers (a, rows) point at bf16 elements (uint16_t), and
//   a_off / tapoff count bf16 elements;
// - the packed weights are bf16 pairs (the driver's pack_pairs): in a tap's
//   [c][NR] block of floats, row i < ceil(cred / 2) holds, per column j, the
//   bf16 pair (W[2i][j], W[2i+1][j]) in one 32-bit slot (0 for 2i + 1 =
//   cred); the rows after them are not read;
// - MR = 32 rows, NR = 16 * NT columns; init (bias or the current outputs)
//   is added after the reduction; prefetch is ignored, stream applies to
//   the 32x32 tile's bf16 rows (out16) that are whole aligned lines; with
//   out16 the rows are bf16 and each result is rounded once (vcvtneps2bf16).
// Accumulation is in f32 (the tile's dot products of pairs: inputs and
// outputs denormals flushed to zero, as oneDNN's AMX kernels do).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "conv_f32_kernels.h"
#include "transpose.h"

namespace tct {
namespace x86 {
namespace {

constexpr int kRows = 32;  // two 16-row A tiles

// The first n of 32 lanes (none for n <= 0, all for n >= 32).
inline __mmask32 lanes32(int64_t n) {
  return n >= 32 ? ~__mmask32{0} : n <= 0 ? __mmask32{0} : (__mmask32{1} << n) - 1;
}

// Palette 1: tiles 0-3 the accumulators C[h][j] (16 rows x 16 floats), 4-5
// the A halves (16 rows x 32 bf16), 6-7 the B tiles (16 pairs x 16 columns).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

const TileConfig& tile_config_amx() {
  static const TileConfig cfg = [] {
    TileConfig c;
    for (int i = 0; i < 8; ++i) {
      c.colsb[i] = 64;
      c.rows[i] = 16;
    }
    return c;
  }();
  return cfg;
}

// Whether the 16 rows p[0..16) are equally spaced, a positive number of bytes
// apart (*stride): one tile load then reads them in place.
inline bool evenly_spaced(const uint16_t* const* p, int64_t* stride) {
  const int64_t d = reinterpret_cast<const char*>(p[1]) - reinterpret_cast<const char*>(p[0]);
  if (d <= 0) return false;
  for (int m = 2; m < 16; ++m)
    if (reinterpret_cast<const char*>(p[m]) - reinterpret_cast<const char*>(p[m - 1]) != d)
      return false;
  *stride = d;
  return true;
}

// Channels per gather batch: the rows of a tap that are not read in place
// are copied for up to this many channels at once before their tile loads,
// so that the copies' stores can drain before the loads read them (a tile
// load waits for the stores it reads). Against one gather per 32-channel
// step no difference was measurable on the SPR VM (DCGAN 256 -> 128 bf16
// forward, within noise); kept as the form that does not depend on it.
constexpr int64_t kGatherChannels = 256;

// Rows p[0..16), elements [c, c + n), into buf (16 rows of kGatherChannels),
// zero from n to the next multiple of 32 (never reading past the n elements).
inline void gather_rows(const uint16_t* const* p, int64_t c, int64_t n, uint16_t* buf) {
  for (int64_t k = 0; k < n; k += 32) {
    const int64_t kn = n - k;
    const __mmask32 mk = lanes32(kn);
#pragma GCC unroll 16
    for (int m = 0; m < 16; ++m)
      _mm512_store_si512(buf + m * kGatherChannels + k, _mm512_maskz_loadu_epi16(mk, p[m] + c + k));
  }
}

// One 32-channel step: A halves from (a0, lda0), (a1, lda1) (bytes), B from
// the pair rows at wc (pairs < 16: a reduction tail, copied with zero rows
// after it, so that the weights after it (perhaps Inf) never meet the zero
// inputs), into the accumulator tiles.
template <int NT>
inline __attribute__((always_inline)) void amx_step(const uint16_t* a0, int64_t lda0,
                                                    const uint16_t* a1, int64_t lda1,
                                                    const float* wc, int64_t pairs,
                                                    uint32_t (*bbuf)[16 * 16]) {
  constexpr int NR = 16 * NT;
  _tile_loadd(4, a0, lda0);
  _tile_loadd(5, a1, lda1);
  if (pairs == 16) {
    _tile_loadd(6, wc, NR * 4);
    if (NT == 2) _tile_loadd(7, wc + 16, NR * 4);
  } else {
    for (int j = 0; j < NT; ++j)
      for (int64_t i = 0; i < 16; ++i)
        _mm512_store_si512(bbuf[j] + 16 * i, i < pairs ? _mm512_loadu_si512(wc + i * NR + 16 * j)
                                                       : _mm512_setzero_si512());
    _tile_loadd(6, bbuf[0], 64);
    if (NT == 2) _tile_loadd(7, bbuf[NT - 1], 64);
  }
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(2, 5, 6);
  if (NT == 2) {
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(3, 5, 7);
  }
}

inline void zero_accumulators() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

// The accumulators plus init (bias, or the outputs when accumulating) into
// the rows' columns [col_off, col_off + ncols), f32 or rounded to bf16. A
// bf16 row of 32 columns is one 64-byte store (one cache line when the row
// is aligned): two 32-byte stores per row, written a column block apart,
// left the bf16 forward waiting on its stores (SPR: the U-Net 2D k2 s2
// forward spent a fifth of its time in them).
template <int NT>
void store_outputs(const ConvTileArgs* args, const float* bias, int64_t col_off, int64_t ncols) {
  constexpr int NR = 16 * NT;
  alignas(64) float cbuf[kRows * NR];
  _tile_stored(0, cbuf, NR * 4);
  _tile_stored(2, cbuf + 16 * NR, NR * 4);
  if (NT == 2) {
    _tile_stored(1, cbuf + 16, NR * 4);
    _tile_stored(3, cbuf + 16 * NR + 16, NR * 4);
  }
  __m512 b[NT];
  __mmask16 k[NT];
  for (int j = 0; j < NT; ++j) {
    const int64_t n = ncols - 16 * j;
    k[j] = n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
    b[j] = args->accumulate || n <= 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(k[j], bias + 16 * j);
  }
  if (args->out16) {
    const __mmask32 k32 = lanes32(ncols);
    for (int m = 0; m < kRows; ++m) {
      uint16_t* o = reinterpret_cast<uint16_t*>(args->out[m]) + col_off;
      const __m512 v0 = _mm512_add_ps(b[0], _mm512_load_ps(cbuf + m * NR));
      if (NT == 2) {
        const __m512 v1 = _mm512_add_ps(b[NT - 1], _mm512_load_ps(cbuf + m * NR + 16));
        const __m512i v = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(v1, v0));
        if (ncols < 32) _mm512_mask_storeu_epi16(o, k32, v);
        else if (args->stream && (reinterpret_cast<uintptr_t>(o) & 63) == 0)
          _mm512_stream_si512(reinterpret_cast<__m512i*>(o), v);  // (fenced by the driver)
        else _mm512_storeu_si512(o, v);
      } else {
        _mm256_mask_storeu_epi16(o, k[0], reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v0)));
      }
    }
    return;
  }
  for (int m = 0; m < kRows; ++m) {
    float* o = args->out[m] + col_off;
    for (int j = 0; j < NT; ++j) {
      const __m512 init = args->accumulate ? _mm512_maskz_loadu_ps(k[j], o + 16 * j) : b[j];
      _mm512_mask_storeu_ps(o + 16 * j, k[j], _mm512_add_ps(init, _mm512_load_ps(cbuf + m * NR + 16 * j)));
    }
  }
}

// Row m's input of tap t (at the reduction's first channel).
inline const uint16_t* input_row(const ConvTileArgs* args, int64_t t, int m) {
  const auto* const* rows = reinterpret_cast<const uint16_t* const*>(args->rows);
  const auto* const* a = reinterpret_cast<const uint16_t* const*>(args->a);
  return (rows ? rows[m] + args->tapoff[t] : a[t * kRows + m]) + args->a_off;
}

// One column block: the A rows that are not read in place gathered per tap
// in batches of kGatherChannels.
template <int NT>
void gemm_tile_amx_one(const ConvTileArgs* args) {
  constexpr int NR = 16 * NT;
  zero_accumulators();
  alignas(64) uint16_t abuf[2][16 * kGatherChannels];
  alignas(64) uint32_t bbuf[NT][16 * 16];
  const int64_t cred = args->cred;
  for (int64_t t = 0; t < args->ntaps; ++t) {
    const float* const w = args->w + (args->wtap ? args->wtap[t] : t) * cred * NR;
    const uint16_t* p[kRows];
    for (int m = 0; m < kRows; ++m) p[m] = input_row(args, t, m);
    int64_t sd[2] = {0, 0};
    const bool even[2] = {evenly_spaced(p, &sd[0]), evenly_spaced(p + 16, &sd[1])};
    for (int64_t c0 = 0; c0 < cred; c0 += kGatherChannels) {
      const int64_t span = cred - c0 < kGatherChannels ? cred - c0 : kGatherChannels;
      // A: read in place when its rows are evenly spaced and whole steps.
      const bool direct[2] = {even[0] && span % 32 == 0, even[1] && span % 32 == 0};
      if (!direct[0]) gather_rows(p, c0, span, abuf[0]);
      if (!direct[1]) gather_rows(p + 16, c0, span, abuf[1]);
      for (int64_t c = c0; c < c0 + span; c += 32) {
        const int64_t kn = cred - c < 32 ? cred - c : 32;
        amx_step<NT>(direct[0] ? p[0] + c : abuf[0] + (c - c0),
                     direct[0] ? sd[0] : 2 * kGatherChannels,
                     direct[1] ? p[16] + c : abuf[1] + (c - c0),
                     direct[1] ? sd[1] : 2 * kGatherChannels, w + c / 2 * NR, (kn + 1) / 2, bbuf);
      }
    }
  }
  store_outputs<NT>(args, args->bias, args->col_off, args->ncols);
}


// nq > 1 column blocks of one group: the rows that are not read in place
// are gathered once for all taps into args->stage (when they fit its
// stage_bytes), then each block runs every tap from them.
template <int NT>
void gemm_tile_amx_multi(const ConvTileArgs* args) {
  constexpr int NR = 16 * NT;
  const int64_t cred = args->cred, credp = (cred + 31) / 32 * 32, T = args->ntaps;
  if (T * kRows * credp * 2 > args->stage_bytes || T > 64) {
    ConvTileArgs one = *args;
    one.nq = 1;
    for (int64_t q = 0; q < args->nq; ++q) {
      one.w = args->w + q * args->wq;
      one.bias = args->bias + q * NR;
      one.col_off = args->col_off + q * NR;
      one.ncols = args->ncols - q * NR;
      gemm_tile_amx_one<NT>(&one);
    }
    return;
  }
  uint16_t* const stage = static_cast<uint16_t*>(args->stage);  // 64-byte aligned
  const uint16_t* base[64][2];
  int64_t stride[64][2];
  for (int64_t t = 0; t < T; ++t) {
    const uint16_t* p[kRows];
    for (int m = 0; m < kRows; ++m) p[m] = input_row(args, t, m);
    for (int h = 0; h < 2; ++h) {
      int64_t sd = 0;
      if (cred % 32 == 0 && evenly_spaced(p + 16 * h, &sd)) {
        base[t][h] = p[16 * h];
        stride[t][h] = sd;
        continue;
      }
      uint16_t* d = stage + (t * 2 + h) * 16 * credp;
      for (int m = 0; m < 16; ++m)
        for (int64_t c = 0; c < credp; c += 32) {
          const int64_t kn = cred - c;
          const __mmask32 mk = lanes32(kn);
          _mm512_store_si512(d + m * credp + c, _mm512_maskz_loadu_epi16(mk, p[16 * h + m] + c));
        }
      base[t][h] = d;
      stride[t][h] = credp * 2;
    }
  }
  alignas(64) uint32_t bbuf[NT][16 * 16];
  for (int64_t q = 0; q < args->nq; ++q) {
    zero_accumulators();
    const float* const wq = args->w + q * args->wq;
    for (int64_t t = 0; t < T; ++t) {
      const float* const w = wq + (args->wtap ? args->wtap[t] : t) * cred * NR;
      for (int64_t c = 0; c < cred; c += 32) {
        const int64_t kn = cred - c < 32 ? cred - c : 32;
        amx_step<NT>(base[t][0] + c, stride[t][0], base[t][1] + c, stride[t][1], w + c / 2 * NR,
                     (kn + 1) / 2, bbuf);
      }
    }
    store_outputs<NT>(args, args->bias + q * NR, args->col_off + q * NR, args->ncols - q * NR);
  }
}

template <int NT>
void gemm_tile_amx(const ConvTileArgs* args) {
  if (args->nq > 1) gemm_tile_amx_multi<NT>(args);
  else gemm_tile_amx_one<NT>(args);
}

}  // namespace

// The tile configuration: loaded by each thread before its first tile of a
// call and released after its last (ConvTable::thread_begin / end), not per
// tile (the per-tile form showed a fifth of the tile's samples on its first
// tile instruction, but the layer's time did not change measurably).
void tiles_begin_amx() { _tile_loadconfig(&tile_config_amx()); }
void tiles_end_amx() { _tile_release(); }

void conv_bf16_amx_32x32(const ConvTileArgs* args) { gemm_tile_amx<2>(args); }
void conv_bf16_amx_32x16(const ConvTileArgs* args) { gemm_tile_amx<1>(args); }

const ConvTable* conv_bf16_table_amx() {
  // Speeds relative to the 32x32 tile (two B tiles per two A tiles, four
  // TDPBF16PS per 32 channels); the 32x16 one does half the products per A.
  static constexpr ConvTable table = {
      "amx",
      16,
      {{"amx_bf16_32x32", conv_bf16_amx_32x32, 32, 32, 1.0, nullptr},
       {"amx_bf16_32x16", conv_bf16_amx_32x16, 32, 16, 0.6, nullptr}},
      2,
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
      tiles_begin_amx,
      tiles_end_amx,
      true,
      {nullptr, nullptr, nullptr},
      {},
      // Streaming from 4 MiB of bf16 results (heuristics A17; SPR VM, 2
      // threads, forward: ResNet's 1x1 s2 (12 MiB) 1.2x; 4 MiB outputs 1.3x
      // called back to back, within noise interleaved with torch; 2 MiB ones
      // no faster, the U-Net 2D backward-data 10-20 % slower). The tiles do a
      // fraction of the f32 tiles' work per output line, so the read for
      // ownership of each line, which the f32 tiles hide below 16 MiB, shows.
      4.0 * (1 << 20),
      // Regrouped rows are not evenly spaced, so every tap of a tile is
      // gathered instead of loaded in place: only where regrouping saves a
      // fifth of the products (SPR VM, bf16 channels-last, 26 regrouped
      // layer-passes: 1.03x geomean against 0.97; GoogLeNet's k7 s2 d2
      // forward, 0.97 of the products, 5.2 -> 4.3 ms; DCGAN 256 -> 128
      // backward-data 1.2x; DCGAN's z layer, 0.06 of them, keeps it).
      0.8,
  };
  return &table;
}

// --- backward-weights (bwd_weights_bf16_common.cpp) ---

void bww_bf16_amx_block(const BwwPairsBlockArgs* args) {
  const int64_t ldb = args->ldb * 4, ldc = args->ldc * 4;
  float* const c = args->c;
  const bool two = args->ncols > 16;
  if (args->zero) {
    _tile_zero(0);
    _tile_zero(2);
    if (two) {
      _tile_zero(1);
      _tile_zero(3);
    }
  } else {
    _tile_loadd(0, c, ldc);
    _tile_loadd(2, c + 16 * args->ldc, ldc);
    if (two) {
      _tile_loadd(1, c + 16, ldc);
      _tile_loadd(3, c + 16 * args->ldc + 16, ldc);
    }
  }
  for (int64_t k = 0; k < args->nks; ++k) {
    _tile_loadd(4, args->a[2 * k], args->lda[2 * k]);
    _tile_loadd(5, args->a[2 * k + 1], args->lda[2 * k + 1]);
    const uint32_t* b = args->b + k * 16 * args->ldb;
    _tile_loadd(6, b, ldb);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(2, 5, 6);
    if (two) {
      _tile_loadd(7, b + 16, ldb);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, ldc);
  _tile_stored(2, c + 16 * args->ldc, ldc);
  if (two) {
    _tile_stored(1, c + 16, ldc);
    _tile_stored(3, c + 16 * args->ldc + 16, ldc);
  }
}

}  // namespace x86
}  // namespace tct
