// The drivers' one tile chooser and even-split helpers (no torch headers, no
// ISA code): which register tile covers a result best, and how a count is cut
// into nearly equal blocks. The conv driver (its GEMM tile per column count)
// and the planar driver (its dot tile per result) choose through cheapest()
// and cover_cost(); the planar and backward-weights drivers split channels
// with even_block() and part_start(). The rules that pick a tile family or
// a vector count (planar choose_tile, backward-weights choose_tiles) then
// fill their tiles with these blocks.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tct {
namespace x86 {

// Splits n into k nearly equal parts (the first n % k one larger); the start
// of part j, 0 <= j <= k.
inline int64_t part_start(int64_t n, int64_t k, int64_t j) {
  return n / k * j + std::min(j, n % k);
}

// The block size that cuts n into the fewest blocks of at most m, as evenly
// as possible: 17 channels by at most 8 give 6 (6 + 6 + 5), not 8 + 8 + 1
// (1 for no channels).
inline int64_t even_block(int64_t n, int64_t m) {
  if (n <= 0) return 1;
  const int64_t blocks = (n + m - 1) / m;
  return std::max<int64_t>(1, (n + blocks - 1) / blocks);
}

// The cost of covering an M x N result with tiles of m x n: the full tiles
// and the edge tiles, each at tile_cost(rows used, columns used).
template <class TileCost>
auto cover_cost(int64_t M, int64_t N, int64_t m, int64_t n, TileCost tile_cost) {
  const int64_t fm = M / m, rm = M % m, fn = N / n, rn = N % n;
  auto cost = static_cast<decltype(tile_cost(m, n))>(fm * fn) * tile_cost(m, n);
  if (rm) cost += static_cast<decltype(cost)>(fn) * tile_cost(rm, n);
  if (rn) cost += static_cast<decltype(cost)>(fm) * tile_cost(m, rn);
  if (rm && rn) cost += tile_cost(rm, rn);
  return cost;
}

// The candidate (of [first, last), which must not be empty) with the least
// cost(candidate); the first of equals. A cost may be a std::pair or tuple
// to break ties.
template <class It, class Cost>
It cheapest(It first, It last, Cost cost) {
  It best = first;
  auto best_cost = cost(*first);
  for (It it = first + 1; it != last; ++it) {
    const auto c = cost(*it);
    if (c < best_cost) {
      best = it;
      best_cost = c;
    }
  }
  return best;
}

}  // namespace x86
}  // namespace tct
