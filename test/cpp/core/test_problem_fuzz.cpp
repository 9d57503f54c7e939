// Resolver fuzzing (issue #24): random attributes and shapes with values up to
// 2**63-1 (and negative ones). Each resolve_* call either throws ProblemError or
// returns a problem whose derived sizes are all in range and consistent: the
// forward size formula, the auto_pad rule, element counts within kMaxElements,
// index sums within kMaxExtent, the result shapes equal to the given ones.
// Expectations are recomputed here in 128-bit arithmetic, independently of
// problem.cpp. The sanitizer build (test/test_sanitizers.py) runs these under
// ASan + UBSan, which also catches any signed overflow inside the resolvers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "problem.h"

namespace tct {
namespace {

using i128 = __int128;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

std::string str(const Shape& v) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ']';
  return os.str();
}

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  int64_t below(int64_t n) { return static_cast<int64_t>(g() % static_cast<uint64_t>(n)); }
  bool chance(int percent) { return below(100) < percent; }
  // Mostly small, sometimes extreme: 2**e - 1, 2**e, 2**e + 1, near 2**63-1, any
  // magnitude, or negative.
  int64_t any() {
    switch (below(12)) {
      case 0: case 1: case 2: case 3: return below(4);
      case 4: case 5: return below(17);
      case 6: case 7: {
        const int e = static_cast<int>(below(63));
        return (int64_t{1} << e) + below(3) - 1;
      }
      case 8: return kInt64Max - below(3);
      case 9: return static_cast<int64_t>(g() >> (1 + below(63)));
      case 10: return -1 - below(3);
      default: return chance(50) ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << 40);
    }
  }
  // A value that is usually valid for an attribute with lower bound lo.
  int64_t attr(int64_t lo) { return chance(75) ? lo + below(3) : any(); }
  // A size: usually small and positive.
  int64_t size() { return chance(80) ? 1 + below(4) : any(); }
};

// The product of the non-zero sizes, saturated far above kMaxElements.
i128 nonzero_product(const std::vector<i128>& v) {
  i128 n = 1;
  for (i128 x : v) {
    if (x == 0) continue;
    n *= x;
    if (n > (i128{1} << 80)) return i128{1} << 80;
  }
  return n;
}

i128 clamp64(i128 v) {
  return std::max<i128>(std::min<i128>(v, kInt64Max), std::numeric_limits<int64_t>::min());
}

// A random case: logical sizes in NCX/IOX terms turned into shapes in the chosen
// layouts, often nearly valid so that resolution goes deep; then maybe a few entries
// replaced by arbitrary values.
struct Case {
  Attributes a;
  int S = 1;
  Shape src, dst, weights;
  std::optional<Shape> src_shape;  // backward data
};

Shape to_layout_act(const std::vector<int64_t>& ncx, DataFormat f) {
  const int S = static_cast<int>(ncx.size()) - 2;
  const auto dims = activation_dims(f, S);
  Shape out(ncx.size());
  for (size_t j = 0; j < ncx.size(); ++j) out[dims[j]] = ncx[j];
  return out;
}

Shape to_layout_w(const std::vector<int64_t>& iox, WeightsFormat f) {
  const int S = static_cast<int>(iox.size()) - 2;
  const auto dims = weights_dims(f, S);
  Shape out(iox.size());
  for (size_t j = 0; j < iox.size(); ++j) out[dims[j]] = iox[j];
  return out;
}

void perturb(Rng& r, Shape& s) {
  if (r.chance(15)) s[r.below(static_cast<int64_t>(s.size()))] = r.any();
}

Case random_case(Rng& r) {
  Case c;
  const int S = c.S = 1 + static_cast<int>(r.below(3));
  Attributes& a = c.a;
  a.data_format = r.chance(50) ? DataFormat::NCX : DataFormat::NXC;
  a.weights_format = static_cast<WeightsFormat>(r.below(4));
  a.auto_pad = r.chance(50) ? AutoPad::None : static_cast<AutoPad>(r.below(4));
  a.groups = r.chance(85) ? 1 + r.below(3) : r.any();
  for (int j = 0; j < S; ++j) {
    a.strides.push_back(r.attr(1));
    a.dilations.push_back(r.attr(1));
    a.pads_begin.push_back(r.attr(0));
    a.pads_end.push_back(r.attr(0));
  }
  if (r.chance(60))
    for (int j = 0; j < S; ++j) {
      const int64_t limit = std::max(a.strides[j], a.dilations[j]);
      a.output_padding.push_back(r.chance(80) && limit >= 1 ? r.below(limit) : r.any());
    }
  if (r.chance(5)) a.strides.push_back(1);  // a wrong list length now and then
  const i128 G = a.groups;
  const int64_t N = r.chance(10) ? 0 : r.size(), ICg = r.chance(10) ? 0 : r.size(),
                OCg = r.chance(10) ? 0 : r.size();
  std::vector<int64_t> I, K, O;
  for (int j = 0; j < S; ++j) {
    I.push_back(r.size());
    K.push_back(r.size());
    const int64_t op = a.output_padding.empty() ? 0 : a.output_padding[j];
    // The forward size with the given pads (auto_pad may change them: then this is
    // merely nearly consistent).
    const i128 o = i128{a.strides[j]} * (i128{I[j]} - 1) + i128{a.dilations[j]} * (i128{K[j]} - 1) + 1 +
                   op - a.pads_begin[j] - a.pads_end[j];
    O.push_back(static_cast<int64_t>(clamp64(r.chance(80) ? o : i128{r.any()})));
  }
  auto act = [&](int64_t n, i128 ch, const std::vector<int64_t>& sp) {
    std::vector<int64_t> v{n, static_cast<int64_t>(clamp64(ch))};
    v.insert(v.end(), sp.begin(), sp.end());
    return to_layout_act(v, a.data_format);
  };
  c.src = act(N, G * ICg, I);
  c.dst = act(N, G * OCg, O);
  std::vector<int64_t> w{static_cast<int64_t>(clamp64(G * ICg)), OCg};
  w.insert(w.end(), K.begin(), K.end());
  c.weights = to_layout_w(w, a.weights_format);
  if (r.chance(50)) c.src_shape = r.chance(50) ? c.src : Shape(I.begin(), I.end());
  perturb(r, c.src);
  perturb(r, c.dst);
  perturb(r, c.weights);
  if (c.src_shape) perturb(r, *c.src_shape);
  return c;
}

