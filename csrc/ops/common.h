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

// Concrete sizes: symbolic ones are specialized (guarded).
inline Shape concrete(c10::SymIntArrayRef sizes) {
  Shape shape;
  for (const auto& v : sizes) shape.push_back(v.guard_int(__FILE__, __LINE__));
  return shape;
}

}  // namespace ops
}  // namespace tct
