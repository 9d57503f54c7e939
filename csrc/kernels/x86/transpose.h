// Block transposes of the x86 ISAs (see transpose_common.cpp for the driver).
#pragma once

#include <cstdint>

namespace tct {
namespace x86 {

// dst[j * dst_stride + i] = src[i * src_stride + j] for i, j < 16.
void transpose_block16_avx512(const float* src, int64_t src_stride, float* dst,
                              int64_t dst_stride);
void transpose_block16_avx2(const float* src, int64_t src_stride, float* dst, int64_t dst_stride);

}  // namespace x86
}  // namespace tct
