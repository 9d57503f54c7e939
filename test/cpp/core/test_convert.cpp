// The 16-bit <-> f32 conversions of every ISA this CPU runs, against the
// scalar conversions of types.h: every bf16 / f16 bit pattern widened, and
// narrowing of random f32 bit patterns plus the edge values (ties, the
// largest finite values, denormals, infinities, NaNs), with every tail length.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/convert.h"
#include "kernels/types.h"

namespace tct {
namespace {

std::vector<Isa> isas() {
  std::vector<Isa> v{Isa::Reference};
  for (Isa i : {Isa::Avx2, Isa::Avx512})
    if (isa_supported(i)) v.push_back(i);
  return v;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

float scalar_widen(DType dt, uint16_t h) { return dt == DType::BF16 ? to_float(bf16{h}) : to_float(f16{h}); }
uint16_t scalar_narrow(DType dt, float f) { return dt == DType::BF16 ? to_bf16(f).bits : to_f16(f).bits; }

TEST(Convert, WidensEveryBitPattern) {
  std::vector<uint16_t> src(65536);
  for (int i = 0; i < 65536; ++i) src[i] = static_cast<uint16_t>(i);
  for (Isa isa : isas())
    for (DType dt : {DType::BF16, DType::F16}) {
      std::vector<float> dst(65536, -1.f);
      widen_to_f32(isa, dt, src.data(), dst.data(), 65536, 2);
      for (int i = 0; i < 65536; ++i) {
        const float want = scalar_widen(dt, src[i]);
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(dst[i])) << isa_name(isa) << " pattern " << i;
        } else {
          ASSERT_EQ(bits(dst[i]), bits(want)) << isa_name(isa) << " pattern " << i;
        }
      }
    }
}

std::vector<float> narrowing_inputs() {
  std::vector<float> v;
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) v.push_back(from_bits(static_cast<uint32_t>(rng())));
  const float inf = std::numeric_limits<float>::infinity();
  for (float f : {0.f, -0.f, 1.f, -1.f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                  -std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::min(), std::numeric_limits<float>::max(),
                  65504.f, 65519.f, 65520.f, 6.1e-5f, 5.96e-8f, 2.98e-8f, 1e-10f})
    v.push_back(f);
  // Exact ties between two bf16 / f16 neighbours, both parities.
  for (uint32_t h = 0x3f80; h < 0x3f90; ++h) v.push_back(from_bits((h << 16) | 0x8000));
  for (int k = 0; k < 16; ++k) v.push_back(1.f + (2 * k + 1) * std::ldexp(1.f, -11));
  v.push_back(from_bits(0x7f800001));  // signalling NaN
  // NaNs whose rounding add would carry into the exponent or the sign
  for (uint32_t b : {0x7fffffffu, 0xffffffffu, 0x7f80ffffu, 0x7fbfffffu, 0xffc0ffffu})
    v.push_back(from_bits(b));
  return v;
}

TEST(Convert, NarrowsLikeTheScalarRounding) {
  const std::vector<float> src = narrowing_inputs();
  const int64_t n = static_cast<int64_t>(src.size());
  for (Isa isa : isas())
    for (DType dt : {DType::BF16, DType::F16}) {
      std::vector<uint16_t> dst(n, 0xdead);
      narrow_from_f32(isa, dt, src.data(), dst.data(), n, 2);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t want = scalar_narrow(dt, src[i]);
        if (std::isnan(src[i])) {
          ASSERT_TRUE(std::isnan(scalar_widen(dt, dst[i]))) << isa_name(isa) << " at " << i;
          ASSERT_EQ(dst[i] & 0x8000, want & 0x8000) << "NaN sign, " << isa_name(isa);
        } else {
          ASSERT_EQ(dst[i], want) << isa_name(isa) << " value " << src[i];
        }
      }
    }
}

TEST(Convert, TailsTouchNothingPastTheEnd) {
  for (Isa isa : isas())
    for (DType dt : {DType::BF16, DType::F16})
      for (int64_t n = 0; n <= 40; ++n) {
        std::vector<uint16_t> h(n + 8, 0x7777);
        std::vector<float> f(n + 8, 42.f);
        for (int64_t i = 0; i < n; ++i) h[i] = scalar_narrow(dt, static_cast<float>(i) - 3.5f);
        widen_to_f32(isa, dt, h.data(), f.data(), n, 1);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(f[i], static_cast<float>(i) - 3.5f);
        for (int64_t i = n; i < n + 8; ++i) ASSERT_EQ(f[i], 42.f) << "widen wrote past " << n;
        narrow_from_f32(isa, dt, f.data(), h.data(), n, 1);
        for (int64_t i = n; i < n + 8; ++i) ASSERT_EQ(h[i], 0x7777) << "narrow wrote past " << n;
      }
}

TEST(Convert, RejectsOtherDtypes) {
  float x = 0;
  EXPECT_THROW(widen_to_f32(Isa::Reference, DType::F32, &x, &x, 1, 1), ProblemError);
}

}  // namespace
}  // namespace tct
