// Placeholder until the FMA peak loops land.
#include "peak.h"

namespace tct {
namespace x86 {

double fma_peak_gflops(Isa, int, double) { return 0.0; }

}  // namespace x86
}  // namespace tct
