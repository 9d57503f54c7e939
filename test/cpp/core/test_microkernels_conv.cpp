// Micro-kernel tester of the forward / backward-data tables (ConvTable,
// conv_f32_kernels.h): every GEMM tile and each of its partial-row forms, the
// dot, depthwise and small-groups tiles and the weight-packing transposes,
// against scalar versions of their contracts (microkernel_tester.h).
#include <immintrin.h>
#include <cstring>
#include <cmath>

#include "microkernel_tester.h"

namespace tct {
namespace mkt {
namespace {

using x86::ConvTable;
using x86::ConvGroupedArgs;
using x86::ConvTileArgs;
using x86::ConvTileFn;

// Where the output rows of a tile lie.
enum Layout {
  kScattered = 0,  // rows in a random order, a row stride that breaks alignment
  kLines = 1,      // rows at 64-byte boundaries, the columns from one
  kBackToBack = 2  // rows one after the other (stride ncols), from a 64-byte boundary
};

// Input rows and the pointers to them. Pointer mode: a[t*MR + m] (cells
// before a_off poisoned; some rows share one zero row, as padding taps do);
// row mode: rows[m] + tapoff[t], only the taps' runs readable.
struct TileInputs {
  std::vector<Buf> bufs;
  std::vector<const float*> a, rows;
  std::vector<int64_t> tapoff;
  bool row_mode = false;
  int MR = 0;
  // Row m's input of tap t (the a_off of GEMM tiles not included).
  const float* in(int m, int64_t t) const {
    return row_mode ? rows[m] + tapoff[t] : a[t * MR + m];
  }

  // T taps x MR rows, the first M real, each read at [a_off, a_off + len);
  // the other rows' inputs all poison. (Depthwise tiles: a_off 0.)
  void build(Rng& rng, int MR_, int M, int64_t T, int64_t a_off, int64_t len, bool rows_) {
    MR = MR_;
    row_mode = rows_;
    bufs.reserve(static_cast<size_t>(T * MR + MR + 2));
    if (!row_mode) {
      bufs.push_back(Buf::input(a_off + len));  // the zero row
      Buf& zero = bufs.back();
      for (int64_t i = a_off; i < a_off + len; ++i) zero[i] = 0.f;
      bufs.push_back(Buf::input(a_off + len));  // dummy rows' input: poison
      const float* dummy = bufs.back().data();
      const float* zp = zero.data();
      a.resize(static_cast<size_t>(T * MR));
      for (int64_t t = 0; t < T; ++t)
        for (int m = 0; m < MR; ++m) {
          const float*& p = a[t * MR + m];
          if (m >= M) {
            p = dummy;
          } else if (rng.uni(0, 5) == 0) {
            p = zp;
          } else {
            bufs.push_back(Buf::input(a_off + len));
            Buf& b = bufs.back();
            for (int64_t i = a_off; i < a_off + len; ++i) b[i] = rng.val();
            p = b.data();
          }
        }
      return;
    }
    // Offsets from -origin on (taps before the row's base, as backward-data's).
    tapoff.resize(static_cast<size_t>(T));
    const int64_t origin = rng.coin() ? 0 : rng.uni(1, len + 2);
    int64_t span = a_off + len;
    for (int64_t t = 0; t < T; ++t) {
      tapoff[t] = rng.uni(0, 2 * len + 3) - origin;
      span = std::max(span, origin + tapoff[t] + a_off + len);
    }
    rows.resize(static_cast<size_t>(MR));
    for (int m = 0; m < MR; ++m) {
      bufs.push_back(Buf::input(span));
      Buf& b = bufs.back();
      if (m < M)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t i = 0; i < len; ++i) {
            float& x = b[origin + tapoff[t] + a_off + i];
            if (bits(x) == bits(poison())) x = rng.val();
          }
      rows[m] = b.data() + origin;
    }
  }
};

// M output rows of `width` columns from column col_off, laid out per
// `layout`; out[m] for m >= M (dummy rows) point into `forbidden`.
struct TileOutputs {
  Buf out = Buf::output(0);
  Buf forbidden = Buf::output(0);
  std::vector<float*> ptr;
  std::vector<int64_t> row;  // row m's offset in out
  int64_t ld = 0;

