// Micro-kernel tester of the bf16 pair kernels: every GEMM tile (and its
// partial-row forms) of the forward / backward-data tables of each pair ISA,
// AMX (conv_bf16_table_amx(): 32x32, 32x16) and AVX512_BF16
// (conv_bf16_table_avx512bf16(): VDPBF16PS register tiles), in pointer mode
// (rows evenly spaced: read in place; scattered: gathered) and row mode,
// reduction tails (odd: one input in the last pair), skipped taps,
// accumulate, bf16 results, column tails, several column blocks; the
// backward-weights block of each ISA, and the pair and gather kernels
// (with the fused-taps packing: rows, segments, the non-finite flags).
// Against scalar versions of their contracts on small integers (every f32
// sum exact); cells the kernels may not read are NaN, cells they may not
// write are guards compared afterwards. Each ISA is skipped where the CPU
// lacks it (isa_supported).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/x86/conv_f32_kernels.h"

namespace tct {
namespace {

using x86::ConvTileArgs;

constexpr uint16_t kPoison16 = 0x7FC1;  // a bf16 NaN
constexpr float kGuard = -12345.f;

uint16_t to_bf16(float v) {  // round to nearest even (the values here are finite)
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Rng {
  std::mt19937 g{12345};
  int64_t uni(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); }
  bool coin() { return uni(0, 1) == 1; }
  float val() { return static_cast<float>(uni(-3, 3)); }
};

// The kernels of one pair ISA.
struct PairKernels {
  const x86::ConvTable* conv;
  void (*block)(const x86::BwwPairsBlockArgs*);
};

PairKernels kernels_of(Isa isa) {
  if (isa == Isa::Avx512Amx) return {x86::conv_bf16_table_amx(), x86::bww_bf16_amx_block};
  return {x86::conv_bf16_table_avx512bf16(), x86::bww_bf16_avx512bf16_block};
}

// The tile state around a kernel call (AMX: the tile configuration).
struct TileScope {
  const x86::ConvTable* t;
  explicit TileScope(const x86::ConvTable* table) : t(table) {
    if (t->thread_begin) t->thread_begin();
  }
  ~TileScope() {
    if (t->thread_end) t->thread_end();
  }
};

class PairTiles : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << "this CPU lacks " << isa_name(GetParam());
  }
};

// The pair packing and the 16-bit transposes (AVX-512 BW) serve both ISAs.
class PairPacking : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!isa_supported(Isa::Avx512Bf16)) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  }
};

TEST_P(PairTiles, TableListsTheTiles) {
  const x86::ConvTable* t = kernels_of(GetParam()).conv;
  EXPECT_EQ(t->in_bytes, 2);
  EXPECT_TRUE(t->pairs16);
  EXPECT_NE(t->pairs_taps, nullptr);
  EXPECT_EQ(t->dw, nullptr);  // depthwise / grouped / dot: the f32 route
  if (GetParam() == Isa::Avx512Amx) {
    ASSERT_EQ(t->ngemm, 2);
    EXPECT_EQ(t->gemm[0].mr, 32);
    EXPECT_EQ(t->gemm[0].nr, 32);
    EXPECT_EQ(t->gemm[1].nr, 16);
  } else {
    ASSERT_EQ(t->ngemm, 4);
    for (int i = 0; i < t->ngemm; ++i) {
      EXPECT_LE(t->gemm[i].mr * (t->gemm[i].nr / 16), 24) << t->gemm[i].name;  // accumulators
      ASSERT_NE(t->gemm[i].partial, nullptr) << t->gemm[i].name;
    }
  }
}

// Pair rows of nrows x nr floats (the driver's pack_pairs layout for one
// tap): row i holds per column (row 2i, row 2i + 1) as bf16, 0 past nrows.
void pack_pairs_scalar(float* w, int64_t nrows, int64_t nr) {
  std::vector<float> orig(w, w + nrows * nr);
  for (int64_t i = 0; i < (nrows + 1) / 2; ++i)
    for (int64_t j = 0; j < nr; ++j) {
      const float hi = 2 * i + 1 < nrows ? orig[(2 * i + 1) * nr + j] : 0.f;
      const uint32_t slot = to_bf16(orig[2 * i * nr + j]) | static_cast<uint32_t>(to_bf16(hi)) << 16;
      std::memcpy(&w[i * nr + j], &slot, 4);
    }
}

