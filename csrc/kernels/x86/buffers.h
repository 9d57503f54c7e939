// The drivers' one aligned-buffer helper (no torch headers).
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace tct {
namespace x86 {

struct AlignedFree {
  void operator()(void* q) const { std::free(q); }
};
template <class T>
using AlignedBuf = std::unique_ptr<T[], AlignedFree>;

// n elements of T (at least min_n), 64-byte aligned, uninitialised; throws
// std::bad_alloc when the memory is not there. Buffers of 4 MiB and more
// start on a 2 MiB boundary and their whole 2 MiB chunks are marked for huge
// pages (no rounding up, no extra memory): each call gets fresh memory, and
// first-touch faults of 4 KiB pages cost ~2 ms per 8 MiB (vocoder 512->256
// k16 backward-weights scratch, Zen 5) during the tiles' stores.
template <class T>
AlignedBuf<T> aligned_buffer(int64_t n, int64_t min_n = 1) {
  const size_t bytes =
      (static_cast<size_t>(std::max<int64_t>(n, min_n)) * sizeof(T) + 63) / 64 * 64;
  constexpr size_t kHuge = size_t{2} << 20;
  void* q = nullptr;
  if (bytes < 2 * kHuge) {
    q = std::aligned_alloc(64, bytes);
  } else if (posix_memalign(&q, kHuge, bytes) == 0) {
#ifdef MADV_HUGEPAGE
    madvise(q, bytes / kHuge * kHuge, MADV_HUGEPAGE);
#endif
  } else {
    q = nullptr;
  }
  if (!q) throw std::bad_alloc();
  return AlignedBuf<T>(static_cast<T*>(q));
}

}  // namespace x86
}  // namespace tct
