#include "tune.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

namespace tct {
namespace {

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

std::atomic<int> g_enabled{-1};  // -1: the environment's setting

struct Cache {
  std::mutex mutex;
  std::map<std::string, TuningEntry> entries;
  std::vector<std::string> order;  // keys in the order they were added
  std::string file;
  bool file_read_from_env = false;
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

std::string label(const CallSpec& s) {
  return std::string("isa=") + isa_name(s.amx ? Isa::Avx512Amx : s.isa) +
         " ncx_path=" + ncx_path_name(s.ncx_path);
}

// The candidate of spec whose label is l (the file's choice), if any.
bool candidate_of(const CallSpec& spec, const std::string& l, CallSpec* out) {
  for (const CallSpec& c : tuning_candidates(spec))
    if (label(c) == l && isa_supported(c.amx ? Isa::Avx512Amx : c.isa)) {
      *out = c;
      return true;
    }
  return false;
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
  // The ISAs at or below the spec's: AMX only changes bf16.
  std::vector<std::pair<Isa, bool>> isas;  // (vector ISA, amx)
  const bool amx = spec.amx || spec.isa == Isa::Avx512Amx;
  const Isa top = vector_isa(spec.isa);
  if (amx && spec.dtype == DType::BF16) isas.push_back({Isa::Avx512, true});
  if (top == Isa::Avx512) isas.push_back({Isa::Avx512, false});
  if (top == Isa::Avx512 || top == Isa::Avx2) isas.push_back({Isa::Avx2, false});
  if (top == Isa::Reference) isas.push_back({Isa::Reference, false});
  std::vector<NcxPath> paths{spec.ncx_path};
  if (spec.ncx_path == NcxPath::Auto && (spec.a.ncx || spec.b.ncx))
    paths = {NcxPath::Auto, NcxPath::Planar, NcxPath::ChannelsLast};
  std::vector<CallSpec> out;
  for (const auto& [isa, with_amx] : isas)
    for (NcxPath path : paths) {
      CallSpec c = spec;
      c.isa = isa;
      c.amx = with_amx;
      c.ncx_path = path;
      out.push_back(c);
    }
  return out;
}

std::string tuning_key(const CallSpec& spec, const std::string& extra) {
  return describe_spec(spec) + (extra.empty() ? "" : " " + extra);
}

CallPlan cached_call_plan(const CallSpec& spec, const std::string& extra) {
  Cache& c = cache();
  std::string choice;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.entries.find(tuning_key(spec, extra));
    if (it != c.entries.end()) choice = it->second.candidates[it->second.chosen].label;
  }
  CallSpec chosen;
  if (!choice.empty() && candidate_of(spec, choice, &chosen)) return make_call_plan(chosen);
  return make_call_plan(spec);
}

CallPlan tuned_call_plan(const CallSpec& spec, const std::string& extra,
                         const std::function<double(const CallPlan&)>& measure, bool* timed) {
  if (timed) *timed = false;
  const std::string key = tuning_key(spec, extra);
  Cache& c = cache();
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    cached = c.entries.count(key) != 0;
  }
  if (cached) return cached_call_plan(spec, extra);
  // Distinct plans among the candidates (the default first).
  std::vector<CallSpec> specs;
  std::vector<CallPlan> plans;
  std::vector<std::string> bodies;
  for (const CallSpec& cand : tuning_candidates(spec)) {
    if (!isa_supported(cand.amx ? Isa::Avx512Amx : cand.isa)) continue;
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
    // (drifts hit every candidate alike): at least 2, up to 5 while the
    // rounds took under half a second.
    for (const CallPlan& p : plans) measure(p);
    double spent = 0;
    for (int round = 0; round < 5 && (round < 2 || spent < 0.5); ++round)
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
