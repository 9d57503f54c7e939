// Views over the dense buffers of the kernel tests.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kernels/kernels.h"
#include "problem.h"

namespace tct {
namespace testing_views {

// Dense channels-last (N, X0, X1, X2, C) buffer seen in logical (N, C, X...) order.
inline ActView dense_nxc_view(void* data, const std::array<int64_t, kAxes>& sp, int64_t C) {
  ActView v;
  v.data = data;
  v.sc = 1;
  v.sx[2] = C;
  v.sx[1] = sp[2] * C;
  v.sx[0] = sp[1] * sp[2] * C;
  v.sn = sp[0] * sp[1] * sp[2] * C;
  return v;
}

// Dense weights of `shape` in layout wf, seen as logical IOX strides.
inline WeightsView dense_weights_view(void* data, const Shape& shape, WeightsFormat wf, int S) {
  std::vector<int64_t> stride(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    stride[i] = stride[i + 1] * shape[i + 1];
  const std::vector<int> dims = weights_dims(wf, S);
  WeightsView w;
  w.data = data;
  w.si = stride[dims[0]];
  w.so = stride[dims[1]];
  for (int ax = 0; ax < kAxes; ++ax) w.sk[ax] = 0;
  for (int i = 0; i < S; ++i) w.sk[kAxes - S + i] = stride[dims[2 + i]];
  return w;
}

// The first 64-byte aligned float of buf (allocate 16 floats more than
// needed): results aligned like torch's allocations, so that the kernels'
// streaming stores of whole lines run in the tests.
inline float* aligned64(std::vector<float>& buf) {
  return buf.data() + ((64 - (reinterpret_cast<uintptr_t>(buf.data()) & 63)) & 63) / 4;
}

}  // namespace testing_views
}  // namespace tct
