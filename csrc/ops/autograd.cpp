// Autograd of the three ops, reverse and forward mode. Each op is bilinear,
// and each of its derivatives is again an op of the family, called through
// the dispatcher with the resolved explicit pads, so double backward,
// forward-over-reverse and reverse-over-forward all work.
//
// The backward graph is built from plain autograd Nodes, the way PyTorch's
// generated VariableType kernels build theirs, rather than from a
// torch::autograd::Function: functorch (torch.func.grad, vjp, jvp, vmap of
// those) refuses C++ autograd Functions, but runs kernels like these as it
// runs torch's own ops. Forward-mode tangents are set on the result at level
// 0, as the generated kernels do (functorch maps its levels onto it).
#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "common.h"
#include "ops.h"

namespace tct {
namespace ops {
namespace {

using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;

// The output_padding that relates src and dst sizes of a call (a guard on it
// where sizes are symbolic: a derivative's shape depends on it).
std::vector<int64_t> plan_op(const Plan& plan) {
  std::vector<int64_t> op;
  for (int ax = kAxes - plan.p.spatial_rank; ax < kAxes; ++ax)
    op.push_back(plan.op[ax].guard_int(__FILE__, __LINE__));
  return op;
}

// The attributes every derivative call needs, with auto_pad already applied.
struct Resolved {
  std::vector<int64_t> strides, pads_begin, pads_end, dilations, output_padding;
  int64_t groups = 1;
  std::string data_format, weights_format;
  int64_t channel_dim = 1;  // of the activations

  Resolved() = default;
  Resolved(const Plan& plan, IntArrayRef strides_, IntArrayRef dilations_, int64_t groups_,
           string_view data_format_, string_view weights_format_)
      : strides(strides_.vec()),
        pads_begin(plan.p.spatial(plan.p.pb)),
        pads_end(plan.p.spatial(plan.p.pe)),
        dilations(dilations_.vec()),
        output_padding(plan_op(plan)),
        groups(groups_),
        data_format(data_format_),
        weights_format(weights_format_),
        channel_dim(plan.attrs.data_format == DataFormat::NCX ? 1 : plan.p.spatial_rank + 1) {}

