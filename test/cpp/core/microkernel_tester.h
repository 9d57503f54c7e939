// Shared pieces of the micro-kernel testers (test_microkernels_*.cpp), in the
// spirit of XNNPACK's gemm-microkernel-tester: every entry of every
// micro-kernel table (kConvTables, kBwwTables, kPlanarTables below; one line
// per table) is run on sampled shapes and compared with a scalar version of
// its documented contract, on small integers (every sum is exact: ==).
//
// Buffers: inputs end exactly where the contract says they may be read (in
// the ASan build, test/test_sanitizers.py, a read past them is reported; in
// the others a few NaNs follow, which any read that reaches an output turns
// into a mismatch). Cells the contract does not let the kernel read are NaN.
// Outputs are surrounded by guard cells (a NaN with its own payload) and
// every cell the kernel may not write starts as a guard; the whole
// allocation is compared afterwards, so a stray store is a failure too.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/x86/bwd_weights_f32.h"
#include "kernels/x86/conv_f32_kernels.h"
#include "kernels/x86/planar_f32.h"

namespace tct {
namespace mkt {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

// --- the tables under test: a new table is one line here --------------------

template <class Table>
struct TableCase {
  const char* name;  // test name suffix
  Isa isa;           // skipped where the CPU lacks it
  const Table* (*get)();
};
using ConvTableCase = TableCase<x86::ConvTable>;
using BwwTableCase = TableCase<x86::bww::BwdWeightsF32Table>;
using PlanarTableCase = TableCase<x86::PlanarF32Table>;

inline const ConvTableCase kConvTables[] = {
    {"f32_avx512", Isa::Avx512, x86::conv_f32_table_avx512},
    {"f32_avx512_intel", Isa::Avx512, x86::conv_f32_table_avx512_intel},
    {"f32_avx2", Isa::Avx2, x86::conv_f32_table_avx2},
    {"f32_avx2_zen3", Isa::Avx2, x86::conv_f32_table_avx2_zen3},
};
inline const BwwTableCase kBwwTables[] = {
    {"f32_avx512", Isa::Avx512, x86::bww::bwd_weights_f32_table_avx512},
    {"f32_avx512_intel", Isa::Avx512, x86::bww::bwd_weights_f32_table_avx512_intel},
    {"f32_avx2", Isa::Avx2, x86::bww::bwd_weights_f32_table_avx2},
};
inline const PlanarTableCase kPlanarTables[] = {
    {"f32_avx512", Isa::Avx512, x86::planar_f32_table_avx512},
    {"f32_avx2", Isa::Avx2, x86::planar_f32_table_avx2},
};

// (gtest prints the parameter of a failing test with this.)
template <class Table>
void PrintTo(const TableCase<Table>& c, std::ostream* os) {
  *os << c.name;
}

template <class Table>
std::string table_name(const ::testing::TestParamInfo<TableCase<Table>>& info) {
  return info.param.name;
}

// --- cell values ---------------------------------------------------------------

inline float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
// Output cells no store may reach.
inline float guard() { return from_bits(0x7fc0dead); }
inline bool is_guard(float f) { return bits(f) == 0x7fc0dead; }
// Input cells no read may reach (a NaN: whatever it touches is wrong).
inline float poison() { return from_bits(0x7fc0beef); }
// In an expected output: a cell the kernel may write with anything.
inline float any() { return from_bits(0x7fc0a11a); }
inline bool is_any(float f) { return bits(f) == 0x7fc0a11a; }

// The bits of a small integer value in bf16 (kind 1) or f16 (kind 2), exact
// for |v| < 256 (bf16) / 2048 (f16), and a 16-bit value back to float: the
// 16-bit kernels' inputs and results in the tests.
inline uint16_t int_to16(float v, int kind) {
  if (kind == 1) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return static_cast<uint16_t>(u >> 16);
  }
  if (v == 0.f) return std::signbit(v) ? 0x8000 : 0;
  int e = 0;
  const float m = std::frexp(std::fabs(v), &e);  // |v| = m * 2^e, m in [0.5, 1)
  const uint32_t mant = static_cast<uint32_t>(std::ldexp(m, 11)) & 0x3FF;
  return static_cast<uint16_t>((v < 0 ? 0x8000 : 0) | ((e + 14) << 10) | mant);
}
inline float from16(uint16_t h, int kind) {
  if (kind == 1) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  if (e == 31) return m ? std::nanf("") : ((h & 0x8000) ? -INFINITY : INFINITY);
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                         : std::ldexp(static_cast<float>(m | 0x400), e - 25);
  return (h & 0x8000) ? -v : v;
}

// The 16-bit input rows of a tile test: R rows x T taps, each tap's run of
// `run` elements holding `lead` poison elements, then n values (value(),
// integers, stored as bf16 / f16 `kind`), then poison; reachable as a tile's
// a pointers (a[t*R + m] at its run) and as its rows (rows[m] + tapoff[t]).
struct Rows16 {
  std::vector<std::vector<uint16_t>> buf;
  std::vector<float> val;  // [m][t][c], the values as floats
  std::vector<const float*> a, rows;
  std::vector<int64_t> tapoff;
  int64_t T, n;

