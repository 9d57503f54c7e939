// AVX-512 conversions between bf16 / f16 and f32 (convert.h). Whole vectors
// of 16, the tail under a mask.
#include <immintrin.h>

#include <cstdint>

#include "convert.h"
#include "vec_avx512.h"

namespace tct {
namespace x86 {
namespace {

inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

// 16 floats -> 16 bf16, round to nearest even; NaN -> the quieted top half.
}  // namespace

void bf16_to_f32_avx512(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = lanes(n - i);
    const __m256i h = _mm256_maskz_loadu_epi16(k, src + i);
    const __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    _mm512_mask_storeu_ps(dst + i, k, _mm512_castsi512_ps(u));
  }
}

void f32_to_bf16_avx512(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = lanes(n - i);
    _mm256_mask_storeu_epi16(dst + i, k, VecAvx512::to_bf16(_mm512_maskz_loadu_ps(k, src + i)));
  }
}

void f16_to_f32_avx512(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = lanes(n - i);
    _mm512_mask_storeu_ps(dst + i, k, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, src + i)));
  }
}

void f32_to_f16_avx512(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = lanes(n - i);
    _mm256_mask_storeu_epi16(dst + i, k, VecAvx512::to_f16(_mm512_maskz_loadu_ps(k, src + i)));
  }
}

}  // namespace x86
}  // namespace tct