  void build(Rng& rng, int MR, int M, int64_t col_off, int64_t width, Layout layout,
             int64_t dummy_width) {
    int64_t shift = 0;
    std::vector<int64_t> order;
    if (layout == kScattered) {
      ld = col_off + width + rng.uni(0, 5);
      shift = rng.uni(0, 15);
      order = rng.perm(M);
    } else {
      ld = layout == kLines ? round_up(col_off + width, 16) + 16 * rng.uni(0, 1) : width;
      order = rng.perm(M);
      if (layout == kBackToBack) std::sort(order.begin(), order.end());
    }
    out = Buf::output(M * ld, shift);
    forbidden = Buf::output(dummy_width);
    ptr.resize(static_cast<size_t>(MR));
    row.resize(static_cast<size_t>(M));
    for (int m = 0; m < MR; ++m) {
      if (m < M) {
        row[m] = order[m] * ld;
        ptr[m] = out.data() + row[m];
      } else {
        ptr[m] = forbidden.data();
      }
    }
  }
};

// Weight taps: tap t's weights are row wt(t) of nw (wtap: a random injective
// map into a larger set, as when padding taps are left out).
struct Taps {
  std::vector<int32_t> wtap;
  int64_t nw = 0;
  void build(Rng& rng, int64_t T, bool use_wtap) {
    nw = use_wtap ? T + 2 : T;
    if (!use_wtap) return;
    const std::vector<int64_t> p = rng.perm(nw);
    for (int64_t t = 0; t < T; ++t) wtap.push_back(static_cast<int32_t>(p[t]));
  }
  int64_t wt(int64_t t) const { return wtap.empty() ? t : wtap[t]; }
  const int32_t* ptr() const { return wtap.empty() ? nullptr : wtap.data(); }
};

struct GemmCase {
  int64_t ntaps, cred, a_off, col_off, ncols;
  bool accumulate, row_mode, wtap, stream, prefetch, prefetch_run;
  Layout layout;
  std::string str() const {
    return Desc()("ntaps", ntaps)("cred", cred)("a_off", a_off)("col_off", col_off)("ncols", ncols)(
               "accumulate", accumulate)("row_mode", row_mode)("wtap", wtap)("stream", stream)(
               "prefetch", prefetch)("prefetch_run", prefetch_run)("layout", static_cast<int>(layout))
        .str();
  }
};

// out[m][col_off + j] = init + sum_t sum_c in(m, t)[a_off + c] * w[(wt(t)*cred + c)*NR + j].
// diag (ConvTable::diag2, block-diagonal weights of two groups): the first
// half of the reduction feeds only the columns below lanes, the second half
// only the others; the off-diagonal weights are poison, never to be read.
::testing::AssertionResult run_gemm(ConvTileFn fn, int MR, int M, int NR, GemmCase k, Rng& rng,
                                    int diag_lanes = 0) {
  if (k.layout == kBackToBack) k.col_off = 0;
  if (k.layout == kLines) k.col_off = round_up(k.col_off, 16);
  const int64_t T = k.ntaps, cred = k.cred;
  Taps taps;
  taps.build(rng, T, k.wtap);
  Buf w = Buf::input(taps.nw * cred * NR);  // 64-byte aligned
  auto on_diagonal = [&](int64_t c, int64_t j) {
    return !diag_lanes || (c < cred / 2) == (j < diag_lanes);
  };
  for (int64_t i = 0; i < w.size(); ++i)
    w[i] = i % NR < k.ncols && on_diagonal(i / NR % cred, i % NR) ? rng.val() : poison();
  Buf bias = Buf::input(NR);
  for (int64_t j = 0; j < NR; ++j) bias[j] = j < k.ncols && !k.accumulate ? rng.val() : poison();
  TileInputs in;
  in.build(rng, MR, M, T, k.a_off, cred, k.row_mode);
  TileOutputs o;
  o.build(rng, MR, M, k.col_off, k.ncols, k.layout, k.col_off + NR + 16);
  if (k.accumulate)
    for (int m = 0; m < M; ++m)
      for (int64_t j = 0; j < k.ncols; ++j) o.out[o.row[m] + k.col_off + j] = rng.val();
  Expect want(o.out);
  const Expect untouched(o.forbidden);
  for (int m = 0; m < M; ++m)
    for (int64_t j = 0; j < k.ncols; ++j) {
      float& s = want[o.row[m] + k.col_off + j];
      if (!k.accumulate) s = bias[j];
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < cred; ++c)
          if (on_diagonal(c, j)) s += in.in(m, t)[k.a_off + c] * w[(taps.wt(t) * cred + c) * NR + j];
    }
  ConvTileArgs args;
  args.a = k.row_mode ? nullptr : in.a.data();
  args.rows = k.row_mode ? in.rows.data() : nullptr;
  args.tapoff = k.row_mode ? in.tapoff.data() : nullptr;
  args.w = w.data();
  args.wtap = taps.ptr();
  args.bias = bias.data();
  args.out = o.ptr.data();
  args.ntaps = T;
  args.cred = cred;
  args.a_off = k.a_off;
  args.col_off = k.col_off;
  args.ncols = k.ncols;
  args.accumulate = k.accumulate;
  args.stream = k.stream;
  args.prefetch = k.prefetch ? 64 : 0;
  args.prefetch_run = k.prefetch_run;
  fn(&args);
  _mm_sfence();
  ::testing::AssertionResult r = matches(o.out, want);
  if (!r) return r;
  return matches(o.forbidden, untouched, "out[dummy rows]");
}

class ConvMicrokernels : public ::testing::TestWithParam<ConvTableCase> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam().isa)) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam().isa);
    tab = GetParam().get();
    ASSERT_NE(tab, nullptr);
  }
  const ConvTable* tab = nullptr;
};

