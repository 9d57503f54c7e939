// The per-microarchitecture choices (dispatch.h): CPUID values of real CPUs,
// faked, classified; a forced uarch changes the choices that were measured to
// depend on it (the AMD NCX rule flag; Zen 3's AVX2 tile speeds and reduction
// chunk budget) and nothing else.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "kernels/dispatch.h"
#include "kernels/x86/x86.h"
#include "problem.h"

namespace tct {
namespace {

struct FakeCpu {
  const char* name;
  CpuidInfo info;
  Uarch want;
};

TEST(Uarch, ClassifiesFakedCpuidValues) {
  const FakeCpu cpus[] = {
      {"EPYC 7742 (Rome)", {"AuthenticAMD", 0x17, 0x31, false, false}, Uarch::Zen2},
      {"EPYC 7763 (Milan)", {"AuthenticAMD", 0x19, 0x01, false, false}, Uarch::Zen3},
      {"Ryzen 9 5950X (Vermeer)", {"AuthenticAMD", 0x19, 0x21, false, false}, Uarch::Zen3},
      {"Ryzen 7 5800U (Cezanne)", {"AuthenticAMD", 0x19, 0x50, false, false}, Uarch::Zen3},
      {"EPYC 9654 (Genoa)", {"AuthenticAMD", 0x19, 0x11, true, false}, Uarch::Zen4},
      {"Ryzen 9 7950X (Raphael)", {"AuthenticAMD", 0x19, 0x61, true, false}, Uarch::Zen4},
      {"Ryzen 7 7840U (Phoenix)", {"AuthenticAMD", 0x19, 0x74, true, false}, Uarch::Zen4},
      {"EPYC 9754 (Bergamo)", {"AuthenticAMD", 0x19, 0xa0, true, false}, Uarch::Zen4},
      {"EPYC 9575F (Turin)", {"AuthenticAMD", 0x1a, 0x02, true, false}, Uarch::Zen5},
      {"Ryzen 9 9950X (Granite Ridge)", {"AuthenticAMD", 0x1a, 0x44, true, false}, Uarch::Zen5},
      {"Hygon Dhyana", {"HygonGenuine", 0x18, 0x01, false, false}, Uarch::Zen2},
      {"Xeon 8480+ (Sapphire Rapids)", {"GenuineIntel", 6, 0x8f, true, true}, Uarch::IntelAmx},
      {"Xeon 8380 (Ice Lake-SP)", {"GenuineIntel", 6, 0x6a, true, false}, Uarch::IntelAvx512},
      {"Core i9-12900K (Alder Lake)", {"GenuineIntel", 6, 0x97, false, false}, Uarch::Intel},
      {"Zhaoxin / VIA", {"CentaurHauls", 6, 0x0f, false, false}, Uarch::Generic},
  };
  for (const FakeCpu& c : cpus)
    EXPECT_EQ(uarch_name(classify_uarch(c.info)), std::string(uarch_name(c.want))) << c.name;
}

TEST(Uarch, NamesRoundTrip) {
  for (Uarch u : {Uarch::Generic, Uarch::Intel, Uarch::IntelAvx512, Uarch::IntelAmx, Uarch::Zen2,
                  Uarch::Zen3, Uarch::Zen4, Uarch::Zen5})
    EXPECT_EQ(parse_uarch(uarch_name(u)), u);
  EXPECT_EQ(parse_uarch("ZEN3"), Uarch::Zen3);
  try {
    parse_uarch("zen9");
    FAIL() << "expected ProblemError";
  } catch (const ProblemError& e) {
    EXPECT_NE(std::string(e.what()).find("got 'zen9'"), std::string::npos) << e.what();
  }
}

// This CPU's own values classify consistently (whatever it is).
TEST(Uarch, ThisCpu) {
  const CpuidInfo info = read_cpuid();
  EXPECT_FALSE(info.vendor.empty());
  EXPECT_GE(info.family, 5u);
  EXPECT_EQ(info.amx, isa_supported(Isa::Avx512Amx));
  const Uarch u = classify_uarch(info);
  if (info.vendor == "GenuineIntel") {
    EXPECT_EQ(u == Uarch::IntelAmx, info.amx);
  }
}

class ForcedUarch : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = active_uarch(); }
  void TearDown() override { set_uarch(saved_); }
  Uarch saved_ = Uarch::Generic;
};

