// Micro-kernel tester of the planar (NCX) tables (PlanarF32Table,
// planar_f32.h): every direct-convolution tile, dot tile and GEMM tile, the
// depthwise rows, the row splits, the strided copy and the 16x16 transpose,
// against scalar versions of their contracts (microkernel_tester.h).
#include <immintrin.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/types.h"
#include "microkernel_tester.h"

namespace tct {
namespace mkt {
namespace {

using x86::PlanarF32Table;

class PlanarMicrokernels : public ::testing::TestWithParam<PlanarTableCase> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam().isa)) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam().isa);
    tab = GetParam().get();
    ASSERT_NE(tab, nullptr);
  }
  const PlanarF32Table* tab = nullptr;
};

// Sets the cells [at, at + n) of an input to values, keeping those already set.
void set_values(Buf& b, int64_t at, int64_t n, Rng& rng) {
  for (int64_t i = at; i < at + n; ++i)
    if (bits(b[i]) == bits(poison())) b[i] = rng.val();
}

TEST_P(PlanarMicrokernels, TableIsWellFormed) {
  EXPECT_NE(tab->isa, nullptr);
  EXPECT_TRUE(tab->vl == 8 || tab->vl == 16) << tab->vl;
  EXPECT_LE(tab->tile_max_m, x86::kPlanarTileMaxM);
  EXPECT_LE(tab->tile_max_nv, x86::kPlanarTileMaxNV);
  EXPECT_GE(tab->tile_deep_nv, 1);
  EXPECT_LE(tab->tile_deep_nv, tab->tile_max_nv);
  // The plans take any tile inside the geometry.
  for (int m = 0; m <= x86::kPlanarTileMaxM; ++m)
    for (int nv = 0; nv <= x86::kPlanarTileMaxNV; ++nv) {
      const bool inside = m >= 1 && nv >= 1 && m <= tab->tile_max_m && nv <= tab->tile_max_nv &&
                          m * nv <= tab->tile_accs;
      EXPECT_EQ(tab->tile[m][nv] != nullptr, inside) << "tile " << m << "x" << nv;
    }
  for (int m = 0; m <= x86::kPlanarDotMaxM; ++m)
    for (int n = 0; n <= x86::kPlanarDotMaxN; ++n)
      if (m == 0 || n == 0) {
        EXPECT_EQ(tab->dot[m][n], nullptr) << m << "x" << n;
      }
  EXPECT_NE(tab->dot[1][1], nullptr);
  if (!tab->dot_by_cost) {  // (the plans then always take the largest)
    EXPECT_NE(tab->dot[x86::kPlanarDotMaxM][x86::kPlanarDotMaxN], nullptr);
  }
  EXPECT_EQ(tab->gemm[0], nullptr);
  for (int m = 1; m <= x86::kPlanarGemmMaxM; ++m) EXPECT_NE(tab->gemm[m], nullptr) << m;
  EXPECT_NE(tab->dw_rows, nullptr);
  EXPECT_NE(tab->split2, nullptr);
  EXPECT_NE(tab->split3, nullptr);
  EXPECT_NE(tab->strided_copy, nullptr);
  EXPECT_NE(tab->transpose16, nullptr);
  for (int k = 0; k < 2; ++k) {
    EXPECT_NE(tab->widen16[k], nullptr) << k;
    EXPECT_NE(tab->narrow16[k], nullptr) << k;
  }
}