  template <class F>
  Rows16(int R, int64_t taps, int64_t lead, int64_t count, int64_t run, int kind, uint16_t poison,
         F&& value)
      : buf(static_cast<size_t>(R), std::vector<uint16_t>(static_cast<size_t>(taps * run), poison)),
        val(static_cast<size_t>(R * taps * count)),
        a(static_cast<size_t>(taps * R)),
        rows(static_cast<size_t>(R)),
        tapoff(static_cast<size_t>(taps)),
        T(taps),
        n(count) {
    for (int64_t t = 0; t < T; ++t) tapoff[t] = t * run;
    for (int m = 0; m < R; ++m) {
      rows[m] = reinterpret_cast<const float*>(buf[m].data());
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t c = 0; c < n; ++c) {
          const float v = value();
          val[(m * T + t) * n + c] = v;
          buf[m][t * run + lead + c] = int_to16(v, kind);
        }
        a[t * R + m] = reinterpret_cast<const float*>(buf[m].data() + t * run);
      }
    }
  }
  float at(int m, int64_t t, int64_t c) const { return val[(m * T + t) * n + c]; }
};

// The output rows of a tile writing a 16-bit (ConvTileArgs::out16) or an f32
// result: `rows` rows of `width` cells, each a guard at first (0xBEEF as 16
// bits, -777 as f32), so that a cell the tile must not write keeps it.
class GuardedRows {
 public:
  GuardedRows(int rows, int64_t width, bool out16)
      : width_(width), out16_(out16),
        o16_(static_cast<size_t>(rows * width), 0xBEEF),
        o32_(static_cast<size_t>(rows * width), -777.f),
        ptrs_(static_cast<size_t>(rows)) {
    for (int m = 0; m < rows; ++m)
      ptrs_[m] = out16 ? reinterpret_cast<float*>(o16_.data() + m * width) : o32_.data() + m * width;
  }
  float* const* ptrs() const { return ptrs_.data(); }
  // Cell c of row m as float (16-bit cells read as `kind`), and a guard's value.
  float at(int m, int64_t c, int kind) const {
    return out16_ ? from16(o16_[m * width_ + c], kind) : o32_[m * width_ + c];
  }
  float guard(int kind) const { return out16_ ? from16(0xBEEF, kind) : -777.f; }

 private:
  int64_t width_;
  bool out16_;
  std::vector<uint16_t> o16_;
  std::vector<float> o32_;
  std::vector<float*> ptrs_;
};

class Rng {
 public:
  explicit Rng(uint32_t seed) : gen_(seed) {}
  // Uniform in [lo, hi].
  int64_t uni(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen_);
  }
  bool coin() { return uni(0, 1) != 0; }
  // A small integer (the values of every input).
  float val() { return static_cast<float>(uni(-4, 4)); }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(uni(0, static_cast<int64_t>(v.size()) - 1))];
  }
  std::vector<int64_t> perm(int64_t n) {
    std::vector<int64_t> p(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
    std::shuffle(p.begin(), p.end(), gen_);
    return p;
  }

 private:
  std::mt19937 gen_;
};

// n floats at data(), in a 64-byte aligned allocation: `shift` floats (0-15)
// past a 64-byte boundary, after a lead of guard / poison cells, and before
// a trail of them. Inputs: no trail in the ASan build (a read past the end is
// reported). Outputs: 16 guard cells either side, all cells guards at first.
class Buf {
 public:
  static Buf input(int64_t n, int64_t shift = 0) {
    return Buf(n, 16 + shift, kAsan ? 0 : 16, poison());
  }
  static Buf output(int64_t n, int64_t shift = 0) { return Buf(n, 16 + shift, 16, guard()); }