TEST_F(ForcedUarch, AmdNcxRuleFlag) {
  for (Uarch u : {Uarch::Zen4, Uarch::Zen5}) {
    set_uarch(u);
    EXPECT_TRUE(avx512_amd()) << uarch_name(u);
  }
  for (Uarch u : {Uarch::Generic, Uarch::Intel, Uarch::IntelAvx512, Uarch::IntelAmx, Uarch::Zen2,
                  Uarch::Zen3}) {
    set_uarch(u);
    EXPECT_FALSE(avx512_amd()) << uarch_name(u);
  }
}

// 40 output columns on AVX2: five 12x8 tiles at full lanes (12x8 at 0.85 of
// the others, Zen 5) or 4x24 / 6x16 tiles at 5/6 of their lanes (12x8 at
// 0.72, as measured on Zen 3). Plans only: nothing runs, any CPU.
TEST_F(ForcedUarch, Zen3AvxTwoTileSpeeds) {
  const Attributes attrs =
      make_attributes({1, 1}, {1, 1}, {1, 1}, {1, 1}, "None", {}, 1, "NXC", "IOX");
  const ConvProblem p = resolve_forward({2, 9, 9, 64}, {64, 40, 3, 3}, std::nullopt, attrs);
  auto tile = [&] {
    const std::string d = x86::describe_conv_f32(Isa::Avx2, Pass::Forward, p, 1);
    const size_t at = d.find("tile=");
    return d.substr(at + 5, d.find(' ', at) - at - 5);
  };
  set_uarch(Uarch::Zen5);
  EXPECT_EQ(tile(), "avx2_12x8");
  set_uarch(Uarch::Generic);
  EXPECT_EQ(tile(), "avx2_12x8");
  set_uarch(Uarch::Zen3);
  const std::string zen3 = tile();
  EXPECT_TRUE(zen3 == "avx2_4x24" || zen3 == "avx2_6x16") << zen3;
}

// Reduction chunks: the 3D U-Net k3 512 -> 256 forward packs 512 channels x
// 27 taps x 16 columns = 884 KB per column block. Generic AVX2 (512 KiB
// chunks): two chunks of 288 and 224 channels; Zen 3 (1 MiB): one chunk.
TEST_F(ForcedUarch, Zen3AvxTwoReductionChunks) {
  const Attributes attrs = make_attributes({1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1}, "None",
                                           {}, 1, "NXC", "IOX");
  const ConvProblem p =
      resolve_forward({1, 8, 9, 9, 512}, {512, 256, 3, 3, 3}, std::nullopt, attrs);
  auto field = [&](const std::string& key) {
    const std::string d = x86::describe_conv_f32(Isa::Avx2, Pass::Forward, p, 2);
    const size_t at = d.find(" " + key + "=");
    if (at == std::string::npos) {
      ADD_FAILURE() << "no " << key << " in " << d;
      return int64_t{-1};
    }
    return static_cast<int64_t>(std::stoll(d.substr(at + key.size() + 2)));
  };
  set_uarch(Uarch::Generic);
  EXPECT_EQ(field("cb"), 288);
  EXPECT_EQ(field("chunks"), 2);
  set_uarch(Uarch::Zen3);
  EXPECT_EQ(field("cb"), 512);
  EXPECT_EQ(field("chunks"), 1);
}

// PREFETCHW detection against the kernel's reading of the same CPUID bit
// (Linux names it 3dnowprefetch in /proc/cpuinfo's flags).
TEST(Cpu, PrefetchwMatchesProcCpuinfo) {
#if !(defined(__x86_64__) || defined(_M_X64))
  GTEST_SKIP() << "not x86-64 (prefetchw_supported() is false there)";
#endif
  std::ifstream f("/proc/cpuinfo");
  if (!f) GTEST_SKIP() << "no /proc/cpuinfo on this system";
  std::string line;
  bool found_flags = false, has = false;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    found_flags = true;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string w;
    while (words >> w) has = has || w == "3dnowprefetch";
    break;
  }
  if (!found_flags) GTEST_SKIP() << "/proc/cpuinfo lists no flags (not x86?)";
  EXPECT_EQ(prefetchw_supported(), has);
}

}  // namespace
}  // namespace tct