TEST_F(PairPacking, PairPackingMatchesScalar) {
  Rng rng;
  for (int iter = 0; iter < 300; ++iter) {
    const int64_t ntaps = rng.uni(1, 40), jn = rng.uni(1, 70), cs = ntaps + rng.uni(0, 3);
    const bool one = rng.uni(0, 3) == 0;  // an odd reduction's last row: no s1
    std::vector<uint16_t> s0(static_cast<size_t>(jn * cs), kPoison16), s1 = s0;
    for (int64_t j = 0; j < jn; ++j)
      for (int64_t t = 0; t < ntaps; ++t) {
        s0[j * cs + t] = to_bf16(rng.val());
        s1[j * cs + t] = to_bf16(rng.val());
      }
    const int64_t W = jn + 8;  // each tap's row, with guards after jn
    std::vector<uint32_t> out(static_cast<size_t>(ntaps * W), 0xDEADBEEFu);
    std::vector<uint32_t*> rows(static_cast<size_t>(ntaps));
    for (int64_t t = 0; t < ntaps; ++t) rows[t] = out.data() + t * W;
    x86::pack_pairs_taps_avx512(s0.data(), one ? nullptr : s1.data(), cs, ntaps, jn, rows.data());
    for (int64_t t = 0; t < ntaps; ++t)
      for (int64_t j = 0; j < W; ++j) {
        const uint32_t want = j < jn ? (s0[j * cs + t] | (one ? 0u : uint32_t{s1[j * cs + t]} << 16))
                                     : 0xDEADBEEFu;
        ASSERT_EQ(out[t * W + j], want) << iter << " taps=" << ntaps << " jn=" << jn << " t=" << t
                                        << " j=" << j;
      }
    // The contiguous form: row t = 0 of the same data with cs = 1.
    std::vector<uint32_t> row(static_cast<size_t>(jn + 8), 0xDEADBEEFu);
    std::vector<uint16_t> c0(static_cast<size_t>(jn)), c1(static_cast<size_t>(jn));
    for (int64_t j = 0; j < jn; ++j) c0[j] = s0[j * cs], c1[j] = s1[j * cs];
    x86::pack_pairs_row_avx512(c0.data(), one ? nullptr : c1.data(), jn, row.data());
    for (int64_t j = 0; j < jn + 8; ++j)
      ASSERT_EQ(row[j], j < jn ? (c0[j] | (one ? 0u : uint32_t{c1[j]} << 16)) : 0xDEADBEEFu);
  }
}

// (The 16-bit transpose blocks: test_transpose.cpp.)

// n elements of T at a 64-byte boundary (the pair and gather kernels store whole aligned vectors).
template <class T>
struct Aligned {
  std::vector<T> raw;
  T* p;
  Aligned(size_t n, T fill) : raw(n + 64 / sizeof(T), fill) {
    p = raw.data();
    while (reinterpret_cast<uintptr_t>(p) % 64) ++p;
  }
};

