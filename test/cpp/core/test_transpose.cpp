// The batched transpose used for NCX <-> channels-last, on every ISA.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/convert.h"
#include "kernels/dispatch.h"
#include "kernels/x86/transpose.h"

namespace tct {
namespace {

TEST(Transpose, MatchesNaiveOnEveryIsaAndShape) {
  const Isa before = active_isa();
  for (Isa isa : {Isa::Reference, Isa::Avx2, Isa::Avx512}) {
    if (!isa_supported(isa)) continue;
    set_active_isa(isa);
    for (auto [batch, rows, cols] : {std::tuple<int64_t, int64_t, int64_t>{1, 16, 16},
                                     {2, 3, 17}, {3, 64, 64}, {2, 130, 47}, {1, 33, 200},
                                     {4, 1, 9}, {2, 80, 1}, {0, 5, 5},
                                     // rows a multiple of 256 (blocks walked by columns)
                                     {2, 512, 70}, {1, 256, 16}, {1, 768, 100}, {1, 256, 3},
                                     // small images: 13-pixel rows, 7x7 planes
                                     {3, 384, 13}, {2, 49, 40}, {2, 40, 49}}) {
      // (16 floats past the end, which no write may reach)
      std::vector<float> src(batch * rows * cols), dst(src.size() + 16, -1.f);
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
      transpose_f32(transpose_f32_kernels(isa), src.data(), dst.data(), batch, rows, cols, 2);
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j)
            ASSERT_EQ(dst[(b * cols + j) * rows + i], src[(b * rows + i) * cols + j])
                << isa_name(isa) << " " << batch << "x" << rows << "x" << cols << " at " << b
                << "," << i << "," << j;
      for (size_t i = src.size(); i < dst.size(); ++i)
        ASSERT_EQ(dst[i], -1.f) << isa_name(isa) << " wrote past the end";
    }
  }
  set_active_isa(before);
}

// The batched 16-bit driver with kernels k against the naive transpose, a
// guard after the destination.
void check_u16_driver(const Transpose16Kernels& k, int64_t batch, int64_t rows, int64_t cols,
                      std::mt19937& rng, const std::string& what) {
  std::vector<uint16_t> src(static_cast<size_t>(batch * rows * cols)), dst(src.size() + 16, 0xBEEF);
  for (auto& v : src) v = static_cast<uint16_t>(rng());
  transpose_u16(src.data(), dst.data(), batch, rows, cols, 2, k);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        ASSERT_EQ(dst[(b * cols + j) * rows + i], src[(b * rows + i) * cols + j])
            << what << " " << batch << "x" << rows << "x" << cols;
  for (size_t i = src.size(); i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xBEEF) << "past the end";
}

// Sources with their own row and batch strides (a slab of each channel plane).
// The 16-bit 32 x 32 blocks (ncx16's and the pair tiles' layout changes) of
// each ISA the CPU has, alone (strides not multiples of anything, a guard
// after each destination row) and in the batched driver (edges in scalar).
TEST(Transpose, U16BlocksMatchNaive) {
  std::mt19937 rng(5);
  std::vector<std::pair<Isa, Transpose16Block>> blocks;
  if (isa_supported(Isa::Avx2)) blocks.push_back({Isa::Avx2, x86::transpose_u16_block32_avx2});
  if (isa_supported(Isa::Avx512)) blocks.push_back({Isa::Avx512, x86::transpose_u16_block32_avx512});
  if (blocks.empty()) GTEST_SKIP() << "no AVX2/AVX-512";
  for (auto [isa, block] : blocks) {
    for (int iter = 0; iter < 20; ++iter) {
      const int64_t lds = 32 + rng() % 11, ldd = 32 + rng() % 11;
      std::vector<uint16_t> src(static_cast<size_t>(32 * lds)), dst(static_cast<size_t>(32 * ldd), 0xBEEF);
      for (auto& v : src) v = static_cast<uint16_t>(rng());
      block(src.data(), lds, dst.data(), ldd);
      for (int64_t c = 0; c < 32; ++c)
        for (int64_t r = 0; r < ldd; ++r)
          ASSERT_EQ(dst[c * ldd + r], r < 32 ? src[r * lds + c] : uint16_t{0xBEEF})
              << isa_name(isa) << " lds " << lds << " ldd " << ldd << " at " << c << "," << r;
    }
    for (auto [batch, rows, cols] : {std::tuple<int64_t, int64_t, int64_t>{2, 64, 96}, {3, 37, 40},
                                     {1, 100, 33}, {2, 5, 70}}) {
      check_u16_driver(block, batch, rows, cols, rng, isa_name(isa));
      if (HasFatalFailure()) return;
    }
  }
}

// The AVX-512 kernel for 2-4 source rows (channels) into a dense
// channels-last destination, alone (row strides past the columns, tails of
// every length mod 32, a guard after the destination) and in the driver.
TEST(Transpose, U16FewRowsMatchNaive) {
  if (!isa_supported(Isa::Avx512)) GTEST_SKIP() << "no AVX-512";
  std::mt19937 rng(9);
  for (int rows = 2; rows <= 4; ++rows)
    for (int64_t n : {int64_t{32}, int64_t{33}, int64_t{63}, int64_t{64}, int64_t{95}, int64_t{200}}) {
      const int64_t lds = n + rng() % 5;
      std::vector<uint16_t> src(static_cast<size_t>(rows * lds)), dst(static_cast<size_t>(rows * n + 8), 0xBEEF);
      for (auto& v : src) v = static_cast<uint16_t>(rng());
      x86::transpose_u16_few_avx512(src.data(), lds, rows, n, dst.data());
      for (int64_t j = 0; j < n; ++j)
        for (int i = 0; i < rows; ++i)
          ASSERT_EQ(dst[j * rows + i], src[i * lds + j]) << rows << " rows, n " << n << " at " << j << "," << i;
      for (size_t i = static_cast<size_t>(rows * n); i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xBEEF) << "past the end";
    }
  const Transpose16Kernels k(x86::transpose_u16_block32_avx512, x86::transpose_u16_few_avx512);
  for (auto [batch, rows, cols] : {std::tuple<int64_t, int64_t, int64_t>{2, 3, 5000}, {3, 4, 70},
                                   {1, 2, 9001}, {2, 4, 31}}) {
    check_u16_driver(k, batch, rows, cols, rng, "few rows");
    if (HasFatalFailure()) return;
  }
}

TEST(Transpose, StridedSourceMatchesNaive) {
  const Isa before = active_isa();
  for (Isa isa : {Isa::Reference, Isa::Avx2, Isa::Avx512}) {
    if (!isa_supported(isa)) continue;
    set_active_isa(isa);
    for (auto [batch, rows, cols, ld] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{2, 16, 40, 100},
                                         {3, 37, 70, 75}, {1, 8, 512, 4096}, {2, 130, 20, 33}}) {
      const int64_t sbatch = rows * ld + 7;
      std::vector<float> src(batch * sbatch), dst(batch * rows * cols + 16, -1.f);
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
      transpose_f32(transpose_f32_kernels(isa), src.data(), dst.data(), batch, rows, cols, 2, ld,
                    sbatch);
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j)
            ASSERT_EQ(dst[(b * cols + j) * rows + i], src[b * sbatch + i * ld + j])
                << isa_name(isa) << " " << batch << "x" << rows << "x" << cols << " ld " << ld;
      for (size_t i = batch * rows * cols; i < dst.size(); ++i) ASSERT_EQ(dst[i], -1.f);
    }
  }
  set_active_isa(before);
}

