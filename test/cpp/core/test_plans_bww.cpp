// Golden plans of the channels-last f32 backward-weights driver: the plan
// (describe_bwd_weights_f32) of every problem of its C++ tests, the benchmark
// layers and a set of random problems, for both ISAs (planning needs no CPU
// support), every weights layout and 1, 2, 4 and 16 threads, compared with
// test/golden/plans_bww.txt. TCT_UPDATE_GOLDEN=1 rewrites the file (only for
// a plan change that is meant: see test/golden/README.md).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/x86/x86.h"
#include "problem.h"

namespace tct {
namespace {

const char* const kGolden = TCT_SOURCE_DIR "/test/golden/plans_bww.txt";

// A problem in graph terms (per spatial axis: size, kernel, stride, dilation,
// pads, output padding).
struct Spec {
  std::string name;
  int64_t N, G, ICg, OCg;
  std::vector<int64_t> I, K, s, d, pb, pe, op;
};

std::string join(const std::vector<int64_t>& v) {
  std::string r;
  for (size_t i = 0; i < v.size(); ++i) r += (i ? "x" : "") + std::to_string(v[i]);
  return r;
}

// The key of a problem: its name, then every size.
std::string key(const Spec& c) {
  std::ostringstream o;
  o << c.name << " N" << c.N << " G" << c.G << " " << c.ICg << "x" << c.OCg << " I" << join(c.I)
    << " K" << join(c.K) << " s" << join(c.s) << " d" << join(c.d) << " p" << join(c.pb) << "/"
    << join(c.pe) << " op" << join(c.op);
  return o.str();
}

ConvProblem resolve(const Spec& c) {
  const size_t S = c.I.size();
  Attributes a;
  a.strides = c.s;
  a.dilations = c.d;
  a.pads_begin = c.pb;
  a.pads_end = c.pe;
  a.output_padding = c.op;
  a.groups = c.G;
  a.data_format = DataFormat::NXC;
  a.weights_format = WeightsFormat::IOX;
  Shape src{c.N}, dst{c.N}, w{c.G * c.ICg, c.OCg};
  for (size_t i = 0; i < S; ++i) {
    src.push_back(c.I[i]);
    dst.push_back(c.s[i] * (c.I[i] - 1) + c.d[i] * (c.K[i] - 1) + 1 + c.op[i] - c.pb[i] - c.pe[i]);
    w.push_back(c.K[i]);
  }
  src.push_back(c.G * c.ICg);
  dst.push_back(c.G * c.OCg);
  return resolve_backward_weights(src, dst, w, a);
}

// The same values on every axis (pads on both sides, no output padding).
Spec simple(const char* name, int S, int64_t N, int64_t G, int64_t ICg, int64_t OCg, int64_t I,
            int64_t K, int64_t s, int64_t pad) {
  const std::vector<int64_t> v(static_cast<size_t>(S), 0);
  auto all = [&](int64_t x) { return std::vector<int64_t>(static_cast<size_t>(S), x); };
  return Spec{name, N, G, ICg, OCg, all(I), all(K), all(s), all(1), all(pad), all(pad), v};
}

// The problems of test_fast_bwd_weights.cpp.
std::vector<Spec> test_problems() {
  std::vector<Spec> r = {
      simple("realistic", 2, 2, 1, 64, 32, 12, 4, 2, 1),
      simple("realistic", 2, 2, 1, 48, 40, 9, 3, 1, 1),
      simple("realistic", 2, 1, 1, 96, 80, 7, 3, 2, 1),
      simple("realistic", 1, 3, 1, 33, 70, 50, 5, 3, 2),
      simple("realistic", 3, 2, 1, 20, 17, 5, 3, 2, 1),
      simple("realistic", 2, 1, 1, 16, 16, 6, 1, 1, 0),
      simple("realistic", 2, 2, 4, 8, 8, 7, 3, 1, 1),
      simple("realistic", 2, 2, 37, 1, 1, 9, 3, 2, 1),
      simple("realistic", 2, 2, 70, 1, 1, 6, 4, 2, 1),
      simple("realistic", 2, 2, 6, 1, 3, 6, 3, 1, 1),
      simple("realistic", 2, 2, 5, 3, 1, 6, 3, 1, 1),
      simple("strides", 2, 2, 1, 17, 19, 5, 2, 4, 0),
      simple("strides", 1, 2, 1, 5, 23, 9, 1, 3, 0),
      simple("batch0", 2, 0, 1, 20, 24, 5, 3, 1, 1),
      simple("batch0", 1, 0, 8, 1, 1, 5, 3, 2, 1),
      simple("threads", 2, 1, 1, 64, 128, 5, 4, 1, 1),
      simple("threads", 2, 3, 1, 16, 16, 5, 1, 1, 0),
      simple("threads", 2, 3, 1, 30, 50, 6, 3, 2, 1),
      simple("threads", 2, 1, 20, 1, 1, 6, 3, 2, 1),
      simple("packed", 1, 1, 1, 130, 136, 37, 16, 8, 4),
      simple("packed", 1, 2, 1, 144, 129, 29, 12, 3, 2),
      simple("packed", 2, 1, 2, 130, 128, 6, 4, 2, 1),
      simple("packed", 1, 2, 1, 300, 64, 1000, 1, 1, 0),
      simple("packed", 3, 1, 1, 200, 96, 4, 3, 1, 1),
      simple("copies", 3, 1, 1, 136, 128, 3, 2, 2, 0),
      simple("shared", 1, 3, 1, 128, 136, 100, 3, 1, 1),
      simple("shared", 2, 2, 1, 130, 128, 7, 2, 2, 0),
      simple("shared", 3, 1, 1, 64, 72, 5, 2, 2, 0),
      simple("shared", 2, 2, 1, 136, 130, 8, 4, 2, 1),
      simple("shared", 2, 2, 1, 136, 128, 8, 4, 2, 1),
      simple("shared", 1, 1, 1, 129, 128, 2500, 2, 2, 0),
      simple("stream", 1, 1, 1, 512, 256, 2, 16, 8, 4),
      simple("local", 2, 2, 1, 160, 144, 3, 3, 2, 0),
      simple("local", 3, 1, 2, 136, 130, 3, 2, 2, 0),
      simple("local", 2, 1, 1, 800, 48, 26, 2, 2, 0),
      simple("fused", 2, 2, 1, 40, 3, 23, 11, 4, 3),
      simple("fused", 1, 3, 1, 33, 2, 30, 5, 2, 2),
      simple("fused", 1, 1, 1, 20, 1, 17, 4, 1, 3),
      simple("fused", 3, 1, 1, 17, 3, 5, 3, 2, 1),
      simple("fewrows", 2, 2, 1, 100, 3, 9, 5, 4, 0),
      simple("fewrows", 2, 1, 1, 6, 130, 7, 3, 2, 1),
      simple("fewrows", 1, 2, 1, 5, 70, 30, 11, 4, 2),
      simple("onevec", 2, 2, 1, 12, 8, 6, 3, 1, 1),
      simple("onevec", 2, 2, 1, 8, 12, 6, 3, 1, 1),
      simple("onevec", 2, 1, 1, 28, 16, 5, 3, 1, 1),
      simple("onevec", 2, 2, 1, 10, 8, 5, 3, 1, 1),
      simple("onevec", 1, 2, 1, 30, 16, 40, 4, 1, 1),
      simple("onevec", 2, 1, 1, 100, 72, 7, 3, 2, 1),
      simple("onevec", 2, 1, 1, 72, 100, 7, 3, 1, 1),
  };
  const int64_t grouped[][3] = {{13, 2, 2}, {7, 4, 4}, {5, 1, 8}, {9, 2, 8}, {6, 8, 4},
                                {3, 8, 8},  {17, 1, 2}, {4, 4, 2}, {11, 3, 4}};
  for (const auto& g : grouped) {
    r.push_back(simple("grouped", 2, 2, g[0], g[1], g[2], 6, 3, 2, 1));
    r.push_back(simple("grouped", 1, 1, g[0], g[1], g[2], 9, 2, 1, 0));
  }
  r.push_back({"dilated", 2, 1, 21, 35, {7, 7}, {3, 3}, {2, 2}, {2, 3}, {0, 4}, {3, 1}, {1, 2}});
  r.push_back({"dilated", 1, 3, 5, 6, {4, 4, 4}, {2, 2, 2}, {1, 1, 1}, {2, 1, 3}, {1, 0, 2},
               {0, 1, 0}, {0, 0, 0}});
  r.push_back({"pads_hide", 2, 1, 5, 7, {3}, {5}, {1}, {1}, {4}, {0}, {0}});
  r.push_back({"packed_dil", 2, 1, 128, 160, {30}, {7}, {2}, {3}, {3}, {3}, {1}});
  r.push_back({"fused", 2, 1, 24, 2, {9, 9}, {3, 3}, {3, 3}, {1, 1}, {1, 2}, {0, 3}, {1, 2}});
  r.push_back({"fused_line1", 3, 1, 3, 2, {2, 1}, {3, 3}, {3, 1}, {1, 1}, {1, 1}, {1, 1}, {0, 0}});
  r.push_back(
      {"fewrows_dil", 2, 1, 100, 3, {9, 9}, {5, 5}, {4, 4}, {1, 2}, {0, 0}, {0, 4}, {0, 0}});
  return r;
}

// benchmarks/cases.py (benchdnn shapes and model layers), graph terms.
std::vector<Spec> benchmark_problems() {
  return {
      {"1d_alexnet_deconv3", 32, 1, 384, 256, {13}, {3}, {1}, {1}, {1}, {1}, {0}},
      {"1d_googlenet_conv1_s2", 32, 1, 64, 3, {112}, {7}, {2}, {1}, {3}, {2}, {0}},
      {"1d_masknet_deconv1_op1", 16, 1, 64, 3, {512}, {7}, {2}, {1}, {0}, {0}, {1}},
      {"1d_dilated_asym_pads", 64, 1, 8, 8, {5}, {3}, {1}, {3}, {3}, {6}, {0}},
      {"1d_vocoder_512to256_k16s8", 1, 1, 512, 256, {283}, {16}, {8}, {1}, {4}, {4}, {0}},
      {"1d_ci_tail_depthwise", 64, 17, 1, 1, {5}, {3}, {1}, {1}, {1}, {1}, {0}},
      {"2d_alexnet_deconv1_k11s4", 4, 1, 96, 3, {55, 55}, {11, 11}, {4, 4}, {1, 1}, {0, 0},
       {0, 0}, {0, 0}},
      {"2d_alexnet_deconv2_g2", 2, 2, 128, 48, {27, 27}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2},
       {0, 0}},
      {"2d_googlenet_4d_3x3", 8, 1, 288, 144, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1},
       {0, 0}},
      {"2d_googlenet_4a_1x1", 16, 1, 192, 480, {14, 14}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0},
       {0, 0}},
      {"2d_resnet50_1x1_s2_op1", 4, 1, 256, 512, {28, 28}, {1, 1}, {2, 2}, {1, 1}, {0, 0},
       {0, 0}, {1, 1}},
      {"2d_alexnet_dil3_g2", 8, 2, 192, 192, {9, 9}, {3, 3}, {1, 1}, {3, 3}, {1, 1}, {1, 1},
       {0, 0}},
      {"2d_googlenet_conv1_s2_d2", 4, 1, 64, 3, {109, 109}, {7, 7}, {2, 2}, {2, 2}, {3, 3},
       {2, 2}, {0, 0}},
      {"2d_512to256_k4s2_32x32", 1, 1, 512, 256, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {1, 1},
       {1, 1}, {0, 0}},
      {"2d_unet_1024to512_k2s2", 1, 1, 1024, 512, {23, 30}, {2, 2}, {2, 2}, {1, 1}, {0, 0},
       {0, 0}, {0, 0}},
      {"2d_512to512_k3s2_4x4", 4, 1, 512, 512, {4, 4}, {3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0},
       {0, 0}},
      {"2d_36to4_k3s3_360x640", 1, 1, 36, 4, {360, 640}, {3, 3}, {3, 3}, {1, 1}, {0, 0}, {0, 0},
       {0, 0}},
      {"2d_ci_oc_tail_gemm", 32, 1, 16, 17, {8, 8}, {3, 3}, {1, 1}, {1, 1}, {3, 3}, {2, 2},
       {0, 0}},
      {"2d_ci_oc_tail_grouped", 32, 4, 4, 5, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1},
       {0, 0}},
      {"2d_ci_tail_depthwise", 64, 17, 1, 1, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1},
       {0, 0}},
      {"3d_unet_deconv8", 1, 1, 512, 256, {8, 9, 9}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0},
       {0, 0, 0}, {0, 0, 0}},
      {"3d_unet_dilated_deconv8", 1, 1, 512, 256, {6, 7, 7}, {3, 3, 3}, {1, 1, 1}, {2, 2, 2},
       {0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
      {"3d_unet_320to320_k2s2", 1, 1, 320, 320, {7, 7, 5}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1},
       {0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
      {"3d_1x1_s2", 16, 1, 16, 16, {5, 5, 5}, {1, 1, 1}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0},
       {0, 0, 0}, {0, 0, 0}},
      {"3d_ci_grouped", 8, 4, 4, 4, {5, 5, 5}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1},
       {1, 1, 1}, {0, 0, 0}},
      {"3d_ci_depthwise", 8, 16, 1, 1, {5, 5, 5}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1},
       {1, 1, 1}, {0, 0, 0}},
      {"3d_ci_ic_tail_gemm", 8, 1, 17, 16, {8, 8, 8}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1},
       {3, 3, 3}, {2, 2, 2}, {0, 0, 0}},
      {"dcgan_z_100to512_k4", 64, 1, 100, 512, {1, 1}, {4, 4}, {1, 1}, {1, 1}, {0, 0}, {0, 0},
       {0, 0}},
      {"dcgan_512to256_8x8", 4, 1, 512, 256, {8, 8}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1},
       {0, 0}},
      {"dcgan_256to128_16x16", 4, 1, 256, 128, {16, 16}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1},
       {0, 0}},
      {"dcgan_128to64_32x32", 4, 1, 128, 64, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1},
       {0, 0}},
      {"dcgan_64to3_64x64", 4, 1, 64, 3, {64, 64}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1},
       {0, 0}},
      {"unet2d_128to64_k2s2_64x64", 2, 1, 128, 64, {64, 64}, {2, 2}, {2, 2}, {1, 1}, {0, 0},
       {0, 0}, {0, 0}},
      {"unet3d_128to64_k2s2_16^3", 1, 1, 128, 64, {16, 16, 16}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1},
       {0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
      {"unet3d_256to128_k2s2_8^3", 2, 1, 256, 128, {8, 8, 8}, {2, 2, 2}, {2, 2, 2}, {1, 1, 1},
       {0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
      {"hifigan_512to256_k16s8", 1, 1, 512, 256, {256}, {16}, {8}, {1}, {4}, {4}, {0}},
      {"hifigan_128to64_k4s2", 1, 1, 128, 64, {4096}, {4}, {2}, {1}, {1}, {1}, {0}},
      {"dw_up_64ch_k4s2_32x32", 8, 64, 1, 1, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1},
       {0, 0}},
  };
}

