// The planar (NCX) f32 forward / backward-data kernels against the reference,
// on small integer-valued data (exact sums, compared with ==), for every ISA
// this CPU supports: random geometry (every rank, groups, depthwise,
// dilation, pads, output_padding, pointwise), larger layers that reach the
// channel blocks and line chunks, thread counts and zero sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
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

std::vector<Isa> isas() {
  std::vector<Isa> v;
  if (isa_supported(Isa::Avx512)) v.push_back(Isa::Avx512);
  if (isa_supported(Isa::Avx2)) v.push_back(Isa::Avx2);
  return v;
}

std::vector<float> random_ints(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> dist(-3, 3);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(dist(rng));
  return v;
}

// Dense NCX (N, C, X0, X1, X2) seen in logical order.
ActView ncx_view(void* data, const std::array<int64_t, kAxes>& sp, int64_t C) {
  const int64_t plane = sp[0] * sp[1] * sp[2];
  return ActView{data, C * plane, plane, {sp[1] * sp[2], sp[2], 1}};
}

std::string describe(const ConvProblem& p) {
  std::ostringstream o;
  o << "N=" << p.N << " G=" << p.G << " ICg=" << p.ICg << " OCg=" << p.OCg;
  auto list = [&](const char* n, const std::array<int64_t, kAxes>& v) {
    o << ' ' << n << '=' << v[0] << ',' << v[1] << ',' << v[2];
  };
  list("I", p.I);
  list("O", p.O);
  list("K", p.K);
  list("s", p.s);
  list("d", p.d);
  list("pb", p.pb);
  list("pe", p.pe);
  return o.str();
}

// Builds a problem from per-axis values of the last S axes (O from the formula).
ConvProblem make(int S, int64_t N, int64_t G, int64_t ICg, int64_t OCg,
                 std::vector<int64_t> I, std::vector<int64_t> K, std::vector<int64_t> s,
                 std::vector<int64_t> d, std::vector<int64_t> pb, std::vector<int64_t> pe,
                 std::vector<int64_t> op = {}) {
  ConvProblem p;
  p.spatial_rank = S;
  p.N = N;
  p.G = G;
  p.ICg = ICg;
  p.OCg = OCg;
  for (int i = 0; i < S; ++i) {
    const int a = kAxes - S + i;
    p.I[a] = I[i];
    p.K[a] = K[i];
    p.s[a] = s[i];
    p.d[a] = d[i];
    p.pb[a] = pb[i];
    p.pe[a] = pe[i];
    p.op[a] = op.empty() ? 0 : op[i];
    p.O[a] = (I[i] - 1) * s[i] + d[i] * (K[i] - 1) + 1 + p.op[a] - pb[i] - pe[i];
  }
  return p;
}

// Both passes of p through the planar kernels, against the reference.
void check(const ConvProblem& p, uint32_t seed, int nthreads = 2) {
  SCOPED_TRACE(describe(p));
  std::mt19937 rng(seed);
  const int64_t IC = p.IC(), OC = p.OC(), src_n = p.N * IC * p.src_spatial(),
                dst_n = p.N * OC * p.dst_spatial();
  auto w = random_ints(static_cast<size_t>(IC * p.OCg * p.taps()), rng);
  // IOX weights; a leading canonical axis of size 1 may have any stride.
  const WeightsView wv{w.data(), p.OCg * p.taps(), p.taps(), {p.K[1] * p.K[2], p.K[2], 1}};
  auto x = random_ints(static_cast<size_t>(src_n), rng);
  auto dy = random_ints(static_cast<size_t>(dst_n), rng);
  auto bias = random_ints(static_cast<size_t>(OC), rng);
  std::vector<float> want_y(dst_n), want_dx(src_n);
  reference_forward(p, DType::F32, ncx_view(x.data(), p.I, IC), wv, bias.data(),
                    ncx_view(want_y.data(), p.O, OC), 1);
  reference_backward_data(p, DType::F32, ncx_view(dy.data(), p.O, OC), wv,
                          ncx_view(want_dx.data(), p.I, IC), 1);
  auto mismatches = [](const std::vector<float>& a, const std::vector<float>& b) {
    int64_t bad = 0;
    for (size_t i = 0; i < a.size(); ++i) bad += !(a[i] == b[i]);  // NaN: unwritten
    return bad;
  };
  for (Isa isa : isas()) {
    SCOPED_TRACE(isa_name(isa));
    std::vector<float> y(dst_n, NAN), dx(src_n, NAN);
    ASSERT_TRUE(x86::planar_f32(isa, p, true, x.data(), wv, bias.data(), y.data(), nthreads));
    EXPECT_EQ(mismatches(y, want_y), 0) << "forward";
    ASSERT_TRUE(x86::planar_f32(isa, p, false, dy.data(), wv, nullptr, dx.data(), nthreads));
    EXPECT_EQ(mismatches(dx, want_dx), 0) << "backward data";
  }
}

// Random per-axis geometry of rank S (pointwise: 1x1 kernel, unit strides,
// no pads); false when some output axis would be empty. The innermost line
// of a 1D problem is up to max_line long.
struct Axes {
  std::vector<int64_t> I, K, s, d, pb, pe, op;
};

