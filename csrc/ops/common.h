// Helpers shared by the op kernels and the autograd functions.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "../problem.h"

namespace tct {
namespace ops {

// Runs f, turning a ProblemError into a c10::Error (RuntimeError in Python).
template <class F>
auto checked(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ProblemError& e) {
    TORCH_CHECK(false, e.what());
  }
}

inline Attributes attributes(at::IntArrayRef strides, at::IntArrayRef pads_begin,
                             at::IntArrayRef pads_end, at::IntArrayRef dilations,
                             c10::string_view auto_pad, at::IntArrayRef output_padding,
                             int64_t groups, c10::string_view data_format,
                             c10::string_view weights_format,
                             const char* weights_format_arg = "weights_format") {
  return checked([&] {
    return make_attributes(strides.vec(), pads_begin.vec(), pads_end.vec(), dilations.vec(),
                           std::string(auto_pad), output_padding.vec(), groups,
                           std::string(data_format), std::string(weights_format),
                           weights_format_arg);
  });
}

// Concrete sizes for validation: symbolic sizes are specialized (guarded).
inline Shape concrete(c10::SymIntArrayRef sizes) {
  Shape shape;
  for (const auto& v : sizes) shape.push_back(v.guard_int(__FILE__, __LINE__));
  return shape;
}

// The same for an activation (or src_shape), whose batch (dim 0) stays
// symbolic in result shapes: a symbolic batch only needs a stand-in here, and
// *symbolic_batch tells that one was used.
constexpr int64_t kBatchStandIn = 1;
inline Shape concrete_activation(c10::SymIntArrayRef sizes, bool* symbolic_batch) {
  Shape shape;
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto v = sizes[i].maybe_as_int();
    if (i == 0 && !v) {
      shape.push_back(kBatchStandIn);
      if (symbolic_batch) *symbolic_batch = true;
    } else {
      shape.push_back(v ? *v : sizes[i].guard_int(__FILE__, __LINE__));
    }
  }
  return shape;
}

// When a batch stand-in was used: checks symbolically that two activations'
// batches are equal, and makes b's stand-in agree with a's.
inline void same_batch(const c10::SymInt& a, const c10::SymInt& b, const Shape& a_shape,
                       Shape& b_shape, const char* what) {
  TORCH_SYM_CHECK(a.sym_eq(b), what);
  b_shape[0] = a_shape[0];
}

}  // namespace ops
}  // namespace tct
