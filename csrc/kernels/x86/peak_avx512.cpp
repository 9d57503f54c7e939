// AVX-512 register-only FMA loop for the FMA-peak measurement (peak.h).
// Compiled with -mavx512f... (CMake picks the flags from the file name).
#include <immintrin.h>

namespace tct {
namespace x86 {

// Runs `iters` iterations of 16 independent 512-bit FMA chains (16 FMAs per
// iteration, 16 f32 lanes each: 512 FLOPs per iteration). 16 chains cover the
// FMA latency (4 cycles) on two ports with room to spare. Returns a value that
// depends on every accumulator, so the compiler can't drop the work.
double fma_peak_chunk_avx512(long iters, float mul, float add) {
  const __m512 a = _mm512_set1_ps(mul);
  const __m512 b = _mm512_set1_ps(add);
  __m512 c0 = _mm512_set1_ps(0.0f), c1 = _mm512_set1_ps(0.1f), c2 = _mm512_set1_ps(0.2f),
         c3 = _mm512_set1_ps(0.3f), c4 = _mm512_set1_ps(0.4f), c5 = _mm512_set1_ps(0.5f),
         c6 = _mm512_set1_ps(0.6f), c7 = _mm512_set1_ps(0.7f), c8 = _mm512_set1_ps(0.8f),
         c9 = _mm512_set1_ps(0.9f), c10 = _mm512_set1_ps(1.0f), c11 = _mm512_set1_ps(1.1f),
         c12 = _mm512_set1_ps(1.2f), c13 = _mm512_set1_ps(1.3f), c14 = _mm512_set1_ps(1.4f),
         c15 = _mm512_set1_ps(1.5f);
  for (long i = 0; i < iters; ++i) {
    c0 = _mm512_fmadd_ps(c0, a, b);
    c1 = _mm512_fmadd_ps(c1, a, b);
    c2 = _mm512_fmadd_ps(c2, a, b);
    c3 = _mm512_fmadd_ps(c3, a, b);
    c4 = _mm512_fmadd_ps(c4, a, b);
    c5 = _mm512_fmadd_ps(c5, a, b);
    c6 = _mm512_fmadd_ps(c6, a, b);
    c7 = _mm512_fmadd_ps(c7, a, b);
    c8 = _mm512_fmadd_ps(c8, a, b);
    c9 = _mm512_fmadd_ps(c9, a, b);
    c10 = _mm512_fmadd_ps(c10, a, b);
    c11 = _mm512_fmadd_ps(c11, a, b);
    c12 = _mm512_fmadd_ps(c12, a, b);
    c13 = _mm512_fmadd_ps(c13, a, b);
    c14 = _mm512_fmadd_ps(c14, a, b);
    c15 = _mm512_fmadd_ps(c15, a, b);
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                           _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
  __m512 t = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)),
                           _mm512_add_ps(_mm512_add_ps(c12, c13), _mm512_add_ps(c14, c15)));
  // Stored and summed in scalar code: GCC 12 warns about _mm512_reduce_add_ps.
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_add_ps(s, t));
  double sum = 0.0;
  for (int i = 0; i < 16; ++i) sum += lanes[i];
  return sum;
}

}  // namespace x86
}  // namespace tct
