// The tap-geometry model (problem.h TapAxis) against a brute-force walk of
// SPEC's o = i*s - pb + k*d, and the tile chooser / even splits (x86/tiling.h)
// against hand-computed cases.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/x86/tiling.h"
#include "problem.h"

namespace tct {
namespace {

TEST(Geometry, IntegerHelpers) {
  EXPECT_EQ(floor_div(7, 3), 2);
  EXPECT_EQ(floor_div(-7, 3), -3);
  EXPECT_EQ(floor_div(-6, 3), -2);
  EXPECT_EQ(floor_mod(-7, 3), 2);
  EXPECT_EQ(floor_mod(7, 3), 1);
  EXPECT_EQ(ceil_div(7, 3), 3);
  EXPECT_EQ(ceil_div(-7, 3), -2);
  EXPECT_EQ(ceil_div(6, 3), 2);
  EXPECT_EQ(round_up(17, 8), 24);
  EXPECT_EQ(round_up(16, 8), 16);
  EXPECT_EQ(round_up(0, 8), 0);
}

// Every (I, O, K, s, d, pb) in a small box: each query of the model equals
// the brute-force answer over all src positions and taps.
TEST(Geometry, TapAxisMatchesBruteForce) {
  int cases = 0;
  for (int64_t I = 1; I <= 5; ++I)
    for (int64_t K = 1; K <= 4; ++K)
      for (int64_t s = 1; s <= 3; ++s)
        for (int64_t d = 1; d <= 2; ++d)
          for (int64_t pb = 0; pb <= d * (K - 1); ++pb)
            for (int64_t op = 0; op < s; ++op) {
              const int64_t pe = d * (K - 1) - pb;
              const int64_t O = forward_output_size<int64_t>(I, s, d * (K - 1) + 1, pb, pe, op);
              if (O < 1) continue;
              const TapAxis ax{I, O, K, s, d, pb};
              ++cases;
              for (int64_t k = 0; k < K; ++k) {
                int64_t first = -1, last = -1;
                for (int64_t i = 0; i < I; ++i) {
                  const int64_t o = i * s - pb + k * d;
                  ASSERT_EQ(ax.dst_of(i, k), o);
                  ASSERT_EQ(ax.dst_at(i, k), o >= 0 && o < O ? o : -1);
                  if (o >= 0 && o < O) {
                    if (first < 0) first = i;
                    last = i + 1;
                  }
                  // The shift split by the stride.
                  ASSERT_EQ(o, (i + ax.tap_off(k)) * s + ax.tap_phase(k));
                  ASSERT_GE(ax.tap_phase(k), 0);
                  ASSERT_LT(ax.tap_phase(k), s);
                }
                const auto range = ax.src_range(k);
                if (first < 0) {
                  ASSERT_EQ(range.first, range.second);
                } else {
                  ASSERT_EQ(range, std::make_pair(first, last));
                }
                // Every dst position (and a few outside): which src reaches it.
                for (int64_t o = -3; o < O + 3; ++o) {
                  int64_t hit = -1, below = INT64_MIN, above = INT64_MAX;
                  for (int64_t i = -20; i < I + 20; ++i) {
                    const int64_t at = i * s - pb + k * d;
                    if (at == o && i >= 0 && i < I) hit = i;
                    if (at <= o) below = i;
                    if (at >= o && above == INT64_MAX) above = i;
                  }
                  ASSERT_EQ(ax.src_at(o, k), hit);
                  ASSERT_EQ(ax.src_floor(o, k), below);
                  ASSERT_EQ(ax.src_ceil(o, k), above);
                  ASSERT_EQ(ax.reaches(o, k), below == above);
                }
              }
            }
  EXPECT_GT(cases, 500);
}

TEST(Geometry, ProblemAxis) {
  ConvProblem p;
  p.spatial_rank = 2;
  p.I = {1, 4, 5};
  p.O = {1, 9, 11};
  p.K = {1, 3, 4};
  p.s = {1, 2, 2};
  p.d = {1, 1, 1};
  p.pb = {0, 1, 1};
  const TapAxis a = p.axis(2);
  EXPECT_EQ(a.I, 5);
  EXPECT_EQ(a.O, 11);
  EXPECT_EQ(a.K, 4);
  EXPECT_EQ(a.s, 2);
  EXPECT_EQ(a.pb, 1);
  // Tap 0 of src 0 lands on -1 (outside): src positions 1..4 reach dst.
  EXPECT_EQ(p.tap_src_range(2, 0), std::make_pair(int64_t{1}, int64_t{5}));
  EXPECT_EQ(p.tap_src_range(1, 2), std::make_pair(int64_t{0}, int64_t{4}));
}

TEST(Tiling, EvenSplits) {
  EXPECT_EQ(x86::even_block(17, 8), 6);  // 6 + 6 + 5
  EXPECT_EQ(x86::even_block(16, 8), 8);
  EXPECT_EQ(x86::even_block(3, 8), 3);
  EXPECT_EQ(x86::even_block(0, 8), 1);
  // 10 into 3 parts: 4 + 3 + 3.
  const std::vector<int64_t> starts{x86::part_start(10, 3, 0), x86::part_start(10, 3, 1),
                                    x86::part_start(10, 3, 2), x86::part_start(10, 3, 3)};
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 4, 7, 10}));
}

TEST(Tiling, CoverCost) {
  auto area = [](int64_t m, int64_t n) { return m * n; };
  // Any tiling of a result covers exactly its area.
  EXPECT_EQ(x86::cover_cost(7, 10, 3, 4, area), 70);
  // Counted tiles: 7 x 10 by 3 x 4 is 3 x 3 tiles.
  EXPECT_EQ(x86::cover_cost(7, 10, 3, 4, [](int64_t, int64_t) { return 1; }), 9);
  // Padded columns: 10 columns in 4-wide tiles, one row: 12.
  EXPECT_EQ(x86::cover_cost(1, 10, 1, 4, [](int64_t, int64_t) { return 4; }), 12);
  EXPECT_EQ(x86::cover_cost(0, 10, 1, 4, area), 0);
}

TEST(Tiling, CheapestPicksLeastCostFirstOfEquals) {
  struct T {
    int nr;
    double eff;
  };
  const std::vector<T> tiles{{64, 0.9}, {48, 0.95}, {32, 0.97}, {16, 0.9}};
  auto pick = [&](int64_t ncol) {
    return x86::cheapest(tiles.begin(), tiles.end(), [&](const T& t) {
      return x86::cover_cost(1, ncol, 1, t.nr, [&](int64_t, int64_t) { return t.nr; }) / t.eff;
    })->nr;
  };
  // Padded columns / speed: 64 columns: 71.1, 101, 66.0, 71.1.
  EXPECT_EQ(pick(64), 32);
  // 48 columns: 71.1, 50.5, 66.0, 53.3.
  EXPECT_EQ(pick(48), 48);
  // 16 columns: 71.1, 50.5, 33.0, 17.8.
  EXPECT_EQ(pick(16), 16);
  // Equal costs: the first.
  const std::vector<T> same{{16, 1.0}, {32, 1.0}};
  EXPECT_EQ(x86::cheapest(same.begin(), same.end(),
                          [](const T& t) { return x86::cover_cost(1, 32, 1, t.nr, [&](int64_t, int64_t) { return t.nr; }); })
                ->nr,
            16);
  // A pair breaks ties: the larger tile.
  EXPECT_EQ(x86::cheapest(same.begin(), same.end(),
                          [](const T& t) { return std::make_pair(0, -t.nr); })
                ->nr,
            32);
}

}  // namespace
}  // namespace tct
