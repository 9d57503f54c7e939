// Problem resolution and validation (SPEC §2-§4), hand-computed expectations.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "problem.h"

namespace tct {
namespace {

Attributes attrs(int S, int64_t s = 1, int64_t pb = 0, int64_t pe = 0, int64_t d = 1) {
  Attributes a;
  a.strides.assign(S, s);
  a.pads_begin.assign(S, pb);
  a.pads_end.assign(S, pe);
  a.dilations.assign(S, d);
  a.data_format = DataFormat::NCX;
  a.weights_format = WeightsFormat::IOX;
  return a;
}

// Expects a ProblemError whose message contains every fragment.
template <class F>
void expect_error(F&& f, std::initializer_list<const char*> fragments) {
  try {
    f();
    ADD_FAILURE() << "expected a ProblemError";
  } catch (const ProblemError& e) {
    const std::string msg = e.what();
    for (const char* frag : fragments)
      EXPECT_NE(msg.find(frag), std::string::npos) << "'" << frag << "' not in: " << msg;
  }
}

// SPEC §9: src 1x1x6x6, K=4, s=1, pads 1/2.
TEST(ResolveForward, OneDnnAutoPadShapes) {
  Attributes a = attrs(2, 1, 1, 2);
  auto p = resolve_forward({1, 1, 6, 6}, {1, 1, 4, 4}, std::nullopt, a);
  EXPECT_EQ(p.spatial(p.O), (std::vector<int64_t>{6, 6}));

  a.auto_pad = AutoPad::SameUpper;
  p = resolve_forward({1, 1, 6, 6}, {1, 1, 4, 4}, std::nullopt, a);
  EXPECT_EQ(p.spatial(p.O), (std::vector<int64_t>{6, 6}));
  EXPECT_EQ(p.spatial(p.pb), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(p.spatial(p.pe), (std::vector<int64_t>{2, 2}));

  a.auto_pad = AutoPad::SameLower;
  p = resolve_forward({1, 1, 6, 6}, {1, 1, 4, 4}, std::nullopt, a);
  EXPECT_EQ(p.spatial(p.pb), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(p.spatial(p.pe), (std::vector<int64_t>{1, 1}));

  a.auto_pad = AutoPad::Valid;
  p = resolve_forward({1, 1, 6, 6}, {1, 1, 4, 4}, std::nullopt, a);
  EXPECT_EQ(p.spatial(p.O), (std::vector<int64_t>{9, 9}));
}

TEST(ResolveForward, SizesGroupsAndCanonicalAxes) {
  // 1D: O = s*(I-1) + d*(K-1) + 1 + op - pb - pe = 3*4 + 2*2 + 1 + 2 - 1 - 0 = 18.
  Attributes a = attrs(1, 3, 1, 0, 2);
  a.output_padding = {2};
  a.groups = 2;
  auto p = resolve_forward({2, 6, 5}, {6, 4, 3}, Shape{8}, a);
  EXPECT_EQ(p.spatial_rank, 1);
  EXPECT_EQ(p.O[2], 18);
  EXPECT_EQ(p.O[0], 1);
  EXPECT_EQ(p.O[1], 1);
  EXPECT_EQ(p.ICg, 3);
  EXPECT_EQ(p.OCg, 4);
  EXPECT_EQ(p.OC(), 8);
  EXPECT_EQ(dst_shape(p, DataFormat::NCX), (Shape{2, 8, 18}));
  EXPECT_EQ(dst_shape(p, DataFormat::NXC), (Shape{2, 18, 8}));
}

TEST(ResolveForward, WeightsLayouts) {
  // IC=4, OCg=3, K=(2,5) in each layout.
  const Shape iox{4, 3, 2, 5}, xoi{2, 5, 3, 4}, oix{3, 4, 2, 5}, xio{2, 5, 4, 3};
  for (auto [f, shape] : {std::pair{WeightsFormat::IOX, iox}, {WeightsFormat::XOI, xoi},
                          {WeightsFormat::OIX, oix}, {WeightsFormat::XIO, xio}}) {
    Attributes a = attrs(2);
    a.weights_format = f;
    auto p = resolve_forward({1, 4, 3, 3}, shape, std::nullopt, a);
    EXPECT_EQ(p.OCg, 3) << to_string(f);
    EXPECT_EQ(p.spatial(p.K), (std::vector<int64_t>{2, 5})) << to_string(f);
    EXPECT_EQ(weights_shape(p, f), shape) << to_string(f);
  }
}

TEST(ResolveBackwardData, InferredSizeAndAutoPadFromDiffDst) {
  // I = floor((D + pb + pe - eff_k) / s) + 1 = floor((10 + 1 + 1 - 3) / 2) + 1 = 5.
  Attributes a = attrs(1, 2, 1, 1);
  auto p = resolve_backward_data({1, 2, 10}, {3, 2, 3}, std::nullopt, a);
  EXPECT_EQ(p.I[2], 5);
  EXPECT_EQ(p.op[2], 1);  // forward from 5 gives 9; D = 10 needs output_padding 1
  // SAME_UPPER with D % s != 0: T = max(eff_k - D % s, 0) = 4 - 1 = 3 -> pads (1, 2).
  a = attrs(1, 2);
  a.auto_pad = AutoPad::SameUpper;
  p = resolve_backward_data({1, 2, 9}, {3, 2, 4}, std::nullopt, a);
  EXPECT_EQ(p.pb[2], 1);
  EXPECT_EQ(p.pe[2], 2);
  // D % s == 0: T = eff_k - s = 2 -> SAME_LOWER pads (1, 1).
  a.auto_pad = AutoPad::SameLower;
  p = resolve_backward_data({1, 2, 8}, {3, 2, 4}, std::nullopt, a);
  EXPECT_EQ(p.pb[2], 1);
  EXPECT_EQ(p.pe[2], 1);
}

TEST(ResolveBackwardData, SrcShapeFullOrSpatialAndConsistency) {
  Attributes a = attrs(1, 2, 1, 1);
  auto p = resolve_backward_data({1, 2, 10}, {3, 2, 3}, Shape{1, 3, 5}, a);
  EXPECT_EQ(p.I[2], 5);
  p = resolve_backward_data({1, 2, 10}, {3, 2, 3}, Shape{5}, a);
  EXPECT_EQ(p.I[2], 5);
  // From I=4 a forward pass gives 7 (+ output_padding < 2): 10 is inconsistent.
  expect_error([&] { resolve_backward_data({1, 2, 10}, {3, 2, 3}, Shape{1, 3, 4}, a); },
               {"inconsistent", "[10]", "[4]"});
  expect_error([&] { resolve_backward_data({1, 2, 10}, {3, 2, 3}, Shape{2, 3, 5}, a); },
               {"src_shape", "batch"});
  expect_error([&] { resolve_backward_data({1, 2, 10}, {3, 2, 3}, Shape{1, 5}, a); },
               {"src_shape", "entries"});
}

TEST(ResolveBackwardWeights, ShapeAndChecks) {
  Attributes a = attrs(2, 2, 1, 1);
  auto p = resolve_backward_weights({2, 4, 3, 3}, {2, 3, 5, 5}, {4, 3, 3, 3}, a);
  EXPECT_EQ(p.OCg, 3);
  EXPECT_EQ(p.spatial(p.op), (std::vector<int64_t>{0, 0}));
  a.groups = 2;
  p = resolve_backward_weights({2, 4, 3, 3}, {2, 6, 5, 5}, {4, 3, 3, 3}, a);
  EXPECT_EQ(p.ICg, 2);
  EXPECT_EQ(p.OC(), 6);
  expect_error([&] { resolve_backward_weights({2, 4, 3, 3}, {2, 6, 5, 5}, {}, a); },
               {"weights_shape_input", "weights_shape"});
  expect_error([&] { resolve_backward_weights({2, 4, 3, 3}, {3, 6, 5, 5}, {4, 3, 3, 3}, a); },
               {"batch"});
  expect_error([&] { resolve_backward_weights({2, 4, 3, 3}, {2, 6, 9, 9}, {4, 3, 3, 3}, a); },
               {"inconsistent"});
}

TEST(Validation, EveryRuleNamesItsArgument) {
  const Shape x{1, 4, 5, 5}, w{4, 2, 3, 3};
  auto fwd = [&](Attributes a, Shape xs = {1, 4, 5, 5}, Shape ws = {4, 2, 3, 3},
                 std::optional<Shape> b = std::nullopt) { resolve_forward(xs, ws, b, a); };
  expect_error([&] { fwd(attrs(2), {4, 5, 5}); }, {"src", "rank"});
  expect_error([&] { fwd(attrs(2), x, {4, 2, 3}); }, {"weights", "rank"});
  Attributes a = attrs(2);
  a.strides = {1};
  expect_error([&] { fwd(a); }, {"strides", "2 entries", "[1]"});
  expect_error([&] { fwd(attrs(2, 0)); }, {"strides", "[0, 0]"});
  expect_error([&] { fwd(attrs(2, 1, 0, 0, 0)); }, {"dilations"});
  expect_error([&] { fwd(attrs(2, 1, -1)); }, {"pads_begin", "-1"});
  expect_error([&] { fwd(attrs(2, 1, 0, -2)); }, {"pads_end", "-2"});
  a = attrs(2);
  a.groups = 0;
  expect_error([&] { fwd(a); }, {"groups", "0"});
  a = attrs(2, 2);
  a.output_padding = {2, 0};
  expect_error([&] { fwd(a); }, {"output_padding", "[2, 0]", "max(stride, dilation)"});
  a = attrs(2, 1, 0, 0, 3);
  a.output_padding = {2, 2};  // < max(1, 3): allowed, as in PyTorch
  EXPECT_NO_THROW(fwd(a));
  expect_error([&] { fwd(attrs(2), {1, 3, 5, 5}); }, {"src", "3 channels", "I=4"});
  a = attrs(2);
  a.groups = 2;
  expect_error([&] { fwd(a, {1, 3, 5, 5}, {3, 2, 3, 3}); }, {"IC=3", "groups=2"});
  expect_error([&] { fwd(attrs(2), x, w, Shape{3}); }, {"bias", "[2]", "[3]"});
  expect_error([&] { fwd(attrs(2, 1, 3, 3), {1, 4, 1, 1}, {4, 2, 3, 3}); },
               {"output spatial size", ">= 1"});
}

// Torch's layout (NCX data, IOX weights) with the NXC/XOI defaults: the channel error
// keeps naming its arguments and values and hints at the formats; a genuine mismatch or
// tensors already in NCX/IOX get no hint.
TEST(Validation, TorchLayoutWithDefaultFormatsHints) {
  const char* hint = "look like NCX data with IOX weights";
  Attributes a = attrs(2);
  a.data_format = DataFormat::NXC;
  a.weights_format = WeightsFormat::XOI;
  // src (1, 4, 5, 6), weights (4, 2, 3, 3): NXC reads 6 channels, XOI reads I=3.
  expect_error([&] { resolve_forward({1, 4, 5, 6}, {4, 2, 3, 3}, std::nullopt, a); },
               {"src has 6 channels", "weights has I=3", "[4, 2, 3, 3]", "[1, 4, 5, 6]", hint,
                "data_format='NCX', weights_format='IOX'"});
  a.groups = 2;  // divisible in the torch layout too
  expect_error([&] { resolve_forward({1, 4, 5, 6}, {4, 1, 3, 3}, std::nullopt, a); }, {hint});
  a.data_format = DataFormat::NCX;  // only the weights format is off
  a.groups = 1;
  expect_error([&] { resolve_forward({1, 4, 5, 6}, {4, 2, 3, 3}, std::nullopt, a); }, {hint});
  Attributes ncx = attrs(2);  // already NCX/IOX: a real mismatch, no hint
  try {
    resolve_forward({1, 3, 5, 5}, {4, 2, 3, 3}, std::nullopt, ncx);
    ADD_FAILURE() << "expected a ProblemError";
  } catch (const ProblemError& e) {
    EXPECT_EQ(std::string(e.what()).find(hint), std::string::npos) << e.what();
  }
  a = attrs(2);
  a.data_format = DataFormat::NXC;
  a.weights_format = WeightsFormat::XOI;
  try {  // NXC/XOI tensors with a real mismatch that is no torch layout either
    resolve_forward({1, 5, 5, 3}, {3, 3, 2, 4}, std::nullopt, a);
    ADD_FAILURE() << "expected a ProblemError";
  } catch (const ProblemError& e) {
    EXPECT_EQ(std::string(e.what()).find(hint), std::string::npos) << e.what();
  }
}

TEST(Validation, UnknownStringsListAcceptedValues) {
  expect_error([] { parse_data_format("NHWC"); }, {"data_format", "NXC, NCX", "'NHWC'"});
  expect_error([] { parse_weights_format("OI", "filter_format"); },
               {"filter_format", "IOX, XOI, OIX, XIO"});
  expect_error([] { parse_auto_pad("same"); },
               {"auto_pad", "SAME_UPPER", "SAME_LOWER", "VALID"});
  EXPECT_EQ(parse_auto_pad("same_lower"), AutoPad::SameLower);
  EXPECT_EQ(parse_auto_pad("Valid"), AutoPad::Valid);
  EXPECT_EQ(parse_auto_pad("none"), AutoPad::None);
  EXPECT_EQ(parse_data_format("ncx"), DataFormat::NCX);
}

TEST(Validation, HugeValuesAreErrorsNotOverflow) {
  const int64_t big = int64_t{1} << 62;
  expect_error([&] { resolve_forward({1, 4, 5}, {4, 2, 3}, std::nullopt, attrs(1, big)); },
               {"strides"});
  expect_error(
      [&] { resolve_forward({1, 4, 5}, {4, 2, 3}, std::nullopt, attrs(1, big - 1)); },
      {"overflow"});
  expect_error(
      [&] { resolve_forward({1, 4, 5}, {4, 2, 3}, std::nullopt, attrs(1, 1, 0, 0, big - 1)); },
      {"overflow"});
  expect_error(
      [&] { resolve_backward_data({1, 2, 5}, {4, 2, 3}, std::nullopt, attrs(1, 1, big - 1)); },
      {"overflow"});
}

// Issue #24: products of sizes overflowed int64 (UBSan; a segfault in the AVX2 path; a
// wrong shape; torch's "negative dimension" error) and huge attributes reached torch's
// allocator. Each is now a ProblemError naming the argument and its value.
TEST(Validation, ChannelsTimesGroupsOverflow) {
  Attributes a = attrs(1);
  // Zero input channels, weights O dim 8: OC = groups * 8 overflowed (2**64 + 8 wraps to 8).
  for (int64_t g : {(int64_t{1} << 61) + 1, int64_t{1} << 62, int64_t{1} << 60,
                    std::numeric_limits<int64_t>::max()}) {
    a.groups = g;
    const std::string gs = std::to_string(g);
    expect_error([&] { resolve_forward({1, 0, 4}, {0, 8, 3}, std::nullopt, a); },
                 {"groups", gs.c_str(), "x 8", "OC"});
    expect_error([&] { resolve_backward_data({1, 8, 6}, {0, 8, 3}, std::nullopt, a); },
                 {"groups", gs.c_str()});
    expect_error([&] { resolve_backward_weights({1, 0, 4}, {1, 8, 6}, {0, 8, 3}, a); },
                 {"groups", gs.c_str()});
  }
  a.groups = int64_t{1} << 41;  // no overflow, but OC = 2**44 is beyond the size limit
  expect_error([&] { resolve_forward({1, 0, 4}, {0, 8, 3}, std::nullopt, a); },
               {"groups", "2199023255552"});
  a.groups = int64_t{1} << 37;  // OC = 2**40 fits, but dst (1, 2**40, 6) does not
  expect_error([&] { resolve_forward({1, 0, 4}, {0, 8, 3}, std::nullopt, a); },
               {"result dst", "groups=137438953472", "2**40"});
  a.groups = 4;  // zero input channels within the limits: fine, OC = 32
  auto p = resolve_forward({1, 0, 4}, {0, 8, 3}, std::nullopt, a);
  EXPECT_EQ(dst_shape(p, DataFormat::NCX), (Shape{1, 32, 6}));
}

TEST(Validation, HugeAttributesNameTheAttribute) {
  // dilations=[2**40, 1]: dst would be 2 x (2**41 + 3) x 6 elements.
  Attributes a = attrs(2);
  a.dilations = {int64_t{1} << 40, 1};
  expect_error([&] { resolve_forward({1, 2, 4, 4}, {2, 2, 3, 3}, std::nullopt, a); },
               {"result dst", "dilations=[1099511627776, 1]", "2**40"});
  a = attrs(2);
  a.strides = {int64_t{1} << 45, 1};
  expect_error([&] { resolve_forward({1, 2, 4, 4}, {2, 2, 3, 3}, std::nullopt, a); },
               {"result dst", "strides=[35184372088832, 1]"});
  // Backward data with a src_shape far beyond the limit.
  a = attrs(1, int64_t{1} << 30);
  expect_error(
      [&] { resolve_backward_data({1, 2, 3}, {2, 2, 3}, Shape{int64_t{1} << 50}, a); },
      {"src_shape", "1125899906842624"});
  // Backward weights: a weights_shape too large to allocate.
  a = attrs(1);
  expect_error([&] { resolve_backward_weights({1, 2, 4}, {1, 2, 6}, {2, int64_t{1} << 40, 3}, a); },
               {"weights_shape", "1099511627776", "2**40"});
  // Input shapes whose products overflow (possible for meta tensors or empty ones).
  const int64_t h = int64_t{1} << 32;
  expect_error([&] { resolve_forward({0, 2, h, h}, {2, 2, 1, 1}, std::nullopt, attrs(2)); },
               {"src", "4294967296", "2**40"});
  expect_error([&] { resolve_backward_data({1, 2, 6, 6}, {2, 2, h, h}, std::nullopt, attrs(2)); },
               {"weights", "4294967296", "2**40"});
  // The kernel extent d*(K-1)+1 overflowed before auto_pad used it.
  a = attrs(1, 1, 0, 0, int64_t{1} << 61);
  a.auto_pad = AutoPad::SameUpper;
  expect_error([&] { resolve_forward({1, 2, 4}, {2, 2, 9}, std::nullopt, a); },
               {"dilations", "overflow"});
  expect_error([&] { resolve_backward_data({1, 2, 4}, {2, 2, 9}, std::nullopt, a); },
               {"dilations", "overflow"});
  // diff_dst size + pads overflowed in the inferred diff_src size.
  a = attrs(1, 1, (int64_t{1} << 62) - 1, 0);
  expect_error([&] { resolve_backward_data({1, 2, 5}, {2, 2, 3}, std::nullopt, a); },
               {"pads_begin", "overflow"});
}

// Zero batch or channels: an empty result (backward weights: zeros, shape as given).
// Zero spatial sizes: an error in all three passes, as in torch.
TEST(Validation, ZeroSizesAgreeAcrossPasses) {
  Attributes a = attrs(1);
  auto p = resolve_forward({0, 2, 4}, {2, 3, 3}, std::nullopt, a);
  EXPECT_EQ(dst_shape(p, DataFormat::NCX), (Shape{0, 3, 6}));
  p = resolve_backward_data({0, 3, 6}, {2, 3, 3}, std::nullopt, a);
  EXPECT_EQ(src_shape(p, DataFormat::NCX), (Shape{0, 2, 4}));
  p = resolve_backward_weights({0, 2, 4}, {0, 3, 6}, {2, 3, 3}, a);
  EXPECT_EQ(p.N, 0);
  p = resolve_backward_weights({1, 0, 4}, {1, 3, 6}, {0, 3, 3}, a);
  EXPECT_EQ(p.IC(), 0);
  expect_error([&] { resolve_forward({1, 2, 0}, {2, 3, 3}, std::nullopt, a); },
               {"src", "zero spatial size", "[1, 2, 0]"});
  expect_error([&] { resolve_backward_data({1, 3, 0}, {2, 3, 3}, std::nullopt, a); },
               {"diff_dst", "zero spatial size", "[1, 3, 0]"});
  expect_error([&] { resolve_backward_data({1, 3, 2}, {2, 3, 3}, Shape{1, 2, 0}, a); },
               {"src_shape", "positive spatial sizes", "[1, 2, 0]"});
  expect_error([&] { resolve_backward_weights({1, 2, 0}, {1, 3, 2}, {2, 3, 3}, a); },
               {"src", "zero spatial size", "[1, 2, 0]"});
  expect_error([&] { resolve_backward_weights({1, 2, 4}, {1, 3, 0}, {2, 3, 3}, a); },
               {"diff_dst", "zero spatial size", "[1, 3, 0]"});
  a = attrs(2);
  a.data_format = DataFormat::NXC;
  expect_error([&] { resolve_forward({2, 0, 3, 4}, {4, 3, 2, 2}, std::nullopt, a); },
               {"src", "zero spatial size", "[2, 0, 3, 4]", "[0, 3]"});
}

TEST(Layouts, DimsOfEachFormat) {
  EXPECT_EQ(activation_dims(DataFormat::NXC, 2), (std::vector<int>{0, 3, 1, 2}));
  EXPECT_EQ(activation_dims(DataFormat::NCX, 3), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(weights_dims(WeightsFormat::XOI, 2), (std::vector<int>{3, 2, 0, 1}));
  EXPECT_EQ(weights_dims(WeightsFormat::XIO, 1), (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(weights_dims(WeightsFormat::OIX, 2), (std::vector<int>{1, 0, 2, 3}));
}

}  // namespace
}  // namespace tct