// Random problems of every kind (dense, grouped, depthwise; 1D to 3D; wide
// and narrow), from raw mt19937 draws (the same on every standard library).
std::vector<Spec> random_problems() {
  std::mt19937 rng(20);
  auto uni = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint32_t>(hi - lo + 1));
  };
  std::vector<Spec> r;
  for (int it = 0; it < 36; ++it) {
    const int S = 1 + it % 3;
    const int kind = (it / 3) % 4;  // 0 narrow dense, 1 wide dense, 2 grouped, 3 depthwise
    Spec c;
    c.name = "random";
    c.N = uni(1, 4);
    c.G = kind < 2 ? 1 : kind == 2 ? uni(2, 12) : uni(2, 80);
    c.ICg = kind == 0 ? uni(1, 70) : kind == 1 ? uni(64, 320) : kind == 2 ? uni(1, 24) : 1;
    c.OCg = kind == 0 ? uni(1, 70) : kind == 1 ? uni(64, 320) : kind == 2 ? uni(1, 24) : 1;
    const int64_t max_i = S == 1 ? 300 : S == 2 ? 24 : 8;
    for (int i = 0; i < S; ++i) {
      for (;;) {
        const int64_t I = uni(1, max_i), K = uni(1, S == 1 ? 16 : S == 2 ? 5 : 3), s = uni(1, 4),
                      d = uni(1, 100) < 70 ? 1 : uni(2, 3);
        const int64_t ek = d * (K - 1) + 1;
        const int64_t pb = uni(0, ek - 1), pe = uni(0, ek - 1), op = uni(0, std::max(s, d) - 1);
        if (s * (I - 1) + ek + op - pb - pe < 1) continue;
        c.I.push_back(I), c.K.push_back(K), c.s.push_back(s), c.d.push_back(d);
        c.pb.push_back(pb), c.pe.push_back(pe), c.op.push_back(op);
        break;
      }
    }
    r.push_back(c);
  }
  return r;
}

