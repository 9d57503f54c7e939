// Benchmark mode (kernels/tune.h), torch-free: the candidates of a call spec,
// the pick among them with made-up timings (the measure function is the
// caller's, so the pick is tested without timing anything), the cache (a
// cached spec is never timed again) and the cache file.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/plan.h"
#include "kernels/tune.h"
#include "problem.h"

namespace tct {
namespace {

// A forward on dense NCX tensors: 64 -> 64 channels, k4 s2 p1, 2 images of 16x16.
CallSpec ncx_spec(Isa isa) {
  const Attributes attrs =
      make_attributes({2, 2}, {1, 1}, {1, 1}, {1, 1}, "None", {}, 1, "NCX", "IOX");
  CallSpec s;
  s.pass = Pass::Forward;
  s.dtype = DType::F32;
  s.p = resolve_forward({2, 64, 16, 16}, {64, 64, 4, 4}, std::nullopt, attrs);
  s.a = {false, true};
  s.b = {false, true};
  s.isa = isa;
  s.ncx_path = NcxPath::Auto;
  s.nthreads = 1;
  return s;
}

std::vector<std::string> labels(const std::vector<CallSpec>& specs) {
  std::vector<std::string> out;
  for (const CallSpec& s : specs)
    out.push_back(std::string(isa_name(s.bf16 != Isa::Reference ? s.bf16 : s.isa)) + "/" +
                  ncx_path_name(s.ncx_path));
  return out;
}

TEST(Tune, CandidatesFollowTheSpec) {
  using V = std::vector<std::string>;
  CallSpec s = ncx_spec(Isa::Avx512);
  EXPECT_EQ(labels(tuning_candidates(s)),
            (V{"avx512/auto", "avx512/planar", "avx512/channels_last", "avx2/auto",
               "avx2/planar", "avx2/channels_last"}));
  // The bf16 tiles (AMX, VDPBF16PS) change bf16 only.
  for (Isa top : {Isa::Avx512Bf16, Isa::Avx512Amx}) {
    s = ncx_spec(top);
    EXPECT_EQ(labels(tuning_candidates(s))[0], "avx512/auto");
    EXPECT_EQ(tuning_candidates(s).size(), 6u);
  }
  s.dtype = DType::BF16;
  // (VDPBF16PS a candidate on AMD cores only: elsewhere its plan is avx512's)
  EXPECT_EQ(tuning_candidates(s).size(), 9u);
  s.amd = true;
  EXPECT_EQ(labels(tuning_candidates(s)),
            (V{"avx512_amx/auto", "avx512_amx/planar", "avx512_amx/channels_last",
               "avx512_bf16/auto", "avx512_bf16/planar", "avx512_bf16/channels_last",
               "avx512/auto", "avx512/planar", "avx512/channels_last", "avx2/auto",
               "avx2/planar", "avx2/channels_last"}));
  s.isa = Isa::Avx512Bf16;
  EXPECT_EQ(labels(tuning_candidates(s)),
            (V{"avx512_bf16/auto", "avx512_bf16/planar", "avx512_bf16/channels_last",
               "avx512/auto", "avx512/planar", "avx512/channels_last", "avx2/auto",
               "avx2/planar", "avx2/channels_last"}));
  // A forced NCX path, a lower ISA, channels-last tensors: fewer candidates.
  s = ncx_spec(Isa::Avx2);
  s.ncx_path = NcxPath::Planar;
  EXPECT_EQ(labels(tuning_candidates(s)), (V{"avx2/planar"}));
  s.ncx_path = NcxPath::Auto;
  s.a = s.b = {true, false};
  EXPECT_EQ(labels(tuning_candidates(s)), (V{"avx2/auto"}));
  s.isa = Isa::Reference;
  EXPECT_EQ(labels(tuning_candidates(s)), (V{"reference/auto"}));
}

// Small problems also try fewer threads: half and one, each ISA and path.
TEST(Tune, SmallProblemsTryFewerThreads) {
  const Attributes attrs =
      make_attributes({2, 2}, {1, 1}, {1, 1}, {1, 1}, "None", {}, 1, "NCX", "IOX");
  CallSpec s = ncx_spec(Isa::Avx2);
  s.nthreads = 8;
  EXPECT_EQ(tuning_candidates(s).size(), 3u);  // (33M multiply-adds: threads kept)
  s.p = resolve_forward({1, 8, 6, 6}, {8, 8, 4, 4}, std::nullopt, attrs);
  ASSERT_LT(s.p.macs(), kFewThreadsMacs);
  const std::vector<CallSpec> c = tuning_candidates(s);
  ASSERT_EQ(c.size(), 9u);
  for (size_t i = 0; i < c.size(); ++i)
    EXPECT_EQ(c[i].nthreads, i < 3 ? 8 : i < 6 ? 4 : 1) << i;
  s.nthreads = 2;
  EXPECT_EQ(tuning_candidates(s).size(), 6u);  // 2 and 1
  s.nthreads = 1;
  EXPECT_EQ(tuning_candidates(s).size(), 3u);
}

// Made-up seconds per route of the candidate plan.
struct FakeTimer {
  std::map<Route, double> seconds;
  int calls = 0;
  double operator()(const CallPlan& plan) {
    ++calls;
    return seconds.at(plan.step.route);
  }
};

class TuneCache : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!isa_supported(Isa::Avx2)) GTEST_SKIP() << "needs AVX2";
    clear_tuning_cache();
    set_tuning_file("");
  }
  void TearDown() override {
    clear_tuning_cache();
    set_tuning_file("");
  }
};

