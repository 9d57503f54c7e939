#include "dispatch.h"

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
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

// AMX-TILE and AMX-BF16 (CPUID 7.0:EDX bits 24 and 22), the OS saving the
// tile state (XCR0 bits 17 and 18), and on Linux the process's permission to
// use the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA:
// granted once per process; torch's oneDNN asks for it the same way).
bool amx_bf16_usable() {
#if (defined(__x86_64__) || defined(_M_X64)) && defined(__linux__)
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!((d >> 24) & 1) || !((d >> 22) & 1)) return false;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) return false;  // OSXSAVE
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if (((lo >> 17) & 3) != 3) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
#else
  return false;
#endif
}

bool avx512_bf16_supported() {
#if defined(__x86_64__) || defined(_M_X64)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1);
#else
  return false;
#endif
}

}  // namespace

bool prefetchw_supported() {
#if defined(__x86_64__) || defined(_M_X64)
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(0x80000001u, &a, &b, &c, &d) && ((c >> 8) & 1);
  }();
  return ok;
#else
  return false;
#endif
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Reference: return "reference";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Bf16: return "avx512_bf16";
    case Isa::Avx512Amx: return "avx512_amx";
  }
  return "?";
}

Isa parse_isa(const std::string& name) {
  const std::string l = lower(name);
  if (l == "reference") return Isa::Reference;
  if (l == "avx2") return Isa::Avx2;
  if (l == "avx512") return Isa::Avx512;
  if (l == "avx512_bf16") return Isa::Avx512Bf16;
  if (l == "avx512_amx") return Isa::Avx512Amx;
  throw ProblemError(
      "isa must be one of reference, avx2, avx512, avx512_bf16, avx512_amx, got '" + name + "'");
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
    case Isa::Avx512Bf16:  // CPUID 7.1:EAX bit 5
      return isa_supported(Isa::Avx512) && avx512_bf16_supported();
    case Isa::Avx512Amx:
      return isa_supported(Isa::Avx512Bf16) && amx_bf16_usable();
  }
  return false;
#else
  return isa == Isa::Reference;
#endif
}

const char* uarch_name(Uarch u) {
  switch (u) {
    case Uarch::Generic: return "generic";
    case Uarch::Intel: return "intel";
    case Uarch::IntelAvx512: return "intel_avx512";
    case Uarch::IntelAmx: return "intel_amx";
    case Uarch::Zen2: return "zen2";
    case Uarch::Zen3: return "zen3";
    case Uarch::Zen4: return "zen4";
    case Uarch::Zen5: return "zen5";
  }
  return "?";
}

Uarch parse_uarch(const std::string& name) {
  const std::string l = lower(name);
  for (Uarch u : {Uarch::Generic, Uarch::Intel, Uarch::IntelAvx512, Uarch::IntelAmx, Uarch::Zen2,
                  Uarch::Zen3, Uarch::Zen4, Uarch::Zen5})
    if (l == uarch_name(u)) return u;
  throw ProblemError(
      "uarch must be one of generic, intel, intel_avx512, intel_amx, zen2, zen3, zen4, zen5, "
      "got '" + name + "'");
}

Uarch classify_uarch(const CpuidInfo& c) {
  if (c.vendor == "GenuineIntel")
    return c.amx ? Uarch::IntelAmx : c.avx512 ? Uarch::IntelAvx512 : Uarch::Intel;
  if (c.vendor != "AuthenticAMD" && c.vendor != "HygonGenuine") return Uarch::Generic;
  if (c.family < 0x19) return c.family == 0x17 || c.vendor == "HygonGenuine" ? Uarch::Zen2
                                                                              : Uarch::Generic;
  if (c.family > 0x19) return Uarch::Zen5;  // 1Ah, and later families until measured
  const unsigned m = c.model;
  const bool zen4 = (m >= 0x10 && m <= 0x1f) || (m >= 0x60 && m <= 0x7f) ||
                    (m >= 0xa0 && m <= 0xaf);
  return zen4 ? Uarch::Zen4 : Uarch::Zen3;
}

CpuidInfo read_cpuid() {
  CpuidInfo info;
#if defined(__x86_64__) || defined(_M_X64)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    info.vendor = vendor;
  }
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    info.family = (a >> 8) & 0xf;
    info.model = (a >> 4) & 0xf;
    if (info.family == 0xf || info.family == 0x6) info.model |= ((a >> 16) & 0xf) << 4;
    if (info.family == 0xf) info.family += (a >> 20) & 0xff;
  }
#endif
  info.avx512 = isa_supported(Isa::Avx512);
  info.amx = isa_supported(Isa::Avx512Amx);
  return info;
}

namespace {
std::atomic<int> g_uarch{-1};

Uarch initial_uarch() {
  if (const char* env = std::getenv("TORCH_CONVTRANSPOSE_UARCH"))
    if (*env) return parse_uarch(env);
  return classify_uarch(read_cpuid());
}
}  // namespace

Uarch active_uarch() {
  const int v = g_uarch.load(std::memory_order_relaxed);
  if (v >= 0) return static_cast<Uarch>(v);
  static const Uarch initial = initial_uarch();
  return initial;
}

void set_uarch(Uarch u) { g_uarch.store(static_cast<int>(u), std::memory_order_relaxed); }

bool avx512_amd() {
  const Uarch u = active_uarch();
  return u == Uarch::Zen4 || u == Uarch::Zen5;
}

Isa detected_isa() {
  if (isa_supported(Isa::Avx512Amx)) return Isa::Avx512Amx;
  if (isa_supported(Isa::Avx512Bf16)) return Isa::Avx512Bf16;
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
