// The x86 f32 forward / backward-data kernels against the reference, on
// small integer-valued data (so every sum is exact and results compare with
// ==), for every ISA this CPU supports.
#include <gtest/gtest.h>

#include "dense_views.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/x86/x86.h"
#include "problem.h"

namespace tct {
namespace {

struct Case {
  int S = 2;
  int64_t N = 1, G = 1, ICg = 1, OCg = 1;
  std::vector<int64_t> I, K, s, d, pb, pe, op;
  bool bias = true;
  WeightsFormat wf = WeightsFormat::IOX;

  std::string str() const {
    std::ostringstream o;
    auto list = [&](const char* n, const std::vector<int64_t>& v) {
      o << ' ' << n << '=';
      for (size_t i = 0; i < v.size(); ++i) o << (i ? "," : "") << v[i];
    };
    o << "S=" << S << " N=" << N << " G=" << G << " ICg=" << ICg << " OCg=" << OCg;
    list("I", I);
    list("K", K);
    list("s", s);
    list("d", d);
    list("pb", pb);
    list("pe", pe);
    list("op", op);
    o << " bias=" << bias << " wf=" << to_string(wf);
    return o.str();
  }
};

std::vector<Isa> isas() {
  std::vector<Isa> v;
  if (isa_supported(Isa::Avx512)) v.push_back(Isa::Avx512);
  if (isa_supported(Isa::Avx2)) v.push_back(Isa::Avx2);
  return v;
}

std::vector<float> random_ints(size_t n, std::mt19937& rng, int lo = -3, int hi = 3) {
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(dist(rng));
  return v;
}

ActView nxc_view(void* data, const std::array<int64_t, kAxes>& sp, int64_t C) {
  return testing_views::dense_nxc_view(data, sp, C);
}

struct Weights {
  Shape shape;             // in the layout wf
  std::vector<float> data;  // dense in that layout
  WeightsView view;         // logical IOX strides
};

Weights make_weights(const Case& c, std::mt19937& rng) {
  const int S = c.S;
  Shape logical{c.G * c.ICg, c.OCg};
  for (int i = 0; i < S; ++i) logical.push_back(c.K[i]);
  const auto dims = weights_dims(c.wf, S);
  Weights w;
  w.shape.assign(S + 2, 0);
  for (int l = 0; l < S + 2; ++l) w.shape[dims[l]] = logical[l];
  int64_t total = 1;
  for (int64_t x : w.shape) total *= x;
  w.data = random_ints(static_cast<size_t>(total), rng);
  w.view = testing_views::dense_weights_view(w.data.data(), w.shape, c.wf, S);
  return w;
}

Attributes make_attrs(const Case& c) {
  Attributes a;
  a.strides = c.s;
  a.dilations = c.d;
  a.pads_begin = c.pb;
  a.pads_end = c.pe;
  a.output_padding = c.op;
  a.groups = c.G;
  a.data_format = DataFormat::NXC;
  a.weights_format = c.wf;
  return a;
}

int64_t count_nonmatching(const std::vector<float>& got, const std::vector<float>& want) {
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i])) ++bad;  // NaN (an unwritten element) counts as bad
  return bad;
}