// One sampled call of tile `ti` of a table (its first `real` rows: a
// partial tile, or all of them) and its check.
void conv_tile_case(const x86::ConvTable* table, int ti, Rng& rng, int iter) {
  const x86::ConvGemmTile& tile = table->gemm[ti];
  const int NR = tile.nr, MR = tile.mr, NT = NR / 16;
  const int real = tile.partial && rng.coin() ? static_cast<int>(rng.uni(1, MR - 1)) : MR;
  const x86::ConvTileFn fn = real < MR ? tile.partial[real] : tile.fn;
  static const int64_t kCred[] = {1, 2, 13, 31, 32, 33, 64, 77, 256, 300};
  const int64_t cred = kCred[rng.uni(0, 9)];
  const int64_t ntaps = rng.uni(1, 3), a_off = rng.uni(0, 5);
  const bool out16 = rng.uni(0, 2) == 0, accumulate = !out16 && rng.coin();
  const bool row_mode = rng.coin(), even = rng.coin(), wtap = rng.coin();
  // nq column blocks in one call (their inputs gathered once, when the stage
  // holds them: big enough, or too small on purpose).
  const int64_t nq = rng.uni(0, 2) == 0 ? rng.uni(2, 3) : 1;
  const int64_t ncols = (nq - 1) * NR + rng.uni(1, NR), col_off = rng.uni(0, 3);
  const int64_t len = a_off + cred;
  // Inputs: bf16, poison outside [a_off, a_off + cred) of every run.
  std::vector<std::vector<uint16_t>> bufs;
  auto run = [&](uint16_t* r) {
    for (int64_t c = a_off; c < len; ++c) r[c] = to_bf16(rng.val());
  };
  std::vector<const uint16_t*> a(static_cast<size_t>(ntaps * MR)), rows(MR);
  std::vector<int64_t> tapoff(static_cast<size_t>(ntaps));
  if (row_mode) {
    const int64_t step = len + rng.uni(0, 4);  // between the taps' runs
    for (int64_t t = 0; t < ntaps; ++t) tapoff[t] = t * step;
    const int64_t span = ntaps * step, stride = span + (even ? rng.uni(0, 3) : 0);
    bufs.emplace_back(static_cast<size_t>(MR * stride + span + 64), kPoison16);
    for (int m = 0; m < MR; ++m) {
      // evenly spaced rows, or one row out of place (gathered)
      const int64_t at = even || m != MR / 2 ? m * stride : MR * stride;
      rows[m] = bufs[0].data() + at;
    }
    for (int m = 0; m < MR; ++m)
      for (int64_t t = 0; t < ntaps; ++t) run(const_cast<uint16_t*>(rows[m]) + tapoff[t]);
  } else {
    bufs.emplace_back(static_cast<size_t>(len + 64), kPoison16);  // the zero row
    for (int64_t c = a_off; c < len; ++c) bufs[0][c] = 0;
    const int64_t stride = len + rng.uni(0, 3);
    for (int64_t t = 0; t < ntaps; ++t) {
      bufs.emplace_back(static_cast<size_t>(MR * stride + 64), kPoison16);
      for (int m = 0; m < MR; ++m) {
        uint16_t* r = bufs.back().data() + m * stride;
        run(r);
        a[t * MR + m] = (!even && rng.uni(0, 4) == 0) ? bufs[0].data() : r;
      }
    }
  }
  // Weights: f32 [tap][cred][NR] per packed tap, then bf16 pairs in place.
  const int64_t wt_n = wtap ? ntaps + 2 : ntaps;
  std::vector<int32_t> wt(static_cast<size_t>(ntaps));
  for (int64_t t = 0; t < ntaps; ++t) wt[t] = static_cast<int32_t>(wtap ? wt_n - 1 - t : t);
  const int64_t wq = wt_n * cred * NR + 16 * rng.uni(0, 2);  // floats between blocks
  // (64-byte aligned, as the driver's packed weights)
  Aligned<float> wbuf(static_cast<size_t>(nq * wq + 64), 0.f);
  float* const w = wbuf.p;
  std::vector<float> wf(static_cast<size_t>(nq * wq + 64));
  for (float& v : wf) v = rng.val();
  std::copy(wf.begin(), wf.end(), w);
  for (int64_t q = 0; q < nq; ++q)
    for (int64_t t = 0; t < wt_n; ++t) pack_pairs_scalar(w + q * wq + t * cred * NR, cred, NR);
  std::vector<float> bias(static_cast<size_t>(nq * NR));
  for (float& v : bias) v = rng.val();
  // Outputs: MR rows of width W with guards around the columns written.
  const int64_t W = col_off + nq * NR + 4;
  std::vector<float> out32(static_cast<size_t>(MR * W), kGuard), init;
  std::vector<uint16_t> out16v(static_cast<size_t>(MR * W), to_bf16(kGuard));
  for (int m = 0; m < MR; ++m)
    for (int64_t j = 0; j < ncols; ++j) out32[m * W + col_off + j] = rng.val();
  init = out32;
  std::vector<float*> outp(MR);
  for (int m = 0; m < MR; ++m)
    outp[m] = out16 ? reinterpret_cast<float*>(out16v.data() + m * W) : out32.data() + m * W;
  ConvTileArgs args;
  args.a = reinterpret_cast<const float* const*>(a.data());
  args.rows = row_mode ? reinterpret_cast<const float* const*>(rows.data()) : nullptr;
  args.tapoff = tapoff.data();
  args.w = w;
  args.wtap = wtap ? wt.data() : nullptr;
  args.bias = bias.data();
  args.out = outp.data();
  args.ntaps = ntaps;
  args.cred = cred;
  args.a_off = a_off;
  args.col_off = col_off;
  args.ncols = ncols;
  args.accumulate = accumulate;
  args.out16 = out16;
  args.nq = nq;
  args.wq = wq;
  const int64_t need = ntaps * MR * ((cred + 31) / 32 * 32) * 2;
  std::vector<char> stage_raw(static_cast<size_t>(need + 128));
  char* stage = stage_raw.data();
  while (reinterpret_cast<uintptr_t>(stage) % 64) ++stage;
  args.stage = stage;
  args.stage_bytes = rng.uni(0, 3) == 0 ? need - 1 : need;
  {
    TileScope scope(table);
    fn(&args);
  }
  for (int m = 0; m < MR; ++m)
    for (int64_t j = 0; j < W; ++j) {
      const int64_t col = j - col_off;
      const bool written = col >= 0 && col < ncols && m < real;
      float want = init[m * W + j];
      if (written) {
        const int64_t q = col / NR, cq = col % NR;
        double sum = accumulate ? init[m * W + j] : bias[col];
        for (int64_t t = 0; t < ntaps; ++t) {
          const uint16_t* in = row_mode ? rows[m] + tapoff[t] : a[t * MR + m];
          for (int64_t c = 0; c < cred; ++c)
            sum += static_cast<double>(from_bf16(in[a_off + c])) *
                   wf[q * wq + (wt[t] * cred + c) * NR + cq];
        }
        want = static_cast<float>(sum);
      }
      const float got = out16 ? from_bf16(out16v[m * W + j]) : out32[m * W + j];
      if (out16) want = from_bf16(to_bf16(written ? want : kGuard));
      ASSERT_EQ(got, want) << "case " << iter << " " << tile.name << " rows=" << real
                           << " NT=" << NT << " cred=" << cred
                           << " taps=" << ntaps << " a_off=" << a_off << " ncols=" << ncols
                           << " out16=" << out16 << " acc=" << accumulate
                           << " rows=" << row_mode << " even=" << even << " wtap=" << wtap
                           << " nq=" << nq
                           << " m=" << m << " col=" << col;
    }
}