template <class Uni>
bool random_axes(Uni& uni, int S, bool pointwise, int64_t max_line, Axes& ax) {
  bool ok = true;
  for (int i = 0; i < S; ++i) {
    ax.I.push_back(uni(1, S == 1 ? max_line : (S == 2 ? 12 : 5)));
    ax.K.push_back(pointwise ? 1 : uni(1, 4));
    ax.s.push_back(pointwise ? 1 : uni(1, 4));
    ax.d.push_back(pointwise ? 1 : uni(1, 3));
    const int64_t effk = ax.d[i] * (ax.K[i] - 1) + 1;
    ax.pb.push_back(pointwise ? 0 : uni(0, effk));
    ax.pe.push_back(pointwise ? 0 : uni(0, effk));
    ax.op.push_back(pointwise ? 0 : uni(0, std::max(ax.s[i], ax.d[i]) - 1));
    ok = ok && (ax.I[i] - 1) * ax.s[i] + effk + ax.op[i] - ax.pb[i] - ax.pe[i] >= 1;
  }
  return ok;
}

TEST(PlanarF32, Randomized) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  std::mt19937 rng(4242);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int done = 0;
  for (int attempt = 0; done < 400 && attempt < 10000; ++attempt) {
    const int S = static_cast<int>(uni(1, 3));
    const bool depthwise = uni(0, 4) == 0, pointwise = uni(0, 5) == 0;
    const int64_t G = depthwise ? uni(2, 9) : uni(1, 2);
    const int64_t ICg = depthwise ? 1 : uni(1, 20), OCg = depthwise ? 1 : uni(1, 20);
    Axes ax;
    if (!random_axes(uni, S, pointwise, 70, ax)) continue;
    const ConvProblem p = make(S, uni(1, 2), G, ICg, OCg, ax.I, ax.K, ax.s, ax.d, ax.pb, ax.pe, ax.op);
    if (p.macs() > 3e5) continue;
    check(p, static_cast<uint32_t>(attempt), done % 4 == 0 ? 2 : 1);
    if (::testing::Test::HasFailure()) return;  // the first failing case is enough
    ++done;
  }
  EXPECT_EQ(done, 400);
}

// Many images x groups on small planes: whole-plane work items (each image's
// input planes copied once, every output row reading them); most of these
// problems must take that path, for both passes.
TEST(PlanarF32, PlaneItems) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  std::mt19937 rng(9191);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int done = 0, planes = 0;
  for (int attempt = 0; done < 150 && attempt < 10000; ++attempt) {
    const int S = static_cast<int>(uni(1, 3));
    const bool depthwise = uni(0, 1) == 0;
    const int64_t G = depthwise ? uni(2, 12) : uni(1, 3);
    const int64_t ICg = depthwise ? 1 : uni(1, 5), OCg = depthwise ? 1 : uni(1, 5);
    Axes ax;
    if (!random_axes(uni, S, uni(0, 5) == 0, 70, ax)) continue;
    const ConvProblem p = make(S, uni(4, 9), G, ICg, OCg, ax.I, ax.K, ax.s, ax.d, ax.pb, ax.pe, ax.op);
    if (p.macs() > 3e5) continue;
    const int nt = static_cast<int>(uni(1, 2));
    planes += x86::planar_uses_planes(isas()[0], p, true, nt) &&
              x86::planar_uses_planes(isas()[0], p, false, nt);
    check(p, static_cast<uint32_t>(attempt), nt);
    if (::testing::Test::HasFailure()) return;
    ++done;
  }
  EXPECT_EQ(done, 150);
  EXPECT_GT(planes, 75);
}

// Layers large enough for several channel blocks (accumulated), line chunks,
// output channel block groups (one image, few rows) and full register tiles.
TEST(PlanarF32, LargerLayers) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  check(make(1, 1, 1, 300, 40, {200}, {4}, {2}, {1}, {1}, {1}), 1);
  check(make(1, 1, 1, 40, 300, {200}, {4}, {2}, {1}, {1}, {1}), 2);
  check(make(2, 2, 1, 64, 3, {20, 37}, {7, 7}, {2, 2}, {2, 2}, {3, 3}, {2, 2}, {1, 1}), 3);
  check(make(2, 1, 1, 3, 64, {20, 37}, {7, 7}, {2, 2}, {2, 2}, {3, 3}, {2, 2}, {1, 1}), 4);
  check(make(2, 1, 1, 96, 80, {9, 40}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {1, 1}), 5);
  check(make(3, 1, 1, 24, 20, {3, 4, 33}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}), 6);
  check(make(2, 3, 1, 130, 50, {7, 7}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}), 7);  // pointwise
  check(make(1, 1, 1, 4, 36, {500}, {3}, {3}, {1}, {0}, {0}), 8);
  // One-pixel src, kernel covering diff_dst: backward-data as dot products.
  check(make(2, 7, 1, 10, 8, {1, 1}, {4, 4}, {1, 1}, {1, 1}, {0, 0}, {0, 0}), 9);
  check(make(2, 5, 2, 5, 4, {1, 1}, {2, 2}, {3, 3}, {1, 1}, {0, 0}, {1, 1}, {1, 1}), 10);
  // Outputs of 2 MiB and more in one channel pass: streaming stores where a
  // full vector starts on an aligned address (lines of 70: rows start anywhere).
  check(make(2, 2, 1, 64, 3, {64, 70}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}), 11);  // backward-data
  check(make(2, 1, 1, 3, 64, {90, 100}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}), 12);  // forward
}

