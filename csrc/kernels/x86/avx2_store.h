// Partial-vector stores for the AVX2 kernel files. Internal linkage (an
// anonymous namespace): each file that includes this compiles its own copy
// with its own -m flags, so no inline code is shared across ISA objects.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace tct {
namespace x86 {
namespace {

// p[0..n) = the first n lanes of v (nothing for n <= 0, all 8 for n >= 8), in
// 4-, 2- and 1-float pieces: masked stores (vmaskmovps) are slow on AMD's
// cores (Zen 3: the layers with column tails ran 6-9 % faster this way).
inline void store_first_lanes(float* p, __m256 v, int64_t n) {
  if (n >= 8) {
    _mm256_storeu_ps(p, v);
    return;
  }
  __m128 x = _mm256_castps256_ps128(v);
  if (n >= 4) {
    _mm_storeu_ps(p, x);
    x = _mm256_extractf128_ps(v, 1);
    p += 4;
    n -= 4;
  }
  if (n >= 2) {
    _mm_storel_pi(reinterpret_cast<__m64*>(p), x);
    x = _mm_movehl_ps(x, x);
    p += 2;
    n -= 2;
  }
  if (n > 0) _mm_store_ss(p, x);
}

}  // namespace
}  // namespace x86
}  // namespace tct