TEST_P(ConvMicrokernels, TableIsWellFormed) {
  EXPECT_NE(tab->isa, nullptr);
  EXPECT_TRUE(tab->lanes == 8 || tab->lanes == 16) << tab->lanes;
  ASSERT_GE(tab->ngemm, 0);
  ASSERT_LE(tab->ngemm, x86::kMaxConvGemmTiles);
  for (int i = 0; i < tab->ngemm; ++i) {
    const x86::ConvGemmTile& g = tab->gemm[i];
    ASSERT_NE(g.fn, nullptr) << i;
    EXPECT_NE(g.name, nullptr) << i;
    EXPECT_GE(g.mr, 1) << i;
    EXPECT_EQ(g.nr % tab->lanes, 0) << i;
    EXPECT_GT(g.eff, 0.0) << i;
    EXPECT_LE(g.eff, 1.0) << i;
    ASSERT_NE(g.partial, nullptr) << i;
    EXPECT_EQ(g.partial[0], g.fn) << i;
    for (int m = 1; m < g.mr; ++m) EXPECT_NE(g.partial[m], nullptr) << i << " partial " << m;
  }
  if (tab->dw) {
    EXPECT_GE(tab->dw_rows, 1);
  }
  if (tab->grouped) {
    EXPECT_EQ(tab->grouped_rows, x86::kDwRows);
  }
  EXPECT_EQ(tab->dot[0], nullptr);
  for (int n = 1; n <= x86::kMaxDotColumns; ++n)
    if (tab->dot[n]) {
      EXPECT_GE(tab->dot_rows[n], 1) << n;
    }
}

// Every GEMM tile with every row count (the tile itself and its partial
// forms), column tails, accumulate, row mode, wtap, streaming, prefetch.
TEST_P(ConvMicrokernels, GemmTilesMatchScalar) {
  Rng rng(11);
  Failures fails;
  const std::vector<int64_t> creds = {1, 2, 3, 4, 5, 7, 8, 9, 12, 17, 33};
  for (int i = 0; i < tab->ngemm; ++i) {
    const x86::ConvGemmTile& g = tab->gemm[i];
    for (int M = 1; M <= g.mr; ++M) {
      const bool full = M == g.mr;
      const ConvTileFn fn = full ? g.fn : g.partial[M];
      // Whole tiles, column tails of every kind (one column, one lane past
      // a vector, one short of the tile, random).
      std::vector<int64_t> ncols = {g.nr, rng.uni(1, g.nr),
                                    rng.pick(std::vector<int64_t>{1, g.nr - 1})};
      if (full) {
        ncols.push_back(g.nr - 1);
        ncols.push_back(1);
        ncols.push_back(rng.uni(1, g.nr));
        if (tab->lanes + 1 < g.nr) ncols.push_back(tab->lanes + 1);
        if (tab->lanes < g.nr) ncols.push_back(tab->lanes);
      }
      for (int64_t nc : ncols) {
        // All 16 combinations of the switches (the other parameters random).
        for (int bitsf = 0; bitsf < 16; ++bitsf) {
          GemmCase k;
          k.ntaps = rng.uni(0, 9) == 0 ? 0 : rng.uni(1, 4);
          k.cred = rng.pick(creds);
          k.a_off = rng.uni(0, 5);
          k.col_off = rng.uni(0, 2 * g.nr);
          k.ncols = nc;
          k.accumulate = bitsf & 1;
          k.row_mode = bitsf & 2;
          k.wtap = bitsf & 4;
          k.stream = (bitsf & 8) && !k.accumulate;  // (streams only fresh tiles)
          k.prefetch = rng.coin();
          k.prefetch_run = k.prefetch && rng.coin();
          k.layout = static_cast<Layout>(k.stream ? rng.uni(1, 2) : rng.uni(0, 2));
          const std::string name =
              std::string(g.name) + (full ? "" : " partial " + std::to_string(M));
          if (!fails.add(run_gemm(fn, g.mr, M, g.nr, k, rng), name, k.str())) return;
        }
      }
    }
  }
  EXPECT_GT(fails.checked(), 0);
}