void check_case(const Case& c, uint32_t seed, int nthreads = 2) {
  SCOPED_TRACE(c.str());
  std::mt19937 rng(seed);
  const Attributes attrs = make_attrs(c);
  Weights w = make_weights(c, rng);
  Shape src_shape{c.N};
  for (int i = 0; i < c.S; ++i) src_shape.push_back(c.I[i]);
  src_shape.push_back(c.G * c.ICg);
  const std::optional<Shape> bias_shape =
      c.bias ? std::optional<Shape>(Shape{c.G * c.OCg}) : std::nullopt;
  const ConvProblem p = resolve_forward(src_shape, w.shape, bias_shape, attrs);

  const auto src = random_ints(static_cast<size_t>(p.N * p.src_spatial() * p.IC()), rng);
  const auto bias = random_ints(static_cast<size_t>(p.OC()), rng);
  const size_t dst_n = static_cast<size_t>(p.N * p.dst_spatial() * p.OC());
  std::vector<float> want(dst_n, 0.f);
  reference_forward(p, DType::F32, nxc_view(const_cast<float*>(src.data()), p.I, p.IC()), w.view,
                    c.bias ? bias.data() : nullptr, nxc_view(want.data(), p.O, p.OC()), nthreads);

  // Backward data of the same geometry: diff_dst has dst's shape.
  Shape dd_shape = dst_shape(p, DataFormat::NXC);
  const ConvProblem pb = resolve_backward_data(dd_shape, w.shape, src_shape, attrs);
  const auto dd = random_ints(dst_n, rng);
  std::vector<float> want_b(src.size(), 0.f);
  reference_backward_data(pb, DType::F32, nxc_view(const_cast<float*>(dd.data()), pb.O, pb.OC()),
                          w.view, nxc_view(want_b.data(), pb.I, pb.IC()), nthreads);

  // Results 64-byte aligned (large depthwise outputs are written with
  // streaming stores where a row's channels start a line).
  using testing_views::aligned64;
  for (Isa isa : isas()) {
    SCOPED_TRACE(isa_name(isa));
    std::vector<float> buf(dst_n + 16, NAN);
    float* got = aligned64(buf);
    ASSERT_TRUE(x86::forward_f32(isa, p, src.data(), w.view, c.bias ? bias.data() : nullptr, got,
                                 nthreads));
    EXPECT_EQ(count_nonmatching(std::vector<float>(got, got + dst_n), want), 0) << "forward";
    EXPECT_TRUE(std::isnan(got[dst_n])) << "forward wrote past its output";
    std::vector<float> buf_b(src.size() + 16, NAN);
    float* got_b = aligned64(buf_b);
    ASSERT_TRUE(x86::backward_data_f32(isa, pb, dd.data(), w.view, got_b, nthreads));
    EXPECT_EQ(count_nonmatching(std::vector<float>(got_b, got_b + src.size()), want_b), 0)
        << "backward data";
    EXPECT_TRUE(std::isnan(got_b[src.size()])) << "backward data wrote past its output";
  }
}

Case make(int S, int64_t N, int64_t G, int64_t ICg, int64_t OCg, std::vector<int64_t> I,
          std::vector<int64_t> K, std::vector<int64_t> s, std::vector<int64_t> d,
          std::vector<int64_t> pb, std::vector<int64_t> pe, std::vector<int64_t> op = {},
          bool bias = true, WeightsFormat wf = WeightsFormat::IOX) {
  Case c;
  c.S = S;
  c.N = N;
  c.G = G;
  c.ICg = ICg;
  c.OCg = OCg;
  c.I = I;
  c.K = K;
  c.s = s;
  c.d = d;
  c.pb = pb;
  c.pe = pe;
  c.op = op.empty() ? std::vector<int64_t>(S, 0) : op;
  c.bias = bias;
  c.wf = wf;
  return c;
}

