#include "convert.h"

#include <cstring>

#include <algorithm>

#include "../problem.h"
#include "types.h"
#include "x86/convert.h"

namespace tct {
namespace {


void bf16_to_f32_scalar(const uint16_t* s, float* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = to_float(bf16{s[i]});
}
void f16_to_f32_scalar(const uint16_t* s, float* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = to_float(f16{s[i]});
}
void f32_to_bf16_scalar(const float* s, uint16_t* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = to_bf16(s[i]).bits;
}
void f32_to_f16_scalar(const float* s, uint16_t* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = to_f16(s[i]).bits;
}

void check_dtype(DType dt) {
  if (dt != DType::BF16 && dt != DType::F16)
    throw ProblemError("16-bit conversion: dtype must be bf16 or f16");
}

x86::Widen16Fn widen_impl(Isa isa, DType dt) {
  const bool bf = dt == DType::BF16;
  switch (vector_isa(isa)) {
    case Isa::Avx512: return bf ? x86::bf16_to_f32_avx512 : x86::f16_to_f32_avx512;
    case Isa::Avx2: return bf ? x86::bf16_to_f32_avx2 : x86::f16_to_f32_avx2;
    default: break;
  }
  return bf ? bf16_to_f32_scalar : f16_to_f32_scalar;
}

x86::Narrow16Fn narrow_fn(Isa isa, DType dt) {
  const bool bf = dt == DType::BF16;
  switch (vector_isa(isa)) {
    case Isa::Avx512: return bf ? x86::f32_to_bf16_avx512 : x86::f32_to_f16_avx512;
    case Isa::Avx2: return bf ? x86::f32_to_bf16_avx2 : x86::f32_to_f16_avx2;
    default: break;
  }
  return bf ? f32_to_bf16_scalar : f32_to_f16_scalar;
}

// Runs f over [0, n) in pieces of at least 64 KiB of f32 per thread.
template <class F>
void in_parallel(int64_t n, int nthreads, F f) {
  constexpr int64_t kMinPiece = 16384;
  const int64_t pieces = std::max<int64_t>(1, std::min<int64_t>(nthreads, n / kMinPiece));
  const int64_t len = (n + pieces - 1) / pieces;
#pragma omp parallel for num_threads(static_cast<int>(pieces)) schedule(static) if (pieces > 1)
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t b = p * len, e = std::min(n, b + len);
    if (b < e) f(b, e - b);
  }
}

// f(row, begin, len) over rows x [0, len) in pieces as in_parallel's.
template <class F>
void rows_in_parallel(int64_t rows, int64_t len, int nthreads, F f) {
  constexpr int64_t kMinPiece = 16384;
  const int64_t per_row = std::max<int64_t>(1, std::min<int64_t>(nthreads, len / kMinPiece));
  const int64_t total = rows * per_row, plen = (len + per_row - 1) / per_row;
  const int nt = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>({nthreads, total, rows * len / kMinPiece})));
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t k = 0; k < total; ++k) {
    const int64_t r = k / per_row, b = k % per_row * plen, e = std::min(len, b + plen);
    if (b < e) f(r, b, e - b);
  }
}

}  // namespace

x86::Widen16Fn widen_fn(Isa isa, DType dt) {
  check_dtype(dt);
  return widen_impl(isa, dt);
}

void widen_rows_to_f32(Isa isa, DType dt, const void* src, int64_t ld_src, float* dst,
                       int64_t ld_dst, int64_t rows, int64_t len, int nthreads) {
  check_dtype(dt);
  const x86::Widen16Fn fn = widen_impl(isa, dt);
  const auto* s = static_cast<const uint16_t*>(src);
  rows_in_parallel(rows, len, nthreads, [&](int64_t r, int64_t b, int64_t n) {
    fn(s + r * ld_src + b, dst + r * ld_dst + b, n);
  });
}

void narrow_rows_from_f32(Isa isa, DType dt, const float* src, int64_t ld_src, void* dst,
                          int64_t ld_dst, int64_t rows, int64_t len, int nthreads) {
  check_dtype(dt);
  const x86::Narrow16Fn fn = narrow_fn(isa, dt);
  auto* d = static_cast<uint16_t*>(dst);
  rows_in_parallel(rows, len, nthreads, [&](int64_t r, int64_t b, int64_t n) {
    fn(src + r * ld_src + b, d + r * ld_dst + b, n);
  });
}

