#include "problem.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <sstream>
#include <tuple>

namespace tct {
namespace {

static_assert(kMaxElements <= (std::numeric_limits<int64_t>::max() / 8) >> 16,
              "byte sizes at 8 bytes per element, and products with a few more small "
              "factors, fit in int64");

std::string join(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ']';
  return os.str();
}

[[noreturn]] void fail(const std::string& msg) { throw ProblemError("conv_transpose: " + msg); }

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

void check_rank(const char* name, const Shape& shape) {
  if (shape.size() < 3 || shape.size() > 5)
    fail(std::string(name) + " must have rank 3, 4 or 5 (1D/2D/3D), got rank " +
         std::to_string(shape.size()) + " with shape " + join(shape));
}

void check_same_rank(const char* name, const Shape& shape, const char* ref_name, size_t rank) {
  if (shape.size() != rank)
    fail(std::string(name) + " must have the same rank as " + ref_name + " (" +
         std::to_string(rank) + "), got rank " + std::to_string(shape.size()) + " with shape " +
         join(shape));
}

void check_sizes_nonnegative(const char* name, const Shape& shape) {
  for (int64_t v : shape)
    if (v < 0) fail(std::string(name) + " has a negative size: " + join(shape));
}

// Checked arithmetic: every product of sizes in the resolution goes through these.
std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The product of the non-zero sizes of a shape (sizes >= 0), which bounds every product
// of its sizes; saturated at kMaxElements + 1.
int64_t nonzero_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t v : shape) {
    if (v == 0) continue;
    const auto r = checked_mul(n, v);
    if (!r || *r > kMaxElements) return kMaxElements + 1;
    n = *r;
  }
  return n;
}

constexpr const char* kLimitText =
    "the product of its non-zero sizes must be at most 2**40 elements (8 TiB at 8 bytes per "
    "element)";

std::string attribute_values(const Attributes& a) {
  return "strides=" + join(a.strides) + ", dilations=" + join(a.dilations) +
         ", pads_begin=" + join(a.pads_begin) + ", pads_end=" + join(a.pads_end) +
         ", output_padding=" + join(a.output_padding) + ", groups=" + std::to_string(a.groups);
}

// A tensor (or a shape argument) within the size limit; a result's message names the
// attributes that made it (`attrs`). The message is built only on failure: this runs on
// every call.
void check_elements(const char* name, const Shape& shape, const Attributes* attrs = nullptr) {
  if (nonzero_elements(shape) > kMaxElements)
    fail(std::string(name) + " " + join(shape) + " is too large: " + kLimitText +
         (attrs ? " (" + attribute_values(*attrs) + ")" : std::string()));
}

// Zero batch or channels are fine (an empty result); a zero spatial size is an error in
// every pass, as in torch ("Only zero batch or zero channel inputs are supported").
void check_spatial_positive(const char* name, const Shape& shape, const ConvProblem& p,
                            const std::array<int64_t, kAxes>& sp) {
  for (int ax = kAxes - p.spatial_rank; ax < kAxes; ++ax)
    if (sp[ax] < 1)
      fail(std::string(name) + " has a zero spatial size: shape " + join(shape) +
           " (spatial " + join(p.spatial(sp)) +
           "); only the batch and channel sizes may be 0, as in torch's conv_transpose");
}

// OC = groups x the weights' O dim, within the size limit (it is a dim of dst).
void check_output_channels(const ConvProblem& p, const char* wname, const Shape& weights) {
  const auto oc = checked_mul(p.G, p.OCg);
  if (!oc || *oc > kMaxElements)
    fail("the output channels OC = groups x " + std::string(wname) + " O dim = " +
         std::to_string(p.G) + " x " + std::to_string(p.OCg) + " are too many (" + wname +
         " shape " + join(weights) + "): at most 2**40, got groups=" + std::to_string(p.G));
}

