// Vector traits of the AVX2 kernel files: the operations the shared tile
// templates (conv_f32_tiles.h) are written over, on 8-float ymm vectors.
// Internal linkage (an unnamed namespace), as vec_avx512.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "avx2_util.h"

namespace tct {
namespace x86 {
namespace {

struct VecAvx2 {
  using Reg = __m256;
  using Mask = __m256i;
  static constexpr int W = 8;
  // Rows of a one-vector GEMM tile that load 4 inputs at once and broadcast
  // them by in-lane permutes (Zen 5 in cache, 12 rows: 2 rows 92-96 %;
  // 1 row 87-89 %, 3 rows spill registers: 70 %).
  static constexpr int permute_rows(int M) { return M >= 12 ? 2 : 0; }
  // No streaming stores from the GEMM tiles (measured with AVX-512 only).
  static constexpr bool kStreamGemm = false;

  static inline Mask first(int64_t n) { return first_lanes(n); }
  static inline Mask tail(int n) { return first_lanes(n); }  // 1 <= n <= 8
  static inline Reg zero() { return _mm256_setzero_ps(); }
  static inline Reg load(const float* p) { return _mm256_load_ps(p); }
  static inline Reg loadu(const float* p) { return _mm256_loadu_ps(p); }
  static inline Reg load_part(Mask k, const float* p) { return _mm256_maskload_ps(p, k); }
  static inline Reg bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static inline Reg bcast4(const float* p) {
    return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(p));
  }
  template <int K>
  static inline Reg lane(Reg q) { return _mm256_permute_ps(q, K * 0x55); }
  static inline Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static inline void storeu(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  // The first n lanes of v, no masked store (avx2_util.h: slow on AMD).
  static inline void store_part(float* p, Reg v, Mask, int64_t n) { store_first_lanes(p, v, n); }
  static inline void stream(float* p, Reg v) { _mm256_stream_ps(p, v); }
  // Column tails are never streamed (a vector is half a line).
  static inline void store_tail(float* p, Reg v, Mask k, int64_t n, bool) { store_part(p, v, k, n); }
  static inline float hsum(Reg v) { return ::tct::x86::hsum(v); }
  // Planar tiles stream a full vector aligned to 32 bytes (half a line).
  static constexpr uintptr_t kStreamAlign = 32;
  static inline void hsum4(Reg v0, Reg v1, Reg v2, Reg v3, float* out) {
    out[0] = hsum(v0);
    out[1] = hsum(v1);
    out[2] = hsum(v2);
    out[3] = hsum(v3);
  }
};

}  // namespace
}  // namespace x86
}  // namespace tct
