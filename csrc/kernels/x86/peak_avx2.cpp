// AVX2+FMA register-only FMA loop for the FMA-peak measurement (peak.h).
// Compiled with -mavx2 -mfma (CMake picks the flags from the file name).
#include <immintrin.h>

namespace tct {
namespace x86 {

// Runs `iters` iterations of 12 independent 256-bit FMA chains (12 FMAs per
// iteration, 8 f32 lanes each: 192 FLOPs per iteration). 12 chains + 2
// constants fit the 16 ymm registers and cover 2 ports x 4-5 cycles latency.
double fma_peak_chunk_avx2(long iters, float mul, float add) {
  const __m256 a = _mm256_set1_ps(mul);
  const __m256 b = _mm256_set1_ps(add);
  __m256 c0 = _mm256_set1_ps(0.0f), c1 = _mm256_set1_ps(0.1f), c2 = _mm256_set1_ps(0.2f),
         c3 = _mm256_set1_ps(0.3f), c4 = _mm256_set1_ps(0.4f), c5 = _mm256_set1_ps(0.5f),
         c6 = _mm256_set1_ps(0.6f), c7 = _mm256_set1_ps(0.7f), c8 = _mm256_set1_ps(0.8f),
         c9 = _mm256_set1_ps(0.9f), c10 = _mm256_set1_ps(1.0f), c11 = _mm256_set1_ps(1.1f);
  for (long i = 0; i < iters; ++i) {
    c0 = _mm256_fmadd_ps(c0, a, b);
    c1 = _mm256_fmadd_ps(c1, a, b);
    c2 = _mm256_fmadd_ps(c2, a, b);
    c3 = _mm256_fmadd_ps(c3, a, b);
    c4 = _mm256_fmadd_ps(c4, a, b);
    c5 = _mm256_fmadd_ps(c5, a, b);
    c6 = _mm256_fmadd_ps(c6, a, b);
    c7 = _mm256_fmadd_ps(c7, a, b);
    c8 = _mm256_fmadd_ps(c8, a, b);
    c9 = _mm256_fmadd_ps(c9, a, b);
    c10 = _mm256_fmadd_ps(c10, a, b);
    c11 = _mm256_fmadd_ps(c11, a, b);
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                           _mm256_add_ps(c4, c5));
  __m256 t = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c6, c7), _mm256_add_ps(c8, c9)),
                           _mm256_add_ps(c10, c11));
  s = _mm256_add_ps(s, t);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return static_cast<double>(_mm_cvtss_f32(h));
}

}  // namespace x86
}  // namespace tct
