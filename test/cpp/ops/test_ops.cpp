// The ops through the dispatcher in a LibTorch-only process: values against
// plain ATen (SPEC §7 oracle), autograd and double backward without Python.
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

c10::OperatorHandle op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

using Strs = std::vector<int64_t>;

torch::Tensor conv_transpose(const torch::Tensor& src, const torch::Tensor& w,
                             const std::optional<torch::Tensor>& bias, Strs s, Strs pb, Strs pe,
                             Strs d, std::string auto_pad, Strs op_, int64_t g, std::string df,
                             std::string wf) {
  static auto h = op("graph::conv_transpose")
                      .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&,
                                           const std::optional<torch::Tensor>&, c10::IntArrayRef,
                                           c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef,
                                           c10::string_view, c10::IntArrayRef, int64_t,
                                           c10::string_view, c10::string_view)>();
  return h.call(src, w, bias, s, pb, pe, d, auto_pad, op_, g, df, wf);
}

// Oracle (SPEC §7) for NCX/IOX with explicit pads.
torch::Tensor oracle_forward(const torch::Tensor& x, const torch::Tensor& w,
                             const torch::Tensor& b, Strs s, Strs pb, Strs pe, Strs d, Strs op_,
                             int64_t g) {
  auto full = torch::conv_transpose2d(x, w, {}, s, 0, 0, g, d);
  int64_t oh = s[0] * (x.size(2) - 1) + d[0] * (w.size(2) - 1) + 1 + op_[0] - pb[0] - pe[0];
  int64_t ow = s[1] * (x.size(3) - 1) + d[1] * (w.size(3) - 1) + 1 + op_[1] - pb[1] - pe[1];
  full = torch::constant_pad_nd(full, {0, std::max<int64_t>(0, pb[1] + ow - full.size(3)), 0,
                                       std::max<int64_t>(0, pb[0] + oh - full.size(2))});
  auto y = full.slice(2, pb[0], pb[0] + oh).slice(3, pb[1], pb[1] + ow);
  return y + b.view({1, -1, 1, 1});
}

TEST(Ops, ForwardMatchesOracleNXC) {
  torch::manual_seed(0);
  auto x = torch::randn({2, 4, 5, 6}, torch::kDouble);  // NCX
  auto w = torch::randn({4, 3, 3, 2}, torch::kDouble);  // IOX, groups 2 -> OC 6
  auto b = torch::randn({6}, torch::kDouble);
  Strs s{2, 3}, pb{1, 0}, pe{0, 2}, d{1, 2}, opad{1, 0};
  auto expect = oracle_forward(x, w, b, s, pb, pe, d, opad, 2);
  // NXC data, XOI weights.
  auto y = conv_transpose(x.permute({0, 2, 3, 1}), w.permute({2, 3, 1, 0}), b, s, pb, pe, d,
                          "None", opad, 2, "NXC", "XOI");
  EXPECT_TRUE(torch::allclose(y.permute({0, 3, 1, 2}), expect, 1e-10, 1e-10));
}

TEST(Ops, AutogradMatchesAtenAndDoubleBackwardRuns) {
  torch::manual_seed(1);
  auto x = torch::randn({2, 3, 4, 5}, torch::kDouble).requires_grad_();
  auto w = torch::randn({3, 2, 3, 3}, torch::kDouble).requires_grad_();
  auto b = torch::randn({2}, torch::kDouble).requires_grad_();
  auto y = conv_transpose(x, w, b, {2, 2}, {1, 1}, {1, 1}, {1, 1}, "None", {1, 1}, 1, "NCX",
                          "IOX");
  auto ref = torch::conv_transpose2d(x, w, b, {2, 2}, {1, 1}, {1, 1}, 1, {1, 1});
  ASSERT_EQ(y.sizes(), ref.sizes());
  EXPECT_TRUE(torch::allclose(y, ref, 1e-10, 1e-10));
  auto gy = torch::randn_like(y);
  auto g = torch::autograd::grad({y}, {x, w, b}, {gy}, true, true);
  auto gr = torch::autograd::grad({ref}, {x, w, b}, {gy}, true, true);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(torch::allclose(g[i], gr[i], 1e-10, 1e-10)) << i;
  // Double backward: differentiate a scalar of the gradients again.
  auto s = (g[0] * g[0]).sum() + (g[1] * g[1]).sum();
  auto sr = (gr[0] * gr[0]).sum() + (gr[1] * gr[1]).sum();
  auto gg = torch::autograd::grad({s}, {x, w});
  auto ggr = torch::autograd::grad({sr}, {x, w});
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(torch::allclose(gg[i], ggr[i], 1e-9, 1e-9)) << i;
}

TEST(Ops, BadAttributeIsAClearError) {
  auto x = torch::randn({1, 2, 3, 3});
  auto w = torch::randn({2, 2, 3, 3});
  try {
    conv_transpose(x, w, std::nullopt, {0, 1}, {0, 0}, {0, 0}, {1, 1}, "None", {}, 1, "NCX",
                   "IOX");
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("strides"), std::string::npos) << e.what();
  }
}

}  // namespace