TEST(FastConvF32, HandPicked) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  using WF = WeightsFormat;
  const std::vector<Case> cases = {
      // The layer shapes of the benchmarks, scaled down.
      make(2, 2, 1, 64, 32, {8, 8}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}),
      make(2, 1, 1, 32, 48, {5, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),
      make(2, 1, 1, 20, 70, {5, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),
      make(2, 1, 1, 17, 130, {3, 4}, {2, 3}, {2, 1}, {1, 1}, {0, 1}, {1, 0}),
      // 1D / 3D.
      make(1, 3, 1, 16, 16, {9}, {5}, {3}, {1}, {2}, {1}, {2}),
      make(3, 1, 1, 8, 24, {3, 4, 5}, {3, 2, 3}, {2, 1, 2}, {1, 2, 1}, {1, 0, 2}, {0, 1, 1}),
      // 1x1 kernel, channel tails, strides larger than the kernel.
      make(2, 2, 1, 5, 7, {4, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}),
      make(2, 1, 1, 3, 5, {3, 3}, {1, 2}, {3, 4}, {1, 1}, {0, 0}, {0, 0}, {2, 3}),
      make(1, 1, 1, 9, 33, {4}, {2}, {5}, {1}, {0}, {1}, {4}, false),
      // Dilation, asymmetric pads, output_padding < dilation.
      make(2, 1, 1, 6, 18, {4, 5}, {3, 2}, {1, 2}, {3, 2}, {2, 0}, {0, 3}, {2, 1}),
      // Groups, depthwise, depthwise with multiplier, tiny groups.
      make(2, 2, 4, 4, 8, {5, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),
      make(2, 2, 24, 1, 1, {6, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),
      make(2, 1, 37, 1, 1, {5, 4}, {4, 4}, {2, 2}, {1, 1}, {1, 2}, {2, 1}, {1, 0}, false),
      make(1, 2, 70, 1, 1, {11}, {3}, {2}, {2}, {1}, {0}),
      make(2, 1, 6, 1, 3, {4, 4}, {3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}),
      make(2, 1, 5, 3, 1, {4, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),
      make(3, 1, 3, 2, 2, {3, 3, 3}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 1, 0}),
      // Pads larger than the kernel extent (output smaller than the input).
      make(2, 1, 1, 4, 4, {7, 7}, {2, 2}, {1, 1}, {1, 1}, {3, 2}, {2, 3}),
      // All four weight layouts.
      make(2, 1, 2, 5, 6, {4, 3}, {2, 3}, {2, 1}, {1, 1}, {1, 0}, {0, 1}, {1, 0}, true, WF::XOI),
      make(2, 1, 2, 5, 6, {4, 3}, {2, 3}, {2, 1}, {1, 1}, {1, 0}, {0, 1}, {1, 0}, true, WF::OIX),
      make(2, 1, 2, 5, 6, {4, 3}, {2, 3}, {2, 1}, {1, 1}, {1, 0}, {0, 1}, {1, 0}, true, WF::XIO),
      make(3, 1, 1, 3, 17, {2, 3, 2}, {2, 2, 3}, {1, 2, 1}, {1, 1, 2}, {0, 1, 1}, {1, 0, 1},
           {0, 1, 0}, false, WF::XOI),
  };
  uint32_t seed = 1;
  for (const Case& c : cases) check_case(c, seed++);
}

// A one-pixel src under a kernel that covers diff_dst (z -> 4x4): backward-
// data as dot products over (tap, oc) rows (one group; weights read
// in place when OCg == 1, else packed), image and channel tails, every rank
// and weights layout; groups take the general path.
TEST(FastConvF32, OnePixelCovering) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  using WF = WeightsFormat;
  std::vector<Case> cases;
  for (WF wf : {WF::IOX, WF::XOI, WF::OIX, WF::XIO})
    cases.push_back(make(2, 9, 1, 7, 4, {1, 1}, {4, 4}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {0, 0}, true, wf));
  cases.push_back(make(2, 5, 1, 10, 1, {1, 1}, {4, 4}, {1, 1}, {1, 1}, {0, 0}, {0, 0}));
  cases.push_back(make(3, 3, 1, 5, 2, {1, 1, 1}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}));
  cases.push_back(make(1, 6, 1, 13, 16, {1}, {3}, {2}, {1}, {0}, {0}, {0}, false));
  cases.push_back(make(2, 4, 2, 3, 4, {1, 1}, {2, 2}, {1, 1}, {1, 1}, {0, 0}, {0, 0}));
  uint32_t seed = 300;
  for (const Case& c : cases) check_case(c, seed++);
}

