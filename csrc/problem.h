// Problem resolution for the ConvTranspose family: attributes and shapes in,
// one validated, canonical problem out. No torch headers: the CPU kernels, the
// meta kernels and the GoogleTest units all use this one source of truth.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tct {

// Every validation failure throws this; the message names the argument and value.
class ProblemError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

enum class DataFormat { NXC, NCX };
enum class WeightsFormat { IOX, XOI, OIX, XIO };
enum class AutoPad { None, SameUpper, SameLower, Valid };

DataFormat parse_data_format(const std::string& value);
// arg_name is "weights_format" or "filter_format" (used in the error message).
WeightsFormat parse_weights_format(const std::string& value, const char* arg_name = "weights_format");
AutoPad parse_auto_pad(const std::string& value);  // any letter case
const char* to_string(DataFormat f);
const char* to_string(WeightsFormat f);

using Shape = std::vector<int64_t>;

struct Attributes {
  std::vector<int64_t> strides, pads_begin, pads_end, dilations;
  std::vector<int64_t> output_padding;  // empty = zeros
  AutoPad auto_pad = AutoPad::None;
  int64_t groups = 1;
  DataFormat data_format = DataFormat::NXC;
  WeightsFormat weights_format = WeightsFormat::XOI;
};

// Parses the string attributes; list attributes are copied as given and
// validated by the resolve_* functions.
Attributes make_attributes(std::vector<int64_t> strides, std::vector<int64_t> pads_begin,
                           std::vector<int64_t> pads_end, std::vector<int64_t> dilations,
                           const std::string& auto_pad, std::vector<int64_t> output_padding,
                           int64_t groups, const std::string& data_format,
                           const std::string& weights_format,
                           const char* weights_format_arg = "weights_format");

// Size limits (never an overflow, never an absurd allocation). Every tensor of a
// resolved problem (src, weights, dst) has at most kMaxElements elements when its zero
// sizes are counted as 1, so every product of its sizes (channels x groups, element counts,
// byte sizes at 8 bytes per element: at most 2**43) fits in int64 with room to spare.
// Attribute values, kernel extents d*(K-1)+1 and index sums i*s - pb + k*d stay below
// kMaxExtent. Larger values are a ProblemError naming the argument and value.
constexpr int64_t kMaxElements = int64_t{1} << 40;
constexpr int64_t kMaxExtent = int64_t{1} << 62;

constexpr int kAxes = 3;  // canonical spatial axes: a 1D/2D problem has leading axes of size 1

// Integer division rounded down, its remainder (0 <= r < b), division rounded
// up and rounding up to a multiple, for any a and b > 0.
constexpr int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
constexpr int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }
constexpr int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }
constexpr int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// The tap geometry of one spatial axis, the one model every plan and driver
// derives its maps, phases, lines and windows from: src position i, kernel
// tap k and dst position o meet where o = i*s - pb + k*d (SPEC section 3).
// Tap k's shift k*d - pb splits by the stride into off*s + phase with
// 0 <= phase < s: src i's tap k lands on dst (i + off)*s + phase, so the dst
// positions of one phase (o mod s) are reached by the taps of that phase only.
struct TapAxis {
  int64_t I = 1, O = 1, K = 1, s = 1, d = 1, pb = 0;  // src and dst sizes, kernel, attributes

  // The dst position of src i through tap k (possibly outside [0, O)).
  constexpr int64_t dst_of(int64_t i, int64_t k) const { return i * s - pb + k * d; }
  constexpr int64_t tap_off(int64_t k) const { return floor_div(k * d - pb, s); }
  constexpr int64_t tap_phase(int64_t k) const { return floor_mod(k * d - pb, s); }
  // The last (first) src position, of any integer ones, whose tap k lands at
  // or before (at or after) dst o; they are equal where tap k reaches o.
  constexpr int64_t src_floor(int64_t o, int64_t k) const { return floor_div(o + pb - k * d, s); }
  constexpr int64_t src_ceil(int64_t o, int64_t k) const { return ceil_div(o + pb - k * d, s); }
  // Whether tap k reaches dst o from some integer src position: o is in tap k's phase.
  constexpr bool reaches(int64_t o, int64_t k) const { return floor_mod(o - tap_phase(k), s) == 0; }
  // The src position inside [0, I) whose tap k lands on dst o, else -1.
  constexpr int64_t src_at(int64_t o, int64_t k) const {
    const int64_t i = src_floor(o, k);
    return reaches(o, k) && i >= 0 && i < I ? i : -1;
  }
  // The dst position inside [0, O) that src i's tap k lands on, else -1.
  constexpr int64_t dst_at(int64_t i, int64_t k) const {
    const int64_t o = dst_of(i, k);
    return o >= 0 && o < O ? o : -1;
  }
  // The src positions whose tap k lands inside dst: [first, second), empty as
  // first == second.
  std::pair<int64_t, int64_t> src_range(int64_t k) const;
};