// Checks list lengths and value ranges, and fills the canonical attribute
// arrays of p (pads before auto_pad).
void load_attributes(const Attributes& a, int S, ConvProblem& p) {
  auto check_len = [&](const char* name, const std::vector<int64_t>& v, bool allow_empty) {
    if (allow_empty && v.empty()) return;
    if (static_cast<int>(v.size()) != S)
      fail(std::string(name) + " must have " + std::to_string(S) +
           " entries (one per spatial axis), got " + join(v));
  };
  check_len("strides", a.strides, false);
  check_len("pads_begin", a.pads_begin, false);
  check_len("pads_end", a.pads_end, false);
  check_len("dilations", a.dilations, false);
  check_len("output_padding", a.output_padding, true);
  auto check_range = [&](const char* name, const std::vector<int64_t>& v, int64_t lo) {
    for (int64_t x : v)
      if (x < lo || x >= kMaxExtent)
        fail(std::string(name) + " must be in [" + std::to_string(lo) + ", 2**62), got " +
             join(v));
  };
  check_range("strides", a.strides, 1);
  check_range("dilations", a.dilations, 1);
  check_range("pads_begin", a.pads_begin, 0);
  check_range("pads_end", a.pads_end, 0);
  check_range("output_padding", a.output_padding, 0);
  if (a.groups < 1) fail("groups must be >= 1, got " + std::to_string(a.groups));

  p.spatial_rank = S;
  const int off = kAxes - S;
  for (int i = 0; i < S; ++i) {
    p.s[off + i] = a.strides[i];
    p.d[off + i] = a.dilations[i];
    p.pb[off + i] = a.pads_begin[i];
    p.pe[off + i] = a.pads_end[i];
    p.op[off + i] = a.output_padding.empty() ? 0 : a.output_padding[i];
    const int64_t limit = std::max(p.s[off + i], p.d[off + i]);
    if (p.op[off + i] >= limit)
      fail("output_padding must be smaller than max(stride, dilation) on each axis, got "
           "output_padding=" + join(a.output_padding) + " with strides=" + join(a.strides) +
           " and dilations=" + join(a.dilations));
  }
}

int64_t eff_k(const ConvProblem& p, int ax) { return effective_kernel(p.K[ax], p.d[ax]); }

void apply_auto_pad(AutoPad mode, ConvProblem& p, const std::array<int64_t, kAxes>* diff_dst) {
  for (int ax = kAxes - p.spatial_rank; ax < kAxes; ++ax)
    std::tie(p.pb[ax], p.pe[ax]) = auto_pads(mode, eff_k(p, ax), p.s[ax],
                                             diff_dst ? (*diff_dst)[ax] % p.s[ax] : -1,
                                             p.pb[ax], p.pe[ax]);
}

// Kernel extents and the sizes they imply must stay below kMaxExtent. Called before
// auto_pad (with the given pads) and again once the sizes are known.
// src_name: where the src sizes come from (for the message).
void check_extent(const ConvProblem& p, int ax, const Attributes& a,
                  const char* src_name = "src") {
  __int128 k_ext = static_cast<__int128>(p.d[ax]) * (p.K[ax] - 1) + 1;
  __int128 i_ext = static_cast<__int128>(p.s[ax]) * (std::max<int64_t>(p.I[ax], 1) - 1);
  __int128 total = k_ext + i_ext + p.op[ax] + p.pb[ax] + p.pe[ax];
  if (total >= kMaxExtent)
    fail("the attributes overflow the size computation: strides=" + join(a.strides) +
         ", dilations=" + join(a.dilations) + ", pads_begin=" + join(a.pads_begin) +
         ", pads_end=" + join(a.pads_end) + " with kernel " + join(p.spatial(p.K)) +
         " and src spatial size " + join(p.spatial(p.I)) + " (" + src_name + ")");
}

void check_extents(const ConvProblem& p, const Attributes& a) {
  for (int ax = kAxes - p.spatial_rank; ax < kAxes; ++ax) check_extent(p, ax, a);
}

int64_t forward_size(const ConvProblem& p, int ax, int64_t op) {
  return forward_output_size(p.I[ax], p.s[ax], eff_k(p, ax), p.pb[ax], p.pe[ax], op);
}

// Splits an activation shape (data layout) into N, C and canonical spatial.
void split_activation(const Shape& shape, DataFormat f, int64_t& n, int64_t& c,
                      std::array<int64_t, kAxes>& sp) {
  const int S = static_cast<int>(shape.size()) - 2;
  auto dims = activation_dims(f, S);
  n = shape[dims[0]];
  c = shape[dims[1]];
  sp = {1, 1, 1};
  for (int i = 0; i < S; ++i) sp[kAxes - S + i] = shape[dims[2 + i]];
}

