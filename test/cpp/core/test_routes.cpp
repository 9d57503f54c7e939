// The call plans and their routes (kernels/plan.h), torch-free: plans are
// built for any ISA without running anything, and executing one on integer
// data (exact sums) gives the reference's values on every route: channels-last
// views and transposes, NCX planar, batch chunks, slabs, backward-weights
// pieces, the strided 1x1 forms, on every ISA this CPU has.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/plan.h"
#include "problem.h"

namespace tct {
namespace {

constexpr Isa kFastIsas[] = {Isa::Avx512, Isa::Avx2};  // (each where the CPU has it)

// Buffers from std::vector: the per-thread slots (one thread calls) and the temporaries.
class VectorWorkspace final : public Workspace {
 public:
  float* buffer(WorkspaceSlot slot, int64_t n) override {
    if (static_cast<int64_t>(slots_[slot].size()) < n) slots_[slot].assign(n, 0.f);
    return slots_[slot].data();
  }
  float* acquire(int64_t n) override {
    temporaries_.emplace_back(static_cast<size_t>(n));
    return temporaries_.back().data();
  }
  void release(float*) override { ++released_; }
  size_t acquired() const { return temporaries_.size(); }
  size_t released() const { return released_; }

 private:
  std::vector<float> slots_[kSlots];
  std::vector<std::vector<float>> temporaries_;
  size_t released_ = 0;
};

// The problem of a forward call on dense NCX src (N, IC, I...) and IOX weights
// (IC, OC, K...), torch-style pads on both sides: resolved as the ops resolve it.
ConvProblem make(int64_t N, int64_t IC, int64_t OC, std::vector<int64_t> I,
                 std::vector<int64_t> K, std::vector<int64_t> s, std::vector<int64_t> pad,
                 std::vector<int64_t> op = {}) {
  const Attributes attrs = make_attributes(s, pad, pad, std::vector<int64_t>(I.size(), 1), "None",
                                           op, 1, "NCX", "IOX");
  Shape src{N, IC}, weights{IC, OC};
  src.insert(src.end(), I.begin(), I.end());
  weights.insert(weights.end(), K.begin(), K.end());
  return resolve_forward(src, weights, std::nullopt, attrs);
}

// A dense activation of n images, c channels and the given spatial sizes, in
// NCX or channels-last order, seen in logical order.
ActView view(float* data, int64_t c, const std::array<int64_t, kAxes>& sp, bool nxc) {
  const int64_t plane = sp[0] * sp[1] * sp[2];
  if (!nxc) return ActView{data, c * plane, plane, {sp[1] * sp[2], sp[2], 1}};
  return ActView{data, c * plane, 1, {sp[1] * sp[2] * c, sp[2] * c, c}};
}

std::vector<float> ints(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-2, 2);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(dist(rng));
  return v;
}

// Runs pass `pass` of p through its plan and through the reference; returns
// the plan's line. Layout: dense NXC or dense NCX, both activations.
std::string check_pass(Isa isa, NcxPath path, Pass pass, const ConvProblem& p, bool nxc) {
  const int64_t src_n = p.N * p.IC() * p.src_spatial(), dst_n = p.N * p.OC() * p.dst_spatial();
  const int64_t w_n = p.IC() * p.OCg * p.taps();
  std::vector<float> src = ints(src_n, 1), dst = ints(dst_n, 2), w = ints(w_n, 3),
                     bias = ints(p.OC(), 4);
  const WeightsView wv{w.data(), p.OCg * p.taps(), p.taps(), {p.K[1] * p.K[2], p.K[2], 1}};
  CallSpec s;
  s.pass = pass;
  s.p = p;
  s.isa = isa;
  s.ncx_path = path;
  s.nthreads = 2;
  s.a = s.b = ActLayout{nxc, !nxc};  // (every problem here has channels and pixels > 1)
  const CallPlan plan = make_call_plan(s);
  const std::string line = describe(plan);
  SCOPED_TRACE(line);
  VectorWorkspace ws;
  CallArgs args, ref;
  const int64_t out_n = pass == Pass::Forward ? dst_n : pass == Pass::BackwardData ? src_n : w_n;
  std::vector<float> got(out_n, -7.f), want(out_n, 7.f);
  float* in = pass == Pass::BackwardData ? dst.data() : src.data();
  const int64_t in_c = pass == Pass::BackwardData ? p.OC() : p.IC();
  const auto& in_sp = pass == Pass::BackwardData ? p.O : p.I;
  args.a = ref.a = view(in, in_c, in_sp, nxc);
  if (pass == Pass::BackwardWeights) {
    args.b = ref.b = view(dst.data(), p.OC(), p.O, nxc);
    args.w = ref.w = wv;
    args.w.data = got.data();
    ref.w.data = want.data();
  } else {
    const bool fwd = pass == Pass::Forward;
    args.w = ref.w = wv;
    args.bias = ref.bias = fwd ? bias.data() : nullptr;
    args.b = view(got.data(), fwd ? p.OC() : p.IC(), fwd ? p.O : p.I, nxc);
    ref.b = view(want.data(), fwd ? p.OC() : p.IC(), fwd ? p.O : p.I, nxc);
  }
  execute(plan, args, ws);
  CallPlan reference = plan;
  reference.step.route = Route::Reference;
  execute(reference, ref, ws);
  EXPECT_EQ(ws.acquired(), ws.released());
  for (int64_t i = 0; i < out_n; ++i) {
    EXPECT_EQ(got[i], want[i]) << "at " << i;
    if (got[i] != want[i]) break;
  }
  return line;
}

// Every pass, both layouts and every NCX path; the routes named must all be taken.
void check_routes(const ConvProblem& p, const std::vector<std::string>& routes) {
  for (Isa isa : kFastIsas) {
    if (!isa_supported(isa)) continue;
    std::string lines;
    for (Pass pass : {Pass::Forward, Pass::BackwardData, Pass::BackwardWeights})
      for (bool nxc : {false, true})
        for (NcxPath path : {NcxPath::Auto, NcxPath::Planar, NcxPath::ChannelsLast}) {
          if (nxc && path != NcxPath::Auto) continue;
          lines += check_pass(isa, path, pass, p, nxc) + "\n";
        }
    for (const std::string& r : routes) EXPECT_NE(lines.find(r), std::string::npos) << r;
  }
}

TEST(Routes, SmallLayersChunksPlanarAndViews) {
  check_routes(make(3, 12, 8, {7, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 0}),
               {"route=ncx_chunks", "route=ncx_planar", "route=nxc to_nxc=view,view",
                "route=nxc to_nxc=transpose,transpose"});
}

TEST(Routes, LongLinesGoInSlabsAndPieces) {
  check_routes(make(1, 2, 2, {1 << 19}, {3}, {1}, {1}),
               {"route=ncx_slabs", "route=ncx_pieces", "driver_last={"});
}

TEST(Routes, Strided1x1Forms) {
  // The forward in batch chunks of a tenth, computed at src's resolution and expanded.
  check_routes(make(11, 8, 8, {4, 4}, {1, 1}, {2, 2}, {0, 0}, {1, 1}), {"s1x1=expand", "last={"});
  // The backward passes on 2**19 floats of diff_dst and more: gathered.
  check_routes(make(2, 4, 16, {64, 64}, {1, 1}, {2, 2}, {0, 0}, {1, 1}), {"s1x1=gather "});
}

TEST(Routes, BackwardWeightsGathersInChunks) {
  // The gathered diff_dst beyond the allowance: batch chunks (the last smaller).
  const ConvProblem p = make(26, 4, 16, {64, 64}, {1, 1}, {2, 2}, {0, 0});
  for (Isa isa : kFastIsas) {
    if (!isa_supported(isa)) continue;
    EXPECT_NE(check_pass(isa, NcxPath::Auto, Pass::BackwardWeights, p, false)
                  .find("s1x1=gather_chunks"),
              std::string::npos);
  }
}

// Plans need no CPU support: every ISA's, on any machine.
TEST(Plans, AreBuiltForAnyIsaWithoutRunning) {
  CallSpec s;
  s.p = make(2, 64, 32, {8, 8}, {4, 4}, {2, 2}, {1, 1});
  s.a = s.b = ActLayout{false, true};
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    s.isa = isa;
    for (Pass pass : {Pass::Forward, Pass::BackwardData, Pass::BackwardWeights}) {
      s.pass = pass;
      const std::string line = describe(make_call_plan(s));
      EXPECT_EQ(line.find("pass="), 0u) << line;
      EXPECT_NE(line.find(std::string("isa=") + isa_name(isa)), std::string::npos) << line;
      EXPECT_EQ(line.find("route=reference"), std::string::npos) << line;
    }
  }
  s.isa = Isa::Reference;
  EXPECT_EQ(make_call_plan(s).step.route, Route::Reference);
  s.isa = Isa::Avx2;
  s.dtype = DType::BF16;  // through f32 chunks, each with its own f32 plan
  const CallPlan c16 = make_call_plan(s);
  EXPECT_EQ(c16.step.route, Route::Convert16);
  ASSERT_TRUE(c16.convert.full);
  EXPECT_EQ(c16.convert.full->spec.dtype, DType::F32);
  EXPECT_EQ(c16.convert.images * (c16.convert.chunks - 1) < s.p.N, true);
  s.dtype = DType::F64;
  EXPECT_EQ(make_call_plan(s).step.route, Route::Reference);
  s.dtype = DType::F32;
  s.p.N = 0;  // an empty result; backward-weights still writes its zeros
  s.pass = Pass::Forward;
  EXPECT_EQ(make_call_plan(s).step.route, Route::None);
  s.pass = Pass::BackwardWeights;
  EXPECT_NE(make_call_plan(s).step.route, Route::None);
}

// Backward-weights routes (chunks of the reduction, pieces) depend on the
// problem alone: the same bits for any thread count.
TEST(Plans, BackwardWeightsRoutesIgnoreThreads) {
  CallSpec s;
  s.pass = Pass::BackwardWeights;
  s.isa = Isa::Avx512;
  s.ncx_path = NcxPath::ChannelsLast;
  s.a = s.b = ActLayout{false, true};
  for (const ConvProblem& p : {make(1, 2, 2, {1 << 21}, {3}, {1}, {1}),
                               make(40, 16, 16, {40, 40}, {3, 3}, {1, 1}, {1, 1})}) {
    s.p = p;
    s.nthreads = 1;
    const CallPlan one = make_call_plan(s);
    EXPECT_EQ(one.step.route, Route::NcxPieces);
    for (int nt : {2, 4, 16}) {
      s.nthreads = nt;
      const CallPlan many = make_call_plan(s);
      EXPECT_EQ(many.step.route, one.step.route);
      EXPECT_EQ(many.step.images, one.step.images);
      EXPECT_EQ(many.step.rows, one.step.rows);
      EXPECT_EQ(many.step.count, one.step.count);
    }
  }
}

}  // namespace
}  // namespace tct
