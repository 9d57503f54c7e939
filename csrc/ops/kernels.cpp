// CPU and Meta kernels of the graph:: ops: attributes and tensors -> resolved
// problem (problem.h) -> the call's plan (kernels/plan.h: routes, layout
// changes, kernels) -> its execution over raw views of the tensors.
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../kernels/dispatch.h"
#include "../kernels/kernels.h"
#include "../kernels/plan.h"
#include "../kernels/tune.h"
#include "../problem.h"
#include "common.h"
#include "ops.h"

namespace tct {
namespace ops {
namespace {

DType dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::F32;
    case at::kDouble: return DType::F64;
    case at::kBFloat16: return DType::BF16;
    case at::kHalf: return DType::F16;
    default: break;
  }
  TORCH_CHECK(false, "unreachable dtype");
}

ActView act_view(const Tensor& t, DataFormat f, int S) {
  auto dims = activation_dims(f, S);
  ActView v{t.data_ptr(), t.stride(dims[0]), t.stride(dims[1]), {0, 0, 0}};
  for (int i = 0; i < S; ++i) v.sx[kAxes - S + i] = t.stride(dims[2 + i]);
  return v;
}

WeightsView weights_view(const Tensor& t, WeightsFormat f, int S) {
  auto dims = weights_dims(f, S);
  WeightsView v{t.data_ptr(), t.stride(dims[0]), t.stride(dims[1]), {0, 0, 0}};
  for (int i = 0; i < S; ++i) v.sk[kAxes - S + i] = t.stride(dims[2 + i]);
  return v;
}

// The buffers of a call's plan from ATen's allocator: per-thread buffers kept
// for later calls (slots keep the buffers of one call apart), and buffers of
// this call only.
class AtenWorkspace final : public Workspace {
 public:
  float* buffer(WorkspaceSlot slot, int64_t n) override {
    // ATen's CPU allocator aligns to 64 bytes, so channels-last rows of 16
    // floats are whole cache lines (a std::vector's 16-byte alignment splits
    // every 64-byte vector store across two lines).
    thread_local Tensor buffers[kSlots];
    Tensor& buf = buffers[slot];
    if (!buf.defined() || buf.numel() < n) {
      buf = Tensor();  // free first: never hold the old and new buffers at once
      buf = at::empty({n}, at::TensorOptions().dtype(at::kFloat));
    }
    return buf.data_ptr<float>();
  }
  float* acquire(int64_t n) override {
    temporaries_.push_back(at::empty({n}, at::TensorOptions().dtype(at::kFloat)));
    return temporaries_.back().data_ptr<float>();
  }
  void release(float* data) override {
    for (auto t = temporaries_.rbegin(); t != temporaries_.rend(); ++t)
      if (t->data_ptr<float>() == data) {
        temporaries_.erase(std::next(t).base());
        return;
      }
  }