// The tiles' flat (segment, channel, tap) lists (compute_row: at most
// kFlatTaps = 256 triples, at least kFlatMinTiles = 8 tiles a list) and the
// nested loops, on either side of both limits: 2D k4 s2 with 60-68 channels
// each way (2 segments x 2 taps a phase: 240-272 triples where a channel
// block holds them all; the rest in a block of fewer channels), and 1D
// lines of 1-3 tiles with 4-32 output channels (1-8 channel blocks).
TEST(PlanarF32, FlatTapListLimits) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  uint32_t seed = 300;
  for (int64_t c : {60, 63, 64, 65, 68})
    check(make(2, 1, 1, c, c, {5, 9}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}), seed++);
  for (int64_t line : {10, 20, 35})
    for (int64_t oc : {4, 8, 12, 16, 32})
      check(make(1, 2, 1, 3, oc, {line}, {4}, {2}, {1}, {1}, {1}), seed++);
}

// Depthwise backward-data (its own rows kernel): planes whose rows stay in
// the buffer whole (runs of interior rows in one call) and larger ones
// (rows copied per output row), few planes (items split into row ranges),
// every rank, strides above the kernel, dilation, pads past the kernel (rows
// with no tap), thread counts; random shapes first.
TEST(PlanarF32, DepthwiseBackwardData) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  std::mt19937 rng(5151);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int done = 0;
  for (int attempt = 0; done < 150 && attempt < 10000; ++attempt) {
    const int S = static_cast<int>(uni(1, 3));
    Axes ax;
    if (!random_axes(uni, S, uni(0, 8) == 0, 90, ax)) continue;
    const ConvProblem p = make(S, uni(1, 3), uni(1, 6), 1, 1, ax.I, ax.K, ax.s, ax.d, ax.pb, ax.pe, ax.op);
    ASSERT_TRUE(x86::planar_depthwise_backward_data(p) || p.taps() % 16 == 0) << describe(p);
    check(p, static_cast<uint32_t>(attempt), static_cast<int>(uni(1, 3)));
    if (::testing::Test::HasFailure()) return;
    ++done;
  }
  EXPECT_EQ(done, 150);
  const std::vector<ConvProblem> layers = {
      make(2, 3, 5, 1, 1, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}),      // whole planes
      make(2, 1, 2, 1, 1, {60, 100}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}),     // rows copied
      make(2, 1, 1, 1, 1, {61, 99}, {3, 5}, {3, 2}, {2, 1}, {4, 5}, {0, 2}, {2, 1}),
      make(3, 2, 3, 1, 1, {5, 6, 17}, {3, 3, 3}, {2, 1, 2}, {1, 2, 1}, {1, 2, 1}, {1, 0, 2}),
      make(1, 2, 4, 1, 1, {300}, {5}, {4}, {1}, {7}, {6}),                        // pads > kernel
      make(2, 1, 3, 1, 1, {9, 40}, {2, 2}, {5, 5}, {1, 1}, {0, 0}, {0, 0}, {4, 4}),  // stride > K
  };
  for (size_t i = 0; i < layers.size(); ++i) {
    ASSERT_TRUE(x86::planar_depthwise_backward_data(layers[i])) << describe(layers[i]);
    for (int nt : {1, 2, 3}) check(layers[i], static_cast<uint32_t>(100 + i), nt);
  }
}