TEST_P(PairTiles, ConvTilesMatchScalar) {
  Rng rng;
  const x86::ConvTable* t = kernels_of(GetParam()).conv;
  for (int ti = 0; ti < t->ngemm; ++ti)
    for (int iter = 0; iter < 300; ++iter) conv_tile_case(t, ti, rng, iter);
}

TEST_P(PairTiles, BwdWeightsKernelsMatchScalar) {
  Rng rng;
  const PairKernels k = kernels_of(GetParam());
  for (int iter = 0; iter < 200; ++iter) {
    const int64_t nks = rng.uni(1, 16), ncols = rng.uni(1, 32), ldb = 32 * rng.uni(1, 2);
    const int64_t ldc = ldb + rng.uni(0, 2) * 16;
    // A: per step two halves, in place (stride in elements) or gathered.
    std::vector<std::vector<uint16_t>> abufs;
    std::vector<Aligned<uint16_t>> gbufs;
    abufs.reserve(static_cast<size_t>(2 * nks));
    gbufs.reserve(static_cast<size_t>(2 * nks));
    std::vector<const void*> a(static_cast<size_t>(2 * nks));
    std::vector<int64_t> lda(static_cast<size_t>(2 * nks));
    for (int64_t s = 0; s < 2 * nks; ++s) {
      const int64_t stride = rng.coin() ? 32 : 32 + rng.uni(1, 40);
      abufs.emplace_back(static_cast<size_t>(16 * stride), kPoison16);
      std::vector<uint16_t>& b = abufs.back();
      for (int m = 0; m < 16; ++m)
        for (int l = 0; l < 32; ++l) b[m * stride + l] = to_bf16(rng.val());
      if (rng.coin()) {
        a[s] = b.data();
        lda[s] = stride * 2;
      } else {  // through the gather kernel, some rows and pixels dropped
        const int rws = static_cast<int>(rng.uni(0, 16));
        const uint32_t valid = static_cast<uint32_t>(rng.uni(0, 0xFFFFFFFFll));
        gbufs.emplace_back(static_cast<size_t>(16 * 32), kPoison16);
        uint16_t* g = gbufs.back().p;
        x86::bww_bf16_gather_avx512(b.data(), stride, valid, rws, g);
        for (int m = 0; m < 16; ++m)
          for (int l = 0; l < 32; ++l)
            ASSERT_EQ(g[m * 32 + l], m < rws && ((valid >> l) & 1) ? b[m * stride + l] : uint16_t{0});
        a[s] = g;
        lda[s] = 64;
      }
    }
    // B: pair rows built by the pair kernel from two rows of ldb bf16.
    Aligned<uint32_t> bp(static_cast<size_t>(nks * 16 * ldb + 16), 0u);
    uint32_t* const bpanel = bp.p;
    for (int64_t q = 0; q < nks * 16; ++q) {
      std::vector<uint16_t> r0(static_cast<size_t>(ldb), kPoison16), r1 = r0;
      const int64_t n = rng.uni(0, ldb);
      for (int64_t j = 0; j < n; ++j) r0[j] = to_bf16(rng.val()), r1[j] = to_bf16(rng.val());
      const int which = static_cast<int>(rng.uni(0, 3));  // a null row now and then
      x86::bww_bf16_pairs_avx512(which == 1 ? nullptr : r0.data(), which == 2 ? nullptr : r1.data(),
                              n, ldb, bpanel + q * ldb);
      for (int64_t j = 0; j < ldb; ++j) {
        const uint32_t slot = bpanel[q * ldb + j];
        ASSERT_EQ(slot & 0xFFFFu, j < n && which != 1 ? r0[j] : 0u);
        ASSERT_EQ(slot >> 16, j < n && which != 2 ? r1[j] : 0u);
      }
    }
    std::vector<float> c(static_cast<size_t>(32 * ldc)), c0;
    for (float& v : c) v = rng.val();
    c0 = c;
    const bool zero = iter % 2 == 1;  // the first chunk: sums from zero, c only written
    x86::BwwPairsBlockArgs args{a.data(), lda.data(), bpanel, ldb, c.data(), ldc, nks, ncols, zero};
    {
      TileScope scope(k.conv);
      k.block(&args);
    }
    const int64_t cols = ncols > 16 ? 32 : 16;
    for (int64_t r = 0; r < 32; ++r)
      for (int64_t j = 0; j < ldc; ++j) {
        double want = c0[r * ldc + j];
        if (j < cols) {
          if (zero) want = 0;
          for (int64_t k = 0; k < nks; ++k) {
            const auto* ah = static_cast<const uint16_t*>(a[2 * k + r / 16]);
            const int64_t st = lda[2 * k + r / 16] / 2;
            for (int64_t q = 0; q < 16; ++q) {
              const uint32_t slot = bpanel[(k * 16 + q) * ldb + j];
              want += static_cast<double>(from_bf16(ah[(r % 16) * st + 2 * q])) *
                          from_bf16(static_cast<uint16_t>(slot & 0xFFFFu)) +
                      static_cast<double>(from_bf16(ah[(r % 16) * st + 2 * q + 1])) *
                          from_bf16(static_cast<uint16_t>(slot >> 16));
            }
          }
        }
        ASSERT_EQ(c[r * ldc + j], static_cast<float>(want))
            << "case " << iter << " nks=" << nks << " ncols=" << ncols << " zero=" << zero
            << " r=" << r << " j=" << j;
      }
  }
}

