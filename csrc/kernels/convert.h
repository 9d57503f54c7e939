// Conversions of whole buffers between the 16-bit storage types and f32,
// with the vector code of an ISA (x86/convert.h; Isa::Reference: the scalar
// conversions of types.h). Widening is exact; narrowing rounds to nearest
// even and keeps NaN a NaN. For the routes that run 16-bit tensors through
// the f32 kernels (converted where the data is copied anyway).
#pragma once

#include <cstdint>

#include "dispatch.h"
#include "kernels.h"
#include "x86/convert.h"

namespace tct {

// dst[i] = src[i] as f32, i < n; dt is DType::BF16 or DType::F16.
void widen_to_f32(Isa isa, DType dt, const void* src, float* dst, int64_t n, int nthreads);
// The same on the calling thread, for code that widens short runs as it copies them.
x86::Widen16Fn widen_fn(Isa isa, DType dt);
// dst[i] = src[i] rounded to dt (DType::BF16 or DType::F16), i < n.
void narrow_from_f32(Isa isa, DType dt, const float* src, void* dst, int64_t n, int nthreads);
// The same for rows of len elements: row r at src + r*ld_src, dst + r*ld_dst
// (e.g. each channel's run of a slab of an NCX tensor), in one parallel pass.
void widen_rows_to_f32(Isa isa, DType dt, const void* src, int64_t ld_src, float* dst,
                       int64_t ld_dst, int64_t rows, int64_t len, int nthreads);
void narrow_rows_from_f32(Isa isa, DType dt, const float* src, int64_t ld_src, void* dst,
                          int64_t ld_dst, int64_t rows, int64_t len, int nthreads);
// Batched transpose of 16-bit elements: dst[b][j][i] = src[b][i][j] for
// i < rows, j < cols (both dense): NCX <-> channels-last for the 16-bit
// tensors that the bf16 tiles read and write without widening.
// block32: a vector kernel for whole 32 x 32 blocks (dst[c*ldd + r] =
// src[r*lds + c]), or null (scalar loops).
using Transpose16Block = void (*)(const uint16_t* src, int64_t lds, uint16_t* dst, int64_t ldd);
// few: a vector kernel for sources of 2 to 4 rows (channels) into a dense
// destination, dst[j * rows + i] = src[i * lds + j] for i < rows, j < n, or
// null (scalar loops).
using Transpose16Few = void (*)(const uint16_t* src, int64_t lds, int rows, int64_t n, uint16_t* dst);
struct Transpose16Kernels {
  Transpose16Kernels(Transpose16Block b = nullptr, Transpose16Few f = nullptr) : block32(b), few(f) {}
  Transpose16Block block32;
  Transpose16Few few;
};
// src_ld / dst_ld: the row strides when not dense (default cols / rows; batch
// 1 only), e.g. a slab of each channel plane.
void transpose_u16(const uint16_t* src, uint16_t* dst, int64_t batch, int64_t rows, int64_t cols,
                   int nthreads, Transpose16Kernels k = {}, int64_t src_ld = -1,
                   int64_t dst_ld = -1);
// (N, C, X) -> (C, N, X) of 16-bit elements (both dense): dst[c][n][x] = src[n][c][x].
void ncx_to_cnx_u16(const uint16_t* src, uint16_t* dst, int64_t n, int64_t c, int64_t x,
                    int nthreads);

}  // namespace tct