// The NCX path rule on Intel's and AMD's AVX-512 cores (x86::planar_preferred's
// amd; pure functions of the shapes, checked on any CPU): AlexNet's
// 96 <- 3 channels k11 s4 backward passes, a depthwise 2x upsampling, k2 s2
// upsamplings of 128 -> 64 channels (2D: little work per element; 2D and 3D
// backward-data GEMMs) and the 36 -> 4 k3 s3 upsampler's backward-weights.
TEST(PlanarF32, NcxRuleIntelAmd) {
  const ConvProblem alex = make(2, 4, 1, 96, 3, {55, 55}, {11, 11}, {4, 4}, {1, 1}, {0, 0}, {0, 0});
  const ConvProblem dw = make(2, 8, 64, 1, 1, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1});
  const ConvProblem up = make(2, 2, 1, 128, 64, {64, 64}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0});
  const ConvProblem big_rgb = make(2, 1, 1, 36, 4, {360, 640}, {3, 3}, {3, 3}, {1, 1}, {0, 0}, {0, 0});
  const ConvProblem up3d = make(3, 1, 1, 128, 64, {16, 16, 16}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0});
  for (bool amd : {false, true}) {
    SCOPED_TRACE(amd ? "AMD" : "Intel");
    EXPECT_TRUE(x86::planar_preferred(Isa::Avx512, alex, Pass::Forward, amd));
    EXPECT_EQ(x86::planar_preferred(Isa::Avx512, alex, Pass::BackwardData, amd), !amd);
    EXPECT_EQ(x86::planar_preferred(Isa::Avx512, dw, Pass::Forward, amd), !amd);
    EXPECT_TRUE(x86::planar_preferred(Isa::Avx512, dw, Pass::BackwardData, amd));
    EXPECT_EQ(x86::planar_preferred(Isa::Avx512, up, Pass::Forward, amd), !amd);
    // Backward-data of k2 s2 as a GEMM over (channel, tap) columns: planar
    // on Intel; on AMD channels-last from 256 columns (64 x 4 in 2D, 64 x 8
    // in 3D).
    EXPECT_EQ(x86::planar_preferred(Isa::Avx512, up, Pass::BackwardData, amd), !amd);
    EXPECT_EQ(x86::planar_preferred(Isa::Avx512, up3d, Pass::BackwardData, amd), !amd);
    // Backward-weights with few diff_dst channels: channels-last (fused taps)
    // when the work per element is large; the 36 -> 4 k3 s3 upsampler's 66 MB
    // of activations at 18 multiply-adds per element stay planar.
    EXPECT_FALSE(x86::planar_preferred(Isa::Avx512, alex, Pass::BackwardWeights, amd));
    EXPECT_TRUE(x86::planar_preferred(Isa::Avx512, big_rgb, Pass::BackwardWeights, amd));
    // Deep layers: the im2col GEMMs at 85 multiply-adds per element (2D k2
    // s2 128 -> 64 on 64x64), channels-last at 819 (HiFi-GAN's 1D 512 -> 256
    // k16 s8 on 256).
    const ConvProblem hifi = make(1, 1, 1, 512, 256, {256}, {16}, {8}, {1}, {4}, {4});
    EXPECT_TRUE(x86::planar_preferred(Isa::Avx512, up, Pass::BackwardWeights, amd));
    EXPECT_FALSE(x86::planar_preferred(Isa::Avx512, hifi, Pass::BackwardWeights, amd));
    // AVX2 from 1000 per element: HiFi-GAN (819) and the 512 -> 512 k3 s2
    // on 4x4 (760) stay planar; 512 -> 256 k4 s2 on 32x32 (1365) and the 3D
    // U-Net 512 -> 256 k3 on 8x9x9 (3575) go channels-last.
    const ConvProblem d4x4 = make(2, 4, 1, 512, 512, {4, 4}, {3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0});
    const ConvProblem d32 = make(2, 1, 1, 512, 256, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1});
    const ConvProblem d3d =
        make(3, 1, 1, 512, 256, {8, 9, 9}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0});
    EXPECT_TRUE(x86::planar_preferred(Isa::Avx2, up, Pass::BackwardWeights, amd));
    EXPECT_TRUE(x86::planar_preferred(Isa::Avx2, hifi, Pass::BackwardWeights, amd));
    EXPECT_TRUE(x86::planar_preferred(Isa::Avx2, d4x4, Pass::BackwardWeights, amd));
    EXPECT_FALSE(x86::planar_preferred(Isa::Avx2, d32, Pass::BackwardWeights, amd));
    EXPECT_FALSE(x86::planar_preferred(Isa::Avx2, d3d, Pass::BackwardWeights, amd));
  }
  // AMD, one group of few channels with little work per element:
  // 16 channels under k3 on 32x32 planar both ways, 32 channels forward
  // channels-last (over 24 a side), 64 channels of a 1x1 backward-data planar.
  // On AVX2 (any vendor) a 1x1 stride-1 forward of 32+ channels a side is
  // planar: the backward-data GEMM of its transposed problem (pointwise_gemm;
  // the planar tiles had lost to channels-last there); AVX-512 keeps AMD's
  // measured channels-last.
  const ConvProblem c16 = make(2, 8, 1, 16, 16, {32, 32}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1});
  const ConvProblem c32 = make(2, 8, 1, 32, 32, {32, 32}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1});
  const ConvProblem c64 = make(2, 8, 1, 64, 64, {32, 32}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0});
  EXPECT_TRUE(x86::planar_preferred(Isa::Avx512, c16, Pass::Forward, true));
  EXPECT_TRUE(x86::planar_preferred(Isa::Avx512, c16, Pass::BackwardData, true));
  EXPECT_FALSE(x86::planar_preferred(Isa::Avx512, c32, Pass::Forward, true));
  EXPECT_FALSE(x86::planar_preferred(Isa::Avx512, c64, Pass::Forward, true));
  EXPECT_TRUE(x86::planar_preferred(Isa::Avx512, c64, Pass::BackwardData, true));
  EXPECT_TRUE(x86::planar_preferred(Isa::Avx2, c64, Pass::Forward, false));
  // ... not with groups, strides or pads (the im2col is not the src), nor
  // below the GEMM's 32 columns (16 input channels).
  const ConvProblem c64g = make(2, 8, 2, 64, 64, {32, 32}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0});
  const ConvProblem c64s2 = make(2, 8, 1, 64, 64, {32, 32}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0});
  const ConvProblem c16x64 = make(2, 8, 1, 16, 64, {32, 32}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0});
  EXPECT_FALSE(x86::planar_preferred(Isa::Avx2, c64g, Pass::Forward, false));
  EXPECT_FALSE(x86::planar_preferred(Isa::Avx2, c64s2, Pass::Forward, false));
  EXPECT_FALSE(x86::planar_preferred(Isa::Avx2, c16x64, Pass::Forward, false));
  // AMD, backward-data whose channels-last tiles would mostly multiply
  // zeros: 17 of 32 lanes and 24 % of the (pixel, tap) pairs inside (3D,
  // cropping pads) planar with 32 diff_dst channels; with 16 (benchdnn's 3D
  // ic tail) the channels-last tiles fuse taps and drop a line's padded
  // outer taps: channels-last, as without cropping pads (77 % inside) and
  // on Intel (lines of 8).
  const ConvProblem tail =
      make(3, 8, 1, 17, 16, {8, 8, 8}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {3, 3, 3}, {2, 2, 2});
  const ConvProblem tail32 =
      make(3, 8, 1, 17, 32, {8, 8, 8}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {3, 3, 3}, {2, 2, 2});
  const ConvProblem tail_uncropped =
      make(3, 8, 1, 17, 16, {8, 8, 8}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1});
  EXPECT_TRUE(x86::planar_preferred(Isa::Avx512, tail32, Pass::BackwardData, true));
  EXPECT_FALSE(x86::planar_preferred(Isa::Avx512, tail, Pass::BackwardData, true));
  EXPECT_FALSE(x86::planar_preferred(Isa::Avx512, tail, Pass::BackwardData, false));
  EXPECT_FALSE(x86::planar_preferred(Isa::Avx512, tail_uncropped, Pass::BackwardData, true));
  // AMD, backward-data of 1x1 kernels as a GEMM over 480-512 columns:
  // planar at stride 1 (GoogLeNet 4a, 192 <- 480), channels-last at stride 2
  // (ResNet's 256 <- 512 with output padding, as when it is not gathered to
  // stride 1: small or cropped).
  const ConvProblem g4a = make(2, 16, 1, 192, 480, {14, 14}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0});
  const ConvProblem r50 =
      make(2, 4, 1, 256, 512, {28, 28}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {1, 1});
  EXPECT_TRUE(x86::planar_preferred(Isa::Avx512, g4a, Pass::BackwardData, true));
  EXPECT_FALSE(x86::planar_preferred(Isa::Avx512, r50, Pass::BackwardData, true));
  EXPECT_TRUE(x86::planar_preferred(Isa::Avx512, r50, Pass::BackwardData, false));
  // AVX2 (amd has no effect): depthwise backward-data planar, forward not.
  EXPECT_FALSE(x86::planar_preferred(Isa::Avx2, dw, Pass::Forward, false));
  EXPECT_TRUE(x86::planar_preferred(Isa::Avx2, dw, Pass::BackwardData, false));
  EXPECT_FALSE(x86::planar_preferred(Isa::Avx2, alex, Pass::BackwardData, false));
  // AVX2 (amd has no effect): backward-data mostly multiplying zeros (17 of
  // 24 lanes, 24 % of the pairs inside) planar, fused taps too (Zen 3); not
  // without the cropping pads (77 % inside). Backward-data of k2 s2 as a
  // GEMM: as on AMD's AVX-512 cores, channels-last from 256 (channel, tap)
  // columns (the 2D U-Net's 64 x 4, the 3D one's 64 x 8; Zen 3), while a
  // stride-1 1x1 (GoogLeNet 4a) keeps the GEMM.
  for (bool amd : {false, true}) {
    EXPECT_TRUE(x86::planar_preferred(Isa::Avx2, tail, Pass::BackwardData, amd));
    EXPECT_FALSE(x86::planar_preferred(Isa::Avx2, tail_uncropped, Pass::BackwardData, amd));
    EXPECT_FALSE(x86::planar_preferred(Isa::Avx2, up3d, Pass::BackwardData, amd));
    EXPECT_FALSE(x86::planar_preferred(Isa::Avx2, up, Pass::BackwardData, amd));
    EXPECT_TRUE(x86::planar_preferred(Isa::Avx2, g4a, Pass::BackwardData, amd));
  }
}

