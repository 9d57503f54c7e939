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

// Concrete sizes for validation. A symbolic batch (dim 0) stays symbolic in
// result shapes, so it only needs a stand-in here; other symbolic sizes are
// specialized.
inline Shape concrete(c10::SymIntArrayRef sizes) {
  Shape shape;
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto v = sizes[i].maybe_as_int();
    shape.push_back(v ? *v : (i == 0 ? 1 : sizes[i].guard_int(__FILE__, __LINE__)));
  }
  return shape;
}

inline Shape concrete_shape(const at::Tensor& t) { return concrete(t.sym_sizes()); }

}  // namespace ops
}  // namespace tct