TEST_F(TuneCache, PicksTheFastestAndCachesIt) {
  const CallSpec s = ncx_spec(Isa::Avx2);
  const Route by_default = make_call_plan(s).step.route;
  const Route other = by_default == Route::NcxPlanar ? Route::NcxChunks : Route::NcxPlanar;
  FakeTimer timer{{{by_default, 2e-3}, {other, 1e-3}}};
  auto measure = [&](const CallPlan& p) { return timer(p); };
  bool timed = false;
  const CallPlan first = tuned_call_plan(s, "weights=IOX", measure, &timed);
  EXPECT_TRUE(timed);
  EXPECT_EQ(first.step.route, other);
  // Two distinct plans (auto equals one of the paths): a warm-up and >= 2 rounds each.
  EXPECT_GE(timer.calls, 6);
  EXPECT_EQ(timer.calls % 2, 0);
  const int calls = timer.calls;
  const CallPlan again = tuned_call_plan(s, "weights=IOX", measure, &timed);
  EXPECT_FALSE(timed);
  EXPECT_EQ(timer.calls, calls);
  EXPECT_EQ(again.step.route, other);
  EXPECT_EQ(describe(again), describe(first));
  EXPECT_EQ(cached_call_plan(s, "weights=IOX").step.route, other);
  // Another key (weights format) is another entry.
  EXPECT_EQ(cached_call_plan(s, "weights=XOI").step.route, by_default);
  const std::vector<TuningEntry> entries = tuning_entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].key, tuning_key(s, "weights=IOX"));
  ASSERT_EQ(entries[0].candidates.size(), 2u);
  EXPECT_EQ(entries[0].candidates[0].label, "isa=avx2 ncx_path=auto threads=1");
  EXPECT_DOUBLE_EQ(entries[0].candidates[0].seconds, 2e-3);
  EXPECT_DOUBLE_EQ(entries[0].candidates[entries[0].chosen].seconds, 1e-3);
}

TEST_F(TuneCache, KeepsTheDefaultWithinTheMargin) {
  const CallSpec s = ncx_spec(Isa::Avx2);
  const Route by_default = make_call_plan(s).step.route;
  const Route other = by_default == Route::NcxPlanar ? Route::NcxChunks : Route::NcxPlanar;
  FakeTimer timer{{{by_default, 1e-3}, {other, 1e-3 * (1 - kTuningMargin / 2)}}};
  const CallPlan plan = tuned_call_plan(s, "", [&](const CallPlan& p) { return timer(p); });
  EXPECT_EQ(plan.step.route, by_default);
  EXPECT_EQ(tuning_entries()[0].chosen, 0);
}

TEST_F(TuneCache, FileRoundTrip) {
  const CallSpec s = ncx_spec(Isa::Avx2);
  const Route by_default = make_call_plan(s).step.route;
  const Route other = by_default == Route::NcxPlanar ? Route::NcxChunks : Route::NcxPlanar;
  const std::string path = ::testing::TempDir() + "tct_tune_cache.txt";
  std::remove(path.c_str());
  set_tuning_file(path);  // (missing: an empty cache; entries are appended)
  FakeTimer timer{{{by_default, 3e-3}, {other, 1e-3}}};
  tuned_call_plan(s, "weights=IOX", [&](const CallPlan& p) { return timer(p); });
  set_tuning_file("");
  clear_tuning_cache();
  EXPECT_EQ(cached_call_plan(s, "weights=IOX").step.route, by_default);
  set_tuning_file(path);  // loads the choice: no timing
  bool timed = true;
  const CallPlan plan =
      tuned_call_plan(s, "weights=IOX", [&](const CallPlan& p) { return timer(p); }, &timed);
  EXPECT_FALSE(timed);
  EXPECT_EQ(plan.step.route, other);
  ASSERT_EQ(tuning_entries().size(), 1u);
  EXPECT_TRUE(tuning_entries()[0].from_file);
  // save_tuning_cache writes the same line.
  const std::string saved = path + ".saved";
  save_tuning_cache(saved);
  std::ifstream a(path), b(saved);
  std::string la, lb;
  std::getline(a, la);
  std::getline(b, lb);
  EXPECT_EQ(la, lb);
  EXPECT_EQ(la.substr(0, la.find('\t')), tuning_key(s, "weights=IOX"));
  std::remove(path.c_str());
  std::remove(saved.c_str());
}

TEST_F(TuneCache, MalformedFileNamesTheLine) {
  const std::string path = ::testing::TempDir() + "tct_tune_bad.txt";
  {
    std::ofstream out(path);
    out << "# comment\nno tab here\n";
  }
  try {
    set_tuning_file(path);
    FAIL() << "expected ProblemError";
  } catch (const ProblemError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

// A choice from a file naming an ISA this CPU lacks, or a label no candidate
// has, falls back to the default plan.
TEST_F(TuneCache, UnknownChoiceFallsBackToTheDefault) {
  const CallSpec s = ncx_spec(Isa::Avx2);
  const std::string path = ::testing::TempDir() + "tct_tune_unknown.txt";
  {
    std::ofstream out(path);
    out << tuning_key(s, "") << "\tisa=avx512 ncx_path=planar threads=1\n";
  }
  set_tuning_file(path);
  EXPECT_EQ(describe(cached_call_plan(s, "")), describe(make_call_plan(s)));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tct