// The block-diagonal two-vector tile (ConvTable::diag2: super-groups of two
// groups of one vector each, heuristics C28), its partial forms, every switch;
// whole column blocks and even reductions, as the plans give it.
TEST_P(ConvMicrokernels, DiagGemmTilesMatchScalar) {
  if (!tab->diag2) GTEST_SKIP() << tab->isa << " has no block-diagonal tile";
  const x86::ConvGemmTile& g = *tab->diag2;
  ASSERT_EQ(g.nr, 2 * tab->lanes);
  ASSERT_NE(g.partial, nullptr);
  Rng rng(12);
  Failures fails;
  for (int M = 1; M <= g.mr; ++M)
    for (int64_t cred : {2, 4, 6, 8, 10, 16, 32})
      for (int bitsf = 0; bitsf < 16; ++bitsf) {
        GemmCase k;
        k.ntaps = rng.uni(0, 9) == 0 ? 0 : rng.uni(1, 4);
        k.cred = cred;
        k.a_off = rng.uni(0, 5);
        k.col_off = rng.uni(0, 2 * g.nr);
        k.ncols = g.nr;
        k.accumulate = bitsf & 1;
        k.row_mode = bitsf & 2;
        k.wtap = bitsf & 4;
        k.stream = (bitsf & 8) && !k.accumulate;
        k.prefetch = rng.coin();
        k.prefetch_run = k.prefetch && rng.coin();
        k.layout = static_cast<Layout>(k.stream ? rng.uni(1, 2) : rng.uni(0, 2));
        const ConvTileFn fn = M == g.mr ? g.fn : g.partial[M];
        const std::string name = std::string(g.name) + (M == g.mr ? "" : " partial " + std::to_string(M));
        if (!fails.add(run_gemm(fn, g.mr, M, g.nr, k, rng, tab->lanes), name, k.str())) return;
      }
  EXPECT_GT(fails.checked(), 0);
}

// Dot tiles: NC columns, vectorized over the reduction (tails of it under a
// mask), weights [c/16][j][16] per tap.
TEST_P(ConvMicrokernels, DotTilesMatchScalar) {
  Rng rng(12);
  Failures fails;
  for (int NC = 1; NC <= x86::kMaxDotColumns; ++NC) {
    const ConvTileFn fn = tab->dot[NC];
    if (!fn) continue;
    const int MR = tab->dot_rows[NC];
    for (int64_t cred : {1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 50}) {
      for (int f = 0; f < 8; ++f) {
        const int64_t T = f == 4 ? 0 : rng.uni(1, 3);
        const int64_t a_off = rng.uni(0, 5), col_off = rng.uni(0, 6);
        const bool use_wtap = f & 1;
        const int64_t credp = round_up(cred, 16);
        Taps taps;
        taps.build(rng, T, use_wtap);
        Buf w = Buf::input(taps.nw * credp * NC);
        for (int64_t i = 0; i < w.size(); ++i) {
          const int64_t u = i % (credp * NC);  // within the tap: [c/16][j][16]
          w[i] = (u / (16 * NC)) * 16 + u % 16 < cred ? rng.val() : 0.f;
        }
        Buf bias = Buf::input(NC);
        bias.fill_values(rng);
        TileInputs in;
        in.build(rng, MR, MR, T, a_off, cred, false);
        TileOutputs o;
        o.build(rng, MR, MR, col_off, NC, f & 2 ? kScattered : kLines, 0);
        Expect want(o.out);
        for (int m = 0; m < MR; ++m)
          for (int j = 0; j < NC; ++j) {
            float& s = want[o.row[m] + col_off + j];
            s = bias[j];
            for (int64_t t = 0; t < T; ++t)
              for (int64_t c = 0; c < cred; ++c)
                s += in.in(m, t)[a_off + c] *
                     w[taps.wt(t) * credp * NC + (c / 16) * 16 * NC + 16 * j + c % 16];
          }
        ConvTileArgs args;
        args.a = in.a.data();
        args.w = w.data();
        args.wtap = taps.ptr();
        args.bias = bias.data();
        args.out = o.ptr.data();
        args.ntaps = T;
        args.cred = cred;
        args.a_off = a_off;
        args.col_off = col_off;
        args.ncols = NC;
        fn(&args);
        const std::string c = Desc()("ntaps", T)("cred", cred)("a_off", a_off)("col_off", col_off)(
                                   "wtap", use_wtap).str();
        if (!fails.add(matches(o.out, want), "dot" + std::to_string(NC), c)) return;
      }
    }
  }
  if (tab->dot[1]) {
    EXPECT_GT(fails.checked(), 0);
  }
}