// A resolved problem. "src" is the small tensor (forward input), "dst" the
// large one. The resolvers guarantee the limits above, so the products below
// cannot overflow. Spatial arrays are canonical: axis kAxes-S.. hold the real axes,
// the leading ones are size 1, stride 1, dilation 1, no pads.
struct ConvProblem {
  int spatial_rank = 0;  // S: 1, 2 or 3
  int64_t N = 0, G = 1, ICg = 0, OCg = 0;
  std::array<int64_t, kAxes> I{1, 1, 1};   // src spatial
  std::array<int64_t, kAxes> O{1, 1, 1};   // dst spatial
  std::array<int64_t, kAxes> K{1, 1, 1};   // kernel
  std::array<int64_t, kAxes> s{1, 1, 1};   // strides
  std::array<int64_t, kAxes> d{1, 1, 1};   // dilations (1 = dense)
  std::array<int64_t, kAxes> pb{0, 0, 0};  // pads_begin after auto_pad
  std::array<int64_t, kAxes> pe{0, 0, 0};  // pads_end after auto_pad
  std::array<int64_t, kAxes> op{0, 0, 0};  // output_padding that makes O consistent with I

  // Every field equal (the plans' memo keys).
  bool operator==(const ConvProblem& o) const {
    return spatial_rank == o.spatial_rank && N == o.N && G == o.G && ICg == o.ICg &&
           OCg == o.OCg && I == o.I && O == o.O && K == o.K && s == o.s && d == o.d &&
           pb == o.pb && pe == o.pe && op == o.op;
  }

  int64_t IC() const { return G * ICg; }
  int64_t OC() const { return G * OCg; }
  int64_t src_spatial() const { return I[0] * I[1] * I[2]; }
  int64_t dst_spatial() const { return O[0] * O[1] * O[2]; }
  int64_t taps() const { return K[0] * K[1] * K[2]; }
  // Useful multiply-adds of every pass: N * IC * OCg * taps * src pixels.
  double macs() const;
  // The src positions i on axis ax (canonical) whose tap k lands inside dst,
  // 0 <= i*s - pb + k*d < O: [first, second), empty as first == second.
  std::pair<int64_t, int64_t> tap_src_range(int ax, int64_t k) const { return axis(ax).src_range(k); }
  // Axis ax (canonical) of the tap geometry.
  TapAxis axis(int ax) const { return {I[ax], O[ax], K[ax], s[ax], d[ax], pb[ax]}; }
  // Real (non-canonical) spatial values, for shapes and messages.
  std::vector<int64_t> spatial(const std::array<int64_t, kAxes>& a) const;
};

// The size formulas of SPEC section 3, one axis at a time, for int64_t sizes
// and for symbolic ones (c10::SymInt, in the meta kernels) alike.
// Forward: O = s*(I-1) + eff_k + op - pb - pe.
template <class Int>
Int forward_output_size(const Int& i, int64_t s, int64_t eff_k, int64_t pb, int64_t pe,
                        int64_t op) {
  return (i - 1) * s + (eff_k + op - pb - pe);
}
// Backward data without src_shape: I = floor((D + pb + pe - eff_k) / s) + 1,
// for D + pb + pe >= eff_k.
template <class Int>
Int backward_data_input_size(const Int& d, int64_t s, int64_t eff_k, int64_t pb, int64_t pe) {
  return (d + (pb + pe - eff_k)) / s + 1;
}
inline int64_t effective_kernel(int64_t k, int64_t d) { return d * (k - 1) + 1; }
// auto_pad's (pads_begin, pads_end) on one axis. dst_rem: D % s for the
// backward ops (their total pad depends on it), -1 for the forward.
std::pair<int64_t, int64_t> auto_pads(AutoPad mode, int64_t eff_k, int64_t s, int64_t dst_rem,
                                      int64_t pb, int64_t pe);

// Resolution. Shapes are the tensors' own shapes, in the layouts named by
// attrs.data_format / attrs.weights_format. Throws ProblemError.
ConvProblem resolve_forward(const Shape& src, const Shape& weights,
                            const std::optional<Shape>& bias, const Attributes& attrs);
// src_shape: the full shape of diff_src in data_format layout (rank S+2), or
// only its S spatial sizes; absent: inferred from diff_dst.
ConvProblem resolve_backward_data(const Shape& diff_dst, const Shape& weights,
                                  const std::optional<Shape>& src_shape,
                                  const Attributes& attrs);
// weights_shape in weights_format layout.
ConvProblem resolve_backward_weights(const Shape& src, const Shape& diff_dst,
                                     const Shape& weights_shape, const Attributes& attrs);

// Logical order of an activation is (N, C, X1..XS); of weights (IC, OCg, K1..KS).
// These return, for each logical dim, the dim of the tensor in the given layout.
std::vector<int> activation_dims(DataFormat f, int spatial_rank);
std::vector<int> weights_dims(WeightsFormat f, int spatial_rank);

// Shapes of the results in their layouts.
Shape src_shape(const ConvProblem& p, DataFormat f);
Shape dst_shape(const ConvProblem& p, DataFormat f);
Shape weights_shape(const ConvProblem& p, WeightsFormat f);

}  // namespace tct