// "key :: plan" for every problem, ISA, layout and thread count, in order.
std::vector<std::string> plan_lines() {
  // The tests' problems in every layout; the others in torch's (IOX) and the ops' default (XOI).
  std::vector<std::pair<Spec, int>> all;  // (problem, layouts)
  for (const Spec& c : test_problems()) all.push_back({c, 4});
  for (const Spec& c : benchmark_problems()) all.push_back({c, 2});
  for (const Spec& c : random_problems()) all.push_back({c, 2});
  const WeightsFormat formats[] = {WeightsFormat::IOX, WeightsFormat::XOI, WeightsFormat::OIX,
                                   WeightsFormat::XIO};
  std::vector<std::string> lines;
  for (const auto& [c, nformats] : all) {
    const ConvProblem p = resolve(c);
    for (Isa isa : {Isa::Avx2, Isa::Avx512})
      for (int f = 0; f < nformats; ++f)
        for (int nt : {1, 2, 4, 16}) {
          const WeightsFormat wf = formats[f];
          lines.push_back(key(c) + " " + isa_name(isa) + " " + to_string(wf) + " nt" +
                          std::to_string(nt) + " :: " +
                          x86::describe_bwd_weights_f32(isa, p, nt, wf));
        }
  }
  return lines;
}

TEST(PlansBwdWeights, MatchGolden) {
  // Pinned to the generic uarch's tables (Intel's AVX-512 one differs in its
  // one-vector tile), so that they compare on any CPU.
  const Uarch saved = active_uarch();
  set_uarch(Uarch::Generic);
  const std::vector<std::string> lines = plan_lines();
  set_uarch(saved);
  const char* update = std::getenv("TCT_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream out(kGolden);
    for (const std::string& l : lines) out << l << "\n";
    ASSERT_TRUE(out.good()) << "could not write " << kGolden;
    GTEST_SKIP() << "rewrote " << kGolden;
  }
  std::ifstream in(kGolden);
  ASSERT_TRUE(in.good()) << "no " << kGolden << " (TCT_UPDATE_GOLDEN=1 writes it)";
  std::vector<std::string> golden;
  for (std::string l; std::getline(in, l);) golden.push_back(l);
  ASSERT_EQ(golden.size(), lines.size()) << "cases added or removed";
  int shown = 0;
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i] != golden[i] && shown++ < 10)
      ADD_FAILURE() << "plan changed:\n  golden: " << golden[i] << "\n  now:    " << lines[i];
  EXPECT_EQ(shown, 0) << "plans that differ from " << kGolden;
}

// Every plan is pure: planning twice gives the same line.
TEST(PlansBwdWeights, Deterministic) {
  const Spec c = benchmark_problems()[4];
  const ConvProblem p = resolve(c);
  EXPECT_EQ(x86::describe_bwd_weights_f32(Isa::Avx512, p, 3, WeightsFormat::IOX),
            x86::describe_bwd_weights_f32(Isa::Avx512, p, 3, WeightsFormat::IOX));
  EXPECT_EQ(x86::describe_bwd_weights_f32(Isa::Reference, p, 3), "route=reference");
}

}  // namespace
}  // namespace tct