// Depthwise: all channels of the pixel, column tails, pointer / row mode,
// wtap, streaming stores.
TEST_P(ConvMicrokernels, DepthwiseTileMatchesScalar) {
  if (!tab->dw) GTEST_SKIP() << "no depthwise tile";
  Rng rng(13);
  Failures fails;
  const int R = tab->dw_rows, L = tab->lanes;
  for (int64_t C : {int64_t{1}, int64_t{L - 1}, int64_t{L}, int64_t{L + 1}, int64_t{2 * L},
                    int64_t{2 * L + 3}, int64_t{4 * L + 5}, int64_t{7}, int64_t{100}}) {
    for (int f = 0; f < 24; ++f) {
      const int64_t T = rng.uni(0, 7) == 0 ? 0 : rng.uni(1, 5);
      const bool row_mode = f & 1, use_wtap = f & 2, stream = f & 4;
      const Layout layout = stream ? kLines : static_cast<Layout>(rng.uni(0, 2));
      Taps taps;
      taps.build(rng, T, use_wtap);
      Buf w = Buf::input(taps.nw * C);
      w.fill_values(rng);
      Buf bias = Buf::input(C);
      bias.fill_values(rng);
      TileInputs in;
      in.build(rng, R, R, T, 0, C, row_mode);
      TileOutputs o;
      o.build(rng, R, R, 0, C, layout, 0);
      Expect want(o.out);
      for (int m = 0; m < R; ++m)
        for (int64_t c = 0; c < C; ++c) {
          float& s = want[o.row[m] + c];
          s = bias[c];
          for (int64_t t = 0; t < T; ++t) s += in.in(m, t)[c] * w[taps.wt(t) * C + c];
        }
      ConvTileArgs args;
      args.a = row_mode ? nullptr : in.a.data();
      args.rows = row_mode ? in.rows.data() : nullptr;
      args.tapoff = row_mode ? in.tapoff.data() : nullptr;
      args.w = w.data();
      args.wtap = taps.ptr();
      args.bias = bias.data();
      args.out = o.ptr.data();
      args.ntaps = T;
      args.ncols = C;
      args.stream = stream;
      tab->dw(&args);
      _mm_sfence();
      const std::string c = Desc()("C", C)("ntaps", T)("row_mode", row_mode)("wtap", use_wtap)(
                                 "stream", stream)("layout", static_cast<int>(layout)).str();
      if (!fails.add(matches(o.out, want), "dw", c)) return;
    }
  }
}

