#include "dispatch.h"

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif

namespace tct {
namespace {

std::atomic<int> g_forced{-1};
std::atomic<int> g_ncx{-1};

std::string lower(const std::string& s) {
  std::string l;
  for (char c : s) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return l;
}

NcxPath initial_ncx_path() {
  if (const char* env = std::getenv("TORCH_CONVTRANSPOSE_NCX"))
    if (*env) return parse_ncx_path(env);
  return NcxPath::Auto;
}

Isa initial_isa() {
  if (const char* env = std::getenv("TORCH_CONVTRANSPOSE_ISA")) {
    if (*env) {
      const Isa isa = parse_isa(env);
      if (isa_supported(isa)) return isa;
    }
  }
  return detected_isa();
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Reference: return "reference";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

Isa parse_isa(const std::string& name) {
  const std::string l = lower(name);
  if (l == "reference") return Isa::Reference;
  if (l == "avx2") return Isa::Avx2;
  if (l == "avx512") return Isa::Avx512;
  throw ProblemError("isa must be one of reference, avx2, avx512, got '" + name + "'");
}

bool isa_supported(Isa isa) {
#if defined(__x86_64__) || defined(_M_X64)
  switch (isa) {
    case Isa::Reference: return true;
    case Isa::Avx2:  // (F16C: the 16-bit conversions of convert_avx2.cpp)
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case Isa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  return false;
#else
  return isa == Isa::Reference;
#endif
}

bool avx512_amd() {
#if defined(__x86_64__) || defined(_M_X64)
  static const bool amd = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    if (std::strcmp(vendor, "AuthenticAMD") != 0 || !__get_cpuid(1, &a, &b, &c, &d)) return false;
    unsigned family = (a >> 8) & 0xf;
    if (family == 0xf) family += (a >> 20) & 0xff;
    return family >= 0x19;  // Zen 3 (no AVX-512), Zen 4; Zen 5 (1Ah) and later
  }();
  return amd;
#else
  return false;
#endif
}

Isa detected_isa() {
  if (isa_supported(Isa::Avx512)) return Isa::Avx512;
  if (isa_supported(Isa::Avx2)) return Isa::Avx2;
  return Isa::Reference;
}

Isa active_isa() {
  int v = g_forced.load(std::memory_order_relaxed);
  if (v < 0) {
    static const Isa initial = initial_isa();
    return initial;
  }
  return static_cast<Isa>(v);
}

void set_active_isa(Isa isa) {
  if (!isa_supported(isa))
    throw ProblemError(std::string("isa '") + isa_name(isa) + "' is not supported by this CPU");
  g_forced.store(static_cast<int>(isa), std::memory_order_relaxed);
}

const char* ncx_path_name(NcxPath path) {
  switch (path) {
    case NcxPath::Auto: return "auto";
    case NcxPath::Planar: return "planar";
    case NcxPath::ChannelsLast: return "channels_last";
  }
  return "?";
}

NcxPath parse_ncx_path(const std::string& name) {
  const std::string l = lower(name);
  if (l == "auto") return NcxPath::Auto;
  if (l == "planar") return NcxPath::Planar;
  if (l == "channels_last") return NcxPath::ChannelsLast;
  throw ProblemError("ncx path must be one of auto, planar, channels_last, got '" + name + "'");
}

NcxPath ncx_path() {
  const int v = g_ncx.load(std::memory_order_relaxed);
  if (v < 0) {
    static const NcxPath initial = initial_ncx_path();
    return initial;
  }
  return static_cast<NcxPath>(v);
}

void set_ncx_path(NcxPath path) { g_ncx.store(static_cast<int>(path), std::memory_order_relaxed); }

}  // namespace tct