// Weights (weights layout) -> I dim, O dim (per group), canonical kernel.
void split_weights(const Shape& shape, WeightsFormat f, int64_t& wi, int64_t& wo,
                   std::array<int64_t, kAxes>& k) {
  const int S = static_cast<int>(shape.size()) - 2;
  auto dims = weights_dims(f, S);
  wi = shape[dims[0]];
  wo = shape[dims[1]];
  k = {1, 1, 1};
  for (int i = 0; i < S; ++i) k[kAxes - S + i] = shape[dims[2 + i]];
}

void check_kernel(const ConvProblem& p, const Shape& weights, const char* wname) {
  for (int ax = kAxes - p.spatial_rank; ax < kAxes; ++ax)
    if (p.K[ax] < 1) fail(std::string(wname) + " has an empty kernel: shape " + join(weights));
}

void check_groups_channels(const ConvProblem& p, int64_t ic, int64_t w_i, const char* src_name,
                           const Shape& src, const Shape& weights, const char* wname) {
  if (ic != w_i)
    fail(std::string(src_name) + " has " + std::to_string(ic) + " channels but " + wname +
         " has I=" + std::to_string(w_i) + " (shape " + join(weights) + ", " + src_name +
         " shape " + join(src) + ")");
  if (ic % p.G != 0)
    fail("input channels IC=" + std::to_string(ic) + " must be divisible by groups=" +
         std::to_string(p.G));
}

// The common start of forward and backward-data resolution: ranks, sizes,
// attributes, and the split of the activation (into N, channels and the
// spatial array `sp` of p) and of the weights (into I dim, O dim, kernel).
ConvProblem start_problem(const char* act_name, const Shape& act,
                          std::array<int64_t, kAxes> ConvProblem::*sp, const Shape& weights,
                          const Attributes& a, int64_t& channels, int64_t& wi, int64_t& wo) {
  check_rank(act_name, act);
  check_same_rank("weights", weights, act_name, act.size());
  check_sizes_nonnegative(act_name, act);
  check_sizes_nonnegative("weights", weights);
  check_elements(act_name, act);
  check_elements("weights", weights);
  ConvProblem p;
  load_attributes(a, static_cast<int>(act.size()) - 2, p);
  p.G = a.groups;
  split_activation(act, a.data_format, p.N, channels, p.*sp);
  split_weights(weights, a.weights_format, wi, wo, p.K);
  check_spatial_positive(act_name, act, p, p.*sp);
  check_kernel(p, weights, "weights");
  check_extents(p, a);  // before auto_pad, which computes with the kernel extents
  return p;
}

// Backward passes: diff_dst size must match the forward formula for an
// output_padding in [0, max(s, d)); records that output_padding in p.op.
void check_consistent(ConvProblem& p, const char* what, const char* src_name) {
  for (int ax = kAxes - p.spatial_rank; ax < kAxes; ++ax) {
    const int64_t base = forward_size(p, ax, 0);
    const int64_t r = p.O[ax] - base;
    if (r < 0 || r >= std::max(p.s[ax], p.d[ax]))
      fail(std::string(what) + ": diff_dst spatial size " + join(p.spatial(p.O)) +
           " is inconsistent with the src spatial size " + join(p.spatial(p.I)) + " (" +
           src_name + ")" +
           " (a forward pass gives " + std::to_string(base) + " + output_padding in [0, " +
           std::to_string(std::max(p.s[ax], p.d[ax])) + ") on axis " +
           std::to_string(ax - (kAxes - p.spatial_rank)) + ")");
    p.op[ax] = r;
  }
}

}  // namespace

std::pair<int64_t, int64_t> auto_pads(AutoPad mode, int64_t eff_k, int64_t s, int64_t dst_rem,
                                      int64_t pb, int64_t pe) {
  if (mode == AutoPad::None) return {pb, pe};
  if (mode == AutoPad::Valid) return {0, 0};
  const int64_t total = std::max<int64_t>(eff_k - (dst_rem > 0 ? dst_rem : s), 0);
  const int64_t begin = mode == AutoPad::SameLower ? (total + 1) / 2 : total / 2;
  return {begin, total - begin};
}

double ConvProblem::macs() const {
  return static_cast<double>(N) * IC() * OCg * taps() * src_spatial();
}

std::pair<int64_t, int64_t> TapAxis::src_range(int64_t k) const {
  const int64_t lo = std::clamp<int64_t>(src_ceil(0, k), 0, I);
  const int64_t hi = std::clamp<int64_t>(src_floor(O - 1, k) + 1, lo, I);
  return {lo, hi};
}

