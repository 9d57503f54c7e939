// FMA-peak driver: runs the register-only FMA loops of peak_avx512.cpp /
// peak_avx2.cpp on nthreads OpenMP threads and reports f32 GFLOP/s.
#include "peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace tct {
namespace x86 {

// Defined in the ISA-specific files (compiled with their -m flags).
double fma_peak_chunk_avx512(long iters, float mul, float add);
double fma_peak_chunk_avx2(long iters, float mul, float add);

namespace {

using Clock = std::chrono::steady_clock;

// One call of a chunk runs kChunkIters iterations: ~10^5 cycles, short enough
// that threads stop within tens of microseconds of the deadline.
constexpr long kChunkIters = 1L << 13;

volatile double g_sink = 0.0;  // keeps the loops' results alive

}  // namespace

double fma_peak_gflops(Isa isa, int nthreads, double seconds) {
  double (*chunk)(long, float, float) = nullptr;
  double flops_per_iter = 0.0;
  switch (isa) {
    case Isa::Avx512:
      chunk = fma_peak_chunk_avx512;
      flops_per_iter = 2.0 * 16 * 16;  // 16 FMAs x 16 lanes
      break;
    case Isa::Avx2:
      chunk = fma_peak_chunk_avx2;
      flops_per_iter = 2.0 * 12 * 8;  // 12 FMAs x 8 lanes
      break;
    case Isa::Reference:
    case Isa::Avx512Bf16:
    case Isa::Avx512Amx:  // (callers pass vector_isa())
      return 0.0;
  }
  if (chunk == nullptr || !isa_supported(isa)) return 0.0;
  if (nthreads < 1) nthreads = omp_get_max_threads();
  if (!(seconds > 0.0)) seconds = 0.2;
  seconds = std::min(seconds, 60.0);
  // Warm-up (clock ramp, AVX frequency licence, thread wake-up) then the timed window.
  const double warmup = std::min(0.05, 0.25 * seconds);

  // Zero for threads the runtime doesn't start.
  std::vector<double> thread_iters(static_cast<size_t>(nthreads), 0.0);
  double wall = 0.0;
  // Multiplier just below 1 and a small addend: the chains converge to
  // add/(1-mul) and stay normal (no denormal or overflow slow-downs).
  const float mul = 0.999999f, add = 1e-6f;

#pragma omp parallel num_threads(nthreads)
  {
    const int tid = omp_get_thread_num();
    double sink = 0.0;
    const auto warm_end = Clock::now() + std::chrono::duration<double>(warmup);
    while (Clock::now() < warm_end) sink += chunk(kChunkIters, mul, add);
#pragma omp barrier
    const auto t0 = Clock::now();
    const auto end = t0 + std::chrono::duration<double>(seconds);
    long iters = 0;
    do {
      sink += chunk(kChunkIters, mul, add);
      iters += kChunkIters;
    } while (Clock::now() < end);
    thread_iters[static_cast<size_t>(tid)] = static_cast<double>(iters);
#pragma omp barrier
#pragma omp master
    {
      wall = std::chrono::duration<double>(Clock::now() - t0).count();
    }
#pragma omp critical
    g_sink = g_sink + sink;
  }
  double total = 0.0;
  for (double it : thread_iters) total += it;
  if (!(wall > 0.0)) return 0.0;
  return total * flops_per_iter / wall * 1e-9;
}

}  // namespace x86
}  // namespace tct
