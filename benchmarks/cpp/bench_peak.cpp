// Prints the f32 FMA peak (GFLOP/s) of every ISA this CPU supports, on one
// thread and on all threads.  Usage: bench_peak [seconds] [nthreads]
#include <omp.h>

#include <cstdio>
#include <cstdlib>

#include "args.h"
#include "kernels/dispatch.h"
#include "kernels/x86/peak.h"

int main(int argc, char** argv) {
  const char* usage = "bench_peak [seconds] [nthreads]";
  tct_bench::help_exit(argc, argv, usage);
  const double seconds = tct_bench::seconds_arg(argc, argv, 1, "seconds", 0.5, usage);
  const int all = static_cast<int>(
      tct_bench::int_arg(argc, argv, 2, "nthreads", omp_get_max_threads(), 1, 4096, usage));
  std::printf("detected ISA: %s, active ISA: %s, threads: %d\n", tct::isa_name(tct::detected_isa()),
              tct::isa_name(tct::active_isa()), all);
  for (tct::Isa isa : {tct::Isa::Avx512, tct::Isa::Avx2}) {
    if (!tct::isa_supported(isa)) {
      std::printf("%-7s not supported\n", tct::isa_name(isa));
      continue;
    }
    const double one = tct::x86::fma_peak_gflops(isa, 1, seconds);
    const double many = tct::x86::fma_peak_gflops(isa, all, seconds);
    std::printf("%-7s 1 thread: %8.1f GFLOP/s   %d threads: %8.1f GFLOP/s (%.1f per thread)\n",
                tct::isa_name(isa), one, all, many, many / all);
  }
  return 0;
}