// Fused-taps packing (bwd_weights_bf16_common.cpp): a geometry whose taps are
// consecutive (tap_stride == OCg), windows of dilated / grouped taps, or
// windows too wide (tap by tap).
x86::BwwFusedGeom fused_geom(Rng& rng) {
  const int64_t K2 = rng.uni(1, 9), OCg = rng.uni(1, 31), kind = rng.uni(0, 2);
  const int64_t T = kind == 0 ? OCg : OCg * rng.uni(1, 3) + (kind == 2 ? rng.uni(0, 40) : 0);
  const x86::BwwFusedGeom g = x86::bww_fused_geom(K2, OCg, T);
  EXPECT_EQ(g.window, T != OCg && K2 * OCg <= 32 && (K2 - 1) * T + OCg <= 64);
  return g;
}

// Pixel data for a fused row: tap k2's channels at base + k2 * tap_stride,
// poison between and around the taps.
std::vector<uint16_t> fused_pixel(Rng& rng, const x86::BwwFusedGeom& g) {
  std::vector<uint16_t> v(static_cast<size_t>((g.K2 + 2) * g.tap_stride + 64), kPoison16);
  for (int64_t k2 = 0; k2 < g.K2; ++k2)
    for (int64_t oc = 0; oc < g.OCg; ++oc) v[32 + k2 * g.tap_stride + oc] = to_bf16(rng.val());
  return v;
}

