// Kernel interface: raw pointers and element strides, no torch headers.
#pragma once

#include <cstdint>

#include "../problem.h"

namespace tct {

enum class DType { F32, F64, BF16, F16 };

// An activation tensor seen in logical order (N, C, X0, X1, X2) with the
// canonical 3 spatial axes of ConvProblem. Strides are in elements; a
// canonical axis of size 1 may have any stride. C is the full channel count
// (all groups).
struct ActView {
  void* data;
  int64_t sn, sc;
  int64_t sx[kAxes];
};

// Weights seen in logical IOX order (IC, OCg, K0, K1, K2), element strides.
struct WeightsView {
  void* data;
  int64_t si, so;
  int64_t sk[kAxes];
};

// The portable reference: plain loops, every dtype, any strides, OpenMP over
// independent outputs (each output element is written once, by one thread).
// bf16/f16 accumulate in f32, f64 in f64. bias may be null; its dtype is dt.
void reference_forward(const ConvProblem& p, DType dt, ActView src, WeightsView w,
                       const void* bias, ActView dst, int nthreads);
void reference_backward_data(const ConvProblem& p, DType dt, ActView diff_dst, WeightsView w,
                             ActView diff_src, int nthreads);
void reference_backward_weights(const ConvProblem& p, DType dt, ActView src, ActView diff_dst,
                                WeightsView diff_w, int nthreads);

}  // namespace tct