  Buf(Buf&& o) noexcept : mem_(o.mem_), lead_(o.lead_), n_(o.n_), total_(o.total_) {
    o.mem_ = nullptr;
  }
  Buf& operator=(Buf&& o) noexcept {
    std::swap(mem_, o.mem_);
    std::swap(lead_, o.lead_);
    std::swap(n_, o.n_);
    std::swap(total_, o.total_);
    return *this;
  }
  Buf(const Buf&) = delete;
  ~Buf() {
    if (mem_) ::operator delete[](mem_, std::align_val_t{64});
  }
  float* data() { return mem_ + lead_; }
  const float* data() const { return mem_ + lead_; }
  float& operator[](int64_t i) { return data()[i]; }
  int64_t size() const { return n_; }
  // The whole allocation, guards included (index lead() is data()[0]).
  std::vector<float> all() const { return std::vector<float>(mem_, mem_ + total_); }
  int64_t lead() const { return lead_; }
  void fill(float v) { std::fill(data(), data() + n_, v); }
  void fill_values(Rng& rng) {
    for (int64_t i = 0; i < n_; ++i) data()[i] = rng.val();
  }

 private:
  Buf(int64_t n, int64_t lead, int64_t trail, float outside)
      : lead_(lead), n_(n), total_(lead + n + trail) {
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(total_, 1)) * 4;
    mem_ = static_cast<float*>(::operator new[](bytes, std::align_val_t{64}));
    std::fill(mem_, mem_ + total_, outside);
  }
  float* mem_;
  int64_t lead_, n_, total_;
};

// An output and the expected contents of its whole allocation: cells start
// as they are in the buffer (guards, or the accumulator's initial values);
// the scalar reference sets the cells the kernel computes (or any()).
struct Expect {
  explicit Expect(const Buf& b) : want(b.all()), lead(b.lead()) {}
  float& operator[](int64_t i) { return want[static_cast<size_t>(lead + i)]; }
  std::vector<float> want;
  int64_t lead;
};

// Compares a buffer with its expected contents: guard cells bit for bit,
// computed cells with == (integers; +0 and -0 alike), any() cells not at all.
inline ::testing::AssertionResult matches(const Buf& got, const Expect& e,
                                          const char* what = "out") {
  const std::vector<float> g = got.all();
  int bad = 0;
  std::ostringstream o;
  for (size_t i = 0; i < g.size(); ++i) {
    const float w = e.want[i];
    if (is_any(w)) continue;
    const bool ok = is_guard(w) ? bits(g[i]) == bits(w) : g[i] == w;
    if (ok) continue;
    if (bad++ < 6) {
      const int64_t at = static_cast<int64_t>(i) - e.lead;
      o << "\n  " << what << "[" << at << "]";
      if (at < 0 || at >= got.size()) o << " (outside the buffer)";
      o << ": got ";
      if (is_guard(g[i])) o << "guard"; else o << g[i];
      o << ", want ";
      if (is_guard(w)) o << "guard (no store)"; else o << w;
    }
  }
  if (!bad) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " wrong cells in " << what << ":" << o.str();
}

// Collects the failures of a test's cases: the first few in full, then a count.
class Failures {
 public:
  // Returns false once enough failures were reported (the caller may stop).
  bool add(const ::testing::AssertionResult& r, const std::string& kernel, const std::string& c) {
    ++checked_;
    if (r) return true;
    if (++failed_ <= 8) ADD_FAILURE() << kernel << " " << c << ": " << r.message();
    return failed_ < 64;
  }
  int64_t checked() const { return checked_; }
  ~Failures() {
    if (failed_ > 8) ADD_FAILURE() << failed_ << " failing cases in all (8 shown)";
    ::testing::Test::RecordProperty("cases", std::to_string(checked_));
  }

 private:
  int64_t checked_ = 0, failed_ = 0;
};

// "name=value" lists for the case descriptions.
class Desc {
 public:
  template <class T>
  Desc& operator()(const char* name, const T& v) {
    o_ << (first_ ? "" : " ") << name << "=" << v;
    first_ = false;
    return *this;
  }
  std::string str() const { return o_.str(); }

 private:
  std::ostringstream o_;
  bool first_ = true;
};

}  // namespace mkt
}  // namespace tct
