// Placeholder until the backward-weights kernels land: nothing handled.
#include "x86.h"

namespace tct {
namespace x86 {

bool backward_weights_f32(Isa, const ConvProblem&, const float*, const float*, WeightsView, int) {
  return false;
}

}  // namespace x86
}  // namespace tct
