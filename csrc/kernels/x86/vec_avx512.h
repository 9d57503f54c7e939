// Vector traits of the AVX-512 kernel files: the operations the shared tile
// templates (conv_f32_tiles.h) are written over, on 16-float zmm vectors.
// Internal linkage (an unnamed namespace): each ISA file that includes this
// compiles its own copy with its own -m flags, so no inline code is shared
// across ISA objects (test IsaObjectsShareNoSymbols).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace tct {
namespace x86 {
namespace {

struct VecAvx512 {
  using Reg = __m512;
  using Mask = __mmask16;
  static constexpr int W = 16;
  // Rows of a one-vector GEMM tile (M rows) that load their inputs 4 at a
  // time and broadcast them with in-lane permutes (trading loads for
  // shuffles; Zen 5, 12 rows in cache, standalone loop: 2 rows 95 %, 4 rows
  // 97 %, 8 rows 95 %, all 12 85 %, none 89 %; the 12x16 tile in
  // bench_conv_f32: 4 rows 94-98 %, was 83-87 %).
  static constexpr int permute_rows(int M) { return M >= 12 ? 4 : M / 3; }
  // One-vector tiles broadcast some rows' inputs by in-lane permutes (the
  // conv tiles' permute_rows, the backward-weights tiles' first 4 rows).
  static constexpr bool kPermuteBcast = true;

