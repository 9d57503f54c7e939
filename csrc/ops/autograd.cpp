// Autograd of the three ops. Each op is bilinear, and each of its
// derivatives is again an op of the family, called through the dispatcher
// with the resolved explicit pads, so double backward works.
#include <torch/autograd.h>

#include "common.h"
#include "ops.h"

namespace tct {
namespace ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The attributes every derivative call needs, with auto_pad already applied.
struct Resolved {
  std::vector<int64_t> strides, pads_begin, pads_end, dilations, output_padding;
  int64_t groups;
  std::string data_format, weights_format;

  Resolved() = default;
  Resolved(const Plan& plan, IntArrayRef strides_, IntArrayRef dilations_, int64_t groups_,
           string_view data_format_, string_view weights_format_)
      : strides(strides_.vec()),
        pads_begin(plan.p.spatial(plan.p.pb)),
        pads_end(plan.p.spatial(plan.p.pe)),
        dilations(dilations_.vec()),
        // The output_padding that relates src and dst sizes of this call.
        output_padding(plan.p.spatial(plan.p.op)),
        groups(groups_),
        data_format(data_format_),
        weights_format(weights_format_) {}

  void save(AutogradContext* ctx) const {
    ctx->saved_data["strides"] = strides;
    ctx->saved_data["pads_begin"] = pads_begin;
    ctx->saved_data["pads_end"] = pads_end;
    ctx->saved_data["dilations"] = dilations;
    ctx->saved_data["output_padding"] = output_padding;
    ctx->saved_data["groups"] = groups;
    ctx->saved_data["data_format"] = data_format;
    ctx->saved_data["weights_format"] = weights_format;
  }

  static Resolved load(AutogradContext* ctx) {
    Resolved r;
    r.strides = ctx->saved_data["strides"].toIntVector();
    r.pads_begin = ctx->saved_data["pads_begin"].toIntVector();
    r.pads_end = ctx->saved_data["pads_end"].toIntVector();
    r.dilations = ctx->saved_data["dilations"].toIntVector();
    r.output_padding = ctx->saved_data["output_padding"].toIntVector();
    r.groups = ctx->saved_data["groups"].toInt();
    r.data_format = ctx->saved_data["data_format"].toStringRef();
    r.weights_format = ctx->saved_data["weights_format"].toStringRef();
    return r;
  }

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

// Whether a call records a graph: grad mode on and some input requires grad.
// Calls that do not go straight to the kernel below autograd (no context to
// fill: tens of microseconds on small problems).
bool records(std::initializer_list<const Tensor*> inputs) {
  if (!at::GradMode::is_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

struct ConvTransposeFunction : public torch::autograd::Function<ConvTransposeFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& src, const Tensor& weights,
                        const std::optional<Tensor>& bias, IntArrayRef strides,
                        IntArrayRef pads_begin, IntArrayRef pads_end, IntArrayRef dilations,
                        string_view auto_pad, IntArrayRef output_padding, int64_t groups,
                        string_view data_format, string_view weights_format) {
    const Plan plan = plan_forward(src, weights, bias, strides, pads_begin, pads_end, dilations,
                                   auto_pad, output_padding, groups, data_format, weights_format);
    Resolved(plan, strides, dilations, groups, data_format, weights_format).save(ctx);
    ctx->saved_data["has_bias"] = bias.has_value();
    ctx->saved_data["channel_dim"] =
        plan.attrs.data_format == DataFormat::NCX ? int64_t{1} : src.dim() - 1;
    ctx->save_for_backward({src, weights});
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_conv_transpose(src, weights, bias, strides, pads_begin, pads_end, dilations,
                               auto_pad, output_padding, groups, data_format, weights_format);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Resolved r = Resolved::load(ctx);
    auto saved = ctx->get_saved_variables();
    const Tensor &src = saved[0], &weights = saved[1];
    const Tensor& g = grads[0];
    variable_list out(12);
    if (!g.defined()) return out;
    if (ctx->needs_input_grad(0)) out[0] = r.backward_data(g, weights, src);
    if (ctx->needs_input_grad(1)) out[1] = r.backward_weights(src, g, weights);
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) {
      const int64_t c = ctx->saved_data["channel_dim"].toInt();
      std::vector<int64_t> dims;
      for (int64_t i = 0; i < g.dim(); ++i)
        if (i != c) dims.push_back(i);
      out[2] = g.sum(dims);
    }
    return out;
  }
};

struct BackwardDataFunction : public torch::autograd::Function<BackwardDataFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& diff_dst, const Tensor& weights,
                        IntArrayRef strides, IntArrayRef pads_begin, IntArrayRef pads_end,
                        IntArrayRef dilations, string_view auto_pad,
                        IntArrayRef output_padding, int64_t groups, string_view data_format,
                        string_view weights_format, at::OptionalSymIntArrayRef src_shape) {
    const Plan plan = plan_backward_data(diff_dst, weights, strides, pads_begin, pads_end,
                                         dilations, auto_pad, output_padding, groups,
                                         data_format, weights_format, src_shape);
    Resolved(plan, strides, dilations, groups, data_format, weights_format).save(ctx);
    ctx->save_for_backward({diff_dst, weights});
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_backward_data(diff_dst, weights, strides, pads_begin, pads_end, dilations,
                              auto_pad, output_padding, groups, data_format, weights_format,
                              src_shape);
  }

  // diff_src = BD(diff_dst, W): d/d diff_dst = forward(g, W); d/dW = BW(g, diff_dst).
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Resolved r = Resolved::load(ctx);
    auto saved = ctx->get_saved_variables();
    const Tensor &diff_dst = saved[0], &weights = saved[1];
    const Tensor& g = grads[0];
    variable_list out(12);
    if (!g.defined()) return out;
    if (ctx->needs_input_grad(0)) out[0] = r.forward(g, weights);
    if (ctx->needs_input_grad(1)) out[1] = r.backward_weights(g, diff_dst, weights);
    return out;
  }
};