void widen_to_f32(Isa isa, DType dt, const void* src, float* dst, int64_t n, int nthreads) {
  check_dtype(dt);
  const x86::Widen16Fn fn = widen_impl(isa, dt);
  const auto* s = static_cast<const uint16_t*>(src);
  in_parallel(n, nthreads, [&](int64_t b, int64_t len) { fn(s + b, dst + b, len); });
}

void narrow_from_f32(Isa isa, DType dt, const float* src, void* dst, int64_t n, int nthreads) {
  check_dtype(dt);
  const x86::Narrow16Fn fn = narrow_fn(isa, dt);
  auto* d = static_cast<uint16_t*>(dst);
  in_parallel(n, nthreads, [&](int64_t b, int64_t len) { fn(src + b, d + b, len); });
}

// In 32 x 32 blocks (a block's source and destination lines stay in L1):
// whole blocks by block32 where given; a side of 32 or more ends in a whole
// block that overlaps the one before it (it rewrites some elements with the
// same values; both are the same item's, so one thread's), a shorter side
// (and everything without block32) in scalar loops (GCC vectorizes
// neither: about an element a cycle). Zen 5: the 36-channel bf16
// channels-last result of the 36 <- 4 k3 s3 backward-data to NCX, 4 of 36
// columns scalar before: 1.3x.
void transpose_u16(const uint16_t* src, uint16_t* dst, int64_t batch, int64_t rows, int64_t cols,
                   int nthreads, Transpose16Kernels kern, int64_t src_ld, int64_t dst_ld) {
  constexpr int64_t B = 32;
  const Transpose16Block block32 = kern.block32;
  const int64_t lds = src_ld < 0 ? cols : src_ld, ldd = dst_ld < 0 ? rows : dst_ld;
  // 2-4 channels into a dense channels-last copy (RGB-like layers): the few
  // kernel, in runs of 4096 columns. Zen 5, the 4-channel 1080x1920 diff_dst
  // of the 36 <- 4 k3 s3 backward-data, NCX: the scalar loop took twice the
  // pair tiles' time.
  if (kern.few && rows >= 2 && rows <= 4 && ldd == rows && cols >= B) {
    constexpr int64_t L = 4096;
    const int64_t per = (cols + L - 1) / L, items = batch * per;
    const int ntf = items >= 2 * nthreads ? nthreads : 1;  // (as the blocks below)
#pragma omp parallel for num_threads(ntf) schedule(static) if (ntf > 1)
    for (int64_t k = 0; k < items; ++k) {
      const int64_t b = k / per, j0 = k % per * L, n = std::min(L, cols - j0);
      kern.few(src + b * rows * lds + j0, lds, static_cast<int>(rows), n,
               dst + b * cols * ldd + j0 * ldd);
    }
    return;
  }
  // Items: a side of 32 or more in floor(n / 32) of them (the last one
  // with the remainder), a shorter one in one.
  auto items_of = [&](int64_t n) { return block32 && n >= B ? n / B : (n + B - 1) / B; };
  const int64_t rb = items_of(rows), cb = items_of(cols);
  const int64_t blocks = batch * rb * cb;
  const int nt = blocks >= 2 * nthreads ? nthreads : 1;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t k = 0; k < blocks; ++k) {
    const int64_t b = k / (rb * cb), ib = (k / cb) % rb, jb = k % cb;
    const uint16_t* s = src + b * rows * lds;
    uint16_t* d = dst + b * cols * ldd;
    const int64_t i0 = ib * B, j0 = jb * B;
    const int64_t i1 = ib == rb - 1 ? rows : i0 + B, j1 = jb == cb - 1 ? cols : j0 + B;
    if (block32 && rows >= B && cols >= B) {
      // the item's whole blocks: at i0 (and i1 - 32 when longer) by j0 (and j1 - 32)
      for (const int64_t i : {i0, i1 - B}) {
        for (const int64_t j : {j0, j1 - B}) {
          block32(s + i * lds + j, lds, d + j * ldd + i, ldd);
          if (j1 - j0 == B) break;
        }
        if (i1 - i0 == B) break;
      }
      continue;
    }
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t i = i0; i < i1; ++i) d[j * ldd + i] = s[i * lds + j];
  }
}

void ncx_to_cnx_u16(const uint16_t* src, uint16_t* dst, int64_t n, int64_t c, int64_t x,
                    int nthreads) {
  const int nt = n * c * x >= (int64_t{1} << 16) ? nthreads : 1;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
  for (int64_t k = 0; k < n * c; ++k) {
    const int64_t i = k / c, ch = k % c;
    std::memcpy(dst + (ch * n + i) * x, src + k * x, sizeof(uint16_t) * static_cast<size_t>(x));
  }
}

}  // namespace tct