TEST(PlanarF32, ThreadCounts) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  for (int nt : {1, 3, 5}) {
    check(make(2, 1, 1, 12, 20, {7, 30}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}), 30, nt);
    check(make(1, 2, 3, 2, 3, {41}, {4}, {3}, {1}, {1}, {2}), 31, nt);
  }
}

TEST(PlanarF32, ZeroSizes) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  // Zero channels: forward without input channels is bias only; backward-data
  // without output channels is zeros.
  check(make(2, 2, 1, 0, 5, {3, 20}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}), 21);
  check(make(2, 2, 1, 5, 0, {3, 20}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}), 22);
  for (Isa isa : isas()) {
    const ConvProblem p = make(2, 0, 1, 4, 4, {3, 3}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1});
    const WeightsView wv{nullptr, 36, 9, {9, 3, 1}};
    EXPECT_TRUE(x86::planar_f32(isa, p, true, nullptr, wv, nullptr, nullptr, 2));
    EXPECT_TRUE(x86::planar_f32(isa, p, false, nullptr, wv, nullptr, nullptr, 2));
  }
}

// Weights views over a dense buffer: IOX (the reference's) and XOI
// (K0, K1, K2, OCg, IC).
WeightsView iox_view(float* data, const ConvProblem& p) {
  return WeightsView{data, p.OCg * p.taps(), p.taps(), {p.K[1] * p.K[2], p.K[2], 1}};
}
WeightsView xoi_view(float* data, const ConvProblem& p) {
  const int64_t k_stride = p.OCg * p.IC();
  return WeightsView{data, 1, p.IC(), {p.K[1] * p.K[2] * k_stride, p.K[2] * k_stride, k_stride}};
}