// Few output columns: the reduction-vectorized (dot) tiles for 1..4 columns
// (AVX-512 and AVX2), reduction tails, padding taps, groups;
// and the kernel-tiles-output forward (K == s: one GEMM over taps x OCg
// columns, scattered), with crops and both ISAs.
TEST(FastConvF32, FewColumns) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  using WF = WeightsFormat;
  const std::vector<Case> cases = {
      make(2, 1, 1, 36, 4, {7, 9}, {3, 3}, {3, 3}, {1, 1}, {0, 0}, {0, 0}),
      make(2, 2, 1, 64, 3, {9, 10}, {7, 7}, {2, 2}, {2, 2}, {3, 3}, {2, 2}, {1, 1}),
      make(2, 1, 1, 64, 3, {6, 6}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}),
      make(1, 2, 1, 17, 1, {13}, {3}, {1}, {1}, {1}, {1}),
      make(1, 1, 1, 33, 2, {11}, {4}, {3}, {2}, {2}, {0}, {1}, false),
      make(3, 1, 1, 20, 4, {3, 4, 5}, {3, 2, 2}, {2, 1, 2}, {1, 2, 1}, {1, 0, 1}, {0, 1, 0}),
      make(2, 1, 2, 20, 2, {5, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, true, WF::XOI),
      make(2, 1, 3, 48, 3, {4, 5}, {2, 3}, {1, 2}, {1, 1}, {0, 1}, {1, 0}, {}, true, WF::OIX),
      // Backward-data with few input channels (dot over OCg).
      make(2, 1, 1, 2, 40, {5, 7}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),
      make(2, 1, 1, 4, 16, {6, 6}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {}, false, WF::XIO),
      // Kernel tiles the output (K == s), crops, tails of the taps x OCg columns.
      make(2, 2, 1, 36, 4, {5, 11}, {3, 3}, {3, 3}, {1, 1}, {1, 0}, {2, 1}),
      make(2, 1, 1, 5, 3, {4, 3}, {2, 3}, {2, 3}, {1, 1}, {1, 2}, {0, 1}, {}, false, WF::XIO),
      make(1, 3, 1, 40, 7, {9}, {4}, {4}, {1}, {3}, {0}, {}, true, WF::OIX),
      make(3, 1, 1, 9, 2, {3, 2, 4}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {1, 0, 0}, {0, 1, 1}, {},
           true, WF::XOI),
      make(2, 1, 1, 700, 5, {3, 4}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}),
      // Forward rows regrouped by their valid taps (small images, dilation).
      make(3, 1, 1, 16, 20, {3, 4, 4}, {3, 3, 3}, {1, 1, 1}, {2, 2, 2}, {0, 0, 0}, {0, 0, 0}),
      make(2, 2, 1, 8, 40, {4, 5}, {3, 3}, {1, 1}, {3, 2}, {1, 0}, {0, 1}),
      make(2, 1, 2, 12, 9, {3, 3}, {4, 3}, {2, 1}, {2, 3}, {1, 1}, {2, 0}, {1, 0}),
      // ... where only 9 % of the (pixel, tap) pairs are padding (GoogLeNet
      // 4d-like k3 p1 on 14x14, images folded into the rows).
      make(2, 2, 1, 24, 48, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),
      // ... chained back to back, tiles spanning groups (3D U-Net-like k3 s1).
      make(3, 1, 1, 20, 40, {5, 6, 6}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}),
      make(2, 2, 1, 24, 16, {5, 6}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {}, false, WF::XOI),
  };
  uint32_t seed = 100;
  for (const Case& c : cases) check_case(c, seed++);
}

// Random geometry: every rank, groups, dilation, pads, output_padding.
TEST(FastConvF32, Randomized) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  std::mt19937 rng(12345);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const WeightsFormat wfs[] = {WeightsFormat::IOX, WeightsFormat::XOI, WeightsFormat::OIX,
                               WeightsFormat::XIO};
  int done = 0;
  for (int attempt = 0; done < 250 && attempt < 5000; ++attempt) {
    Case c;
    c.S = static_cast<int>(uni(1, 3));
    c.N = uni(0, 9) == 0 ? 0 : uni(1, 2);
    const int64_t kind = uni(0, 5);
    if (kind == 0) {  // depthwise
      c.G = uni(2, 40);
      c.ICg = c.OCg = 1;
    } else if (kind == 1) {  // small groups
      c.G = uni(2, 4);
      c.ICg = uni(1, 6);
      c.OCg = uni(1, 6);
    } else {
      c.G = uni(0, 3) == 0 ? 2 : 1;
      c.ICg = uni(1, 40);
      c.OCg = uni(1, 80);
    }
    for (int i = 0; i < c.S; ++i) {
      const int64_t maxsp = c.S == 3 ? 4 : (c.S == 2 ? 7 : 12);
      c.I.push_back(uni(1, maxsp));
      c.K.push_back(uni(1, c.S == 3 ? 3 : 4));
      c.s.push_back(uni(1, 4));
      c.d.push_back(uni(0, 2) == 0 ? uni(2, 3) : 1);
      const int64_t effk = c.d[i] * (c.K[i] - 1) + 1;
      c.pb.push_back(uni(0, effk));
      c.pe.push_back(uni(0, effk));
      c.op.push_back(uni(0, std::max(c.s[i], c.d[i]) - 1));
      const int64_t O = c.s[i] * (c.I[i] - 1) + effk + c.op[i] - c.pb[i] - c.pe[i];
      if (O < 1) c.pb[i] = c.pe[i] = 0;
    }
    c.bias = uni(0, 1) == 1;
    c.wf = wfs[uni(0, 3)];
    // Bound the reference's cost.
    double macs = static_cast<double>(c.N) * c.G * c.ICg * c.OCg;
    for (int i = 0; i < c.S; ++i) macs *= c.I[i] * c.K[i];
    if (macs > 4e5) continue;
    // Mostly one thread: on a loaded 2-core machine every OpenMP barrier can
    // cost a scheduler time slice (ThreadCounts covers the threading).
    check_case(c, static_cast<uint32_t>(attempt), done % 4 == 0 ? 2 : 1);
    if (::testing::Test::HasFailure()) return;  // the first failing case is enough
    ++done;
  }
  EXPECT_EQ(done, 250);
}