// Every invariant of a resolved problem, recomputed in 128-bit arithmetic.
void check_problem(const ConvProblem& p, const Case& c) {
  const Attributes& a = c.a;
  const int S = c.S;
  ASSERT_EQ(p.spatial_rank, S);
  ASSERT_EQ(p.G, a.groups);
  ASSERT_GE(p.G, 1);
  ASSERT_GE(p.N, 0);
  ASSERT_GE(p.ICg, 0);
  ASSERT_GE(p.OCg, 0);
  const i128 IC = i128{p.G} * p.ICg, OC = i128{p.G} * p.OCg;
  std::vector<i128> src{p.N, IC}, dst{p.N, OC}, w{IC, p.OCg};
  for (int ax = 0; ax < kAxes; ++ax) {
    const bool real = ax >= kAxes - S;
    const int j = ax - (kAxes - S);
    if (!real) {
      ASSERT_EQ(p.I[ax], 1);
      ASSERT_EQ(p.O[ax], 1);
      ASSERT_EQ(p.K[ax], 1);
      ASSERT_EQ(p.s[ax], 1);
      ASSERT_EQ(p.d[ax], 1);
      ASSERT_EQ(p.pb[ax] + p.pe[ax] + p.op[ax], 0);
      continue;
    }
    ASSERT_GE(p.I[ax], 1);
    ASSERT_GE(p.O[ax], 1);
    ASSERT_GE(p.K[ax], 1);
    ASSERT_EQ(p.s[ax], a.strides[j]);
    ASSERT_EQ(p.d[ax], a.dilations[j]);
    ASSERT_GE(p.pb[ax], 0);
    ASSERT_GE(p.pe[ax], 0);
    ASSERT_GE(p.op[ax], 0);
    ASSERT_LT(p.op[ax], std::max(p.s[ax], p.d[ax]));
    const i128 ek = i128{p.d[ax]} * (p.K[ax] - 1) + 1;
    // The forward formula of SPEC section 3 relates I and O in every pass.
    ASSERT_EQ(i128{p.O[ax]}, i128{p.s[ax]} * (p.I[ax] - 1) + ek + p.op[ax] - p.pb[ax] - p.pe[ax]);
    if (a.auto_pad == AutoPad::None) {
      ASSERT_EQ(p.pb[ax], a.pads_begin[j]);
      ASSERT_EQ(p.pe[ax], a.pads_end[j]);
    } else {
      ASSERT_LE(i128{p.pb[ax]} + p.pe[ax], ek);  // auto_pad totals are at most eff_k
    }
    // Index sums o = i*s - pb + k*d over i in [0, I), k in [0, K).
    const i128 lo = -i128{p.pb[ax]};
    const i128 hi = i128{p.s[ax]} * (p.I[ax] - 1) - p.pb[ax] + i128{p.d[ax]} * (p.K[ax] - 1);
    ASSERT_LT(std::max(-lo, hi), kMaxExtent);
    ASSERT_LT(ek + p.pb[ax] + p.pe[ax], kMaxExtent);
    src.push_back(p.I[ax]);
    dst.push_back(p.O[ax]);
    w.push_back(p.K[ax]);
    // tap_src_range: exactly the i whose o lands in [0, O), for the first, middle, last tap.
    for (int64_t k : {int64_t{0}, p.K[ax] / 2, p.K[ax] - 1}) {
      const auto [first, last] = p.tap_src_range(ax, k);
      ASSERT_LE(0, first);
      ASSERT_LE(first, last);
      ASSERT_LE(last, p.I[ax]);
      auto o = [&](i128 i) { return i * p.s[ax] - p.pb[ax] + i128{k} * p.d[ax]; };
      if (first < last) {
        ASSERT_GE(o(first), 0);
        ASSERT_LT(o(last - 1), p.O[ax]);
      }
      if (first > 0 && first < last) {
        ASSERT_LT(o(first - 1), 0);
      }
      if (last < p.I[ax] && first < last) {
        ASSERT_GE(o(last), p.O[ax]);
      }
    }
  }
  // Element counts (zero sizes as 1) within the limit: every product of sizes the
  // kernels form, and byte sizes at 8 bytes per element, fit in int64.
  ASSERT_LE(nonzero_product(src), kMaxElements) << str(c.src);
  ASSERT_LE(nonzero_product(dst), kMaxElements) << str(c.dst);
  ASSERT_LE(nonzero_product(w), kMaxElements) << str(c.weights);
  ASSERT_LE(nonzero_product(dst) * 8, kInt64Max);
  // Only now are the accessors known not to overflow.
  ASSERT_EQ(i128{p.IC()}, IC);
  ASSERT_EQ(i128{p.OC()}, OC);
  ASSERT_EQ(i128{p.src_spatial()}, i128{p.I[0]} * p.I[1] * p.I[2]);
  ASSERT_EQ(i128{p.dst_spatial()}, i128{p.O[0]} * p.O[1] * p.O[2]);
  ASSERT_EQ(i128{p.taps()}, i128{p.K[0]} * p.K[1] * p.K[2]);
}

