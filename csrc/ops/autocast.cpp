// Autocast (torch.autocast("cpu", dtype=...)): the ops are treated like torch's
// own conv_transpose, which autocast runs in its lower-precision dtype: every
// floating input (bias included, float64 excepted, as autocast does) is cast
// to the autocast dtype, then the op runs with autocast off. The casts are
// differentiable, so gradients come back in the inputs' own dtypes.
#include <ATen/autocast_mode.h>

#include "ops.h"

namespace tct {
namespace ops {
namespace {

at::ScalarType autocast_dtype() { return at::autocast::get_autocast_dtype(at::kCPU); }

Tensor cast(const Tensor& t) { return at::autocast::cached_cast(autocast_dtype(), t, at::kCPU); }
std::optional<Tensor> cast(const std::optional<Tensor>& t) {
  return at::autocast::cached_cast(autocast_dtype(), t, at::kCPU);
}

struct AutocastOff {
  c10::impl::ExcludeDispatchKeyGuard guard{c10::DispatchKey::AutocastCPU};
};

}  // namespace

Tensor conv_transpose_autocast(TCT_CONV_TRANSPOSE_ARGS) {
  AutocastOff off;
  return call_conv_transpose(cast(src), cast(weights), cast(bias), strides, pads_begin, pads_end,
                             dilations, auto_pad, output_padding, groups, data_format,
                             weights_format);
}

Tensor backward_data_autocast(TCT_BACKWARD_DATA_ARGS) {
  AutocastOff off;
  return call_backward_data(cast(diff_dst), cast(weights), strides, pads_begin, pads_end,
                            dilations, auto_pad, output_padding, groups, data_format,
                            weights_format, src_shape);
}

Tensor backward_weights_autocast(TCT_BACKWARD_WEIGHTS_ARGS) {
  AutocastOff off;
  return call_backward_weights(cast(src), cast(diff_dst), weights_shape_input, strides,
                               pads_begin, pads_end, dilations, auto_pad, output_padding, groups,
                               data_format, weights_format, weights_shape);
}

}  // namespace ops
}  // namespace tct