// Larger layers that exercise whole register tiles, several row blocks and
// the column-group split.
TEST(FastConvF32, LargerLayers) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  check_case(make(2, 1, 1, 64, 32, {16, 16}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}), 7);
  check_case(make(2, 1, 1, 96, 200, {6, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}), 8);
  check_case(make(1, 2, 1, 40, 64, {50}, {7}, {4}, {1}, {2}, {3}), 9);
  check_case(make(2, 1, 64, 1, 1, {20, 20}, {5, 5}, {2, 2}, {1, 1}, {2, 2}, {2, 2}, {1, 1}), 10);
  // Depthwise with outputs of 2 MiB and more (streaming stores), both passes;
  // 48 channels: AVX-512's 32-channel blocks and a full 16-channel tail.
  check_case(make(2, 4, 32, 1, 1, {64, 66}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 0}), 14);
  check_case(make(2, 2, 48, 1, 1, {64, 66}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 0}), 15);
  // Small groups across 16-lane blocks; weights larger than the activations
  // (one packed column block per work item).
  check_case(make(2, 2, 32, 4, 4, {9, 9}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}), 11);
  check_case(make(2, 1, 1, 128, 256, {3, 3}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}), 12);
  // Backward-data reduction over 160 channels x 64 taps: cut into chunks
  // that the tiles accumulate (both ISAs).
  check_case(make(3, 1, 1, 16, 160, {2, 2, 2}, {4, 4, 4}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}), 13);
  // Weights far larger than the activations, 27 taps x 160 channels: on
  // AVX-512 the forward reduction is cut into chunks (by rows); the second
  // layer's backward-data reduces over 27 x 256 in chunks, by columns.
  check_case(make(3, 1, 1, 160, 128, {3, 3, 3}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}), 16);
  check_case(make(3, 1, 1, 128, 256, {2, 2, 2}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}), 18);
  // IOX weights packed channel by channel through 16x16 transposes: 27 taps
  // (two tap blocks), 40 columns (a 8-column tail), strided phases.
  check_case(make(3, 2, 1, 24, 40, {3, 4, 3}, {3, 3, 3}, {2, 1, 2}, {1, 1, 1}, {1, 0, 1}, {1, 1, 0}, {1, 0, 1}), 17);
  // Weights with the columns outermost (IOX backward-data, OIX forward), up
  // to 16 taps: packed 16 columns at a time. 40 columns (an 8-column strip),
  // a reduction of 200 channels x 16 taps in two chunks (backward-data);
  // 70 columns (a 6-column strip and an empty one); OIX forward, 9 taps.
  check_case(make(2, 1, 1, 40, 200, {5, 5}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}), 21);
  check_case(make(2, 2, 1, 70, 24, {6, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {1, 1}, {1, 0}), 22);
  check_case(make(2, 2, 1, 24, 70, {6, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {1, 1}, {1, 0}, true,
                  WeightsFormat::OIX), 23);
}

// Depthwise tiles line by line (lines long enough that their tiles' dummy
// rows are at most 1/8): lines whose axis-0/1 taps are partly or wholly
// padding (valid taps listed per line), image borders along the line
// (pointer tiles), dummy rows at a line's end, channel tails, stride
// phases (forward), dilation, 1D/3D, runs of lines split across threads.
TEST(FastConvF32, DepthwiseLines) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  // The k4 s2 upsampler; forward phases of 16-pixel lines.
  check_case(make(2, 2, 64, 1, 1, {16, 16}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}), 40);
  // 17 channels (a masked tail only); lines of 24, 3x3 stride 1.
  check_case(make(2, 1, 17, 1, 1, {9, 24}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}), 41);
  // 40 channels (32 + 8); lines of 15 (a last tile of 7 rows on AVX-512),
  // dilation 2, asymmetric pads, output padding.
  check_case(make(2, 2, 40, 1, 1, {8, 8}, {3, 3}, {2, 2}, {2, 2}, {2, 1}, {0, 2}, {1, 1}), 42);
  check_case(make(2, 1, 40, 1, 1, {6, 15}, {3, 3}, {1, 1}, {2, 2}, {2, 1}, {0, 2}), 43);
  // Pads as wide as the kernel on the outer axis: backward-data lines with
  // no tap inside diff_dst (zeros), forward lines with one.
  check_case(make(2, 1, 20, 1, 1, {6, 16}, {2, 3}, {1, 1}, {1, 1}, {2, 1}, {0, 1}), 44);
  // K < s: forward phases without taps (bias only).
  check_case(make(2, 1, 32, 1, 1, {5, 16}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {1, 1}), 45);
  // 1D long lines; 3D.
  check_case(make(1, 3, 24, 1, 1, {64}, {5}, {3}, {1}, {2}, {2}), 46);
  check_case(make(3, 1, 16, 1, 1, {3, 4, 16}, {3, 3, 3}, {1, 2, 1}, {1, 1, 1}, {1, 0, 2}, {1, 2, 0}, {0, 1, 0}), 47);
  // Many lines per image: runs of 64, 32, ... lines across 1-3 threads.
  for (int nt : {1, 2, 3})
    check_case(make(2, 3, 48, 1, 1, {40, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}), 48, nt);
}