std::vector<int64_t> ConvProblem::spatial(const std::array<int64_t, kAxes>& a) const {
  return std::vector<int64_t>(a.begin() + (kAxes - spatial_rank), a.end());
}

DataFormat parse_data_format(const std::string& value) {
  const std::string u = upper(value);
  if (u == "NXC") return DataFormat::NXC;
  if (u == "NCX") return DataFormat::NCX;
  fail("data_format must be one of NXC, NCX, got '" + value + "'");
}

WeightsFormat parse_weights_format(const std::string& value, const char* arg_name) {
  const std::string u = upper(value);
  if (u == "IOX") return WeightsFormat::IOX;
  if (u == "XOI") return WeightsFormat::XOI;
  if (u == "OIX") return WeightsFormat::OIX;
  if (u == "XIO") return WeightsFormat::XIO;
  fail(std::string(arg_name) + " must be one of IOX, XOI, OIX, XIO, got '" + value + "'");
}

AutoPad parse_auto_pad(const std::string& value) {
  const std::string u = upper(value);
  if (u == "NONE") return AutoPad::None;
  if (u == "SAME_UPPER") return AutoPad::SameUpper;
  if (u == "SAME_LOWER") return AutoPad::SameLower;
  if (u == "VALID") return AutoPad::Valid;
  fail("auto_pad must be one of None, SAME_UPPER, SAME_LOWER, VALID (any letter case), got '" +
       value + "'");
}

const char* to_string(DataFormat f) { return f == DataFormat::NXC ? "NXC" : "NCX"; }

const char* to_string(WeightsFormat f) {
  switch (f) {
    case WeightsFormat::IOX: return "IOX";
    case WeightsFormat::XOI: return "XOI";
    case WeightsFormat::OIX: return "OIX";
    case WeightsFormat::XIO: return "XIO";
  }
  return "?";
}

Attributes make_attributes(std::vector<int64_t> strides, std::vector<int64_t> pads_begin,
                           std::vector<int64_t> pads_end, std::vector<int64_t> dilations,
                           const std::string& auto_pad, std::vector<int64_t> output_padding,
                           int64_t groups, const std::string& data_format,
                           const std::string& weights_format, const char* weights_format_arg) {
  Attributes a;
  a.strides = std::move(strides);
  a.pads_begin = std::move(pads_begin);
  a.pads_end = std::move(pads_end);
  a.dilations = std::move(dilations);
  a.output_padding = std::move(output_padding);
  a.auto_pad = parse_auto_pad(auto_pad);
  a.groups = groups;
  a.data_format = parse_data_format(data_format);
  a.weights_format = parse_weights_format(weights_format, weights_format_arg);
  return a;
}

std::vector<int> activation_dims(DataFormat f, int S) {
  std::vector<int> dims(S + 2);
  dims[0] = 0;
  if (f == DataFormat::NCX) {
    for (int j = 1; j < S + 2; ++j) dims[j] = j;
  } else {
    dims[1] = S + 1;
    for (int i = 0; i < S; ++i) dims[2 + i] = 1 + i;
  }
  return dims;
}

std::vector<int> weights_dims(WeightsFormat f, int S) {
  std::vector<int> dims(S + 2);
  for (int i = 0; i < S; ++i) {
    const bool k_last = f == WeightsFormat::IOX || f == WeightsFormat::OIX;
    dims[2 + i] = k_last ? 2 + i : i;
  }
  switch (f) {
    case WeightsFormat::IOX: dims[0] = 0; dims[1] = 1; break;
    case WeightsFormat::OIX: dims[0] = 1; dims[1] = 0; break;
    case WeightsFormat::XOI: dims[0] = S + 1; dims[1] = S; break;
    case WeightsFormat::XIO: dims[0] = S; dims[1] = S + 1; break;
  }
  return dims;
}

namespace {
Shape activation_shape(const ConvProblem& p, DataFormat f, int64_t c,
                       const std::array<int64_t, kAxes>& sp) {
  const int S = p.spatial_rank;
  auto dims = activation_dims(f, S);
  Shape shape(S + 2);
  shape[dims[0]] = p.N;
  shape[dims[1]] = c;
  for (int i = 0; i < S; ++i) shape[dims[2 + i]] = sp[kAxes - S + i];
  return shape;
}
}  // namespace

