// The machine's FMA peak, measured by a short register-only FMA loop, so that
// benchmarks report % of peak measured in the same run.
#pragma once

#include "../dispatch.h"

namespace tct {
namespace x86 {

// f32 GFLOP/s (2 per FMA lane) of nthreads threads running FMAs of the
// given ISA for about `seconds`. Returns 0 for Isa::Reference.
double fma_peak_gflops(Isa isa, int nthreads, double seconds);

}  // namespace x86
}  // namespace tct