TEST_F(PairPacking, FusedTapsPackingMatchesScalar) {
  Rng rng;
  for (int iter = 0; iter < 400; ++iter) {
    const x86::BwwFusedGeom g = fused_geom(rng);
    const int64_t run = g.K2 * g.OCg, nrows = rng.uni(1, 4);
    std::vector<std::vector<uint16_t>> px;
    std::vector<x86::BwwFusedRow> rows(static_cast<size_t>(nrows));
    for (int64_t r = 0; r < nrows; ++r)
      for (int h = 0; h < 2; ++h) {
        px.push_back(fused_pixel(rng, g));
        x86::BwwFusedRow& w = rows[r];
        w.a[h] = rng.uni(0, g.K2);
        w.b[h] = rng.uni(w.a[h], g.K2);
        w.p[h] = rng.uni(0, 4) == 0 ? nullptr : px.back().data() + 32 + w.a[h] * g.tap_stride;
      }
    const int64_t n = nrows * run;
    Aligned<uint32_t> out(static_cast<size_t>(n + 32), 0xDEADBEEFu);
    x86::bww_bf16_fused_pairs_avx512(rows.data(), nrows, g, out.p);
    for (int64_t j = 0; j < n + 32; ++j) {
      uint32_t want = 0xDEADBEEFu;  // untouched past the 16 zeros
      if (j < n) {
        const int64_t r = j / run, k2 = j % run / g.OCg, oc = j % g.OCg;
        want = 0;
        for (int h = 0; h < 2; ++h) {
          const x86::BwwFusedRow& w = rows[r];
          if (w.p[h] && w.a[h] <= k2 && k2 < w.b[h])
            want |= static_cast<uint32_t>(w.p[h][(k2 - w.a[h]) * g.tap_stride + oc]) << (16 * h);
        }
      } else if (j < n + 16) {
        want = 0;
      }
      ASSERT_EQ(out.p[j], want) << "case " << iter << " j=" << j << " K2=" << g.K2
                                << " OCg=" << g.OCg << " T=" << g.tap_stride;
    }
  }
}

