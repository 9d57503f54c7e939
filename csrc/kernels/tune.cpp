#include "tune.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <unordered_map>

namespace tct {
namespace {

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

std::atomic<int> g_enabled{-1};  // -1: the environment's setting

// A choice as applied to a spec.
struct Choice {
  Isa isa;
  Isa bf16;
  NcxPath ncx_path;
  int nthreads;
};

struct Cache {
  std::mutex mutex;
  std::map<std::string, TuningEntry> entries;  // by tuning_key
  // The calls' fast path: the spec's fields as raw numbers (fast_key) -> its
  // choice, filled from `entries` on a spec's first lookup (formatting the
  // readable key costs microseconds, a tenth of a small call).
  std::unordered_map<std::string, Choice> fast;
  std::vector<std::string> order;  // keys in the order they were added
  std::string file;
};

void add_locked(Cache& c, TuningEntry e) {
  auto it = c.entries.find(e.key);
  if (it == c.entries.end()) c.order.push_back(e.key);
  c.entries[e.key] = std::move(e);
}

// Reads path's entries into c (a missing file is an empty cache).
void load_locked(Cache& c, const std::string& path) {
  std::ifstream in(path);
  if (!in) return;
  c.fast.clear();  // (rebuilt from the entries as calls look them up)
  std::string line;
  int no = 0;
  while (std::getline(in, line)) {
    ++no;
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.find('\t');
    if (tab == std::string::npos || tab == 0 || tab + 1 == line.size())
      throw ProblemError("benchmark cache file '" + path + "' line " + std::to_string(no) +
                         ": expected '<key>\\t<choice>', got '" + line + "'");
    TuningEntry e;
    e.key = line.substr(0, tab);
    e.candidates.push_back({line.substr(tab + 1), 0.0});
    e.from_file = true;
    add_locked(c, std::move(e));
  }
}

Cache& cache() {
  static Cache* c = [] {
    auto* c = new Cache;  // (never destroyed: calls may run during static destruction)
    if (const char* f = std::getenv("TORCH_CONVTRANSPOSE_BENCHMARK_FILE")) {
      if (*f) {
        c->file = f;
        load_locked(*c, c->file);
      }
    }
    return c;
  }();
  return *c;
}

// The ISA a candidate names (the bf16 tiles' on top of AVX-512).
Isa named_isa(const CallSpec& s) { return s.bf16 != Isa::Reference ? s.bf16 : s.isa; }

std::string label(const CallSpec& s) {
  return std::string("isa=") + isa_name(named_isa(s)) +
         " ncx_path=" + ncx_path_name(s.ncx_path) + " threads=" + std::to_string(s.nthreads);
}

// The candidate of spec whose label is l (the file's choice), if any.
bool candidate_of(const CallSpec& spec, const std::string& l, CallSpec* out) {
  for (const CallSpec& c : tuning_candidates(spec))
    if (label(c) == l && isa_supported(named_isa(c))) {
      *out = c;
      return true;
    }
  return false;
}

std::string fast_key(const CallSpec& s, const std::string& extra) {
  const ConvProblem& p = s.p;
  std::vector<int64_t> v{static_cast<int64_t>(s.pass), static_cast<int64_t>(s.dtype),
                         s.a.nxc, s.a.ncx, s.b.nxc, s.b.ncx, static_cast<int64_t>(s.isa), static_cast<int64_t>(s.bf16),
                         s.amd, static_cast<int64_t>(s.ncx_path), s.nthreads,
                         static_cast<int64_t>(s.weights), p.spatial_rank, p.N, p.G, p.ICg, p.OCg};
  for (const auto* a : {&p.I, &p.O, &p.K, &p.s, &p.d, &p.pb, &p.pe, &p.op})
    v.insert(v.end(), a->begin(), a->end());
  std::string key(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
  return key + extra;
}

Choice choice_of(const CallSpec& s) { return {s.isa, s.bf16, s.ncx_path, s.nthreads}; }

CallSpec apply(CallSpec s, const Choice& c) {
  s.isa = c.isa;
  s.bf16 = c.bf16;
  s.ncx_path = c.ncx_path;
  s.nthreads = c.nthreads;
  return s;
}

// The cached choice of a spec, through the fast map (c.mutex held); false when
// the spec has no entry. A label that is no candidate here (a file's, naming
// an ISA this CPU lacks) is the default.
bool lookup_locked(Cache& c, const CallSpec& spec, const std::string& extra, Choice* out) {
  const std::string fk = fast_key(spec, extra);
  auto f = c.fast.find(fk);
  if (f != c.fast.end()) {
    *out = f->second;
    return true;
  }
  auto it = c.entries.find(tuning_key(spec, extra));
  if (it == c.entries.end()) return false;
  CallSpec chosen;
  const bool known = candidate_of(spec, it->second.candidates[it->second.chosen].label, &chosen);
  *out = choice_of(known ? chosen : spec);
  c.fast.emplace(fk, *out);
  return true;
}

// describe() without the spec's fields: equal for candidates that run the same plan.
std::string plan_body(const CallPlan& plan) {
  return describe(plan).substr(describe_spec(plan.spec).size());
}

}  // namespace

bool benchmark_enabled() {
  const int v = g_enabled.load(std::memory_order_relaxed);
  if (v >= 0) return v != 0;
  static const bool initial = env_on("TORCH_CONVTRANSPOSE_BENCHMARK");
  return initial;
}

void set_benchmark_enabled(bool on) { g_enabled.store(on ? 1 : 0, std::memory_order_relaxed); }

std::vector<CallSpec> tuning_candidates(const CallSpec& spec) {
  // The ISAs at or below the spec's: the bf16 tiles (AMX, then VDPBF16PS)
  // only change bf16.
  std::vector<std::pair<Isa, Isa>> isas;  // (vector ISA, bf16 tiles)
  const Isa bf16 = spec.bf16 != Isa::Reference ? spec.bf16 : bf16_isa(spec.isa);
  const Isa top = vector_isa(spec.isa);
  if (spec.dtype == DType::BF16) {
    if (bf16 == Isa::Avx512Amx) isas.push_back({Isa::Avx512, Isa::Avx512Amx});
    // (VDPBF16PS only where the plan would take its tiles: else its plan is avx512's)
    if (bf16 != Isa::Reference && spec.amd) isas.push_back({Isa::Avx512, Isa::Avx512Bf16});
  }
  if (top == Isa::Avx512) isas.push_back({Isa::Avx512, Isa::Reference});
  if (top == Isa::Avx512 || top == Isa::Avx2) isas.push_back({Isa::Avx2, Isa::Reference});
  if (top == Isa::Reference) isas.push_back({Isa::Reference, Isa::Reference});
  std::vector<NcxPath> paths{spec.ncx_path};
  if (spec.ncx_path == NcxPath::Auto && (spec.a.ncx || spec.b.ncx))
    paths = {NcxPath::Auto, NcxPath::Planar, NcxPath::ChannelsLast};
  // Small problems: also fewer threads (the team's start and barriers can
  // outweigh the work; every route gives the same bits for any thread count).
  std::vector<int> threads{spec.nthreads};
  if (spec.nthreads > 1 && spec.p.macs() < kFewThreadsMacs) {
    if (spec.nthreads / 2 > 1) threads.push_back(spec.nthreads / 2);
    threads.push_back(1);
  }
  std::vector<CallSpec> out;
  for (int nt : threads)
    for (const auto& [isa, tiles16] : isas)
      for (NcxPath path : paths) {
        CallSpec c = spec;
        c.isa = isa;
        c.bf16 = tiles16;
        c.ncx_path = path;
        c.nthreads = nt;
        out.push_back(c);
      }
  return out;
}

std::string tuning_key(const CallSpec& spec, const std::string& extra) {
  return describe_spec(spec) + (extra.empty() ? "" : " " + extra);
}

CallPlan cached_call_plan(const CallSpec& spec, const std::string& extra) {
  Cache& c = cache();
  Choice choice;
  bool found;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    found = lookup_locked(c, spec, extra, &choice);
  }
  return make_call_plan(found ? apply(spec, choice) : spec);
}

CallPlan tuned_call_plan(const CallSpec& spec, const std::string& extra,
                         const std::function<double(const CallPlan&)>& measure, bool* timed) {
  if (timed) *timed = false;
  Cache& c = cache();
  {
    Choice choice;
    bool found;
    {
      std::lock_guard<std::mutex> lock(c.mutex);
      found = lookup_locked(c, spec, extra, &choice);
    }
    if (found) return make_call_plan(apply(spec, choice));
  }
  const std::string key = tuning_key(spec, extra);
  // Distinct plans among the candidates (the default first).
  std::vector<CallSpec> specs;
  std::vector<CallPlan> plans;
  std::vector<std::string> bodies;
  for (const CallSpec& cand : tuning_candidates(spec)) {
    if (!isa_supported(named_isa(cand))) continue;
    CallPlan plan = make_call_plan(cand);
    std::string body = plan_body(plan);
    if (std::find(bodies.begin(), bodies.end(), body) != bodies.end()) continue;
    bodies.push_back(std::move(body));
    specs.push_back(cand);
    plans.push_back(std::move(plan));
  }
  std::vector<double> best(plans.size(), 0);
  if (plans.size() > 1) {
    // A warm-up round (buffers, packed weights, caches), then rounds in turn
    // (drifts hit every candidate alike): at least 2, more while the rounds
    // took under 50 ms (up to 100: the minimum of a 20 us call over 5 rounds
    // picked one thread where two were 1.3x faster, SPR).
    for (const CallPlan& p : plans) measure(p);
    double spent = 0;
    for (int round = 0; round < 100 && (round < 2 || spent < 0.05); ++round)
      for (size_t i = 0; i < plans.size(); ++i) {
        const double t = measure(plans[i]);
        spent += t;
        best[i] = round == 0 ? t : std::min(best[i], t);
      }
    if (timed) *timed = true;
  }
  // The fastest, unless it beats the default (candidate 0) by less than the margin.
  int chosen = static_cast<int>(std::min_element(best.begin(), best.end()) - best.begin());
  if (best[chosen] > best[0] * (1.0 - kTuningMargin)) chosen = 0;
  TuningEntry e;
  e.key = key;
  for (size_t i = 0; i < plans.size(); ++i) e.candidates.push_back({label(specs[i]), best[i]});
  e.chosen = chosen;
  const std::string chosen_label = e.candidates[chosen].label;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (!c.file.empty()) {
      std::ofstream out(c.file, std::ios::app);
      out << key << '\t' << chosen_label << '\n';
    }
    add_locked(c, std::move(e));
    c.fast[fast_key(spec, extra)] = choice_of(specs[chosen]);
  }
  return plans[chosen];
}

std::vector<TuningEntry> tuning_entries() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  std::vector<TuningEntry> out;
  for (const std::string& k : c.order) out.push_back(c.entries.at(k));
  return out;
}

void clear_tuning_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.entries.clear();
  c.order.clear();
  c.fast.clear();
}

void set_tuning_file(const std::string& path) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  if (!path.empty()) load_locked(c, path);
  c.file = path;
}

std::string tuning_file() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.file;
}

void save_tuning_cache(const std::string& path) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw ProblemError("benchmark cache file '" + path + "' cannot be written");
  for (const std::string& k : c.order) {
    const TuningEntry& e = c.entries.at(k);
    out << k << '\t' << e.candidates[e.chosen].label << '\n';
  }
}

}  // namespace tct
