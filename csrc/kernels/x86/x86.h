// Entry points of the x86 f32 kernels (AVX-512 and AVX2). Same contract as
// the fast_*_f32 functions of dispatch.h, with the ISA to use given; isa is
// never Isa::Reference and the CPU is known to support it.
#pragma once

#include "../dispatch.h"

namespace tct {
namespace x86 {

bool forward_f32(Isa isa, const ConvProblem& p, const float* src, WeightsView w,
                 const float* bias, float* dst, int nthreads);
bool backward_data_f32(Isa isa, const ConvProblem& p, const float* diff_dst, WeightsView w,
                       float* diff_src, int nthreads);
bool backward_weights_f32(Isa isa, const ConvProblem& p, const float* src, const float* diff_dst,
                          WeightsView diff_w, int nthreads);

}  // namespace x86
}  // namespace tct
