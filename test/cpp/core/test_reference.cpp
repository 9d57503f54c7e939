// The reference kernels on hand-computed cases.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/kernels.h"
#include "problem.h"

namespace tct {
namespace {

Attributes attrs_2d(DataFormat df, WeightsFormat wf, int64_t groups) {
  Attributes a;
  a.strides = {1, 1};
  a.pads_begin = {0, 0};
  a.pads_end = {0, 0};
  a.dilations = {1, 1};
  a.groups = groups;
  a.data_format = df;
  a.weights_format = wf;
  return a;
}

// SPEC §9 (oneDNN unit test): NCX, IOX, g=2, 1x1 kernel.
TEST(ReferenceForward, OneDnnGroupedExample) {
  auto a = attrs_2d(DataFormat::NCX, WeightsFormat::IOX, 2);
  ConvProblem p = resolve_forward({1, 4, 1, 1}, {4, 4, 1, 1}, std::nullopt, a);
  ASSERT_EQ(p.OC(), 8);
  std::vector<float> src{1, 2, 3, 4};
  std::vector<float> w(16);
  for (int ic = 0; ic < 4; ++ic)
    for (int b = 0; b < 4; ++b) w[ic * 4 + b] = (b % 2 == 0) ? 1.f : 0.f;
  std::vector<float> dst(8, -1.f);
  ActView s{src.data(), 4, 1, {1, 1, 1}};
  WeightsView wv{w.data(), 4, 1, {1, 1, 1}};
  ActView d{dst.data(), 8, 1, {1, 1, 1}};
  reference_forward(p, DType::F32, s, wv, nullptr, d, 2);
  EXPECT_EQ(dst, (std::vector<float>{3, 0, 3, 0, 7, 0, 7, 0}));
}

// 1D, stride 2, K=3, pads 1/0: dst[o] = sum over i,k with o = 2i - 1 + k.
TEST(ReferenceForward, Strided1DByHand) {
  Attributes a;
  a.strides = {2};
  a.pads_begin = {1};
  a.pads_end = {0};
  a.dilations = {1};
  a.data_format = DataFormat::NCX;
  a.weights_format = WeightsFormat::IOX;
  ConvProblem p = resolve_forward({1, 1, 3}, {1, 1, 3}, Shape{1}, a);
  ASSERT_EQ(p.O[2], 2 * 2 + 3 - 1);  // 6
  std::vector<float> src{1, 2, 3}, w{1, 10, 100}, bias{0.5f}, dst(6);
  reference_forward(p, DType::F32, ActView{src.data(), 3, 3, {0, 0, 1}},
                    WeightsView{w.data(), 3, 3, {0, 0, 1}}, bias.data(),
                    ActView{dst.data(), 6, 6, {0, 0, 1}}, 1);
  // o=0: i=0,k=1 -> 10; o=1: i=0,k=2 (100) + i=1,k=0 (2); o=2: i=1,k=1 -> 20;
  // o=3: i=1,k=2 (200) + i=2,k=0 (3); o=4: i=2,k=1 -> 30; o=5: i=2,k=2 -> 300.
  EXPECT_EQ(dst, (std::vector<float>{10.5f, 102.5f, 20.5f, 203.5f, 30.5f, 300.5f}));
}

}  // namespace
}  // namespace tct