 private:
  std::vector<Tensor> temporaries_;
};

// Dims of the channels-last order (N, X..., C) in the tensor's layout.
std::vector<int64_t> nxc_order(DataFormat f, int S) {
  auto dims = activation_dims(f, S);
  std::vector<int64_t> perm{dims[0]};
  for (int i = 0; i < S; ++i) perm.push_back(dims[2 + i]);
  perm.push_back(dims[1]);
  return perm;
}

// Whether t's dims, taken in `order`, are contiguous: ATen's is_contiguous
// rule (sizes of 1 are skipped, an empty tensor is contiguous) without a view.
bool contiguous_in(const Tensor& t, const std::vector<int64_t>& order) {
  if (t.numel() == 0) return true;
  int64_t expected = 1;
  for (auto d = order.rbegin(); d != order.rend(); ++d) {
    const int64_t size = t.size(*d);
    if (size == 1) continue;
    if (t.stride(*d) != expected) return false;
    expected *= size;
  }
  return true;
}

// Dense channels-last (N, X..., C), and dense NCX: a tensor seen as (N, C,
// pixels), the case the fast transpose serves (ATen's permute-copy is several
// times slower for it) and the 16-bit routes widen in batch chunks.
ActLayout layout_of(const Tensor& t, DataFormat f) {
  const auto dt = t.scalar_type();
  const bool ncx = f == DataFormat::NCX && t.is_contiguous() &&
                   (dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf);
  return {contiguous_in(t, nxc_order(f, static_cast<int>(t.dim()) - 2)), ncx};
}

// The inputs of a call's plan: the ISA, the NCX path setting and the thread
// count are read here, once per call.
CallSpec call_spec(Pass pass, const ConvProblem& p, const Tensor& a, const Tensor& b,
                   DataFormat f, WeightsFormat wf) {
  CallSpec s;
  s.weights = wf;
  s.pass = pass;
  s.dtype = dtype_of(a.scalar_type());
  s.p = p;
  s.a = layout_of(a, f);
  s.b = layout_of(b, f);
  s.isa = active_isa();
  s.amd = avx512_amd();
  s.ncx_path = ncx_path();
  s.nthreads = at::get_num_threads();
  return s;
}

// The view of activation t that a call hands down: t itself, or where the
// plan reads it channels-last but t has other strides (copy), ATen's dense
// channels-last copy of it (kept alive in *keep).
ActView activation(const Tensor& t, DataFormat f, bool copy, Tensor* keep) {
  const int S = static_cast<int>(t.dim()) - 2;
  if (!copy) return act_view(t, f, S);
  *keep = t.permute(nxc_order(f, S)).contiguous();
  return act_view(*keep, DataFormat::NXC, S);
}

// torch_convtranspose.plans(): the frames open now, each collecting the plan
// lines of the calls made while it is open (process-wide).
struct PlanFrame {
  bool execute;
  std::vector<std::string> lines;
};
std::mutex g_plan_mutex;
std::vector<PlanFrame> g_plan_frames;
std::atomic<int> g_plan_depth{0};

bool verbose() {
  static const bool on = [] {
    const char* v = std::getenv("TORCH_CONVTRANSPOSE_VERBOSE");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }();
  return on;
}

// Prints the plan (TORCH_CONVTRANSPOSE_VERBOSE=1) and records it (plans());
// false: a dry run, the call returns its result uninitialized.
bool observe(const CallPlan& plan) {
  const bool print = verbose();
  if (!print && g_plan_depth.load(std::memory_order_acquire) == 0) return true;
  const std::string line = describe(plan);
  if (print) std::fprintf(stderr, "torch_convtranspose plan: %s\n", line.c_str());
  std::lock_guard<std::mutex> lock(g_plan_mutex);
  bool execute = true;
  for (PlanFrame& frame : g_plan_frames) {
    frame.lines.push_back(line);
    execute = execute && frame.execute;
  }
  return execute;
}

// Whether an open plans(execute=False) frame makes this call a dry run.
bool dry_run() {
  if (g_plan_depth.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(g_plan_mutex);
  for (const PlanFrame& frame : g_plan_frames)
    if (!frame.execute) return true;
  return false;
}

// The plan of a call: the default one, or in benchmark mode (tune.h) the
// fastest candidate for its spec, timed on this call's tensors the first
// time (run: executes a plan on them; the caller runs the chosen plan after).
CallPlan call_plan(const CallSpec& spec, const std::function<void(const CallPlan&)>& run) {
  if (!benchmark_enabled()) return make_call_plan(spec);
  // The weights' layout is part of every tuning key: backward-weights'
  // spec names it already (describe_spec), the other passes add it here.
  const std::string extra = spec.pass == Pass::BackwardWeights
                                ? std::string()
                                : std::string("weights=") + to_string(spec.weights);
  if (dry_run()) return cached_call_plan(spec, extra);
  bool timed = false;
  CallPlan plan = tuned_call_plan(
      spec, extra,
      [&](const CallPlan& candidate) {
        const auto t0 = std::chrono::steady_clock::now();
        run(candidate);
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      },
      &timed);
  if (timed && verbose()) {
    for (const TuningEntry& e : tuning_entries()) {
      if (e.key != tuning_key(spec, extra)) continue;
      for (size_t i = 0; i < e.candidates.size(); ++i)
        std::fprintf(stderr, "torch_convtranspose benchmark: %s %.3f ms%s [%s]\n",
                     e.candidates[i].label.c_str(), e.candidates[i].seconds * 1e3,
                     static_cast<int>(i) == e.chosen ? " (chosen)" : "", e.key.c_str());
    }
  }
  return plan;
}

}  // namespace

// ------------------------------------------------------------------ plans

void plans_begin(bool execute) {
  std::lock_guard<std::mutex> lock(g_plan_mutex);
  g_plan_frames.push_back({execute, {}});
  g_plan_depth.fetch_add(1, std::memory_order_release);
}

std::vector<std::string> plans_end() {
  std::lock_guard<std::mutex> lock(g_plan_mutex);
  TORCH_CHECK(!g_plan_frames.empty(), "plans_end: no plans_begin to close");
  std::vector<std::string> lines = std::move(g_plan_frames.back().lines);
  g_plan_frames.pop_back();
  g_plan_depth.fetch_sub(1, std::memory_order_release);
  return lines;
}

// ---------------------------------------------------------------- forward

Tensor conv_transpose_cpu(TCT_CONV_TRANSPOSE_ARGS) {
  auto plan = plan_forward(src, weights, bias, strides, pads_begin, pads_end, dilations, auto_pad,
                           output_padding, groups, data_format, weights_format);
  const ConvProblem& p = plan.p;
  const DataFormat df = plan.attrs.data_format;
  const int S = p.spatial_rank;
  Tensor dst = at::empty(dst_shape(p, df), src.options());
  const Tensor b = bias ? bias->contiguous() : Tensor();
  auto run = [&](const CallPlan& call) {
    Tensor src_copy;
    CallArgs args;
    args.a = activation(src, df, call.copy_a, &src_copy);
    args.b = act_view(dst, df, S);
    args.w = weights_view(weights, plan.attrs.weights_format, S);
    args.bias = b.defined() ? b.data_ptr() : nullptr;
    AtenWorkspace ws;
    execute(call, args, ws);
  };
  const CallPlan call =
      call_plan(call_spec(Pass::Forward, p, src, dst, df, plan.attrs.weights_format), run);
  if (observe(call)) run(call);
  return dst;
}

Tensor conv_transpose_meta(TCT_CONV_TRANSPOSE_ARGS) {
  auto plan = plan_forward(src, weights, bias, strides, pads_begin, pads_end, dilations, auto_pad,
                           output_padding, groups, data_format, weights_format);
  return at::empty_symint(plan.result_shape, src.options());
}

// ---------------------------------------------------------- backward data

Tensor backward_data_cpu(TCT_BACKWARD_DATA_ARGS) {
  auto plan = plan_backward_data(diff_dst, weights, strides, pads_begin, pads_end, dilations,
                                 auto_pad, output_padding, groups, data_format, weights_format,
                                 src_shape);
  const ConvProblem& p = plan.p;
  const DataFormat df = plan.attrs.data_format;
  const int S = p.spatial_rank;
  Tensor diff_src = at::empty(tct::src_shape(p, df), diff_dst.options());
  auto run = [&](const CallPlan& call) {
    Tensor dy_copy;
    CallArgs args;
    args.a = activation(diff_dst, df, call.copy_a, &dy_copy);
    args.b = act_view(diff_src, df, S);
    args.w = weights_view(weights, plan.attrs.weights_format, S);
    AtenWorkspace ws;
    execute(call, args, ws);
  };
  const CallPlan call = call_plan(
      call_spec(Pass::BackwardData, p, diff_dst, diff_src, df, plan.attrs.weights_format), run);
  if (observe(call)) run(call);
  return diff_src;
}

Tensor backward_data_meta(TCT_BACKWARD_DATA_ARGS) {
  auto plan = plan_backward_data(diff_dst, weights, strides, pads_begin, pads_end, dilations,
                                 auto_pad, output_padding, groups, data_format, weights_format,
                                 src_shape);
  return at::empty_symint(plan.result_shape, diff_dst.options());
}

Tensor backprop_data(const Tensor& output_delta, const Tensor& filter, IntArrayRef strides,
                     IntArrayRef pads_begin, IntArrayRef pads_end, IntArrayRef dilations,
                     string_view auto_pad, IntArrayRef output_padding, int64_t groups,
                     string_view data_format, string_view filter_format,
                     at::OptionalSymIntArrayRef src_shape) {
  // Validate filter_format here so that its error names the argument.
  checked([&] { return parse_weights_format(std::string(filter_format), "filter_format"); });
  try {
    return call_backward_data(output_delta, filter, strides, pads_begin, pads_end, dilations,
                              auto_pad, output_padding, groups, data_format, filter_format,
                              src_shape);
  } catch (const c10::Error& e) {
    // Name this op's arguments: its errors come from conv_transpose_backward_data.
    TORCH_CHECK(false, "conv_transpose_backprop_data (output_delta is diff_dst, filter is "
                "weights, filter_format is weights_format): ", e.what_without_backtrace());
  }
}

// ------------------------------------------------------- backward weights

Tensor backward_weights_cpu(TCT_BACKWARD_WEIGHTS_ARGS) {
  auto plan = plan_backward_weights(src, diff_dst, weights_shape_input, strides, pads_begin,
                                    pads_end, dilations, auto_pad, output_padding, groups,
                                    data_format, weights_format, weights_shape);
  const ConvProblem& p = plan.p;
  const DataFormat df = plan.attrs.data_format;
  const int S = p.spatial_rank;
  // Dense in weights_format: the plan's gradient copies are added to it element by element.
  Tensor diff_w = at::empty(tct::weights_shape(p, plan.attrs.weights_format), src.options());
  auto run = [&](const CallPlan& call) {
    Tensor src_copy, dy_copy;
    CallArgs args;
    args.a = activation(src, df, call.copy_a, &src_copy);
    args.b = activation(diff_dst, df, call.copy_b, &dy_copy);
    args.w = weights_view(diff_w, plan.attrs.weights_format, S);
    AtenWorkspace ws;
    execute(call, args, ws);
  };
  const CallPlan call = call_plan(
      call_spec(Pass::BackwardWeights, p, src, diff_dst, df, plan.attrs.weights_format), run);
  if (observe(call)) run(call);
  return diff_w;
}

Tensor backward_weights_meta(TCT_BACKWARD_WEIGHTS_ARGS) {
  auto plan = plan_backward_weights(src, diff_dst, weights_shape_input, strides, pads_begin,
                                    pads_end, dilations, auto_pad, output_padding, groups,
                                    data_format, weights_format, weights_shape);
  return at::empty_symint(plan.result_shape, src.options());
}

}  // namespace ops
}  // namespace tct