// Backward-data with a few diff_dst channels (fused taps) line by line:
// interior tiles fused in row mode, border positions of a line gathered into
// pointer tiles, tiles of near-equal size (partial tiles), lines whose outer
// taps are partly or wholly padding, several column blocks, 1D/3D, 1-3
// threads. (Each case's forward runs too.)
TEST(FastConvF32, FusedBackwardDataLines) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  // DCGAN's 64 <- 3 k4 s2 on lines of 64.
  check_case(make(2, 2, 1, 64, 3, {12, 64}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}), 60);
  // The 36 <- 4 k3 s3 upsampler (no padding); 40 columns, lines of 50.
  check_case(make(2, 1, 1, 36, 4, {10, 50}, {3, 3}, {3, 3}, {1, 1}, {0, 0}, {0, 0}), 61);
  check_case(make(2, 1, 1, 40, 4, {6, 30}, {3, 3}, {3, 3}, {1, 1}, {2, 1}, {2, 0}, {1, 2}), 62);
  // Pads as wide as the kernel on the outer axis: lines with no tap inside.
  check_case(make(2, 1, 1, 32, 3, {5, 48}, {2, 3}, {1, 1}, {1, 1}, {2, 1}, {0, 1}), 63);
  // 80 columns: several column blocks per tile; 1D, 2 fused taps.
  check_case(make(1, 2, 1, 80, 2, {40}, {2}, {1}, {1}, {0}, {0}), 64);
  check_case(make(3, 1, 1, 24, 3, {3, 4, 24}, {3, 3, 3}, {1, 2, 2}, {1, 1, 1}, {1, 1, 1}, {1, 0, 1}, {0, 1, 1}), 65);
  for (int nt : {1, 2, 3})
    check_case(make(2, 3, 1, 48, 5, {9, 31}, {3, 5}, {2, 2}, {1, 1}, {1, 2}, {1, 1}, {1, 1}), 66, nt);
  // Short lines where most (row, tap) pairs are padding (benchdnn's 3D
  // ic-tail: 8-pixel lines, cropping pads, 24 % inside) and a 2D one.
  check_case(make(3, 2, 1, 17, 16, {8, 8, 8}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {3, 3, 3}, {2, 2, 2}), 67);
  check_case(make(2, 2, 1, 20, 6, {7, 9}, {4, 4}, {1, 1}, {1, 1}, {3, 4}, {3, 3}), 68);
}

// GEMM tiles writing outputs of 16 MiB and more (AVX-512: streaming stores;
// AVX2: the 36-channel backward-data line by line, each tile prefetching the
// rows four tiles on for writing).
// Backward-data to 36 channels (8x48 tiles of 36 columns: consecutive rows
// staged and written as whole lines; the last tile of 3 rows line by line),
// and a forward of 96 columns in two 48-column blocks (whole-line vectors
// streamed, row by row, in stride phases). Forwards with K = s and 4
// channels (per input pixel one GEMM row, copied to its 3x3 patch) stream
// whole tiles whose runs start a line and copy the others: rows of 1500
// pixels (tiles at every fourth pixel aligned, tiles across image rows), and
// of 1497 (no tile aligned).
TEST(FastConvF32, LargeOutputsStreamed) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  check_case(make(2, 1, 1, 36, 4, {241, 499}, {3, 3}, {3, 3}, {1, 1}, {0, 0}, {0, 0}), 19);
  check_case(make(2, 1, 1, 36, 4, {241, 500}, {3, 3}, {3, 3}, {1, 1}, {0, 0}, {0, 0}), 24);
  check_case(make(2, 1, 1, 8, 96, {112, 112}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}), 20);
}

