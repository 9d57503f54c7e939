// Tensors and attributes -> a resolved problem (problem.h) and the result's
// shape, for the CPU, Meta and Autograd kernels alike.
//
// Symbolic sizes (torch.compile, torch.export): the batch and every spatial
// size stay symbolic; channels and kernel sizes are specialized. The resolver
// works on int64 values, so a symbolic size is shown to it as a guard-free
// stand-in chosen to resolve to the same pads, and the real sizes are checked
// and the result's sizes computed symbolically with the same formulas
// (problem.h). The only guard beyond those checks is D % s for auto_pad SAME
// in the backward ops, whose pads depend on it.
#include <algorithm>

#include "common.h"
#include "ops.h"

namespace tct {
namespace ops {
namespace {

void check_tensor(const char* name, const Tensor& t, const Tensor& ref, const char* ref_name) {
  const auto st = t.scalar_type();
  TORCH_CHECK(st == at::kFloat || st == at::kDouble || st == at::kBFloat16 || st == at::kHalf,
              "conv_transpose: ", name, " must be float32, bfloat16, float16 or float64, got ",
              st);
  TORCH_CHECK(&t == &ref || st == ref.scalar_type(), "conv_transpose: ", name, " has dtype ", st,
              " but ", ref_name, " has dtype ", ref.scalar_type(),
              "; all floating tensors must share one dtype");
  TORCH_CHECK(t.device() == ref.device(), "conv_transpose: ", name, " is on ", t.device(),
              " but ", ref_name, " is on ", ref.device());
}

Shape shape_from_input(const Tensor& t) {
  TORCH_CHECK(t.dim() == 1 && !at::isFloatingType(t.scalar_type()) &&
                  !at::isComplexType(t.scalar_type()) && t.scalar_type() != at::kBool,
              "conv_transpose_backward_weights: weights_shape_input must be a 1-D integer "
              "tensor, got dtype ",
              t.scalar_type(), " and shape ", t.sizes());
  TORCH_CHECK(t.device().is_cpu(),
              "conv_transpose_backward_weights: weights_shape_input must be a CPU tensor to be "
              "read; on meta/fake tensors pass the weights_shape attribute");
  Tensor c = t.to(at::kLong).contiguous();
  return Shape(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

using SymShape = std::vector<c10::SymInt>;

// An activation's sizes: `sym` as given, `rep` as the resolver sees them.
// Symbolic batch and spatial sizes are marked in `stand_in` (their rep is set
// by the caller); every other symbolic size is specialized.
struct Sizes {
  SymShape sym;
  Shape rep;
  std::vector<bool> stand_in;

  Sizes(c10::SymIntArrayRef sizes, DataFormat f) : sym(sizes.begin(), sizes.end()) {
    const int rank = static_cast<int>(sizes.size());
    const bool ranked = rank >= 3 && rank <= 5;
    const int channel_dim = f == DataFormat::NCX ? 1 : rank - 1;
    for (int i = 0; i < rank; ++i) {
      const auto v = sym[i].maybe_as_int();
      const bool free = !v && ranked && i != channel_dim;
      rep.push_back(v ? *v : free ? 1 : sym[i].guard_int(__FILE__, __LINE__));
      stand_in.push_back(free);
    }
  }
  // Gives up symbolic-ness of dim i (guards on its value).
  void specialize(size_t i) {
    if (!stand_in[i]) return;
    rep[i] = sym[i].guard_int(__FILE__, __LINE__);
    stand_in[i] = false;
  }
  void specialize_all() {
    for (size_t i = 0; i < rep.size(); ++i) specialize(i);
  }
  // Whether the stand-ins would make the resolver see a tensor near its size
  // limit (huge pads on every axis) that the real sizes may not be.
  bool stand_ins_too_large() const {
    int64_t n = 1;
    for (size_t i = 0; i < rep.size(); ++i) {
      const int64_t v = std::max<int64_t>(rep[i], 1);
      if (n > (kMaxElements >> 8) / v) return std::find(stand_in.begin(), stand_in.end(),
                                                        true) != stand_in.end();
      n *= v;
    }
    return false;
  }
};

// Gives up the stand-ins of sizes whose stand-ins are too large (guards on the
// real values, which the resolver then checks as in eager mode).
void specialize_if_too_large(std::initializer_list<Sizes*> all) {
  bool large = false;
  for (const Sizes* s : all) large = large || (s && s->stand_ins_too_large());
  if (large)
    for (Sizes* s : all)
      if (s) s->specialize_all();
}

// Kernel size on spatial axis j of weights given in a's weights_format.
int64_t kernel_size(const Attributes& a, const Shape& weights, int j) {
  return weights[weights_dims(a.weights_format, static_cast<int>(weights.size()) - 2)[2 + j]];
}

// Whether the attributes and weights are well-formed enough for stand-ins to
// be computed from them; if not, sizes are specialized and the resolver
// reports the problem with the real values.
bool attributes_usable(const Attributes& a, int S, const Shape& weights) {
  auto len_ok = [&](const std::vector<int64_t>& v) { return static_cast<int>(v.size()) == S; };
  if (S < 1 || S > 3 || static_cast<int>(weights.size()) != S + 2) return false;
  if (!len_ok(a.strides) || !len_ok(a.dilations) || !len_ok(a.pads_begin) ||
      !len_ok(a.pads_end) || !(a.output_padding.empty() || len_ok(a.output_padding)))
    return false;
  for (int j = 0; j < S; ++j)
    if (a.strides[j] < 1 || a.dilations[j] < 1 || a.pads_begin[j] < 0 || a.pads_end[j] < 0 ||
        a.pads_begin[j] > (int64_t{1} << 40) || a.pads_end[j] > (int64_t{1} << 40) ||
        a.strides[j] > (int64_t{1} << 20) || a.dilations[j] > (int64_t{1} << 20))
      return false;
  for (int j = 0; j < S; ++j)
    if (kernel_size(a, weights, j) < 1 || kernel_size(a, weights, j) > (int64_t{1} << 20))
      return false;
  return true;
}

// One spatial axis j of a backward pass. D: diff_dst's size; I: src's, when
// known. Where they are symbolic, sets stand-ins (D_rep, I_rep) that resolve
// to the same pads, checks the real sizes symbolically, and returns src's size
// and the output_padding relating the two (both symbolic).
std::pair<c10::SymInt, c10::SymInt> backward_axis(const Attributes& a, const Shape& weights,
                                                  int j, Sizes& dd, size_t d_dim, Sizes* src,
                                                  size_t i_dim, const char* what) {
  const int64_t s = a.strides[j], dil = a.dilations[j];
  const int64_t ek = effective_kernel(kernel_size(a, weights, j), dil);
  const bool same = a.auto_pad == AutoPad::SameUpper || a.auto_pad == AutoPad::SameLower;
  const c10::SymInt& D = dd.sym[d_dim];
  // D % s decides the SAME pads: the stand-in keeps it (a guard on it).
  const int64_t rem = same ? (D % s).guard_int(__FILE__, __LINE__) : 0;
  const auto [pb, pe] = auto_pads(a.auto_pad, ek, s, rem, a.pads_begin[j], a.pads_end[j]);
  const int64_t I_rep = pb + pe + ek + 1;
  c10::SymInt I;
  if (src) {
    I = src->sym[i_dim];
    src->rep[i_dim] = I_rep;
    const int64_t op_rep = same ? floor_mod(rem - (ek - pb - pe), s) : 0;
    dd.rep[d_dim] = forward_output_size(I_rep, s, ek, pb, pe, op_rep);
  } else {
    TORCH_SYM_CHECK(D.sym_ge(ek - pb - pe), what, ": the diff_src size on spatial axis ", j,
                    " would be < 1 (diff_dst size ", D, ", effective kernel ", ek, ", pads ", pb,
                    "/", pe, ")");
    I = backward_data_input_size(D, s, ek, pb, pe);
    dd.rep[d_dim] = s * I_rep + rem;
  }
  c10::SymInt op = D - forward_output_size(I, s, ek, pb, pe, 0);
  TORCH_SYM_CHECK(op.sym_ge(0) .sym_and(op.sym_lt(std::max(s, dil))), what,
                  ": the diff_dst size ", D, " on spatial axis ", j,
                  " is inconsistent with the src size ", I, " (a forward pass gives ",
                  forward_output_size(I, s, ek, pb, pe, 0), " + output_padding in [0, ",
                  std::max(s, dil), "))");
  return {I, op};
}

SymShape symbolic(const Shape& shape) { return SymShape(shape.begin(), shape.end()); }

// output_padding per canonical axis, from the resolved problem.
void set_concrete_op(Plan& plan) {
  for (int ax = 0; ax < kAxes; ++ax) plan.op[ax] = plan.p.op[ax];
}

}  // namespace

// ---------------------------------------------------------------- forward

Plan plan_forward(TCT_CONV_TRANSPOSE_ARGS) {
  check_tensor("src", src, src, "src");
  check_tensor("weights", weights, src, "src");
  if (bias) check_tensor("bias", *bias, src, "src");
  return checked([&] {
    Plan plan;
    const Attributes& a = plan.attrs =
        attributes(strides, pads_begin, pads_end, dilations, auto_pad, output_padding, groups,
                   data_format, weights_format);
    const Shape w = concrete(weights.sym_sizes());
    Sizes x(src.sym_sizes(), a.data_format);
    const int S = static_cast<int>(x.rep.size()) - 2;
    const bool usable = attributes_usable(a, S, w);
    if (!usable) x.specialize_all();
    const auto dims = usable ? activation_dims(a.data_format, S) : std::vector<int>();
    // Any src size >= pb + pe + 1 resolves (O >= 1), and the pads do not depend on it.
    for (int j = 0; usable && j < S; ++j)
      if (x.stand_in[dims[2 + j]]) x.rep[dims[2 + j]] = a.pads_begin[j] + a.pads_end[j] + 1;
    specialize_if_too_large({&x});
    std::optional<Shape> bias_shape;
    if (bias) bias_shape = concrete(bias->sym_sizes());
    plan.p = resolve_forward(x.rep, w, bias_shape, a);
    set_concrete_op(plan);
    const ConvProblem& p = plan.p;
    plan.result_shape = symbolic(dst_shape(p, a.data_format));
    plan.result_shape[0] = x.sym[0];
    for (int j = 0; usable && j < S; ++j) {
      const int ax = kAxes - S + j, dim = dims[2 + j];
      if (!x.stand_in[dim]) continue;
      c10::SymInt O = forward_output_size(x.sym[dim], p.s[ax], effective_kernel(p.K[ax], p.d[ax]),
                                          p.pb[ax], p.pe[ax], p.op[ax]);
      TORCH_SYM_CHECK(O.sym_ge(1), "conv_transpose: the computed output size ", O,
                      " on spatial axis ", j, " must be >= 1 (src size ", x.sym[dim], ")");
      plan.result_shape[dim] = O;
    }
    return plan;
  });
}

// ---------------------------------------------------------- backward data

Plan plan_backward_data(TCT_BACKWARD_DATA_ARGS) {
  check_tensor("diff_dst", diff_dst, diff_dst, "diff_dst");
  check_tensor("weights", weights, diff_dst, "diff_dst");
  const char* what = "conv_transpose_backward_data";
  return checked([&] {
    Plan plan;
    const Attributes& a = plan.attrs =
        attributes(strides, pads_begin, pads_end, dilations, auto_pad, output_padding, groups,
                   data_format, weights_format);
    const Shape w = concrete(weights.sym_sizes());
    Sizes dd(diff_dst.sym_sizes(), a.data_format);
    const int S = static_cast<int>(dd.rep.size()) - 2;
    // src_shape: the full shape (its batch and spatial sizes may be symbolic),
    // only the spatial sizes, or absent.
    const bool full = src_shape && static_cast<int>(src_shape->size()) == S + 2;
    const bool spatial_only = src_shape && static_cast<int>(src_shape->size()) == S;
    std::optional<Sizes> ss;
    if (full) ss.emplace(*src_shape, a.data_format);
    SymShape spatial_src;
    if (spatial_only) spatial_src.assign(src_shape->begin(), src_shape->end());
    const bool usable = attributes_usable(a, S, w) && (!src_shape || full || spatial_only);
    const auto dims = usable ? activation_dims(a.data_format, S) : std::vector<int>();
    if (!usable) {
      dd.specialize_all();
      if (ss) ss->specialize_all();
    } else if (ss) {
      if (dd.stand_in[0] != ss->stand_in[0]) {
        dd.specialize(0);
        ss->specialize(0);
      } else if (dd.stand_in[0]) {
        TORCH_SYM_CHECK(dd.sym[0].sym_eq(ss->sym[0]),
                        what, ": the batch of src_shape differs from diff_dst's");
      }
    }
    // Spatial-only src_shape: concrete values, specialized.
    Shape spatial_rep;
    for (const auto& v : spatial_src) spatial_rep.push_back(v.guard_int(__FILE__, __LINE__));
    std::vector<c10::SymInt> I(S);
    for (int j = 0; usable && j < S; ++j) {
      const size_t dim = dims[2 + j];
      if (spatial_only) dd.specialize(dim);
      if (ss && dd.stand_in[dim] != ss->stand_in[dim]) {
        dd.specialize(dim);
        ss->specialize(dim);
      }
      if (dd.stand_in[dim])
        I[j] = backward_axis(a, w, j, dd, dim, ss ? &*ss : nullptr, dim, what).first;
      plan.op[kAxes - S + j] = c10::SymInt(0);
    }
    specialize_if_too_large({&dd, ss ? &*ss : nullptr});
    std::optional<Shape> ss_rep;
    if (ss) ss_rep = ss->rep;
    if (spatial_only) ss_rep = spatial_rep;
    if (src_shape && !full && !spatial_only) ss_rep = concrete(*src_shape);  // the resolver's error
    plan.p = resolve_backward_data(dd.rep, w, ss_rep, a);
    set_concrete_op(plan);
    const ConvProblem& p = plan.p;
    plan.result_shape = full ? ss->sym : symbolic(tct::src_shape(p, a.data_format));
    if (!full) plan.result_shape[0] = dd.sym[0];
    for (int j = 0; usable && j < S; ++j) {
      const size_t dim = dims[2 + j];
      if (!dd.stand_in[dim]) continue;
      if (!full) plan.result_shape[dim] = I[j];
      const int ax = kAxes - S + j;
      plan.op[ax] = dd.sym[dim] - forward_output_size(I[j], p.s[ax],
                                                      effective_kernel(p.K[ax], p.d[ax]),
                                                      p.pb[ax], p.pe[ax], 0);
    }
    return plan;
  });
}

// ------------------------------------------------------- backward weights

Plan plan_backward_weights(TCT_BACKWARD_WEIGHTS_ARGS) {
  check_tensor("src", src, src, "src");
  check_tensor("diff_dst", diff_dst, src, "src");
  const char* what = "conv_transpose_backward_weights";
  // The input wins over the attribute; a meta/fake input cannot be read, and
  // then the attribute (if given) stands in for it.
  Shape wshape;
  if (weights_shape_input && (weights_shape_input->device().is_cpu() || weights_shape.empty()))
    wshape = shape_from_input(*weights_shape_input);
  else
    wshape = concrete(weights_shape);
  return checked([&] {
    Plan plan;
    const Attributes& a = plan.attrs =
        attributes(strides, pads_begin, pads_end, dilations, auto_pad, output_padding, groups,
                   data_format, weights_format);
    Sizes x(src.sym_sizes(), a.data_format), dd(diff_dst.sym_sizes(), a.data_format);
    const int S = static_cast<int>(x.rep.size()) - 2;
    const bool usable = attributes_usable(a, S, wshape) && dd.rep.size() == x.rep.size();
    const auto dims = usable ? activation_dims(a.data_format, S) : std::vector<int>();
    if (!usable) {
      x.specialize_all();
      dd.specialize_all();
    } else if (x.stand_in[0] != dd.stand_in[0]) {
      x.specialize(0);
      dd.specialize(0);
    } else if (x.stand_in[0]) {
      TORCH_SYM_CHECK(x.sym[0].sym_eq(dd.sym[0]), what, ": src and diff_dst batch sizes differ");
    }
    std::vector<c10::SymInt> op(S, c10::SymInt(0));
    std::vector<bool> symbolic_axis(S, false);
    for (int j = 0; usable && j < S; ++j) {
      const size_t dim = dims[2 + j];
      if (x.stand_in[dim] != dd.stand_in[dim]) {
        x.specialize(dim);
        dd.specialize(dim);
      }
      if (!dd.stand_in[dim]) continue;
      op[j] = backward_axis(a, wshape, j, dd, dim, &x, dim, what).second;
      symbolic_axis[j] = true;
    }
    specialize_if_too_large({&x, &dd});
    plan.p = resolve_backward_weights(x.rep, dd.rep, wshape, a);
    set_concrete_op(plan);
    for (int j = 0; j < S; ++j)
      if (symbolic_axis[j]) plan.op[kAxes - S + j] = op[j];
    plan.result_shape = symbolic(tct::weights_shape(plan.p, a.weights_format));
    return plan;
  });
}

}  // namespace ops
}  // namespace tct