// The strided 1x1 forward's expansion from src's resolution: every output
// position either its src position's value or the bias (zero without).
TEST(Transpose, ExpandStrided1x1MatchesNaive) {
  struct Axes { std::array<int64_t, kAxes> I, s, pb, pe, op; };
  const Axes cases[] = {
      {{1, 7, 13}, {1, 2, 2}, {0, 1, 0}, {0, 0, 1}, {0, 1, 1}},  // pairs path, pads
      {{1, 5, 9}, {1, 2, 2}, {0, 0, 0}, {0, 0, 0}, {0, 1, 1}},   // ResNet-like
      {{3, 4, 9}, {2, 1, 3}, {0, 0, 1}, {0, 0, 0}, {1, 0, 2}},   // stride 3 inner
      {{1, 1, 37}, {1, 1, 2}, {0, 0, 0}, {0, 0, 3}, {0, 0, 1}},  // cropped end
  };
  for (const Axes& a : cases)
    for (bool with_bias : {true, false}) {
      ConvProblem p;
      p.spatial_rank = 3;
      p.N = 2;
      p.G = 2;
      p.ICg = 3;
      p.OCg = 5;
      p.I = a.I;
      p.s = a.s;
      p.pb = a.pb;
      p.pe = a.pe;
      p.op = a.op;
      for (int ax = 0; ax < kAxes; ++ax)
        p.O[ax] = (p.I[ax] - 1) * p.s[ax] + 1 + p.op[ax] - p.pb[ax] - p.pe[ax];
      const int64_t planes = p.N * p.OC();
      std::vector<float> y(planes * p.src_spatial()), bias(p.OC());
      for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(i % 97) + 1.f;
      for (int64_t c = 0; c < p.OC(); ++c) bias[c] = -1.f - static_cast<float>(c);
      std::vector<float> dst(planes * p.dst_spatial() + 16, 12345.f);
      expand_strided_1x1_f32(p, y.data(), with_bias ? bias.data() : nullptr, dst.data(), 2);
      for (int64_t c = 0; c < planes; ++c)
        for (int64_t o0 = 0; o0 < p.O[0]; ++o0)
          for (int64_t o1 = 0; o1 < p.O[1]; ++o1)
            for (int64_t o2 = 0; o2 < p.O[2]; ++o2) {
              const int64_t o[kAxes] = {o0, o1, o2};
              int64_t i[kAxes];
              bool in = true;
              for (int ax = 0; ax < kAxes; ++ax) {
                const int64_t q = o[ax] + p.pb[ax];
                i[ax] = q / p.s[ax];
                in = in && q % p.s[ax] == 0 && i[ax] < p.I[ax];
              }
              const float want =
                  in ? y[((c * p.I[0] + i[0]) * p.I[1] + i[1]) * p.I[2] + i[2]]
                     : (with_bias ? bias[c % p.OC()] : 0.f);
              ASSERT_EQ(dst[((c * p.O[0] + o0) * p.O[1] + o1) * p.O[2] + o2], want)
                  << "plane " << c << " at " << o0 << "," << o1 << "," << o2;
            }
      for (size_t k = planes * p.dst_spatial(); k < dst.size(); ++k)
        ASSERT_EQ(dst[k], 12345.f) << "wrote past the end";
    }
}

}  // namespace
}  // namespace tct
