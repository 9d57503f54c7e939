// The plan of the f32 forward / backward-data driver (conv_f32_common.cpp)
// for weights of any layout; x86.h's describe_conv_f32 assumes dense IOX.
#pragma once

#include <string>

#include "../dispatch.h"

namespace tct {
namespace x86 {

// What forward_f32 / backward_data_f32 would do on this ISA with nthreads
// threads, for weights with w's strides (w.data is not read), in one line of
// `key=value` fields. (backward_data_f32 first tries
// dense_backward_data_f32, which this does not describe.)
std::string describe_conv_f32(Isa isa, Pass pass, const ConvProblem& p, const WeightsView& w,
                              int nthreads);

}  // namespace x86
}  // namespace tct
