// Benchmark mode (like torch.backends.cudnn.benchmark): the first call of a
// problem times the candidate plans of its call spec on the call's own
// tensors and keeps the fastest for that spec, for the rest of the process
// (and in a file the user names, for later processes). No torch headers: the
// caller (ops/) hands in how to run a plan once.
//
// Candidates (tuning_candidates): the same call on each vector ISA the spec's
// ISA includes (avx512_amx -> avx512_bf16 -> avx512 -> avx2; for bf16 they
// differ, for f32 and f16 the first three are one candidate), for dense NCX
// activations with the NCX path on auto, both NCX paths (planar, channels
// last), and for small problems fewer threads. An ISA or NCX path forced by the user (set_isa to a lower ISA, an
// NCX path other than auto) narrows the list. Candidates whose plans are the
// same (apart from the spec's own fields) are timed once. Every candidate
// computes the same result up to the order of float sums (exact on integer
// data: test_tune.py, test_routes.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "plan.h"

namespace tct {

// Off by default; TORCH_CONVTRANSPOSE_BENCHMARK=1 turns it on at start,
// TORCH_CONVTRANSPOSE_BENCHMARK_FILE names a cache file (loaded at start).
bool benchmark_enabled();
void set_benchmark_enabled(bool on);

// The candidates of a spec, the spec itself (the default plan) first; for
// problems below kFewThreadsMacs multiply-adds, each also with half the
// threads and with one (labels: "isa=... ncx_path=... threads=N").
constexpr double kFewThreadsMacs = 4.0 * (1 << 20);
std::vector<CallSpec> tuning_candidates(const CallSpec& spec);

// The cache key of a spec (describe_spec of it) plus what the caller adds
// (the weights format, which the spec does not hold).
std::string tuning_key(const CallSpec& spec, const std::string& extra);

struct TuningCandidate {
  std::string label;  // "isa=avx512 ncx_path=planar threads=2"
  double seconds = 0;  // the fastest timed call; 0 when read from a file
};
struct TuningEntry {
  std::string key;
  std::vector<TuningCandidate> candidates;
  int chosen = 0;
  bool from_file = false;
};

// A spec's plan in benchmark mode: the cached choice, or (first call of the
// key) times each candidate with measure (seconds of one run of the plan on
// the call's tensors; it may run the plan and must leave nothing else
// changed) and caches the fastest. A candidate other than the default must
// be faster by kTuningMargin to be chosen (noise keeps the default).
// timed is set when this call ran measure.
constexpr double kTuningMargin = 0.03;
CallPlan tuned_call_plan(const CallSpec& spec, const std::string& extra,
                         const std::function<double(const CallPlan&)>& measure,
                         bool* timed = nullptr);
// The cached choice without timing (a dry run): the default plan when none.
CallPlan cached_call_plan(const CallSpec& spec, const std::string& extra);

std::vector<TuningEntry> tuning_entries();
void clear_tuning_cache();
// The cache file: entries are appended as they are timed; set_tuning_file
// loads the file's entries first when it exists (throws ProblemError naming
// the file and the line for a malformed one). An empty path: no file.
void set_tuning_file(const std::string& path);
std::string tuning_file();
// Writes every entry to path (one line each: key, tab, the chosen label).
void save_tuning_cache(const std::string& path);

}  // namespace tct
