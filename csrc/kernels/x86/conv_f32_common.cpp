// Placeholder until the forward/backward-data kernels land: nothing handled.
#include "x86.h"

namespace tct {
namespace x86 {

bool forward_f32(Isa, const ConvProblem&, const float*, WeightsView, const float*, float*, int) {
  return false;
}
bool backward_data_f32(Isa, const ConvProblem&, const float*, WeightsView, float*, int) {
  return false;
}

}  // namespace x86
}  // namespace tct