enum class Pass { Forward, BackwardData, BackwardWeights };

struct Tally {
  int ok = 0, errors = 0, ok_extreme = 0;
};

// Whether a case has a value of at least 2**31 (or negative) anywhere.
bool extreme(const Case& c) {
  auto big = [](const std::vector<int64_t>& v) {
    return std::any_of(v.begin(), v.end(),
                       [](int64_t x) { return x < 0 || x >= (int64_t{1} << 31); });
  };
  return big(c.src) || big(c.dst) || big(c.weights) || big(c.a.strides) ||
         big(c.a.dilations) || big(c.a.pads_begin) || big(c.a.pads_end) ||
         big(c.a.output_padding) || c.a.groups >= (int64_t{1} << 31) || c.a.groups < 0 ||
         (c.src_shape && big(*c.src_shape));
}

Tally fuzz(Pass pass, uint64_t seed, int cases) {
  Rng r(seed);
  Tally t;
  for (int n = 0; n < cases; ++n) {
    const Case c = random_case(r);
    SCOPED_TRACE("case " + std::to_string(n) + ": src " + str(c.src) + " dst " + str(c.dst) +
                 " weights " + str(c.weights) + " strides " + str(c.a.strides) + " dilations " +
                 str(c.a.dilations) + " pads " + str(c.a.pads_begin) + "/" +
                 str(c.a.pads_end) + " output_padding " + str(c.a.output_padding) + " groups " +
                 std::to_string(c.a.groups) + " auto_pad " +
                 std::to_string(static_cast<int>(c.a.auto_pad)));
    try {
      ConvProblem p;
      if (pass == Pass::Forward) {
        p = resolve_forward(c.src, c.weights, std::nullopt, c.a);
        EXPECT_EQ(src_shape(p, c.a.data_format), c.src);
      } else if (pass == Pass::BackwardData) {
        p = resolve_backward_data(c.dst, c.weights, c.src_shape, c.a);
        EXPECT_EQ(dst_shape(p, c.a.data_format), c.dst);
        if (c.src_shape && c.src_shape->size() == c.src.size()) {
          EXPECT_EQ(src_shape(p, c.a.data_format), *c.src_shape);
        }
      } else {
        p = resolve_backward_weights(c.src, c.dst, c.weights, c.a);
        EXPECT_EQ(src_shape(p, c.a.data_format), c.src);
        EXPECT_EQ(dst_shape(p, c.a.data_format), c.dst);
      }
      check_problem(p, c);
      EXPECT_EQ(weights_shape(p, c.a.weights_format), c.weights);
      if (::testing::Test::HasFailure()) return t;  // one reported case is enough
      ++t.ok;
      if (extreme(c)) ++t.ok_extreme;
    } catch (const ProblemError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("conv_transpose: ", 0), 0u) << msg;
      ++t.errors;
    }
  }
  return t;
}

// The fuzz must reach valid problems, extreme ones included, and errors alike.
void expect_coverage(const Tally& t, int cases) {
  std::printf("%d valid problems (%d with extreme values), %d errors\n", t.ok, t.ok_extreme,
              t.errors);
  EXPECT_GT(t.ok, cases / 40) << "valid problems: " << t.ok << ", errors: " << t.errors;
  EXPECT_GT(t.ok_extreme, cases / 400) << "valid problems with extreme values";
  EXPECT_GT(t.errors, cases / 10);
}

constexpr int kCases = 20000;

TEST(ResolverFuzz, Forward) { expect_coverage(fuzz(Pass::Forward, 0x5eed01, kCases), kCases); }
TEST(ResolverFuzz, BackwardData) {
  expect_coverage(fuzz(Pass::BackwardData, 0x5eed02, kCases), kCases);
}
TEST(ResolverFuzz, BackwardWeights) {
  expect_coverage(fuzz(Pass::BackwardWeights, 0x5eed03, kCases), kCases);
}

}  // namespace
}  // namespace tct