TEST_F(PairPacking, FusedTapsSegmentMatchesScalar) {
  Rng rng;
  for (int iter = 0; iter < 300; ++iter) {
    x86::BwwFusedGeom g = fused_geom(rng);
    const int64_t run = g.K2 * g.OCg;
    if (g.tap_stride != g.OCg && !g.window) continue;
    const int64_t nrows = rng.uni(1, 3), npairs = rng.uni(1, 6);
    const int64_t span = (g.K2 - 1) * g.tap_stride + g.OCg;
    const int64_t stride = rng.uni(1, 2 * span);  // pixel to pixel
    const int64_t ldd = round_up(nrows * run, 16) + 16 * rng.uni(0, 1);
    std::vector<std::vector<uint16_t>> data;
    std::vector<const uint16_t*> rowp(static_cast<size_t>(nrows));
    for (int64_t r = 0; r < nrows; ++r) {
      data.emplace_back(static_cast<size_t>(2 * npairs * stride + span + 64), kPoison16);
      std::vector<uint16_t>& d = data.back();
      for (int64_t j = 0; j < 2 * npairs; ++j)  // pixel j's taps (later pixels overwrite)
        for (int64_t k2 = 0; k2 < g.K2; ++k2)
          for (int64_t oc = 0; oc < g.OCg; ++oc)
            d[j * stride + k2 * g.tap_stride + oc] = to_bf16(rng.val());
      rowp[r] = rng.uni(0, 4) == 0 ? nullptr : d.data();
    }
    Aligned<uint32_t> out(static_cast<size_t>(npairs * ldd + 32), 0xDEADBEEFu);
    x86::bww_bf16_fused_segment_avx512(rowp.data(), nrows, g, stride, npairs, ldd, out.p);
    // Row q: its values, 16 zeros (those past ldd: the next row's, rewritten),
    // then nothing written up to ldd.
    const int64_t n = nrows * run;
    for (int64_t q = 0; q < npairs; ++q)
      for (int64_t j = 0; j < std::max(ldd, n + 16); ++j) {
        if (j >= ldd && q < npairs - 1) break;
        uint32_t want = j < n + 16 ? 0u : 0xDEADBEEFu;
        if (j < n && rowp[j / run]) {
          const int64_t r = j / run, k2 = j % run / g.OCg, oc = j % g.OCg;
          for (int h = 0; h < 2; ++h)
            want |= static_cast<uint32_t>(rowp[r][(2 * q + h) * stride + k2 * g.tap_stride + oc])
                    << (16 * h);
        }
        ASSERT_EQ(out.p[q * ldd + j], want) << "case " << iter << " q=" << q << " j=" << j;
      }
  }
}

TEST_F(PairPacking, NonFiniteFlagsMatchScalar) {
  Rng rng;
  for (int iter = 0; iter < 300; ++iter) {
    const int rows = static_cast<int>(rng.uni(0, 16));
    const int64_t stride = 32 + rng.uni(0, 8);
    const uint32_t readable = rng.coin() ? ~0u : static_cast<uint32_t>(rng.uni(0, 0xFFFFFFFFll));
    const uint32_t lanes = readable & static_cast<uint32_t>(rng.uni(0, 0xFFFFFFFFll));
    std::vector<uint16_t> x(static_cast<size_t>(16 * stride), 0);
    for (auto& v : x) {
      const int64_t k = rng.uni(0, 9);
      v = k == 0 ? 0x7F80 : k == 1 ? 0xFF80 : k == 2 ? kPoison16 : to_bf16(rng.val());
    }
    uint32_t out[16];
    const bool any = x86::bww_bf16_nonfinite_avx512(x.data(), stride, lanes, readable, rows, out);
    bool want_any = false;
    for (int m = 0; m < rows; ++m) {
      uint32_t want = 0;
      for (int l = 0; l < 32; ++l)
        if ((lanes >> l) & 1u && (x[m * stride + l] & 0x7F80) == 0x7F80) want |= 1u << l;
      ASSERT_EQ(out[m], want) << "case " << iter << " m=" << m;
      want_any |= want != 0;
    }
    ASSERT_EQ(any, want_any);
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, PairTiles, ::testing::Values(Isa::Avx512Bf16, Isa::Avx512Amx),
                         [](const ::testing::TestParamInfo<Isa>& i) {
                           return std::string(isa_name(i.param));
                         });

}  // namespace
}  // namespace tct