Shape src_shape(const ConvProblem& p, DataFormat f) { return activation_shape(p, f, p.IC(), p.I); }
Shape dst_shape(const ConvProblem& p, DataFormat f) { return activation_shape(p, f, p.OC(), p.O); }

Shape weights_shape(const ConvProblem& p, WeightsFormat f) {
  const int S = p.spatial_rank;
  auto dims = weights_dims(f, S);
  Shape shape(S + 2);
  shape[dims[0]] = p.IC();
  shape[dims[1]] = p.OCg;
  for (int i = 0; i < S; ++i) shape[dims[2 + i]] = p.K[kAxes - S + i];
  return shape;
}

ConvProblem resolve_forward(const Shape& src, const Shape& weights, const std::optional<Shape>& bias,
                            const Attributes& a) {
  int64_t ic, wi, wo;
  ConvProblem p = start_problem("src", src, &ConvProblem::I, weights, a, ic, wi, wo);
  const int S = p.spatial_rank;
  try {
    check_groups_channels(p, ic, wi, "src", src, weights, "weights");
  } catch (const ProblemError& e) {
    // torch's layout (NCX data, IOX weights) passed with other formats (the defaults are
    // NXC/XOI): say so when the channels would have been consistent in that layout.
    const bool other_formats =
        a.data_format != DataFormat::NCX || a.weights_format != WeightsFormat::IOX;
    if (other_formats && src[1] == weights[0] && src[1] % p.G == 0)
      throw ProblemError(std::string(e.what()) +
                         " (the tensors look like NCX data with IOX weights, torch's layout: "
                         "pass data_format='NCX', weights_format='IOX')");
    throw;
  }
  p.ICg = ic / p.G;
  p.OCg = wo;
  check_output_channels(p, "weights", weights);
  if (bias) {
    if (bias->size() != 1 || (*bias)[0] != p.OC())
      fail("bias must have shape [" + std::to_string(p.OC()) + "] (OC = weights O dim " +
           std::to_string(wo) + " x groups " + std::to_string(p.G) + "), got " + join(*bias));
  }
  apply_auto_pad(a.auto_pad, p, nullptr);
  for (int ax = kAxes - S; ax < kAxes; ++ax) {
    check_extent(p, ax, a);
    p.O[ax] = forward_size(p, ax, p.op[ax]);
  }
  for (int ax = kAxes - S; ax < kAxes; ++ax)
    if (p.O[ax] < 1)
      fail("the computed output spatial size " + join(p.spatial(p.O)) +
           " must be >= 1 (src spatial " + join(p.spatial(p.I)) + ", pads_begin=" +
           join(p.spatial(p.pb)) + ", pads_end=" + join(p.spatial(p.pe)) + ")");
  check_elements("the result dst", dst_shape(p, a.data_format), &a);
  return p;
}