// out[r*out_stride + x] = init + sum_{s, c, t} w[seg_w[s] + c*cws + tap_w[t] + r]
//                                 * in[in_off + seg_in[s] + c*cis + tap_in[t] + x]
// for r < m, x < nx; the input readable for the tile's full vectors, only the
// cells that reach outputs x < nx hold values (the rest NaN).
TEST_P(PlanarMicrokernels, TilesMatchScalar) {
  Rng rng(31);
  Failures fails;
  const int W = tab->vl;
  for (int M = 1; M <= x86::kPlanarTileMaxM; ++M)
    for (int NV = 1; NV <= x86::kPlanarTileMaxNV; ++NV) {
      const x86::PlanarTileFn fn = tab->tile[M][NV];
      if (!fn) continue;
      std::vector<int64_t> nxs = {int64_t{NV} * W, int64_t{NV} * W - 1, int64_t{NV - 1} * W + 1,
                                  rng.uni(1, int64_t{NV} * W)};
      for (int64_t nx : nxs)
        for (int f = 0; f < 8; ++f) {  // (two draws of each)
          const bool accumulate = f % 4 == 1, with_bias = f % 4 == 2 || (f % 4 == 3 && rng.coin());
          const bool stream = f % 4 >= 2;
          const int64_t nseg = rng.uni(1, 2), cin = rng.uni(1, 3), ntap = rng.uni(1, 3);
          const int64_t cis = rng.uni(1, 40), cws = rng.uni(1, 30), in_off = rng.uni(0, 5);
          std::vector<int64_t> seg_in, seg_w, tap_in, tap_w;
          for (int64_t s = 0; s < nseg; ++s) {
            seg_in.push_back(s * (cin * cis + rng.uni(0, 9)));
            seg_w.push_back(s * (cin * cws + rng.uni(0, 9) + 3 * M));
          }
          for (int64_t t = 0; t < ntap; ++t) {
            tap_in.push_back(rng.uni(0, 12));
            tap_w.push_back(rng.uni(0, 2 * M));
          }
          auto in_at = [&](int64_t s, int64_t c, int64_t t) {
            return in_off + seg_in[s] + c * cis + tap_in[t];
          };
          auto w_at = [&](int64_t s, int64_t c, int64_t t) {
            return seg_w[s] + c * cws + tap_w[t];
          };
          int64_t in_len = 0, w_len = 0;
          for (int64_t s = 0; s < nseg; ++s)
            for (int64_t c = 0; c < cin; ++c)
              for (int64_t t = 0; t < ntap; ++t) {
                in_len = std::max(in_len, in_at(s, c, t) + NV * W);
                w_len = std::max(w_len, w_at(s, c, t) + M);
              }
          Buf in = Buf::input(in_len), w = Buf::input(w_len), bias = Buf::input(M);
          for (int64_t s = 0; s < nseg; ++s)
            for (int64_t c = 0; c < cin; ++c)
              for (int64_t t = 0; t < ntap; ++t) {
                set_values(in, in_at(s, c, t), nx, rng);
                set_values(w, w_at(s, c, t), M, rng);
              }
          bias.fill_values(rng);
          const int64_t ld = stream ? round_up(nx, 16) + 16 * rng.uni(0, 1) : nx + rng.uni(0, 5);
          Buf out = Buf::output((M - 1) * ld + nx, stream ? 0 : rng.uni(0, 15));
          if (accumulate)
            for (int r = 0; r < M; ++r)
              for (int64_t x = 0; x < nx; ++x) out[r * ld + x] = rng.val();
          Expect want(out);
          for (int r = 0; r < M; ++r)
            for (int64_t x = 0; x < nx; ++x) {
              float& o = want[r * ld + x];
              if (!accumulate) o = with_bias ? bias[r] : 0.f;
              for (int64_t s = 0; s < nseg; ++s)
                for (int64_t c = 0; c < cin; ++c)
                  for (int64_t t = 0; t < ntap; ++t)
                    o += w[w_at(s, c, t) + r] * in[in_at(s, c, t) + x];
            }
          x86::PlanarTileArgs a{};
          a.in = in.data();
          a.w = w.data();
          a.seg_in = seg_in.data();
          a.seg_w = seg_w.data();
          a.tap_in = tap_in.data();
          a.tap_w = tap_w.data();
          a.bias = with_bias ? bias.data() : nullptr;
          a.out = out.data();
          a.in_off = in_off;
          a.nseg = nseg;
          a.cin = cin;
          a.c_in_stride = cis;
          a.c_w_stride = cws;
          a.ntap = ntap;
          a.out_stride = ld;
          a.nx = nx;
          a.accumulate = accumulate;
          a.stream = stream;
          fn(&a);
          _mm_sfence();
          const std::string d = Desc()("nx", nx)("nseg", nseg)("cin", cin)("ntap", ntap)(
                                     "accumulate", accumulate)("bias", with_bias)("stream", stream)(
                                     "out_stride", ld).str();
          const std::string name = "tile " + std::to_string(M) + "x" + std::to_string(NV);
          if (!fails.add(matches(out, want), name, d)) return;
        }
    }
}