// IOX weights copied into the XOI layout.
std::vector<float> to_xoi(const std::vector<float>& w, const ConvProblem& p) {
  const int64_t IC = p.IC(), T = p.taps();
  std::vector<float> wx(w.size());
  for (int64_t ic = 0; ic < IC; ++ic)
    for (int64_t oc = 0; oc < p.OCg; ++oc)
      for (int64_t k = 0; k < T; ++k) wx[(k * p.OCg + oc) * IC + ic] = w[(ic * p.OCg + oc) * T + k];
  return wx;
}

// Backward-weights on every ISA: random geometry into an XOI-strided result
// and the larger layers, against the reference.
void check_bwd_weights(Isa isa, const ConvProblem& p, uint32_t seed, int nthreads, bool iox,
                       bool gemm);
void check_bwd_weights(const ConvProblem& p, uint32_t seed, int nthreads, bool iox = false,
                       bool gemm = false) {
  for (Isa isa : isas()) check_bwd_weights(isa, p, seed, nthreads, iox, gemm);
}

void check_bwd_weights(Isa isa, const ConvProblem& p, uint32_t seed, int nthreads, bool iox,
                       bool gemm) {
  SCOPED_TRACE(std::string(isa_name(isa)) + " " + describe(p));
  if (gemm) {
    ASSERT_TRUE(x86::planar_bwd_weights_gemm(isa, p));
  }
  std::mt19937 rng(seed);
  const int64_t IC = p.IC(), OC = p.OC(), T = p.taps();
  auto x = random_ints(static_cast<size_t>(p.N * IC * p.src_spatial()), rng);
  auto dy = random_ints(static_cast<size_t>(p.N * OC * p.dst_spatial()), rng);
  std::vector<float> want(static_cast<size_t>(IC * p.OCg * T));
  const WeightsView wv = iox_view(want.data(), p);
  reference_backward_weights(p, DType::F32, ncx_view(x.data(), p.I, IC),
                             ncx_view(dy.data(), p.O, OC), wv, 1);
  std::vector<float> got(want.size(), NAN);
  // XOI, or IOX like the reference's.
  const WeightsView gv = iox ? iox_view(got.data(), p) : xoi_view(got.data(), p);
  ASSERT_TRUE(x86::planar_bwd_weights_f32(isa, p, x.data(), dy.data(), gv, nthreads));
  int64_t bad = 0;
  for (int64_t ic = 0; ic < IC; ++ic)
    for (int64_t oc = 0; oc < p.OCg; ++oc)
      for (int64_t k = 0; k < T; ++k) {
        const int64_t at = iox ? (ic * p.OCg + oc) * T + k : (k * p.OCg + oc) * IC + ic;
        bad += !(got[at] == want[(ic * p.OCg + oc) * T + k]);
      }
  EXPECT_EQ(bad, 0);
}

TEST(PlanarF32, BackwardWeights) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  std::mt19937 rng(777);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int done = 0;
  for (int attempt = 0; done < 300 && attempt < 10000; ++attempt) {
    const int S = static_cast<int>(uni(1, 3));
    const bool pointwise = uni(0, 5) == 0;
    Axes ax;
    if (!random_axes(uni, S, pointwise, 90, ax)) continue;
    const ConvProblem p =
        make(S, uni(1, 3), uni(1, 3), uni(1, 9), uni(1, 9), ax.I, ax.K, ax.s, ax.d, ax.pb, ax.pe, ax.op);
    if (p.macs() > 3e5) continue;
    check_bwd_weights(p, static_cast<uint32_t>(attempt), static_cast<int>(uni(1, 3)));
    if (::testing::Test::HasFailure()) return;
    ++done;
  }
  EXPECT_EQ(done, 300);
  check_bwd_weights(make(1, 2, 1, 64, 3, {300}, {7}, {2}, {1}, {3}, {2}, {1}), 1, 2);
  check_bwd_weights(make(2, 1, 1, 4, 36, {5, 100}, {3, 3}, {3, 3}, {1, 1}, {0, 0}, {0, 0}), 2, 3);
  check_bwd_weights(make(2, 2, 1, 20, 12, {6, 7}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}), 3, 2);
}

