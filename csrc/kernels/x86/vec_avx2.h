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
  static constexpr bool kPermuteBcast = true;  // (see VecAvx512)

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
  // A whole vector aligned to 32 bytes (half a line) streams when the caller
  // allows it (plans that stream GEMM tiles on AVX2 write whole lines: both
  // halves); partial vectors never do.
  static inline void store_tail(float* p, Reg v, Mask k, int64_t n, bool stream_ok) {
    if (stream_ok && n >= W && (reinterpret_cast<uintptr_t>(p) & 31) == 0)
      stream(p, v);
    else
      store_part(p, v, k, n);
  }
  static inline float hsum(Reg v) { return ::tct::x86::hsum(v); }
  // f32 -> bf16 bits in each 32-bit lane, rounded to nearest even, NaN kept
  // a (quiet) NaN: its top half with the quiet bit set (the rounding add
  // could carry a NaN's mantissa into its exponent). Integer instructions
  // only, one shift after the select (8; they were 9. A float compare for
  // the NaN test ran faster alone but slowed the 6x16 tiles' stores, Zen 3).
  static inline __m256i to_bf16_32(Reg x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i q = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
    return _mm256_srli_epi32(_mm256_blendv_epi8(r, q, nan), 16);
  }
  // The 8 lanes as bf16 (kind 1) or f16 (kind 2), rounded to nearest even.
  static inline __m128i to16(Reg v, int64_t kind) {
    if (kind == 2) return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i b = to_bf16_32(v);  // packus per 128-bit lane, then the low lane
    return _mm256_castsi256_si128(
        _mm256_permute4x64_epi64(_mm256_packus_epi32(b, b), _MM_SHUFFLE(3, 1, 2, 0)));
  }
  // 8 bf16 (KIND 1: a shift) or f16 (KIND 2: vcvtph2ps) values at p as
  // floats; load16_part: the first n (1 <= n <= 8), reading no further.
  template <int KIND>
  static inline Reg widen16(__m128i h) {
    if constexpr (KIND == 2) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  template <int KIND>
  static inline Reg load16(const uint16_t* p) {
    return widen16<KIND>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // The bf16 / f16 value at p as a float in every lane.
  template <int KIND>
  static inline Reg bcast16(const uint16_t* p) {
    if constexpr (KIND == 2) return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(*p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_set1_epi16(static_cast<short>(*p)), 16));
  }
  // Pair-split bf16 loads, evens / odds and interleave: as VecAvx512.
  static inline void split_bf16(const uint16_t* p, Reg& even, Reg& odd) {
    __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    __asm__("" : "+x"(x));  // (one load, as VecAvx512)
    even = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    odd = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  // (shufps picks 0 2 | 8 10 | 4 6 | 12 14 by 64-bit pairs; the permute
  // puts the pairs in order)
  static inline Reg evens(Reg a, Reg b) {
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8));
  }
  static inline Reg odds(Reg a, Reg b) {
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8));
  }
  static inline void interleave(Reg even, Reg odd, Reg& lo, Reg& hi) {
    const Reg l = _mm256_unpacklo_ps(even, odd), h = _mm256_unpackhi_ps(even, odd);
    lo = _mm256_permute2f128_ps(l, h, 0x20);
    hi = _mm256_permute2f128_ps(l, h, 0x31);
  }
  // bcast4 over 16-bit elements: p[0..4) widened, in each 128-bit lane.
  template <int KIND>
  static inline Reg bcast4_16(const uint16_t* p) {
    const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    __m128 f;
    if constexpr (KIND == 2) f = _mm_cvtph_ps(h);
    else f = _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(f), f, 1);
  }
  template <int KIND>
  static inline Reg load16_part(Mask, const uint16_t* p, int64_t n) {
    return widen16<KIND>(load_first16(p, n));
  }
  // The first min(n, 8) lanes of v rounded to bf16 / f16 at p.
  static inline void store16(uint16_t* p, Reg v, int64_t n, int64_t kind) {
    if (n > 0) store_first16(p, to16(v, kind), n);
  }
  // v0's and v1's 16 lanes rounded to bf16 / f16, in order (one pack and one
  // permute for both bf16 vectors).
  static inline __m256i to16x2(Reg v0, Reg v1, int64_t kind) {
    if (kind == 2)
      return _mm256_set_m128i(_mm256_cvtps_ph(v1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                              _mm256_cvtps_ph(v0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256i b = _mm256_packus_epi32(to_bf16_32(v0), to_bf16_32(v1));
    return _mm256_permute4x64_epi64(b, _MM_SHUFFLE(3, 1, 2, 0));
  }
  // to16x2 at p; stream16x2: with a streaming store, p aligned to 32
  // bytes (half a line: the caller writes whole lines).
  static inline void store16x2(uint16_t* p, Reg v0, Reg v1, int64_t kind) {
    if (kind == 2) {  // (two 16-byte stores: no insert)
      store16(p, v0, W, kind);
      store16(p + W, v1, W, kind);
      return;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), to16x2(v0, v1, kind));
  }
  static inline void stream16x2(uint16_t* p, Reg v0, Reg v1, int64_t kind) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), to16x2(v0, v1, kind));
  }
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