// out[i*out_m + j*out_n] += sum_r sum_{x < nvec*16} a[r][i*a_stride + x] * b[r][j*b_stride + x].
TEST_P(PlanarMicrokernels, DotTilesMatchScalar) {
  Rng rng(32);
  Failures fails;
  for (int M = 1; M <= x86::kPlanarDotMaxM; ++M)
    for (int N = 1; N <= x86::kPlanarDotMaxN; ++N) {
      const x86::PlanarDotFn fn = tab->dot[M][N];
      if (!fn) continue;
      for (int f = 0; f < 6; ++f) {
        const int64_t nrows = rng.pick(std::vector<int64_t>{0, 1, 2, 3}), nvec = rng.uni(1, 3);
        const int64_t as = nvec * 16 + rng.uni(0, 5), bs = nvec * 16 + rng.uni(0, 5);
        std::vector<Buf> rows;
        std::vector<const float*> a, b;
        rows.reserve(static_cast<size_t>(2 * nrows));
        for (int64_t r = 0; r < nrows; ++r)
          for (int side = 0; side < 2; ++side) {
            const int64_t k = side ? N : M, st = side ? bs : as;
            rows.push_back(Buf::input((k - 1) * st + nvec * 16));
            for (int64_t i = 0; i < k; ++i) set_values(rows.back(), i * st, nvec * 16, rng);
            (side ? b : a).push_back(rows.back().data());
          }
        // The result transposed or not, with gaps or not.
        const bool by_rows = f % 2 == 0;
        const int64_t gap = f / 2;
        const int64_t out_m = by_rows ? N + gap : 1, out_n = by_rows ? 1 : M + gap;
        Buf out = Buf::output((M - 1) * out_m + (N - 1) * out_n + 1, rng.uni(0, 15));
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) out[i * out_m + j * out_n] = rng.val();
        Expect want(out);
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j)
            for (int64_t r = 0; r < nrows; ++r)
              for (int64_t x = 0; x < nvec * 16; ++x)
                want[i * out_m + j * out_n] += a[r][i * as + x] * b[r][j * bs + x];
        x86::PlanarDotArgs args{a.data(), b.data(), out.data(), nrows, nvec, as, bs, out_m, out_n};
        fn(&args);
        const std::string d = Desc()("nrows", nrows)("nvec", nvec)("a_stride", as)("b_stride", bs)(
                                   "out_m", out_m)("out_n", out_n).str();
        if (!fails.add(matches(out, want), "dot " + std::to_string(M) + "x" + std::to_string(N), d))
          return;
      }
    }
}

// c[i*c_stride + j] = (accumulate ? c : 0) + sum_{r < kc} a[i*a_stride + r] * b[r*b_stride + j].
TEST_P(PlanarMicrokernels, GemmTilesMatchScalar) {
  Rng rng(33);
  Failures fails;
  for (int M = 1; M <= x86::kPlanarGemmMaxM; ++M) {
    const x86::PlanarGemmFn fn = tab->gemm[M];
    if (!fn) continue;
    for (int64_t n : {1, 5, 8, 9, 15, 16, 17, 24, 25, 31, 32})
      for (int accumulate = 0; accumulate < 2; ++accumulate) {
        const int64_t kc = rng.pick(std::vector<int64_t>{0, 1, 2, 3, 7, 12});
        const int64_t as = kc + rng.uni(0, 3), bs = n + rng.uni(0, 5), cs = n + rng.uni(0, 5);
        Buf a = Buf::input((M - 1) * as + kc), b = Buf::input(kc ? (kc - 1) * bs + n : 0);
        for (int i = 0; i < M; ++i) set_values(a, i * as, kc, rng);
        for (int64_t r = 0; r < kc; ++r) set_values(b, r * bs, n, rng);
        Buf c = Buf::output((M - 1) * cs + n, rng.uni(0, 15));
        if (accumulate)
          for (int i = 0; i < M; ++i)
            for (int64_t j = 0; j < n; ++j) c[i * cs + j] = rng.val();
        Expect want(c);
        for (int i = 0; i < M; ++i)
          for (int64_t j = 0; j < n; ++j) {
            float& s = want[i * cs + j];
            if (!accumulate) s = 0.f;
            for (int64_t r = 0; r < kc; ++r) s += a[i * as + r] * b[r * bs + j];
          }
        x86::PlanarGemmArgs args{a.data(), b.data(), c.data(), kc, as, bs, cs, n, accumulate};
        fn(&args);
        const std::string d = Desc()("n", n)("kc", kc)("accumulate", accumulate)("a_stride", as)(
                                   "b_stride", bs)("c_stride", cs).str();
        if (!fails.add(matches(c, want, "c"), "gemm " + std::to_string(M), d)) return;
      }
  }
}

