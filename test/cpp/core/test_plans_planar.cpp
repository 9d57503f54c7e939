// Golden plans of the planar (NCX) driver: describe_planar_f32 for every
// pass, both ISAs (the plans need no CPU support) and 1, 2, 4 and 16 threads,
// plus the NCX path rule (planar_preferred, Intel and AMD), over the problems
// of test_planar.cpp, the benchmark layers (benchmarks/cases.py) and seeded
// random shapes, compared with test/golden/plans_planar.txt. Equal plans mean
// equal work: a refactor leaves the file as it is; a rule changed on purpose
// rewrites it (TCT_UPDATE_GOLDEN=1) and says so in its commit message.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/x86/x86.h"
#include "problem.h"

namespace tct {
namespace {

// "N G ICg OCg | I | K | s | d | pb | pe | op", per-axis values joined by
// 'x' (the last S axes); O from the output-size formula.
ConvProblem parse_problem(const std::string& spec) {
  std::vector<std::string> parts;
  std::stringstream ss(spec);
  for (std::string part; std::getline(ss, part, '|');) parts.push_back(part);
  ConvProblem p;
  if (parts.size() != 8) {
    ADD_FAILURE() << "bad problem spec: " << spec;
    return p;
  }
  std::istringstream head(parts[0]);
  head >> p.N >> p.G >> p.ICg >> p.OCg;
  // Per-axis fields of the last S axes, in the spec's order.
  std::array<int64_t, kAxes>* fields[] = {&p.I, &p.K, &p.s, &p.d, &p.pb, &p.pe, &p.op};
  int S = 0;
  for (int f = 0; f < 7; ++f) {
    std::vector<int64_t> v;
    std::stringstream as(parts[f + 1]);
    for (std::string x; std::getline(as, x, 'x');) v.push_back(std::stoll(x));
    S = static_cast<int>(v.size());
    for (int i = 0; i < S; ++i) (*fields[f])[kAxes - S + i] = v[i];
  }
  p.spatial_rank = S;
  for (int a = kAxes - S; a < kAxes; ++a)
    p.O[a] = forward_output_size<int64_t>(p.I[a], p.s[a], effective_kernel(p.K[a], p.d[a]),
                                          p.pb[a], p.pe[a], p.op[a]);
  return p;
}

struct Case {
  std::string name, spec;
};

// Seeded random shapes of every rank (groups, depthwise, pointwise, dilation,
// pads, output_padding), as the randomized kernel tests draw them.
std::vector<Case> random_cases(int count) {
  std::mt19937 rng(2020);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<Case> out;
  while (static_cast<int>(out.size()) < count) {
    const int S = static_cast<int>(uni(1, 3));
    const bool depthwise = uni(0, 4) == 0, pointwise = uni(0, 5) == 0;
    const int64_t G = depthwise ? uni(2, 9) : uni(1, 3);
    const int64_t ICg = depthwise ? 1 : uni(1, 40), OCg = depthwise ? 1 : uni(1, 40);
    std::string ax[7];
    bool ok = true;
    for (int i = 0; i < S; ++i) {
      const int64_t I = uni(1, S == 1 ? 300 : (S == 2 ? 40 : 9));
      const int64_t K = pointwise ? 1 : uni(1, 5), s = pointwise ? 1 : uni(1, 4);
      const int64_t d = pointwise ? 1 : uni(1, 3);
      const int64_t effk = d * (K - 1) + 1;
      const int64_t pb = pointwise ? 0 : uni(0, effk), pe = pointwise ? 0 : uni(0, effk);
      const int64_t op = pointwise ? 0 : uni(0, std::max(s, d) - 1);
      ok = ok && (I - 1) * s + effk + op - pb - pe >= 1;
      const int64_t v[7] = {I, K, s, d, pb, pe, op};
      for (int j = 0; j < 7; ++j) ax[j] += (i ? "x" : "") + std::to_string(v[j]);
    }
    if (!ok) continue;
    std::string spec = std::to_string(uni(1, 8)) + " " + std::to_string(G) + " " +
                       std::to_string(ICg) + " " + std::to_string(OCg);
    for (const std::string& a : ax) spec += " | " + a;
    out.push_back({"random_" + std::to_string(out.size()), spec});
  }
  return out;
}

// benchmarks/cases.py (benchdnn shapes and model layers).
std::vector<Case> benchmark_cases() {
  return {
      {"1d_alexnet_deconv3", "32 1 384 256 | 13 | 3 | 1 | 1 | 1 | 1 | 0"},
      {"1d_googlenet_conv1_s2", "32 1 64 3 | 112 | 7 | 2 | 1 | 3 | 2 | 0"},
      {"1d_masknet_deconv1_op1", "16 1 64 3 | 512 | 7 | 2 | 1 | 0 | 0 | 1"},
      {"1d_dilated_asym_pads", "64 1 8 8 | 5 | 3 | 1 | 3 | 3 | 6 | 0"},
      {"1d_vocoder_512to256_k16s8", "1 1 512 256 | 283 | 16 | 8 | 1 | 4 | 4 | 0"},
      {"1d_ci_tail_depthwise", "64 17 1 1 | 5 | 3 | 1 | 1 | 1 | 1 | 0"},
      {"2d_alexnet_deconv1_k11s4", "4 1 96 3 | 55x55 | 11x11 | 4x4 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"2d_alexnet_deconv2_g2", "2 2 128 48 | 27x27 | 5x5 | 1x1 | 1x1 | 2x2 | 2x2 | 0x0"},
      {"2d_googlenet_4d_3x3", "8 1 288 144 | 14x14 | 3x3 | 1x1 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"2d_googlenet_4a_1x1", "16 1 192 480 | 14x14 | 1x1 | 1x1 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"2d_resnet50_1x1_s2_op1", "4 1 256 512 | 28x28 | 1x1 | 2x2 | 1x1 | 0x0 | 0x0 | 1x1"},
      {"2d_alexnet_dil3_g2", "8 2 192 192 | 9x9 | 3x3 | 1x1 | 3x3 | 1x1 | 1x1 | 0x0"},
      {"2d_googlenet_conv1_s2_d2", "4 1 64 3 | 109x109 | 7x7 | 2x2 | 2x2 | 3x3 | 2x2 | 0x0"},
      {"2d_512to256_k4s2_32x32", "1 1 512 256 | 32x32 | 4x4 | 2x2 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"2d_unet_1024to512_k2s2", "1 1 1024 512 | 23x30 | 2x2 | 2x2 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"2d_512to512_k3s2_4x4", "4 1 512 512 | 4x4 | 3x3 | 2x2 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"2d_36to4_k3s3_360x640", "1 1 36 4 | 360x640 | 3x3 | 3x3 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"2d_ci_oc_tail_gemm", "32 1 16 17 | 8x8 | 3x3 | 1x1 | 1x1 | 3x3 | 2x2 | 0x0"},
      {"2d_ci_oc_tail_grouped", "32 4 4 5 | 5x5 | 3x3 | 1x1 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"2d_ci_tail_depthwise", "64 17 1 1 | 5x5 | 3x3 | 1x1 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"3d_unet_deconv8", "1 1 512 256 | 8x9x9 | 3x3x3 | 1x1x1 | 1x1x1 | 0x0x0 | 0x0x0 | 0x0x0"},
      {"3d_unet_dilated_deconv8",
       "1 1 512 256 | 6x7x7 | 3x3x3 | 1x1x1 | 2x2x2 | 0x0x0 | 0x0x0 | 0x0x0"},
      {"3d_unet_320to320_k2s2",
       "1 1 320 320 | 7x7x5 | 2x2x2 | 2x2x2 | 1x1x1 | 0x0x0 | 0x0x0 | 0x0x0"},
      {"3d_1x1_s2", "16 1 16 16 | 5x5x5 | 1x1x1 | 2x2x2 | 1x1x1 | 0x0x0 | 0x0x0 | 0x0x0"},
      {"3d_ci_grouped", "8 4 4 4 | 5x5x5 | 3x3x3 | 1x1x1 | 1x1x1 | 1x1x1 | 1x1x1 | 0x0x0"},
      {"3d_ci_depthwise", "8 16 1 1 | 5x5x5 | 3x3x3 | 1x1x1 | 1x1x1 | 1x1x1 | 1x1x1 | 0x0x0"},
      {"3d_ci_ic_tail_gemm", "8 1 17 16 | 8x8x8 | 3x3x3 | 1x1x1 | 1x1x1 | 3x3x3 | 2x2x2 | 0x0x0"},
      {"dcgan_z_100to512_k4", "64 1 100 512 | 1x1 | 4x4 | 1x1 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"dcgan_512to256_8x8", "4 1 512 256 | 8x8 | 4x4 | 2x2 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"dcgan_256to128_16x16", "4 1 256 128 | 16x16 | 4x4 | 2x2 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"dcgan_128to64_32x32", "4 1 128 64 | 32x32 | 4x4 | 2x2 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"dcgan_64to3_64x64", "4 1 64 3 | 64x64 | 4x4 | 2x2 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"unet2d_128to64_k2s2_64x64", "2 1 128 64 | 64x64 | 2x2 | 2x2 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"unet3d_128to64_k2s2_16^3",
       "1 1 128 64 | 16x16x16 | 2x2x2 | 2x2x2 | 1x1x1 | 0x0x0 | 0x0x0 | 0x0x0"},
      {"unet3d_256to128_k2s2_8^3",
       "2 1 256 128 | 8x8x8 | 2x2x2 | 2x2x2 | 1x1x1 | 0x0x0 | 0x0x0 | 0x0x0"},
      {"hifigan_512to256_k16s8", "1 1 512 256 | 256 | 16 | 8 | 1 | 4 | 4 | 0"},
      {"hifigan_128to64_k4s2", "1 1 128 64 | 4096 | 4 | 2 | 1 | 1 | 1 | 0"},
      {"dw_up_64ch_k4s2_32x32", "8 64 1 1 | 32x32 | 4x4 | 2x2 | 1x1 | 1x1 | 1x1 | 0x0"},
  };
}

// The problems of test_planar.cpp.
std::vector<Case> test_planar_cases() {
  return {
      {"test_planar_01", "1 1 300 40 | 200 | 4 | 2 | 1 | 1 | 1 | 0"},
      {"test_planar_02", "1 1 40 300 | 200 | 4 | 2 | 1 | 1 | 1 | 0"},
      {"test_planar_03", "2 1 64 3 | 20x37 | 7x7 | 2x2 | 2x2 | 3x3 | 2x2 | 1x1"},
      {"test_planar_04", "1 1 3 64 | 20x37 | 7x7 | 2x2 | 2x2 | 3x3 | 2x2 | 1x1"},
      {"test_planar_05", "1 1 96 80 | 9x40 | 1x1 | 2x2 | 1x1 | 0x0 | 0x0 | 1x1"},
      {"test_planar_06", "1 1 24 20 | 3x4x33 | 2x2x2 | 2x2x2 | 1x1x1 | 0x0x0 | 0x0x0 | 0x0x0"},
      {"test_planar_07", "3 1 130 50 | 7x7 | 1x1 | 1x1 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_08", "1 1 4 36 | 500 | 3 | 3 | 1 | 0 | 0 | 0"},
      {"test_planar_09", "7 1 10 8 | 1x1 | 4x4 | 1x1 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_10", "5 2 5 4 | 1x1 | 2x2 | 3x3 | 1x1 | 0x0 | 1x1 | 1x1"},
      {"test_planar_11", "2 1 64 3 | 64x70 | 4x4 | 2x2 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"test_planar_12", "1 1 3 64 | 90x100 | 3x3 | 1x1 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"test_planar_13", "3 5 1 1 | 32x32 | 4x4 | 2x2 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"test_planar_14", "1 2 1 1 | 60x100 | 4x4 | 2x2 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"test_planar_15", "1 1 1 1 | 61x99 | 3x5 | 3x2 | 2x1 | 4x5 | 0x2 | 2x1"},
      {"test_planar_16", "2 3 1 1 | 5x6x17 | 3x3x3 | 2x1x2 | 1x2x1 | 1x2x1 | 1x0x2 | 0x0x0"},
      {"test_planar_17", "2 4 1 1 | 300 | 5 | 4 | 1 | 7 | 6 | 0"},
      {"test_planar_18", "1 3 1 1 | 9x40 | 2x2 | 5x5 | 1x1 | 0x0 | 0x0 | 4x4"},
      {"test_planar_19", "4 1 96 3 | 55x55 | 11x11 | 4x4 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_20", "8 64 1 1 | 32x32 | 4x4 | 2x2 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"test_planar_21", "2 1 128 64 | 64x64 | 2x2 | 2x2 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_22", "1 1 36 4 | 360x640 | 3x3 | 3x3 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_23", "1 1 128 64 | 16x16x16 | 2x2x2 | 2x2x2 | 1x1x1 | 0x0x0 | 0x0x0 | 0x0x0"},
      {"test_planar_24", "1 1 512 256 | 256 | 16 | 8 | 1 | 4 | 4 | 0"},
      {"test_planar_25", "8 1 16 16 | 32x32 | 3x3 | 1x1 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"test_planar_26", "8 1 32 32 | 32x32 | 3x3 | 1x1 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"test_planar_27", "8 1 64 64 | 32x32 | 1x1 | 1x1 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_28", "8 1 17 16 | 8x8x8 | 3x3x3 | 1x1x1 | 1x1x1 | 3x3x3 | 2x2x2 | 0x0x0"},
      {"test_planar_29", "8 1 17 32 | 8x8x8 | 3x3x3 | 1x1x1 | 1x1x1 | 3x3x3 | 2x2x2 | 0x0x0"},
      {"test_planar_30", "8 1 17 16 | 8x8x8 | 3x3x3 | 1x1x1 | 1x1x1 | 1x1x1 | 1x1x1 | 0x0x0"},
      {"test_planar_31", "16 1 192 480 | 14x14 | 1x1 | 1x1 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_32", "4 1 256 512 | 28x28 | 1x1 | 2x2 | 1x1 | 0x0 | 0x0 | 1x1"},
      {"test_planar_33", "1 1 12 20 | 7x30 | 3x3 | 2x2 | 1x1 | 1x1 | 1x1 | 1x1"},
      {"test_planar_34", "2 3 2 3 | 41 | 4 | 3 | 1 | 1 | 2 | 0"},
      {"test_planar_35", "2 1 0 5 | 3x20 | 2x2 | 2x2 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_36", "2 1 5 0 | 3x20 | 2x2 | 2x2 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_37", "0 1 4 4 | 3x3 | 3x3 | 2x2 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"test_planar_38", "2 1 64 3 | 300 | 7 | 2 | 1 | 3 | 2 | 1"},
      {"test_planar_39", "1 1 4 36 | 5x100 | 3x3 | 3x3 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_40", "2 1 20 12 | 6x7 | 1x1 | 1x1 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_41", "2 1 24 37 | 14x14 | 1x1 | 1x1 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_42", "3 1 13 16 | 9x30 | 1x1 | 2x2 | 1x1 | 0x0 | 0x0 | 1x1"},
      {"test_planar_43", "1 2 8 300 | 5x130 | 1x1 | 2x3 | 1x1 | 1x2 | 0x1 | 0x0"},
      {"test_planar_44", "2 1 33 20 | 600 | 1 | 1 | 1 | 0 | 0 | 0"},
      {"test_planar_45", "1 3 9 17 | 3x5x120 | 1x1x1 | 2x1x3 | 1x1x1 | 0x0x2 | 0x0x0 | 1x0x2"},
      {"test_planar_46", "0 1 16 16 | 4x64 | 1x1 | 1x1 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_47", "3 1 9 5 | 6x120 | 3x3 | 2x2 | 1x1 | 1x1 | 0x0 | 1x1"},
      {"test_planar_48", "1 1 12 40 | 700 | 5 | 3 | 2 | 3 | 1 | 0"},
      {"test_planar_49", "2 2 8 7 | 4x3x130 | 2x2x3 | 1x2x2 | 2x1x1 | 1x0x2 | 0x0x0 | 0x0x0"},
      {"test_planar_50", "1 1 9 6 | 6x3x120 | 2x2x3 | 1x2x2 | 2x1x1 | 1x0x2 | 0x1x0 | 1x0x1"},
      {"test_planar_51", "1 1 16 100 | 4x64 | 3x3 | 1x1 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"test_planar_52", "2 1 16 3 | 40x64 | 7x7 | 4x4 | 1x1 | 3x3 | 2x3 | 0x1"},
      {"test_planar_53", "8 2 192 192 | 9x9 | 3x3 | 1x1 | 3x3 | 3x3 | 3x3 | 0x0"},
      {"test_planar_54", "8 2 192 192 | 9x9 | 3x3 | 1x1 | 1x1 | 1x1 | 1x1 | 0x0"},
      {"test_planar_55", "2 1 40 33 | 9x11 | 1x1 | 1x1 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_56", "3 1 37 100 | 9x30 | 1x1 | 2x2 | 1x1 | 0x0 | 0x0 | 1x1"},
      {"test_planar_57", "1 2 50 20 | 13x17 | 2x2 | 2x2 | 1x1 | 1x0 | 0x1 | 0x1"},
      {"test_planar_58", "1 1 36 4 | 10x40 | 3x3 | 3x3 | 1x1 | 0x1 | 2x0 | 0x0"},
      {"test_planar_59", "2 1 33 16 | 3x5x6 | 2x2x2 | 2x2x2 | 1x1x1 | 0x0x0 | 0x0x0 | 0x0x0"},
      {"test_planar_60", "1 1 64 300 | 700 | 1 | 1 | 1 | 0 | 0 | 0"},
      {"test_planar_61", "1 1 100 64 | 8x8 | 1x1 | 1x1 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_62", "6 1 9 4 | 1x1 | 4x4 | 1x1 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_63", "5 2 3 2 | 1x1x1 | 2x2x2 | 1x1x1 | 1x1x1 | 0x0x0 | 0x0x0 | 0x0x0"},
      {"test_planar_64", "27 1 9 5 | 1x1 | 4x4 | 1x1 | 1x1 | 0x0 | 0x0 | 0x0"},
      {"test_planar_65", "5 2 3 3 | 1x1x1 | 2x3x2 | 2x1x1 | 1x1x1 | 0x0x0 | 0x0x0 | 0x0x0"},
      {"test_planar_66", "13 3 4 7 | 1 | 6 | 3 | 1 | 0 | 0 | 0"},
  };
}

std::vector<Case> cases() {
  std::vector<Case> v = benchmark_cases();
  for (const Case& c : test_planar_cases()) v.push_back(c);
  for (const Case& c : random_cases(24)) v.push_back(c);
  return v;
}

const char* pass_key(Pass pass) {
  switch (pass) {
    case Pass::Forward: return "fwd";
    case Pass::BackwardData: return "bwd_d";
    case Pass::BackwardWeights: return "bwd_w";
  }
  return "?";
}

std::vector<std::string> plan_lines() {
  std::vector<std::string> lines;
  for (const Case& c : cases()) {
    const ConvProblem p = parse_problem(c.spec);
    for (Pass pass : {Pass::Forward, Pass::BackwardData, Pass::BackwardWeights})
      for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
        const bool intel = x86::planar_preferred(isa, p, pass, false);
        const bool amd = x86::planar_preferred(isa, p, pass, true);
        for (int nt : {1, 2, 4, 16}) {
          std::ostringstream o;
          o << c.name << ' ' << pass_key(pass) << ' ' << isa_name(isa)
            << " t" << nt << " | preferred=" << intel << amd << ' '
            << x86::describe_planar_f32(isa, pass, p, nt);
          lines.push_back(o.str());
        }
      }
  }
  return lines;
}

TEST(PlansPlanar, MatchGolden) {
  const std::string path = std::string(TCT_SOURCE_DIR) + "/test/golden/plans_planar.txt";
  const std::vector<std::string> got = plan_lines();
  const char* update = std::getenv("TCT_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream out(path);
    for (const std::string& l : got) out << l << '\n';
    ASSERT_TRUE(out.good()) << path;
    GTEST_SKIP() << "rewrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path << " missing: run with TCT_UPDATE_GOLDEN=1";
  std::vector<std::string> want;
  for (std::string l; std::getline(in, l);) want.push_back(l);
  ASSERT_EQ(got.size(), want.size()) << "number of plan lines";
  int shown = 0, differ = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    ++differ;
    if (shown++ < 10) ADD_FAILURE() << "plan changed:\n  want " << want[i] << "\n  got  " << got[i];
  }
  EXPECT_EQ(differ, 0) << "plans that differ from " << path;
}

// A plan names the kernels of its ISA (avx2 plans never name avx512 tiles).
TEST(PlansPlanar, DescribeIsOneLine) {
  for (const std::string& l : plan_lines()) {
    EXPECT_EQ(l.find('\n'), std::string::npos);
    const bool avx2 = l.find(" avx2 t") != std::string::npos;
    EXPECT_EQ(l.find(avx2 ? "_avx512_" : "_avx2_"), std::string::npos) << l;
  }
}

}  // namespace
}  // namespace tct
