// Conversions between the 16-bit storage types (bf16, f16: raw uint16_t
// bits) and f32, per ISA. Widening is exact; narrowing rounds to nearest
// even (what torch's casts do) and keeps NaN a NaN (bf16: quieted, as
// torch's c10::BFloat16; f16: as vcvtps2ph). Leaf functions over raw
// pointers, defined in the ISA files (convert_avx512.cpp, convert_avx2.cpp);
// only call the ones the CPU supports (AVX2 files need F16C too).
#pragma once

#include <cstdint>

namespace tct {
namespace x86 {

// The widening of n 16-bit elements to f32 and the rounding of n floats to
// 16 bits (the *_to_f32 and f32_to_* below).
using Widen16Fn = void (*)(const uint16_t* src, float* dst, int64_t n);
using Narrow16Fn = void (*)(const float* src, uint16_t* dst, int64_t n);

void bf16_to_f32_avx512(const uint16_t* src, float* dst, int64_t n);
void f32_to_bf16_avx512(const float* src, uint16_t* dst, int64_t n);
void f16_to_f32_avx512(const uint16_t* src, float* dst, int64_t n);
void f32_to_f16_avx512(const float* src, uint16_t* dst, int64_t n);

void bf16_to_f32_avx2(const uint16_t* src, float* dst, int64_t n);
void f32_to_bf16_avx2(const float* src, uint16_t* dst, int64_t n);
void f16_to_f32_avx2(const uint16_t* src, float* dst, int64_t n);
void f32_to_f16_avx2(const float* src, uint16_t* dst, int64_t n);

}  // namespace x86
}  // namespace tct
