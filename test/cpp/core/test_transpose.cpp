// The batched transpose used for NCX <-> channels-last, on every ISA.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/dispatch.h"

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
      transpose_f32(src.data(), dst.data(), batch, rows, cols, 2);
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

}  // namespace
}  // namespace tct
