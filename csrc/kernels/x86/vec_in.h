// Vector loads of activations in any of their storages, for the tiles written
// over the vector traits V (vec_avx512.h, vec_avx2.h): IN 0 f32 (T float), 1
// bf16 or 2 f16 (T uint16_t, widened as loaded: a shift or vcvtph2ps).
// Internal linkage (an unnamed namespace), as the traits. And their prefetch.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace tct {
namespace x86 {
namespace {

// Prefetches (into L1) every 64-byte line that [addr, addr + bytes) touches.
// Addresses as integers: a later tile's or row's inputs may lie past the tensor.
inline __attribute__((always_inline)) void prefetch_lines(uintptr_t addr, uintptr_t bytes) {
  for (uintptr_t l = addr & ~uintptr_t{63}; l < addr + bytes; l += 64)
    _mm_prefetch(reinterpret_cast<const char*>(l), _MM_HINT_T0);
}

// V::W elements at p as floats.
template <class V, int IN, class T>
inline __attribute__((always_inline)) typename V::Reg load_in(const T* p) {
  if constexpr (IN == 0) return V::loadu(p);
  else return V::template load16<IN>(p);
}

// The element at p as a float in every lane.
template <class V, int IN, class T>
inline __attribute__((always_inline)) typename V::Reg bcast_in(const T* p) {
  if constexpr (IN == 0) return V::bcast(p);
  else return V::template bcast16<IN>(p);
}

// The first n elements at p (1 <= n <= V::W, k = V::first(n)), reading no further.
template <class V, int IN, class T>
inline __attribute__((always_inline)) typename V::Reg load_in_part(typename V::Mask k, const T* p,
                                                                   int64_t n) {
  if constexpr (IN == 0) return V::load_part(k, p);
  else return V::template load16_part<IN>(k, p, n);
}

}  // namespace
}  // namespace x86
}  // namespace tct