// The GEMM path (x86::planar_bwd_weights_gemm, asserted for every ISA: 8+
// src channels per group, 16+ (channel, tap) columns; AVX-512 128+ positions
// per image and rows of 48+ or 1x1 kernels, AVX2 channels x row length of
// 1024+, 16+ positions and 3/4 of the (tap, position) pairs inside
// diff_dst): 1x1 and larger kernels with strides, dilations, pads,
// output_padding, groups, column and chunk tails, reduction parts and column
// panels, diff_dst rows shared by several taps (phase rows), both result
// layouts and several thread counts.
TEST(PlanarF32, BackwardWeightsGemm) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  int seed = 100;
  for (bool iox : {false, true})
    for (int nt : {1, 2, 3}) {
      SCOPED_TRACE(std::string(iox ? "IOX" : "XOI") + " threads " + std::to_string(nt));
      check_bwd_weights(make(2, 2, 1, 24, 37, {14, 14}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}), ++seed, nt, iox, true);
      check_bwd_weights(make(2, 3, 1, 13, 16, {9, 30}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {1, 1}), ++seed, nt, iox, true);
      check_bwd_weights(make(2, 1, 2, 8, 300, {5, 130}, {1, 1}, {2, 3}, {1, 1}, {1, 2}, {0, 1}), ++seed, nt, iox, true);
      check_bwd_weights(make(1, 2, 1, 33, 20, {600}, {1}, {1}, {1}, {0}, {0}), ++seed, nt, iox, true);
      check_bwd_weights(make(3, 1, 3, 9, 17, {3, 5, 120}, {1, 1, 1}, {2, 1, 3}, {1, 1, 1}, {0, 0, 2}, {0, 0, 0}, {1, 0, 2}), ++seed, nt, iox, true);
      check_bwd_weights(make(2, 0, 1, 16, 16, {4, 64}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}), ++seed, nt, iox, true);
      check_bwd_weights(make(2, 3, 1, 9, 5, {6, 120}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 0}, {1, 1}), ++seed, nt, iox, true);
      check_bwd_weights(make(1, 1, 1, 12, 40, {700}, {5}, {3}, {2}, {3}, {1}), ++seed, nt, iox, true);
      check_bwd_weights(make(3, 2, 2, 8, 7, {4, 3, 130}, {2, 2, 3}, {1, 2, 2}, {2, 1, 1}, {1, 0, 2}, {0, 0, 0}), ++seed, nt, iox, true);
      check_bwd_weights(make(3, 1, 1, 9, 6, {6, 3, 120}, {2, 2, 3}, {1, 2, 2}, {2, 1, 1}, {1, 0, 2}, {0, 1, 0}, {1, 0, 1}), ++seed, nt, iox, true);
      check_bwd_weights(make(2, 1, 1, 16, 100, {4, 64}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}), ++seed, nt, iox, true);
      // Taps sharing phase rows (K > s) over more diff_dst rows than the row cache holds.
      check_bwd_weights(make(2, 2, 1, 16, 3, {40, 64}, {7, 7}, {4, 4}, {1, 1}, {3, 3}, {2, 3}, {0, 1}), ++seed, nt, iox, true);
    }
  // AVX2: no GEMM when under 3/4 of the (tap, position) pairs are inside
  // diff_dst (AlexNet's k3 d3 p3 on 9x9: 60 %; the same with d1: 86 %).
  if (isa_supported(Isa::Avx2)) {
    EXPECT_FALSE(x86::planar_bwd_weights_gemm(
        Isa::Avx2, make(2, 8, 2, 192, 192, {9, 9}, {3, 3}, {1, 1}, {3, 3}, {3, 3}, {3, 3})));
    EXPECT_TRUE(x86::planar_bwd_weights_gemm(
        Isa::Avx2, make(2, 8, 2, 192, 192, {9, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1})));
  }
}

// Backward-data GEMMs (every ISA; x86::planar_backward_data_gemm: kernels that
// do not overlap, 32+ src channels per group, 32-512 (channel, tap) columns,
// 64+ positions): 1x1 kernels with and without strides, k2 s2 and k3 s3 with
// pads and output_padding, groups, 3D, row / slice / reduction-part tails,
// channel blocks for few items, IOX (read in place) and XOI (packed) weights
// and several thread counts, against the reference.
void check_bwd_data_gemm(Isa isa, const ConvProblem& p, uint32_t seed, int nthreads, bool iox,
                         bool gemm);
void check_bwd_data_gemm(const ConvProblem& p, uint32_t seed, int nthreads, bool iox,
                         bool gemm = true) {
  for (Isa isa : isas()) check_bwd_data_gemm(isa, p, seed, nthreads, iox, gemm);
}

