// The kernels registered for the graph:: ops (see registration.cpp).
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "../problem.h"

namespace tct {
namespace ops {

using at::IntArrayRef;
using at::Tensor;
using c10::string_view;

// CPU and Meta kernels share one signature per op; `meta` selects shape-only
// execution (no data is read, the result is uninitialized).
#define TCT_CONV_TRANSPOSE_ARGS                                                          \
  const Tensor &src, const Tensor &weights, const std::optional<Tensor> &bias,         \
      IntArrayRef strides, IntArrayRef pads_begin, IntArrayRef pads_end,                 \
      IntArrayRef dilations, string_view auto_pad, IntArrayRef output_padding,           \
      int64_t groups, string_view data_format, string_view weights_format
#define TCT_BACKWARD_DATA_ARGS                                                           \
  const Tensor &diff_dst, const Tensor &weights, IntArrayRef strides,                    \
      IntArrayRef pads_begin, IntArrayRef pads_end, IntArrayRef dilations,               \
      string_view auto_pad, IntArrayRef output_padding, int64_t groups,                  \
      string_view data_format, string_view weights_format, at::OptionalSymIntArrayRef src_shape
#define TCT_BACKWARD_WEIGHTS_ARGS                                                        \
  const Tensor &src, const Tensor &diff_dst, const std::optional<Tensor> &weights_shape_input, \
      IntArrayRef strides, IntArrayRef pads_begin, IntArrayRef pads_end,                 \
      IntArrayRef dilations, string_view auto_pad, IntArrayRef output_padding,           \
      int64_t groups, string_view data_format, string_view weights_format,               \
      c10::SymIntArrayRef weights_shape

// Validated attributes and resolved problem of a call (throws c10::Error).
// With symbolic sizes (meta/fake tensors), p holds guard-free stand-ins for
// them; result_shape and op are the real, symbolic values.
struct Plan {
  Attributes attrs;
  ConvProblem p;
  std::vector<c10::SymInt> result_shape;
  // output_padding relating src and dst sizes, per canonical axis
  std::array<c10::SymInt, kAxes> op;
};
Plan plan_forward(TCT_CONV_TRANSPOSE_ARGS);
Plan plan_backward_data(TCT_BACKWARD_DATA_ARGS);
Plan plan_backward_weights(TCT_BACKWARD_WEIGHTS_ARGS);

Tensor conv_transpose_cpu(TCT_CONV_TRANSPOSE_ARGS);
Tensor conv_transpose_meta(TCT_CONV_TRANSPOSE_ARGS);
Tensor conv_transpose_autograd(TCT_CONV_TRANSPOSE_ARGS);
Tensor conv_transpose_autocast(TCT_CONV_TRANSPOSE_ARGS);

Tensor backward_data_cpu(TCT_BACKWARD_DATA_ARGS);
Tensor backward_data_meta(TCT_BACKWARD_DATA_ARGS);
Tensor backward_data_autograd(TCT_BACKWARD_DATA_ARGS);
Tensor backward_data_autocast(TCT_BACKWARD_DATA_ARGS);

Tensor backward_weights_cpu(TCT_BACKWARD_WEIGHTS_ARGS);
Tensor backward_weights_meta(TCT_BACKWARD_WEIGHTS_ARGS);
Tensor backward_weights_autograd(TCT_BACKWARD_WEIGHTS_ARGS);
Tensor backward_weights_autocast(TCT_BACKWARD_WEIGHTS_ARGS);

// The older name: the same computation with filter_format (default XIO).
Tensor backprop_data(const Tensor& output_delta, const Tensor& filter, IntArrayRef strides,
                     IntArrayRef pads_begin, IntArrayRef pads_end, IntArrayRef dilations,
                     string_view auto_pad, IntArrayRef output_padding, int64_t groups,
                     string_view data_format, string_view filter_format,
                     at::OptionalSymIntArrayRef src_shape);

// torch_convtranspose.plans(): plans_begin opens a frame that collects the
// plan line of every call until plans_end closes it and returns them; with
// execute false the calls only plan (a dry run: uninitialized results).
void plans_begin(bool execute);
std::vector<std::string> plans_end();

// Calls through the dispatcher (so autograd and tracing see the ops).
Tensor call_conv_transpose(TCT_CONV_TRANSPOSE_ARGS);
Tensor call_backward_data(TCT_BACKWARD_DATA_ARGS);
Tensor call_backward_weights(TCT_BACKWARD_WEIGHTS_ARGS);

}  // namespace ops
}  // namespace tct