// out[r*out_step + x] = sum_t w[t] * in[r*in_step + off[t] + x]; the input
// readable for n rounded up to whole vectors.
TEST_P(PlanarMicrokernels, DepthwiseRowsMatchScalar) {
  Rng rng(34);
  Failures fails;
  const int W = tab->vl;
  for (int64_t n : {int64_t{1}, int64_t{W - 1}, int64_t{W}, int64_t{W + 1}, int64_t{3 * W + 2},
                    int64_t{4 * W}, int64_t{4 * W + 1}, int64_t{5 * W + 3}, int64_t{9 * W - 2},
                    rng.uni(1, 10 * W)})
    for (int f = 0; f < 3; ++f) {
      const int64_t rows = rng.uni(1, 3), ntap = f == 0 ? 0 : rng.uni(1, 4);
      std::vector<int64_t> off;
      int64_t max_off = 0;
      for (int64_t t = 0; t < ntap; ++t) {
        off.push_back(rng.uni(0, 6));
        max_off = std::max(max_off, off.back());
      }
      const int64_t span = max_off + round_up(n, W);
      const int64_t in_step = span + rng.uni(0, 4), out_step = n + rng.uni(0, 4);
      Buf in = Buf::input((rows - 1) * in_step + span), w = Buf::input(ntap);
      w.fill_values(rng);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t t = 0; t < ntap; ++t) set_values(in, r * in_step + off[t], n, rng);
      Buf out = Buf::output((rows - 1) * out_step + n, rng.uni(0, 15));
      Expect want(out);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t x = 0; x < n; ++x) {
          float& s = want[r * out_step + x];
          s = 0.f;
          for (int64_t t = 0; t < ntap; ++t) s += w[t] * in[r * in_step + off[t] + x];
        }
      x86::PlanarDwArgs args{in.data(), off.data(), w.data(), out.data(), in_step, out_step,
                             ntap,      rows,       n};
      tab->dw_rows(&args);
      const std::string d = Desc()("n", n)("rows", rows)("ntap", ntap).str();
      if (!fails.add(matches(out, want), "dw_rows", d)) return;
    }
}