struct BackwardWeightsFunction : public torch::autograd::Function<BackwardWeightsFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& src, const Tensor& diff_dst,
                        const std::optional<Tensor>& weights_shape_input, IntArrayRef strides,
                        IntArrayRef pads_begin, IntArrayRef pads_end, IntArrayRef dilations,
                        string_view auto_pad, IntArrayRef output_padding, int64_t groups,
                        string_view data_format, string_view weights_format,
                        c10::SymIntArrayRef weights_shape) {
    const Plan plan = plan_backward_weights(src, diff_dst, weights_shape_input, strides,
                                            pads_begin, pads_end, dilations, auto_pad,
                                            output_padding, groups, data_format, weights_format,
                                            weights_shape);
    Resolved(plan, strides, dilations, groups, data_format, weights_format).save(ctx);
    ctx->save_for_backward({src, diff_dst});
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_backward_weights(src, diff_dst, weights_shape_input, strides, pads_begin,
                                 pads_end, dilations, auto_pad, output_padding, groups,
                                 data_format, weights_format, weights_shape);
  }

  // diff_W = BW(src, diff_dst): d/dsrc = BD(diff_dst, g); d/d diff_dst = forward(src, g).
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Resolved r = Resolved::load(ctx);
    auto saved = ctx->get_saved_variables();
    const Tensor &src = saved[0], &diff_dst = saved[1];
    const Tensor& g = grads[0];
    variable_list out(13);
    if (!g.defined()) return out;
    if (ctx->needs_input_grad(0)) out[0] = r.backward_data(diff_dst, g, src);
    if (ctx->needs_input_grad(1)) out[1] = r.forward(src, g);
    return out;
  }
};

}  // namespace

Tensor conv_transpose_autograd(TCT_CONV_TRANSPOSE_ARGS) {
  if (!records({&src, &weights, bias ? &*bias : nullptr})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_conv_transpose(src, weights, bias, strides, pads_begin, pads_end, dilations,
                               auto_pad, output_padding, groups, data_format, weights_format);
  }
  return ConvTransposeFunction::apply(src, weights, bias, strides, pads_begin, pads_end,
                                      dilations, auto_pad, output_padding, groups, data_format,
                                      weights_format);
}

Tensor backward_data_autograd(TCT_BACKWARD_DATA_ARGS) {
  if (!records({&diff_dst, &weights})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_backward_data(diff_dst, weights, strides, pads_begin, pads_end, dilations,
                              auto_pad, output_padding, groups, data_format, weights_format,
                              src_shape);
  }
  return BackwardDataFunction::apply(diff_dst, weights, strides, pads_begin, pads_end, dilations,
                                     auto_pad, output_padding, groups, data_format,
                                     weights_format, src_shape);
}

Tensor backward_weights_autograd(TCT_BACKWARD_WEIGHTS_ARGS) {
  if (!records({&src, &diff_dst})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return call_backward_weights(src, diff_dst, weights_shape_input, strides, pads_begin,
                                 pads_end, dilations, auto_pad, output_padding, groups,
                                 data_format, weights_format, weights_shape);
  }
  return BackwardWeightsFunction::apply(src, diff_dst, weights_shape_input, strides, pads_begin,
                                        pads_end, dilations, auto_pad, output_padding, groups,
                                        data_format, weights_format, weights_shape);
}

}  // namespace ops
}  // namespace tct