ConvProblem resolve_backward_data(const Shape& diff_dst, const Shape& weights,
                                  const std::optional<Shape>& src_shape_arg, const Attributes& a) {
  const char* what = "conv_transpose_backward_data";
  int64_t oc, wi, wo;
  ConvProblem p = start_problem("diff_dst", diff_dst, &ConvProblem::O, weights, a, oc, wi, wo);
  const int S = p.spatial_rank;
  if (wi % p.G != 0)
    fail("input channels IC=" + std::to_string(wi) + " (weights I dim, shape " + join(weights) +
         ") must be divisible by groups=" + std::to_string(p.G));
  p.ICg = wi / p.G;
  p.OCg = wo;
  check_output_channels(p, "weights", weights);
  if (oc != p.OC())
    fail("diff_dst has " + std::to_string(oc) + " channels but weights O dim x groups = " +
         std::to_string(wo) + " x " + std::to_string(p.G) + " (weights shape " + join(weights) +
         ", diff_dst shape " + join(diff_dst) + ")");
  apply_auto_pad(a.auto_pad, p, &p.O);
  if (src_shape_arg) {
    const Shape& ss = *src_shape_arg;
    if (static_cast<int>(ss.size()) == S + 2) {
      int64_t n, c;
      split_activation(ss, a.data_format, n, c, p.I);
      if (n != p.N || c != p.IC())
        fail("src_shape " + join(ss) + " does not match diff_dst batch " + std::to_string(p.N) +
             " and weights input channels " + std::to_string(p.IC()) + " (data_format " +
             to_string(a.data_format) + ")");
    } else if (static_cast<int>(ss.size()) == S) {
      for (int i = 0; i < S; ++i) p.I[kAxes - S + i] = ss[i];
    } else {
      fail("src_shape must have " + std::to_string(S + 2) + " entries (or " + std::to_string(S) +
           " spatial sizes), got " + join(ss));
    }
    for (int ax = kAxes - S; ax < kAxes; ++ax) {
      if (p.I[ax] < 1)
        fail("src_shape must have positive spatial sizes (only the batch and channel sizes "
             "may be 0, as in torch's conv_transpose), got " + join(ss));
      check_extent(p, ax, a, "src_shape");
    }
    check_consistent(p, what, "from src_shape");
  } else {
    for (int ax = kAxes - S; ax < kAxes; ++ax) {
      check_extent(p, ax, a);
      const int64_t num = p.O[ax] + p.pb[ax] + p.pe[ax] - eff_k(p, ax);
      if (num < 0)
        fail(std::string(what) + ": the computed diff_src spatial size is < 1 (diff_dst spatial " +
             join(p.spatial(p.O)) + ", kernel " + join(p.spatial(p.K)) + ", dilations " +
             join(a.dilations) + ", pads_begin=" + join(p.spatial(p.pb)) + ", pads_end=" +
             join(p.spatial(p.pe)) + ")");
      p.I[ax] = backward_data_input_size(p.O[ax], p.s[ax], eff_k(p, ax), p.pb[ax], p.pe[ax]);
      check_extent(p, ax, a, "inferred from diff_dst");
      p.op[ax] = p.O[ax] - forward_size(p, ax, 0);
    }
  }
  check_elements("the result diff_src", tct::src_shape(p, a.data_format), &a);
  return p;
}

ConvProblem resolve_backward_weights(const Shape& src, const Shape& diff_dst,
                                     const Shape& weights_shape_arg, const Attributes& a) {
  const char* what = "conv_transpose_backward_weights";
  check_rank("src", src);
  check_same_rank("diff_dst", diff_dst, "src", src.size());
  check_sizes_nonnegative("src", src);
  check_sizes_nonnegative("diff_dst", diff_dst);
  const int S = static_cast<int>(src.size()) - 2;
  if (weights_shape_arg.empty())
    fail(std::string(what) + " needs the weights shape: give weights_shape_input (a 1-D "
         "integer tensor) or the weights_shape attribute");
  if (weights_shape_arg.size() != src.size())
    fail("weights_shape must have " + std::to_string(src.size()) + " entries (rank of src), got " +
         join(weights_shape_arg));
  check_sizes_nonnegative("weights_shape", weights_shape_arg);
  check_elements("src", src);
  check_elements("diff_dst", diff_dst);
  check_elements("weights_shape", weights_shape_arg);
  ConvProblem p;
  load_attributes(a, S, p);
  p.G = a.groups;
  int64_t ic, oc, wi, wo, n2;
  split_activation(src, a.data_format, p.N, ic, p.I);
  split_activation(diff_dst, a.data_format, n2, oc, p.O);
  split_weights(weights_shape_arg, a.weights_format, wi, wo, p.K);
  check_spatial_positive("src", src, p, p.I);
  check_spatial_positive("diff_dst", diff_dst, p, p.O);
  check_kernel(p, weights_shape_arg, "weights_shape");
  check_extents(p, a);  // before auto_pad, which computes with the kernel extents
  if (n2 != p.N)
    fail("src batch " + std::to_string(p.N) + " and diff_dst batch " + std::to_string(n2) +
         " differ (src shape " + join(src) + ", diff_dst shape " + join(diff_dst) + ")");
  check_groups_channels(p, ic, wi, "src", src, weights_shape_arg, "weights_shape");
  p.ICg = ic / p.G;
  p.OCg = wo;
  check_output_channels(p, "weights_shape", weights_shape_arg);
  if (oc != p.OC())
    fail("diff_dst has " + std::to_string(oc) + " channels but weights_shape O dim x groups = " +
         std::to_string(wo) + " x " + std::to_string(p.G) + " (weights_shape " +
         join(weights_shape_arg) + ")");
  apply_auto_pad(a.auto_pad, p, &p.O);
  check_extents(p, a);
  check_consistent(p, what, "from src");
  return p;
}

}  // namespace tct