// The row splits (dq[j] = src[k*j + q]), the strided copy (dst[j] =
// src[j*step]) and the 16x16 block transpose.
TEST_P(PlanarMicrokernels, SplitsCopiesAndTransposeMatchScalar) {
  Rng rng(35);
  Failures fails;
  const std::vector<int64_t> ns = {0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40, 47, 48, 49, 100};
  for (int64_t n : ns)
    for (int k = 2; k <= 3; ++k) {
      Buf src = Buf::input(k * n);
      src.fill_values(rng);
      std::vector<Buf> dst;
      std::vector<Expect> want;
      for (int q = 0; q < k; ++q) {
        dst.push_back(Buf::output(n, rng.uni(0, 15)));
        want.emplace_back(dst.back());
        for (int64_t j = 0; j < n; ++j) want.back()[j] = src[k * j + q];
      }
      if (k == 2) tab->split2(src.data(), n, dst[0].data(), dst[1].data());
      else tab->split3(src.data(), n, dst[0].data(), dst[1].data(), dst[2].data());
      for (int q = 0; q < k; ++q)
        if (!fails.add(matches(dst[q], want[q], ("d" + std::to_string(q)).c_str()),
                       k == 2 ? "split2" : "split3", Desc()("n", n).str()))
          return;
    }
  for (int64_t n : ns)
    for (int64_t step : {1, 2, 3, 5, 16, 1000}) {
      Buf src = Buf::input(n ? (n - 1) * step + 1 : 0);
      for (int64_t j = 0; j < n; ++j) src[j * step] = rng.val();
      Buf dst = Buf::output(n, rng.uni(0, 15));
      Expect want(dst);
      for (int64_t j = 0; j < n; ++j) want[j] = src[j * step];
      tab->strided_copy(src.data(), step, n, dst.data());
      if (!fails.add(matches(dst, want, "dst"), "strided_copy", Desc()("n", n)("step", step).str()))
        return;
    }
  for (int64_t ss : {16, 17, 40})
    for (int64_t ds : {16, 19, 32}) {
      Buf src = Buf::input(15 * ss + 16);
      for (int i = 0; i < 16; ++i) set_values(src, i * ss, 16, rng);
      Buf dst = Buf::output(15 * ds + 16, rng.uni(0, 15));
      Expect want(dst);
      for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 16; ++j) want[j * ds + i] = src[i * ss + j];
      tab->transpose16(src.data(), ss, dst.data(), ds);
      if (!fails.add(matches(dst, want, "dst"), "transpose16",
                     Desc()("src_stride", ss)("dst_stride", ds).str()))
        return;
    }
}

// The 16-bit conversions (planar16's rows and results): every length up to
// a few vectors, against types.h's scalar conversions (exact widening; round
// to nearest even, NaN kept, overflow to Inf), no element past n written.
TEST_P(PlanarMicrokernels, Conversions16MatchScalar) {
  Rng rng(29);
  std::vector<float> specials{0.f, -0.f, 1.f, -1.5f, 65504.f, 65520.f, 1e-8f, 3.0e38f,
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN()};
  for (int k = 0; k < 2; ++k)
    for (int64_t n = 0; n <= 70; ++n) {
      std::vector<float> f(static_cast<size_t>(n) + 8, 7.f);
      for (int64_t i = 0; i < n; ++i)
        f[i] = i < static_cast<int64_t>(specials.size()) && n > 20
                   ? specials[i]
                   : static_cast<float>(rng.val()) * 1.0009765625f;  // bits below bf16's
      std::vector<uint16_t> h(static_cast<size_t>(n) + 8, 0xabcd);
      tab->narrow16[k](f.data(), h.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t want = k == 0 ? to_bf16(f[i]).bits : to_f16(f[i]).bits;
        if (std::isnan(f[i])) {
          const float back = k == 0 ? to_float(bf16{h[i]}) : to_float(f16{h[i]});
          ASSERT_TRUE(std::isnan(back)) << "narrow16[" << k << "] n=" << n << " i=" << i;
        } else {
          ASSERT_EQ(h[i], want) << "narrow16[" << k << "] n=" << n << " i=" << i << " " << f[i];
        }
      }
      for (int64_t i = n; i < n + 8; ++i) ASSERT_EQ(h[i], 0xabcd) << "narrow16 wrote past n";
      std::vector<float> back(static_cast<size_t>(n) + 8, 7.f);
      tab->widen16[k](h.data(), back.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const float want = k == 0 ? to_float(bf16{h[i]}) : to_float(f16{h[i]});
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(back[i]));
        } else {
          ASSERT_EQ(back[i], want) << "widen16[" << k << "] n=" << n << " i=" << i;
        }
      }
      for (int64_t i = n; i < n + 8; ++i) ASSERT_EQ(back[i], 7.f) << "widen16 wrote past n";
    }
}

INSTANTIATE_TEST_SUITE_P(Tables, PlanarMicrokernels, ::testing::ValuesIn(kPlanarTables),
                         table_name<PlanarF32Table>);

}  // namespace
}  // namespace mkt
}  // namespace tct