  Tensor forward(const Tensor& src, const Tensor& w) const {
    return call_conv_transpose(src, w, std::nullopt, strides, pads_begin, pads_end, dilations,
                               "None", output_padding, groups, data_format, weights_format);
  }
  Tensor backward_data(const Tensor& diff_dst, const Tensor& w, const Tensor& like_src) const {
    return call_backward_data(diff_dst, w, strides, pads_begin, pads_end, dilations, "None",
                              output_padding, groups, data_format, weights_format,
                              like_src.sym_sizes());
  }
  Tensor backward_weights(const Tensor& src, const Tensor& diff_dst, const Tensor& like_w) const {
    return call_backward_weights(src, diff_dst, std::nullopt, strides, pads_begin, pads_end,
                                 dilations, "None", output_padding, groups, data_format,
                                 weights_format, like_w.sym_sizes());
  }
};

// Sum of the defined terms (undefined when none is).
Tensor sum_defined(std::initializer_list<Tensor> terms) {
  Tensor out;
  for (const Tensor& t : terms)
    if (t.defined()) out = out.defined() ? out + t : t;
  return out;
}

bool has_tangent(const std::optional<Tensor>& t) {
  return torch::autograd::isFwGradDefined(t);
}
Tensor tangent(const Tensor& t) { return has_tangent(t) ? t._fw_grad(/*level=*/0) : Tensor(); }
Tensor primal(const Tensor& t) { return has_tangent(t) ? t._fw_primal(/*level=*/0) : t; }

// A bilinear op's node: grads -> the op's input gradients, by `fn`.
struct BilinearBackward : public Node {
  explicit BilinearBackward(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  void release_variables() override {
    a_.reset_data();
    b_.reset_data();
  }
  Resolved r;
  SavedVariable a_, b_;  // the op's two tensor inputs

 protected:
  std::string name_;
};

// dst = CT(src, W) + bias: d src = BD(g, W), d W = BW(src, g), d bias = sum(g).
struct ConvTransposeBackward : public BilinearBackward {
  ConvTransposeBackward() : BilinearBackward("ConvTransposeBackward") {}
  variable_list apply(variable_list&& grads) override {
    const Tensor src = a_.unpack(), weights = b_.unpack();
    const Tensor& g = grads[0];
    variable_list out(num_outputs());  // 2, or 3 with a bias
    if (!g.defined()) return out;
    if (task_should_compute_output(0)) out[0] = r.backward_data(g, weights, src);
    if (task_should_compute_output(1)) out[1] = r.backward_weights(src, g, weights);
    if (out.size() > 2 && task_should_compute_output(2)) {
      std::vector<int64_t> dims;
      for (int64_t i = 0; i < g.dim(); ++i)
        if (i != r.channel_dim) dims.push_back(i);
      out[2] = g.sum(dims);
    }
    return out;
  }
};

// diff_src = BD(diff_dst, W): d diff_dst = CT(g, W), d W = BW(g, diff_dst).
struct BackwardDataBackward : public BilinearBackward {
  BackwardDataBackward() : BilinearBackward("ConvTransposeBackwardDataBackward") {}
  variable_list apply(variable_list&& grads) override {
    const Tensor diff_dst = a_.unpack(), weights = b_.unpack();
    const Tensor& g = grads[0];
    variable_list out(2);
    if (!g.defined()) return out;
    if (task_should_compute_output(0)) out[0] = r.forward(g, weights);
    if (task_should_compute_output(1)) out[1] = r.backward_weights(g, diff_dst, weights);
    return out;
  }
};

// diff_W = BW(src, diff_dst): d src = BD(diff_dst, g), d diff_dst = CT(src, g).
struct BackwardWeightsBackward : public BilinearBackward {
  BackwardWeightsBackward() : BilinearBackward("ConvTransposeBackwardWeightsBackward") {}
  variable_list apply(variable_list&& grads) override {
    const Tensor src = a_.unpack(), diff_dst = b_.unpack();
    const Tensor& g = grads[0];
    variable_list out(2);
    if (!g.defined()) return out;
    if (task_should_compute_output(0)) out[0] = r.backward_data(diff_dst, g, src);
    if (task_should_compute_output(1)) out[1] = r.forward(src, g);
    return out;
  }
};

// A new autograd node, held as this torch holds them: c10::intrusive_ptr since
// torch 2.13, std::shared_ptr before (the device machine's torch 2.11, say).
template <class NodeT>
auto new_node() {
  if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, NodeT>)
    return c10::make_intrusive<NodeT>();
  else
    return std::shared_ptr<NodeT>(new NodeT());
}

// Runs `call` below autograd; when some input requires grad, records `node`
// (built by `make`) as the result's grad_fn. Returns the result.
template <class NodeT, class Call, class Make>
Tensor with_history(std::initializer_list<const Tensor*> inputs, Call&& call, Make&& make) {
  bool requires = false;
  if (at::GradMode::is_enabled())
    for (const Tensor* t : inputs) requires = requires || (t && t->defined() && t->requires_grad());
  decltype(new_node<NodeT>()) node;
  if (requires) {
    node = new_node<NodeT>();
    torch::autograd::edge_list edges;
    for (const Tensor* t : inputs)
      edges.push_back(t && t->defined() ? torch::autograd::impl::gradient_edge(*t)
                                        : torch::autograd::Edge());
    node->set_next_edges(std::move(edges));
    make(*node);
  }
  Tensor result;
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    result = call();
  }
  if (node) torch::autograd::set_history(result, node);
  return result;
}

}  // namespace

Tensor conv_transpose_autograd(TCT_CONV_TRANSPOSE_ARGS) {
  // Resolved lazily: calls that record nothing go straight to the kernel
  // (resolving costs tens of microseconds on small problems).
  auto resolved = [&] {
    return Resolved(plan_forward(src, weights, bias, strides, pads_begin, pads_end, dilations,
                                 auto_pad, output_padding, groups, data_format, weights_format),
                    strides, dilations, groups, data_format, weights_format);
  };
  Tensor result = with_history<ConvTransposeBackward>(
      {&src, &weights, bias ? &*bias : nullptr},
      [&] {
        return call_conv_transpose(src, weights, bias, strides, pads_begin, pads_end, dilations,
                                   auto_pad, output_padding, groups, data_format, weights_format);
      },
      [&](ConvTransposeBackward& n) {
        n.r = resolved();
        n.a_ = SavedVariable(src, false);
        n.b_ = SavedVariable(weights, false);
      });
  if (has_tangent(src) || has_tangent(weights) || has_tangent(bias)) {
    const Resolved r = resolved();
    const Tensor sp = primal(src), wp = primal(weights), st = tangent(src), wt = tangent(weights);
    Tensor t = sum_defined({st.defined() ? r.forward(st, wp) : Tensor(),
                            wt.defined() ? r.forward(sp, wt) : Tensor()});
    if (bias && has_tangent(bias)) {
      std::vector<int64_t> shape(result.dim(), 1);
      shape[r.channel_dim] = -1;
      const Tensor bt = tangent(*bias).reshape(shape);
      t = t.defined() ? t + bt : bt.expand(result.sizes()).contiguous();
    }
    result._set_fw_grad(t, /*level=*/0, /*is_inplace_op=*/false);
  }
  return result;
}

Tensor backward_data_autograd(TCT_BACKWARD_DATA_ARGS) {
  auto resolved = [&] {
    return Resolved(plan_backward_data(diff_dst, weights, strides, pads_begin, pads_end,
                                       dilations, auto_pad, output_padding, groups, data_format,
                                       weights_format, src_shape),
                    strides, dilations, groups, data_format, weights_format);
  };
  Tensor result = with_history<BackwardDataBackward>(
      {&diff_dst, &weights},
      [&] {
        return call_backward_data(diff_dst, weights, strides, pads_begin, pads_end, dilations,
                                  auto_pad, output_padding, groups, data_format, weights_format,
                                  src_shape);
      },
      [&](BackwardDataBackward& n) {
        n.r = resolved();
        n.a_ = SavedVariable(diff_dst, false);
        n.b_ = SavedVariable(weights, false);
      });
  if (has_tangent(diff_dst) || has_tangent(weights)) {
    const Resolved r = resolved();
    const Tensor dp = primal(diff_dst), wp = primal(weights);
    const Tensor dt = tangent(diff_dst), wt = tangent(weights);
    result._set_fw_grad(sum_defined({dt.defined() ? r.backward_data(dt, wp, result) : Tensor(),
                                     wt.defined() ? r.backward_data(dp, wt, result) : Tensor()}),
                        /*level=*/0, /*is_inplace_op=*/false);
  }
  return result;
}

Tensor backward_weights_autograd(TCT_BACKWARD_WEIGHTS_ARGS) {
  auto resolved = [&] {
    return Resolved(plan_backward_weights(src, diff_dst, weights_shape_input, strides,
                                          pads_begin, pads_end, dilations, auto_pad,
                                          output_padding, groups, data_format, weights_format,
                                          weights_shape),
                    strides, dilations, groups, data_format, weights_format);
  };
  Tensor result = with_history<BackwardWeightsBackward>(
      {&src, &diff_dst},
      [&] {
        return call_backward_weights(src, diff_dst, weights_shape_input, strides, pads_begin,
                                     pads_end, dilations, auto_pad, output_padding, groups,
                                     data_format, weights_format, weights_shape);
      },
      [&](BackwardWeightsBackward& n) {
        n.r = resolved();
        n.a_ = SavedVariable(src, false);
        n.b_ = SavedVariable(diff_dst, false);
      });
  if (has_tangent(src) || has_tangent(diff_dst)) {
    const Resolved r = resolved();
    const Tensor sp = primal(src), dp = primal(diff_dst);
    const Tensor st = tangent(src), dt = tangent(diff_dst);
    result._set_fw_grad(
        sum_defined({st.defined() ? r.backward_weights(st, dp, result) : Tensor(),
                     dt.defined() ? r.backward_weights(sp, dt, result) : Tensor()}),
        /*level=*/0, /*is_inplace_op=*/false);
  }
  return result;
}

}  // namespace ops
}  // namespace tct