// Depthwise over 16-bit inputs (ConvTable::dw16, kind 1 bf16, 2 f16): each
// row / tap input is C 16-bit values followed by NaN poison (a value past C
// reaching a written result fails; reads past C are kept out by masked
// loads, which this cannot see); results 16-bit (out16, the route's use) or
// f32, every sum exact; guards after each output row.
TEST_P(ConvMicrokernels, Depthwise16TileMatchesScalar) {
  if (!tab->dw16[1] && !tab->dw16[2]) GTEST_SKIP() << "no 16-bit depthwise tile";
  Rng rng(17);
  const int R = tab->dw_rows, L = tab->lanes;
  int checked = 0;
  for (int kind : {1, 2}) {
    ASSERT_NE(tab->dw16[kind], nullptr);
    const uint16_t poison = kind == 1 ? 0x7FC1 : 0x7E01;
    // (every tail length of a 16-bit vector: the partial loads and stores are
    // put together from pieces per length)
    std::vector<int64_t> Cs = {L, L + 1, 2 * L, 4 * L + 5, 100};
    for (int64_t t = 1; t < L; ++t) Cs.push_back(t % 2 ? t : 2 * L + t);
    for (int64_t C : Cs) {
      for (int f = 0; f < 8; ++f) {
        const int64_t T = rng.uni(1, 5);
        const bool row_mode = f & 1, use_wtap = f & 2, out16 = (f & 4) == 0;
        const int64_t wt_n = use_wtap ? T + 2 : T, pad = rng.uni(1, 9);
        std::vector<int32_t> wtap(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) wtap[t] = static_cast<int32_t>(use_wtap ? wt_n - 1 - t : t);
        std::vector<float> w(static_cast<size_t>(wt_n * C)), bias(static_cast<size_t>(C));
        for (float& v : w) v = static_cast<float>(rng.uni(-3, 3));
        for (float& v : bias) v = static_cast<float>(rng.uni(-3, 3));
        // Inputs: row m holds its T taps' runs, each C values + pad poison.
        const Rows16 in(R, T, 0, C, C + pad, kind, poison,
                        [&] { return static_cast<float>(rng.uni(-3, 3)); });
        // Outputs with guards after each row.
        const int64_t OW = C + 8;
        const GuardedRows o(R, OW, out16);
        ConvTileArgs args;
        args.a = row_mode ? nullptr : in.a.data();
        args.rows = row_mode ? in.rows.data() : nullptr;
        args.tapoff = row_mode ? in.tapoff.data() : nullptr;
        args.w = w.data();
        args.wtap = use_wtap ? wtap.data() : nullptr;
        args.bias = bias.data();
        args.out = o.ptrs();
        args.ntaps = T;
        args.ncols = C;
        args.out16 = out16 ? kind : 0;
        tab->dw16[kind](&args);
        for (int m = 0; m < R; ++m)
          for (int64_t c = 0; c < OW; ++c) {
            float want = o.guard(kind);
            if (c < C) {
              want = bias[c];
              for (int64_t t = 0; t < T; ++t) want += in.at(m, t, c) * w[wtap[t] * C + c];
            }
            const float got = o.at(m, c, kind);
            const bool same = got == want || (std::isnan(got) && std::isnan(want));
            ASSERT_TRUE(same) << "kind " << kind << " C " << C << " T " << T << " row_mode "
                              << row_mode << " wtap " << use_wtap << " out16 " << out16 << " m "
                              << m << " c " << c << ": got " << got << " want " << want;
            ++checked;
          }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// Dot tiles with a 16-bit side (kind 1 bf16, 2 f16): the 16-bit input tiles
// (ConvTable::dot16) and the f32 ones, each writing 16-bit results (out16)
// or f32. Each row / tap input is cred values followed by NaN poison (a value
// past cred reaching a result fails); every sum exact; guards after each
// output row's columns.
TEST_P(ConvMicrokernels, Dot16TilesMatchScalar) {
  if (!tab->dot[1]) GTEST_SKIP() << "no dot tiles";
  Rng rng(19);
  int checked = 0;
  for (int kind : {1, 2})
    for (int NC = 1; NC <= x86::kMaxDotColumns; ++NC) {
      const int MR = tab->dot_rows[NC];
      ASSERT_NE(tab->dot16[kind][NC], nullptr) << "kind " << kind << " NC " << NC;
      const uint16_t poison = kind == 1 ? 0x7FC1 : 0x7E01;
      for (int64_t cred : {1, 7, 8, 9, 15, 16, 17, 31, 33, 50}) {
        for (int f = 0; f < 8; ++f) {
          const bool in16 = f & 1, out16 = (f & 2) == 0, use_wtap = f & 4;
          const int64_t T = rng.uni(1, 3), a_off = rng.uni(0, 5), col_off = rng.uni(0, 6);
          const int64_t credp = round_up(cred, 16), wt_n = use_wtap ? T + 1 : T;
          std::vector<int32_t> wtap(static_cast<size_t>(T));
          for (int64_t t = 0; t < T; ++t) wtap[t] = static_cast<int32_t>(use_wtap ? wt_n - 1 - t : t);
          // Packed weights [tap][c/16][j][16], zero past cred; 64-byte aligned.
          Buf w = Buf::input(wt_n * credp * NC);
          w.fill(0.f);
          for (int64_t i = 0; i < w.size(); ++i) {
            const int64_t u = i % (credp * NC);
            if ((u / (16 * NC)) * 16 + u % 16 < cred) w[i] = static_cast<float>(rng.uni(-3, 3));
          }
          std::vector<float> bias(static_cast<size_t>(NC));
          for (float& v : bias) v = static_cast<float>(rng.uni(-3, 3));
          // Inputs: row m, tap t: a_off values, then cred values, then poison.
          const int64_t run = a_off + cred + 16;
          std::vector<std::vector<uint16_t>> b16(static_cast<size_t>(MR),
                                                 std::vector<uint16_t>(T * run, poison));
          std::vector<std::vector<float>> b32(
              static_cast<size_t>(MR), std::vector<float>(T * run, std::nanf("")));
          std::vector<float> val(static_cast<size_t>(MR * T * cred));
          std::vector<const float*> a(static_cast<size_t>(T * MR));
          for (int m = 0; m < MR; ++m)
            for (int64_t t = 0; t < T; ++t) {
              for (int64_t c = 0; c < cred; ++c) {
                const float v = static_cast<float>(rng.uni(-3, 3));
                val[(m * T + t) * cred + c] = v;
                b16[m][t * run + a_off + c] = int_to16(v, kind);
                b32[m][t * run + a_off + c] = v;
              }
              a[t * MR + m] = in16 ? reinterpret_cast<const float*>(b16[m].data() + t * run)
                                   : b32[m].data() + t * run;
            }
          const int64_t OW = col_off + NC + 8;
          const GuardedRows o(MR, OW, out16);
          ConvTileArgs args;
          args.a = a.data();
          args.w = w.data();
          args.wtap = use_wtap ? wtap.data() : nullptr;
          args.bias = bias.data();
          args.out = o.ptrs();
          args.ntaps = T;
          args.cred = cred;
          args.a_off = a_off;
          args.col_off = col_off;
          args.ncols = NC;
          args.out16 = out16 ? kind : 0;
          (in16 ? tab->dot16[kind][NC] : tab->dot[NC])(&args);
          for (int m = 0; m < MR; ++m)
            for (int64_t c = 0; c < OW; ++c) {
              float want = o.guard(kind);
              if (c >= col_off && c < col_off + NC) {
                const int64_t j = c - col_off;
                want = bias[j];
                for (int64_t t = 0; t < T; ++t)
                  for (int64_t r = 0; r < cred; ++r)
                    want += val[(m * T + t) * cred + r] *
                            w[(wtap[t] * credp + r / 16 * 16) * NC + 16 * j + r % 16];
              }
              const float got = o.at(m, c, kind);
              ASSERT_EQ(got, want) << "kind " << kind << " NC " << NC << " cred " << cred
                                   << " in16 " << in16 << " out16 " << out16 << " wtap "
                                   << use_wtap << " m " << m << " c " << c;
              ++checked;
            }
        }
      }
    }
  EXPECT_GT(checked, 0);
}

// The GEMM tiles over 16-bit inputs (ConvTable::gemm16: bf16 and f16, each
// tile whole and partial): integer data, exact against the scalar sum; the
// inputs past the reduction are NaN (a tile reading one element too far
// fails), as are the columns past ncols in the weights and bias; f32 and
// 16-bit results; the a-pointer and row (rows + tapoff) forms; wtap.
TEST_P(ConvMicrokernels, Gemm16TilesMatchScalar) {
  Rng rng(23);
  int checked = 0;
  for (int i = 0; i < tab->ngemm; ++i) {
    const x86::ConvGemmTile& g = tab->gemm[i];
    for (int kind : {1, 2}) {
      const uint16_t poison = kind == 1 ? 0x7FC1 : 0x7E01;
      for (int M = 1; M <= g.mr; ++M) {
        const ConvTileFn fn = tab->gemm16[kind][i][M == g.mr ? 0 : M];
        ASSERT_NE(fn, nullptr) << g.name << " kind " << kind << " M " << M;
        for (int f = 0; f < 8; ++f) {
          const bool out16 = f & 1, row_mode = f & 2, use_wtap = f & 4;
          const int64_t T = rng.uni(1, 3), cred = rng.pick(std::vector<int64_t>{1, 3, 4, 5, 9, 17}),
                        a_off = rng.uni(0, 5), col_off = rng.uni(0, 6);
          const int64_t ncols = rng.pick(std::vector<int64_t>{g.nr, 1, g.nr - 1, rng.uni(1, g.nr)});
          const int64_t nw = use_wtap ? T + 1 : T;
          std::vector<int32_t> wtap(static_cast<size_t>(T));
          for (int64_t t = 0; t < T; ++t) wtap[t] = static_cast<int32_t>(use_wtap ? nw - 1 - t : t);
          Buf w = Buf::input(nw * cred * g.nr);
          for (int64_t e = 0; e < w.size(); ++e)
            w[e] = e % g.nr < ncols ? static_cast<float>(rng.uni(-2, 2)) : std::nanf("");
          Buf bias = Buf::input(g.nr);
          for (int64_t j = 0; j < g.nr; ++j)
            bias[j] = j < ncols ? static_cast<float>(rng.uni(-3, 3)) : std::nanf("");
          // Row m, tap t: a_off elements, then cred values, then poison
          // (|sum| <= 3 + 51 * 2: exact in bf16 and f16 too).
          const Rows16 in(g.mr, T, a_off, cred, a_off + cred + 8, kind, poison,
                          [&] { return static_cast<float>(rng.uni(-1, 1)); });
          const int64_t OW = col_off + g.nr + 8;
          const GuardedRows o(g.mr, OW, out16);
          ConvTileArgs args;
          args.a = row_mode ? nullptr : in.a.data();
          args.rows = row_mode ? in.rows.data() : nullptr;
          args.tapoff = row_mode ? in.tapoff.data() : nullptr;
          args.w = w.data();
          args.wtap = use_wtap ? wtap.data() : nullptr;
          args.bias = bias.data();
          args.out = o.ptrs();
          args.ntaps = T;
          args.cred = cred;
          args.a_off = a_off;
          args.col_off = col_off;
          args.ncols = ncols;
          args.out16 = out16 ? kind : 0;
          // (the prefetches, of a later tile's inputs, change no result)
          args.prefetch = rng.coin() ? 32 * rng.uni(1, 64) : 0;
          args.prefetch_run = args.prefetch && rng.coin();
          fn(&args);
          for (int m = 0; m < g.mr; ++m)
            for (int64_t c = 0; c < OW; ++c) {
              float want = o.guard(kind);
              if (m < M && c >= col_off && c < col_off + ncols) {
                const int64_t j = c - col_off;
                want = bias[j];
                for (int64_t t = 0; t < T; ++t)
                  for (int64_t r = 0; r < cred; ++r)
                    want += in.at(m, t, r) * w[(wtap[t] * cred + r) * g.nr + j];
              }
              ASSERT_EQ(o.at(m, c, kind), want)
                  << g.name << " kind " << kind << " M " << M << " cred " << cred << " ncols "
                  << ncols << " out16 " << out16 << " row_mode " << row_mode << " wtap "
                  << use_wtap << " m " << m << " c " << c;
              ++checked;
            }
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// Small groups: per 16-channel block v, lane l's input for reduction index c
// is channel base[v] + idx[(v*cred + c)*16 + l] (read below in_c only).
TEST_P(ConvMicrokernels, GroupedTileMatchesScalar) {
  if (!tab->grouped) GTEST_SKIP() << "no small-groups tile";
  Rng rng(14);
  Failures fails;
  const int R = tab->grouped_rows;
  for (int64_t ncols : {5, 16, 20, 32, 37, 48}) {
    for (int f = 0; f < 6; ++f) {
      const int64_t T = rng.uni(1, 3), cred = rng.pick(std::vector<int64_t>{1, 2, 3, 5, 8});
      const int64_t ncp = round_up(ncols, 16), nv = ncp / 16;
      std::vector<int32_t> base(static_cast<size_t>(nv));
      int64_t in_c = 1;
      for (auto& b : base) {
        b = static_cast<int32_t>(rng.uni(0, 24));
        in_c = std::max<int64_t>(in_c, b + 1);
      }
      // Some blocks with all 32 channels readable, others fewer (masked loads).
      in_c = std::max<int64_t>(in_c, *std::max_element(base.begin(), base.end()) + rng.uni(1, 32));
      std::vector<int32_t> idx(static_cast<size_t>(nv * cred * 16));
      for (int64_t v = 0; v < nv; ++v)
        for (int64_t i = 0; i < cred * 16; ++i)
          idx[v * cred * 16 + i] =
              static_cast<int32_t>(rng.uni(0, std::min<int64_t>(31, in_c - 1 - base[v])));
      Buf w = Buf::input(T * cred * ncp);
      for (int64_t i = 0; i < w.size(); ++i) w[i] = i % ncp < ncols ? rng.val() : poison();
      Buf bias = Buf::input(ncp);
      for (int64_t j = 0; j < ncp; ++j) bias[j] = j < ncols ? rng.val() : poison();
      TileInputs in;
      in.build(rng, R, R, T, 0, in_c, false);
      TileOutputs o;
      o.build(rng, R, R, 0, ncols, kScattered, 0);
      Expect want(o.out);
      for (int m = 0; m < R; ++m)
        for (int64_t oc = 0; oc < ncols; ++oc) {
          const int64_t v = oc / 16, l = oc % 16;
          float& s = want[o.row[m] + oc];
          s = bias[oc];
          for (int64_t t = 0; t < T; ++t)
            for (int64_t c = 0; c < cred; ++c)
              s += in.in(m, t)[base[v] + idx[(v * cred + c) * 16 + l]] *
                   w[(t * cred + c) * ncp + oc];
        }
      ConvGroupedArgs args{in.a.data(), w.data(), bias.data(), o.ptr.data(), idx.data(),
                           base.data(), T,        cred,        ncols,        ncp,        in_c};
      tab->grouped(&args);
      const std::string c = Desc()("ncols", ncols)("ntaps", T)("cred", cred)("in_c", in_c).str();
      if (!fails.add(matches(o.out, want), "grouped", c)) return;
    }
  }
}

// The weight-packing transposes: dst[j][i] = src[i*stride + j] for i < rows,
// j < cols; the streaming form writes whole 64-byte rows (zeros past rows).
TEST_P(ConvMicrokernels, TransposeRowsMatchScalar) {
  Rng rng(15);
  Failures fails;
  for (int s = 0; s < 2; ++s) {
    const x86::ConvTransposeRowsFn fn = s ? tab->transpose_rows_stream : tab->transpose_rows;
    if (!fn) continue;
    for (int rows = 1; rows <= 16; ++rows)
      for (int cols = 1; cols <= 16; ++cols) {
        if (rows % 4 != 1 && cols % 4 != 1 && rows != 16 && cols != 16 && rng.uni(0, 2) != 0)
          continue;  // a sample of the middle shapes
        const int64_t stride = rng.pick(std::vector<int64_t>{cols, 16, cols + 3});
        Buf src = Buf::input((rows - 1) * stride + cols);
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < cols; ++j) src[i * stride + j] = rng.val();
        const int64_t ld = s ? 16 * rng.uni(1, 2) : 16 + rng.uni(0, 5);
        Buf dst = Buf::output(cols * ld, s ? 0 : rng.uni(0, 15));
        std::vector<float*> d(static_cast<size_t>(cols));
        const std::vector<int64_t> order = rng.perm(cols);
        for (int j = 0; j < cols; ++j) d[j] = dst.data() + order[j] * ld;
        Expect want(dst);
        for (int j = 0; j < cols; ++j)
          for (int i = 0; i < (s ? 16 : rows); ++i)
            want[order[j] * ld + i] = i < rows ? src[i * stride + j] : 0.f;
        fn(src.data(), stride, rows, cols, d.data());
        _mm_sfence();
        const std::string c = Desc()("rows", rows)("cols", cols)("stride", stride).str();
        const char* name = s ? "transpose_rows_stream" : "transpose_rows";
        if (!fails.add(matches(dst, want, "dst"), name, c)) return;
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Tables, ConvMicrokernels, ::testing::ValuesIn(kConvTables),
                         table_name<x86::ConvTable>);

}  // namespace
}  // namespace mkt
}  // namespace tct
