// Block transposes of the x86 ISAs (the batched driver is kernels/transpose.cpp;
// conv_f32_common.cpp packs weights with the row-pointer form).
#pragma once

#include <cstdint>

namespace tct {
namespace x86 {

// dst[j * dst_stride + i] = src[i * src_stride + j] for i, j < 16.
void transpose_block16_avx512(const float* src, int64_t src_stride, float* dst,
                              int64_t dst_stride);
void transpose_block16_avx2(const float* src, int64_t src_stride, float* dst, int64_t dst_stride);

// 16-bit elements: dst[c * ldd + r] = src[r * lds + c] for r, c < 32 (the
// 16-bit layout changes: the pair tiles' routes and ncx16; the AVX-512 one
// needs AVX-512 BW, pairs_avx512.cpp).
void transpose_u16_block32_avx512(const uint16_t* src, int64_t lds, uint16_t* dst, int64_t ldd);
void transpose_u16_block32_avx2(const uint16_t* src, int64_t lds, uint16_t* dst, int64_t ldd);
// dst[j * rows + i] = src[i * lds + j] for i < rows (2 to 4), j < n (AVX-512 BW:
// two-source word permutes per 32 destination elements).
void transpose_u16_few_avx512(const uint16_t* src, int64_t lds, int rows, int64_t n, uint16_t* dst);

// dst[j][i] = src[i * src_stride + j] for i < rows, j < cols (rows, cols <= 16):
// each destination row j at its own pointer (rows floats written). Nothing
// outside the rows x cols source block is read (masked loads).
void transpose_rows_avx512(const float* src, int64_t src_stride, int rows, int cols,
                           float* const* dst);
void transpose_rows_avx2(const float* src, int64_t src_stride, int rows, int cols,
                         float* const* dst);

// As transpose_rows, into whole cache lines with non-temporal stores: each
// destination row j < cols is 64-byte aligned and gets all 16 floats written
// (zeros past `rows`). For packing weights that outgrow the caches: no read
// for ownership of the lines written. The caller fences (_mm_sfence) before
// another thread reads them.
void transpose_rows_stream_avx512(const float* src, int64_t src_stride, int rows, int cols,
                                  float* const* dst);
void transpose_rows_stream_avx2(const float* src, int64_t src_stride, int rows, int cols,
                                float* const* dst);

}  // namespace x86
}  // namespace tct