  // The first n lanes (none for n <= 0, all for n >= 16).
  static inline Mask first(int64_t n) {
    if (n >= 16) return static_cast<Mask>(0xFFFF);
    if (n <= 0) return 0;
    return static_cast<Mask>((1u << n) - 1u);
  }
  // The first n lanes, 1 <= n <= 16 (no range checks).
  static inline Mask tail(int n) { return static_cast<Mask>((1u << n) - 1u); }
  static inline bool full(Mask k) { return k == 0xFFFF; }
  static inline Reg zero() { return _mm512_setzero_ps(); }
  static inline Reg load(const float* p) { return _mm512_load_ps(p); }
  static inline Reg loadu(const float* p) { return _mm512_loadu_ps(p); }
  static inline Reg load_part(Mask k, const float* p) { return _mm512_maskz_loadu_ps(k, p); }
  static inline Reg bcast(const float* p) { return _mm512_set1_ps(*p); }
  // p[0..4) in each 128-bit lane; lane<K> broadcasts element K of it.
  static inline Reg bcast4(const float* p) { return _mm512_broadcast_f32x4(_mm_loadu_ps(p)); }
  template <int K>
  static inline Reg lane(Reg q) { return _mm512_permute_ps(q, K * 0x55); }
  static inline Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static inline void storeu(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  // The first n lanes of v (k = first(n)).
  static inline void store_part(float* p, Reg v, Mask k, int64_t) { _mm512_mask_storeu_ps(p, k, v); }
  static inline void stream(float* p, Reg v) { _mm512_stream_ps(p, v); }
  // A column-tail store that may stream: a full vector is a whole line.
  static inline void store_tail(float* p, Reg v, Mask k, int64_t n, bool stream_ok) {
    if (stream_ok && full(k) && (reinterpret_cast<uintptr_t>(p) & 63) == 0)
      stream(p, v);
    else
      store_part(p, v, k, n);
  }
  // f32 -> bf16 bits, rounded to nearest even, NaN kept a (quiet) NaN.
  static inline __m256i to_bf16(Reg x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i top = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(top, _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_cvtepi32_epi16(
        _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(top, _mm512_set1_epi32(0x40))));
  }
  // f32 -> f16 bits, rounded to nearest even.
  static inline __m256i to_f16(Reg x) {
    return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 16 bf16 (KIND 1: a shift) or f16 (KIND 2: vcvtph2ps) values at p as
  // floats; load16_part: the first n (1 <= n <= 16, k = first(n)), reading no further.
  template <int KIND>
  static inline Reg widen16(__m256i h) {
    if constexpr (KIND == 2) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  template <int KIND>
  static inline Reg load16(const uint16_t* p) {
    return widen16<KIND>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  template <int KIND>
  static inline Reg load16_part(Mask k, const uint16_t* p, int64_t) {
    return widen16<KIND>(_mm256_maskz_loadu_epi16(k, p));
  }
  // The bf16 / f16 value at p as a float in every lane (a 16-bit broadcast
  // load, then a shift or vcvtph2ps).
  template <int KIND>
  static inline Reg bcast16(const uint16_t* p) {
    if constexpr (KIND == 2) return _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(*p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_set1_epi16(static_cast<short>(*p)), 16));
  }
  // Pair-split bf16 loads (the depthwise tiles): the 2W bf16 values at p as
  // floats in two vectors, even = elements 0, 2, .., 2W-2 and odd = 1, 3, ..,
  // 2W-1 (one load, a shift and an and, where two widening loads take two
  // shuffles and two shifts). evens / odds put two natural vectors' floats
  // (a = elements 0..W-1, b = W..2W-1) in that order; interleave undoes it.
  static inline void split_bf16(const uint16_t* p, Reg& even, Reg& odd) {
    __m512i x = _mm512_loadu_si512(p);
    __asm__("" : "+v"(x));  // (one load: else both uses fold a load each)
    even = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static inline Reg evens(Reg a, Reg b) {
    return _mm512_permutex2var_ps(
        a, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), b);
  }
  static inline Reg odds(Reg a, Reg b) {
    return _mm512_permutex2var_ps(
        a, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), b);
  }
  static inline void interleave(Reg even, Reg odd, Reg& lo, Reg& hi) {
    lo = _mm512_permutex2var_ps(
        even, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23), odd);
    hi = _mm512_permutex2var_ps(
        even, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31), odd);
  }
  // bcast4 over 16-bit elements: p[0..4) widened, in each 128-bit lane.
  template <int KIND>
  static inline Reg bcast4_16(const uint16_t* p) {
    const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    if constexpr (KIND == 2) return _mm512_broadcast_f32x4(_mm_cvtph_ps(h));
    return _mm512_broadcast_f32x4(_mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16)));
  }
  // The 16 lanes as bf16 (kind 1) or f16 (kind 2).
  static inline __m256i to16(Reg v, int64_t kind) { return kind == 2 ? to_f16(v) : to_bf16(v); }
  // The first min(n, 16) lanes of v rounded to bf16 / f16 at p.
  static inline void store16(uint16_t* p, Reg v, int64_t n, int64_t kind) {
    if (n <= 0) return;
    _mm256_mask_storeu_epi16(p, first(n), to16(v, kind));
  }
  // v0's and v1's 32 lanes rounded to bf16 / f16 at p.
  static inline void store16x2(uint16_t* p, Reg v0, Reg v1, int64_t kind) {
    store16(p, v0, W, kind);
    store16(p + W, v1, W, kind);
  }
  // The same with one streaming store, p aligned to 64 bytes (a line).
  static inline void stream16x2(uint16_t* p, Reg v0, Reg v1, int64_t kind) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p),
                        _mm512_inserti64x4(_mm512_castsi256_si512(to16(v0, kind)), to16(v1, kind), 1));
  }
  // out[0..4) = the lane sums of v0..v3.
  // The lane sum of v.
  static inline float hsum(Reg v) { return _mm512_reduce_add_ps(v); }
  // Planar tiles stream a full vector when it is a whole aligned line.
  static constexpr uintptr_t kStreamAlign = 64;
  static inline void hsum4(Reg v0, Reg v1, Reg v2, Reg v3, float* out) {
    const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(v2, v3, _MM_SHUFFLE(3, 2, 3, 2)));
    // 128-bit block k: 4 partial sums of v_k.
    __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
    u = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(2, 3, 0, 1)));
    u = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m512i idx = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
    _mm_storeu_ps(out, _mm512_castps512_ps128(_mm512_permutexvar_ps(idx, u)));
  }
};

// The same with every broadcast a load: Intel's AVX-512 cores run vpermilps
// zmm on port 5, one of their two 512-bit FMA ports, so there the permutes
// take FMA slots (SPR VM, one core in cache: the 12x16 conv tile 63-72 % of
// the FMA peak with 4 permuted rows, 74-86 % with none; 2 rows 69-83 %).
struct VecAvx512Loads : VecAvx512 {
  static constexpr bool kPermuteBcast = false;
};

}  // namespace
}  // namespace x86
}  // namespace tct