// Packed weights of 2 MiB and more: written with non-temporal stores, whole
// 16-float lines (zeros past the columns). Forward IOX (per channel a
// [column][tap] transpose; 9 taps, 300 columns: a column block of 44, a
// 12-column strip) and its backward-data (columns outermost, a reduction of
// 300 channels); XOI (reduction channels innermost: per tap a transpose);
// a 1D k16 s8 layer (16 taps), on 1-3 threads.
TEST(FastConvF32, PackedWeightsStreamed) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  check_case(make(2, 2, 1, 256, 300, {3, 3}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}), 50);
  check_case(make(2, 1, 1, 300, 256, {2, 3}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {0, 1}, {1, 1}, true,
                  WeightsFormat::XOI), 51);
  for (int nt : {1, 2, 3})
    check_case(make(1, 1, 1, 128, 260, {5}, {16}, {8}, {1}, {4}, {4}), 52, nt);
}

// Weights that dwarf the activations, by columns: each item packs its own
// column block into its thread's buffer right before using it (no packed
// copy of all the weights). Forward and backward-data, each packing path:
// IOX (forward: [column][tap] transposes per channel; backward-data: columns
// outermost, 9 taps, or per channel with 27 taps), XOI (channels
// contiguous), OIX; 200 columns (an 8-column tail block), 1 to 4 threads;
// column blocks shared by the threads in row parts.
TEST(FastConvF32, ColumnBlocksPackedByTheirItems) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  using WF = WeightsFormat;
  for (int nt : {1, 2, 4}) {
    for (WF wf : {WF::IOX, WF::XOI, WF::OIX})
      check_case(make(2, 1, 1, 256, 200, {3, 3}, {3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {},
                      true, wf), 60, nt);
    check_case(make(3, 1, 1, 144, 96, {2, 2, 2}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1},
                    {1, 1, 1}), 61, nt);
  }
  // Backward-data with 5 column blocks (320 columns) on 2 threads: each
  // block's rows in 2 parts, items of their own (3 threads: by rows).
  for (int nt : {2, 3})
    check_case(make(3, 1, 1, 320, 320, {3, 3, 2}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0},
                    {0, 0, 0}), 62, nt);
}

// Any thread count gives the same (exact) results.
TEST(FastConvF32, ThreadCounts) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  for (int nt : {1, 3, 5}) {
    check_case(make(2, 1, 1, 24, 40, {7, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}), 30, nt);
    check_case(make(1, 2, 6, 2, 3, {17}, {4}, {3}, {1}, {1}, {2}), 31, nt);
  }
}

// Zero-size problems: nothing to compute, still handled.
TEST(FastConvF32, ZeroSizes) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  // Zero channels: forward without input channels is bias only; backward-data
  // without output channels is zeros.
  check_case(make(2, 2, 1, 0, 5, {3, 3}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}), 21);
  check_case(make(2, 2, 1, 5, 0, {3, 3}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}), 22);
  check_case(make(1, 1, 3, 0, 2, {4}, {3}, {1}, {1}, {1}, {1}, {}, false), 23);
  for (Isa isa : isas()) {
    Case c = make(2, 0, 1, 4, 4, {3, 3}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1});
    std::mt19937 rng(1);
    Weights w = make_weights(c, rng);
    const ConvProblem p = resolve_forward({0, 3, 3, 4}, w.shape, std::nullopt, make_attrs(c));
    EXPECT_TRUE(x86::forward_f32(isa, p, nullptr, w.view, nullptr, nullptr, 2));
    const ConvProblem pb = resolve_backward_data({0, 5, 5, 4}, w.shape, std::nullopt, make_attrs(c));
    EXPECT_TRUE(x86::backward_data_f32(isa, pb, nullptr, w.view, nullptr, 2));
  }
}

}  // namespace
}  // namespace tct