void check_bwd_data_gemm(Isa isa, const ConvProblem& p, uint32_t seed, int nthreads, bool iox,
                         bool gemm) {
  SCOPED_TRACE(std::string(isa_name(isa)) + " " + describe(p));
  if (gemm) {
    ASSERT_TRUE(x86::planar_backward_data_gemm(isa, p));
  }
  std::mt19937 rng(seed);
  const int64_t IC = p.IC(), OC = p.OC(), T = p.taps();
  auto w = random_ints(static_cast<size_t>(IC * p.OCg * T), rng);  // IOX
  auto dy = random_ints(static_cast<size_t>(p.N * OC * p.dst_spatial()), rng);
  const WeightsView wv = iox_view(w.data(), p);
  std::vector<float> want(static_cast<size_t>(p.N * IC * p.src_spatial()));
  reference_backward_data(p, DType::F32, ncx_view(dy.data(), p.O, OC), wv,
                          ncx_view(want.data(), p.I, IC), 1);
  std::vector<float> wx = to_xoi(w, p);
  const WeightsView xv = xoi_view(wx.data(), p);
  std::vector<float> got(want.size(), NAN);
  ASSERT_TRUE(x86::planar_f32(isa, p, false, dy.data(), iox ? wv : xv, nullptr, got.data(),
                              nthreads));
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) bad += !(got[i] == want[i]);  // NaN: unwritten
  EXPECT_EQ(bad, 0);
}

TEST(PlanarF32, BackwardDataGemm) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  int seed = 200;
  for (bool iox : {false, true})
    for (int nt : {1, 2, 3}) {
      SCOPED_TRACE(std::string(iox ? "IOX" : "XOI") + " threads " + std::to_string(nt));
      check_bwd_data_gemm(make(2, 2, 1, 40, 33, {9, 11}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}), ++seed, nt, iox);
      check_bwd_data_gemm(make(2, 3, 1, 37, 100, {9, 30}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, {1, 1}), ++seed, nt, iox);
      check_bwd_data_gemm(make(2, 1, 2, 50, 20, {13, 17}, {2, 2}, {2, 2}, {1, 1}, {1, 0}, {0, 1}, {0, 1}), ++seed, nt, iox);
      check_bwd_data_gemm(make(2, 1, 1, 36, 4, {10, 40}, {3, 3}, {3, 3}, {1, 1}, {0, 1}, {2, 0}), ++seed, nt, iox);
      check_bwd_data_gemm(make(3, 2, 1, 33, 16, {3, 5, 6}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}), ++seed, nt, iox);
      check_bwd_data_gemm(make(1, 1, 1, 64, 300, {700}, {1}, {1}, {1}, {0}, {0}), ++seed, nt, iox);  // parts, chunks
      check_bwd_data_gemm(make(2, 1, 1, 100, 64, {8, 8}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}), ++seed, nt, iox);  // blocks
    }
}

// A one-pixel src under a covering kernel: backward-data as dot products,
// forward as one GEMM over (oc, tap) columns; IOX weights read in place, XOI
// packed first; bias or none, groups, image (tile rows) and column tails.
void check_one_pixel_forward(Isa isa, const ConvProblem& p, uint32_t seed, int nthreads,
                             bool iox, bool with_bias) {
  SCOPED_TRACE(std::string(isa_name(isa)) + " " + describe(p));
  std::mt19937 rng(seed);
  const int64_t IC = p.IC(), OC = p.OC(), T = p.taps();
  auto w = random_ints(static_cast<size_t>(IC * p.OCg * T), rng);  // IOX
  auto x = random_ints(static_cast<size_t>(p.N * IC), rng);
  auto bias = random_ints(static_cast<size_t>(OC), rng);
  const WeightsView wv = iox_view(w.data(), p);
  std::vector<float> want(static_cast<size_t>(p.N * OC * p.dst_spatial()));
  reference_forward(p, DType::F32, ncx_view(x.data(), p.I, IC), wv, with_bias ? bias.data() : nullptr,
                    ncx_view(want.data(), p.O, OC), 1);
  std::vector<float> wx = to_xoi(w, p);
  const WeightsView xv = xoi_view(wx.data(), p);
  std::vector<float> got(want.size(), NAN);
  ASSERT_TRUE(x86::planar_f32(isa, p, true, x.data(), iox ? wv : xv,
                              with_bias ? bias.data() : nullptr, got.data(), nthreads));
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) bad += !(got[i] == want[i]);
  EXPECT_EQ(bad, 0);
}

TEST(PlanarF32, OnePixelCovering) {
  if (isas().empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  int seed = 400;
  for (bool iox : {false, true})
    for (int nt : {1, 2}) {
      check_bwd_data_gemm(make(2, 6, 1, 9, 4, {1, 1}, {4, 4}, {1, 1}, {1, 1}, {0, 0}, {0, 0}), ++seed, nt, iox, false);
      check_bwd_data_gemm(make(3, 5, 2, 3, 2, {1, 1, 1}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}), ++seed, nt, iox, false);
      for (bool b : {false, true})
        for (Isa isa : isas()) {
          check_one_pixel_forward(isa, make(2, 27, 1, 9, 5, {1, 1}, {4, 4}, {1, 1}, {1, 1}, {0, 0}, {0, 0}), ++seed, nt, iox, b);
          check_one_pixel_forward(isa, make(3, 5, 2, 3, 3, {1, 1, 1}, {2, 3, 2}, {2, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}), ++seed, nt, iox, b);
          check_one_pixel_forward(isa, make(1, 13, 3, 4, 7, {1}, {6}, {3}, {1}, {0}, {0}), ++seed, nt, iox, b);
        }
    }
}

}  // namespace
}  // namespace tct
