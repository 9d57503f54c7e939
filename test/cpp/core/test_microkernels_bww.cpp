// Micro-kernel tester of the backward-weights tables (BwdWeightsF32Table,
// bwd_weights_f32.h): the GEMM tiles on pixel lists and on packed panels,
// the grouped and depthwise tiles, the panel packing and the final
// transposes, against scalar versions of their contracts
// (microkernel_tester.h).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "microkernel_tester.h"

namespace tct {
namespace mkt {
namespace {

using x86::bww::BwdWeightsF32Table;
using x86::bww::Pix;
using x86::bww::TileArgs;

// npix pixels whose A rows are readable at [a_off, a_off + a_len) and B rows
// at [b_off, b_off + b_len) (the cells before the offsets poisoned).
struct PixList {
  std::vector<Buf> bufs;
  std::vector<Pix> pix;
  void build(Rng& rng, int64_t npix, int64_t a_off, int64_t a_len, int64_t b_off, int64_t b_len) {
    bufs.reserve(static_cast<size_t>(2 * npix));
    for (int64_t i = 0; i < npix; ++i) {
      Pix p{};
      for (int side = 0; side < 2; ++side) {
        const int64_t off = side ? b_off : a_off, len = side ? b_len : a_len;
        bufs.push_back(Buf::input(off + len));
        Buf& b = bufs.back();
        for (int64_t j = off; j < off + len; ++j) b[j] = rng.val();
        (side ? p.b : p.a) = b.data();
      }
      pix.push_back(p);
    }
  }
};

// The rows of px as 16-bit copies (elements [0, len) of each, NaN after):
// the Pix list of the 16-bit kernels points at them.
struct Rows16 {
  std::vector<std::vector<uint16_t>> rows;
  std::vector<x86::bww::Pix> pix;
  Rows16(const std::vector<x86::bww::Pix>& px, int64_t len, bool side_b, int kind) {
    const uint16_t nan16 = kind == 1 ? 0x7FC1 : 0x7E01;
    for (const auto& p : px) {
      const float* r = side_b ? p.b : p.a;
      rows.emplace_back(static_cast<size_t>(len + 32), nan16);
      if (r)
        for (int64_t j = 0; j < len; ++j) rows.back()[j] = int_to16(r[j], kind);
      const float* r16 = r ? reinterpret_cast<const float*>(rows.back().data()) : nullptr;
      pix.push_back(side_b ? x86::bww::Pix{nullptr, r16} : x86::bww::Pix{r16, nullptr});
    }
  }
};

// Both sides of px as 16-bit copies (kind 1 bf16, 2 f16; a_len / b_len
// elements of each row, NaN after): the Pix list of the 16-bit tiles.
struct Lists16 {
  Rows16 a, b;
  std::vector<Pix> pix;
  Lists16(const std::vector<Pix>& px, int64_t a_len, int64_t b_len, int kind)
      : a(px, a_len, false, kind), b(px, b_len, true, kind) {
    for (size_t i = 0; i < px.size(); ++i) pix.push_back({a.pix[i].a, b.pix[i].b});
  }
};

class BwwMicrokernels : public ::testing::TestWithParam<BwwTableCase> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam().isa)) GTEST_SKIP() << "CPU lacks " << isa_name(GetParam().isa);
    tab = GetParam().get();
    ASSERT_NE(tab, nullptr);
  }
  const BwdWeightsF32Table* tab = nullptr;
};

TEST_P(BwwMicrokernels, TableIsWellFormed) {
  EXPECT_NE(tab->isa, nullptr);
  EXPECT_TRUE(tab->lanes == 8 || tab->lanes == 16) << tab->lanes;
  ASSERT_GE(tab->max_vecs, 1);
  ASSERT_LE(tab->max_vecs, x86::bww::kMaxTileVecs);
  EXPECT_EQ(tab->rows[0], 0);
  for (int v = 1; v <= x86::bww::kMaxTileVecs; ++v) {
    if (v <= tab->max_vecs) {
      EXPECT_GE(tab->rows[v], 1) << v;
    } else {
      EXPECT_EQ(tab->rows[v], 0) << v;
    }
  }
  EXPECT_NE(tab->gemm, nullptr);
  EXPECT_NE(tab->pack, nullptr);
  EXPECT_NE(tab->transpose_taps, nullptr);
  EXPECT_NE(tab->store_fence, nullptr);
  if (tab->dw) {
    EXPECT_GE(tab->dw_vecs, 1);
  }
  if (tab->grouped) {
    EXPECT_TRUE(tab->grouped_max_cols == 2 || tab->grouped_max_cols == 4 ||
                tab->grouped_max_cols == 8);
    EXPECT_GE(tab->grouped_vecs_few_rows, 1);
    EXPECT_GE(tab->grouped_vecs, 1);
  }
  EXPECT_GE(tab->l1_b_blocks, 1);
}

// C[m*ldc + n] (+)= sum_i A_i[m] * B_i[n]: every vector count and row
// count, column tails, pixel lists and packed panels, fresh and accumulating;
// pixel lists of f32 rows (gemm) and of their bf16 / f16 copies (gemm16,
// kind 1 / 2: the f32 sums exactly, on integer values).
TEST_P(BwwMicrokernels, GemmTilesMatchScalar) {
  ASSERT_NE(tab->gemm16, nullptr);
  Rng rng(21);
  Failures fails;
  const int L = tab->lanes;
  for (int nv = 1; nv <= tab->max_vecs; ++nv)
    for (int rows = 1; rows <= tab->rows[nv]; ++rows) {
      const int lo = (nv - 1) * L + 1, hi = nv * L;
      for (int cols : {hi, lo, static_cast<int>(rng.uni(lo, hi))})
        for (int mode = 0; mode < 16; ++mode) {  // (two draws of each)
          const bool packed = mode & 1, fresh = mode & 2;
          const int kind = packed ? 0 : (mode >> 2) % 3;  // lists: f32, bf16, f16
          const int64_t npix = rng.pick(std::vector<int64_t>{0, 1, 2, 5, 13, 40});
          const int64_t a_off = rng.uni(0, 5), b_off = rng.uni(0, 5);
          const int64_t ldc = cols + rng.uni(0, 3);
          const int64_t lda = rows + rng.uni(0, 3), ldb = round_up(cols, L) + L * rng.uni(0, 1);
          PixList px;
          Buf pa = Buf::input(0), pb = Buf::input(0);
          // (A of pixel i, row m) and (B of pixel i, column n)
          std::vector<float> A(npix * rows), B(npix * cols);
          if (packed) {
            pa = Buf::input(npix ? (npix - 1) * lda + rows : 0);
            pb = Buf::input(npix ? (npix - 1) * ldb + round_up(cols, L) : 0);
            for (int64_t i = 0; i < npix; ++i) {
              for (int m = 0; m < rows; ++m) A[i * rows + m] = pa[i * lda + m] = rng.val();
              for (int64_t n = 0; n < round_up(cols, L); ++n)  // zero-padded to whole vectors
                pb[i * ldb + n] = n < cols ? (B[i * cols + n] = rng.val()) : 0.f;
            }
          } else {
            px.build(rng, npix, a_off, rows, b_off, cols);
            for (int64_t i = 0; i < npix; ++i) {
              for (int m = 0; m < rows; ++m) A[i * rows + m] = px.pix[i].a[a_off + m];
              for (int n = 0; n < cols; ++n) B[i * cols + n] = px.pix[i].b[b_off + n];
            }
          }
          Buf c = Buf::output(rows * ldc, rng.uni(0, 15));
          for (int m = 0; m < rows; ++m)
            for (int n = 0; n < cols; ++n) c[m * ldc + n] = fresh ? guard() : rng.val();
          Expect want(c);
          for (int m = 0; m < rows; ++m)
            for (int n = 0; n < cols; ++n) {
              float& s = want[m * ldc + n];
              if (fresh) s = 0.f;
              for (int64_t i = 0; i < npix; ++i) s += A[i * rows + m] * B[i * cols + n];
            }
          const Lists16 px16(px.pix, a_off + rows, b_off + cols, kind ? kind : 1);
          TileArgs t{};
          t.pix = packed ? nullptr : kind ? px16.pix.data() : px.pix.data();
          t.npix = npix;
          t.a_off = packed ? 0 : a_off;
          t.b_off = packed ? 0 : b_off;
          t.c = c.data();
          t.ldc = ldc;
          t.rows = rows;
          t.cols = cols;
          t.pa = packed ? pa.data() : nullptr;
          t.pb = packed ? pb.data() : nullptr;
          t.lda = lda;
          t.ldb = ldb;
          t.fresh = fresh;
          if (kind) tab->gemm16(t, kind);
          else tab->gemm(t);
          const std::string d = Desc()("kind", kind)("rows", rows)("cols", cols)("npix", npix)(
                                     "packed", packed)("fresh", fresh)("a_off", a_off)(
                                     "b_off", b_off)("ldc", ldc)("lda", lda)("ldb", ldb).str();
          if (!fails.add(matches(c, want, "c"), "gemm", d)) return;
        }
    }
}

// Grouped: group gl, row m, column n at c[(v*rows + m)*L + l], v = gl / (L/cols),
// l = (gl % (L/cols))*cols + n; lanes of the written vectors past the
// groups may hold anything, nothing past them may be written. f32 rows
// (grouped) and, where the table has grouped16, their bf16 / f16 copies.
TEST_P(BwwMicrokernels, GroupedTilesMatchScalar) {
  if (!tab->grouped) GTEST_SKIP() << "no grouped tile";
  Rng rng(22);
  Failures fails;
  const int L = tab->lanes;
  for (int kind = 0; kind <= (tab->grouped16 ? 2 : 0); ++kind)
    for (int cols = 2; cols <= tab->grouped_max_cols; cols *= 2)
      for (int rows = 1; rows <= cols; ++rows) {
        const int gpv = L / cols;
        const int maxg = gpv * (rows <= 4 ? tab->grouped_vecs_few_rows : tab->grouped_vecs);
        std::vector<int> groups_list = {1, maxg, static_cast<int>(rng.uni(1, maxg))};
        if (gpv + 1 <= maxg) groups_list.push_back(gpv + 1);
        for (int groups : groups_list) {
          const int64_t npix = rng.pick(std::vector<int64_t>{0, 1, 7, 30});
          const int64_t a_off = rng.uni(0, 5), b_off = rng.uni(0, 5);
          PixList px;
          px.build(rng, npix, a_off, int64_t{groups} * rows, b_off, int64_t{groups} * cols);
          const int64_t nvg = (int64_t{groups} * cols + L - 1) / L;
          Buf c = Buf::output(nvg * rows * L, rng.uni(0, 15));
          Expect want(c);
          for (int64_t i = 0; i < nvg * rows * L; ++i) want[i] = any();
          for (int gl = 0; gl < groups; ++gl)
            for (int m = 0; m < rows; ++m)
              for (int n = 0; n < cols; ++n) {
                float& s = want[((gl / gpv) * rows + m) * L + (gl % gpv) * cols + n];
                s = 0.f;
                for (int64_t i = 0; i < npix; ++i)
                  s += px.pix[i].a[a_off + gl * rows + m] * px.pix[i].b[b_off + gl * cols + n];
              }
          const Lists16 px16(px.pix, a_off + int64_t{groups} * rows, b_off + int64_t{groups} * cols,
                             kind ? kind : 1);
          TileArgs t{};
          t.pix = kind ? px16.pix.data() : px.pix.data();
          t.npix = npix;
          t.a_off = a_off;
          t.b_off = b_off;
          t.c = c.data();
          t.ldc = L;
          t.rows = rows;
          t.cols = cols;
          t.groups = groups;
          if (kind) tab->grouped16(t, kind);
          else tab->grouped(t);
          const std::string d = Desc()("kind", kind)("rows", rows)("cols", cols)("groups", groups)(
                                    "npix", npix).str();
          if (!fails.add(matches(c, want, "c"), "grouped", d)) return;
        }
      }
}

// Depthwise: C[n] += sum_i A_i[b_off + n] * B_i[b_off + n] (rows and a_off
// ignored); f32 rows (dw) and their bf16 / f16 copies (dw16).
TEST_P(BwwMicrokernels, DepthwiseTileMatchesScalar) {
  if (!tab->dw) GTEST_SKIP() << "no depthwise tile";
  ASSERT_NE(tab->dw16, nullptr);
  Rng rng(23);
  Failures fails;
  const int L = tab->lanes, maxc = L * tab->dw_vecs;
  for (int kind : {0, 1, 2})
    for (int cols : {1, L - 1, L, L + 1, 2 * L + 3, 5 * L, maxc - 1, maxc,
                     static_cast<int>(rng.uni(1, maxc))}) {
      for (int64_t npix : {0, 1, 9}) {
        const int64_t b_off = rng.uni(0, 5);
        PixList px;
        px.build(rng, npix, b_off, cols, b_off, cols);
        Buf c = Buf::output(cols, rng.uni(0, 15));
        c.fill_values(rng);
        Expect want(c);
        for (int n = 0; n < cols; ++n)
          for (int64_t i = 0; i < npix; ++i)
            want[n] += px.pix[i].a[b_off + n] * px.pix[i].b[b_off + n];
        const Lists16 px16(px.pix, b_off + cols, b_off + cols, kind ? kind : 1);
        TileArgs t{};
        t.pix = kind ? px16.pix.data() : px.pix.data();
        t.npix = npix;
        t.a_off = 1000003;  // ignored
        t.b_off = b_off;
        t.c = c.data();
        t.ldc = -1;
        t.rows = -1;  // ignored
        t.cols = cols;
        if (kind) tab->dw16(t, kind);
        else tab->dw(t);
        const std::string d =
            Desc()("kind", kind)("cols", cols)("npix", npix)("b_off", b_off).str();
        if (!fails.add(matches(c, want, "c"), "dw", d)) return;
      }
    }
}

// Packing: row i = width floats of its pixel row from off, zeros to ld
// (a null row: all zeros).
// pack on f32 rows and pack16 on bf16 / f16 copies of them (kind 1, 2).
TEST_P(BwwMicrokernels, PackMatchesScalar) {
  ASSERT_NE(tab->pack16, nullptr);
  Rng rng(24);
  Failures fails;
  const int L = tab->lanes;
  for (int kind : {0, 1, 2})
    for (int width : {1, L - 1, L, L + 1, 2 * L + 5, 37})
      for (int64_t ld : {int64_t{width}, round_up(width, L), int64_t{width} + 3})
        for (int side_b = 0; side_b < 2; ++side_b) {
          const int64_t n = rng.pick(std::vector<int64_t>{0, 1, 5, 12, 20});
          const int64_t off = rng.uni(0, 4);
          PixList px;
          px.build(rng, n, off, width, off, width);
          for (auto& p : px.pix)
            if (rng.uni(0, 4) == 0) (side_b ? p.b : p.a) = nullptr;
          Buf dst = Buf::output(n * ld, rng.uni(0, 15));
          Expect want(dst);
          for (int64_t i = 0; i < n; ++i) {
            const float* r = side_b ? px.pix[i].b : px.pix[i].a;
            for (int64_t j = 0; j < ld; ++j) want[i * ld + j] = r && j < width ? r[off + j] : 0.f;
          }
          if (kind == 0) {
            tab->pack(px.pix.data(), n, side_b, off, width, ld, dst.data());
          } else {
            const Rows16 r16(px.pix, off + width, side_b, kind);
            tab->pack16(r16.pix.data(), n, side_b, off, width, ld, dst.data(), kind);
          }
          const std::string d = Desc()("kind", kind)("n", n)("side_b", side_b)("off", off)(
                                    "width", width)("ld", ld).str();
          if (!fails.add(matches(dst, want, "dst"), "pack", d)) return;
        }
}

// All m-blocks' A panels at once: block j (rows starts[j]..starts[j+1]) at
// starts[j]*block + j*kPanelSlack, row i at + i*r; reads below off + readable,
// writes inside the panels' span only.
TEST_P(BwwMicrokernels, PackPanelsMatchScalar) {
  if (!tab->pack_panels) GTEST_SKIP() << "no pack_panels";
  ASSERT_NE(tab->pack_panels16, nullptr);
  Rng rng(25);
  Failures fails;
  for (int f = 0; f < 120; ++f) {
    const int kind = f % 3;  // 0 f32 (pack_panels), 1 bf16, 2 f16 (pack_panels16)
    const int64_t nblocks = rng.uni(1, 4), n = rng.pick(std::vector<int64_t>{1, 2, 5, 10, 13});
    const int64_t block = n + rng.uni(0, 1) * rng.uni(1, 4);
    std::vector<int64_t> starts = {0};
    for (int64_t j = 0; j < nblocks; ++j) starts.push_back(starts.back() + rng.uni(1, 20));
    const int64_t width = starts.back(), readable = width + (rng.coin() ? 0 : rng.uni(1, 9));
    const int64_t off = rng.uni(0, 6);
    PixList px;
    px.build(rng, n, off, readable, 0, 0);
    const int64_t span = width * block + nblocks * x86::bww::kPanelSlack;
    Buf dst = Buf::output(span, rng.uni(0, 15));
    Expect want(dst);
    for (int64_t i = 0; i < span; ++i) want[i] = any();
    for (int64_t j = 0; j < nblocks; ++j) {
      const int64_t m0 = starts[j], r = starts[j + 1] - m0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < r; ++c)
          want[m0 * block + j * x86::bww::kPanelSlack + i * r + c] = px.pix[i].a[off + m0 + c];
    }
    if (kind == 0) {
      tab->pack_panels(px.pix.data(), n, off, readable, starts.data(), nblocks, block,
                       dst.data());
    } else {
      const Rows16 r16(px.pix, off + readable, false, kind);
      tab->pack_panels16(r16.pix.data(), n, off, readable, starts.data(), nblocks, block,
                         dst.data(), kind);
    }
    Desc d;
    d("kind", kind)("n", n)("block", block)("off", off)("readable", readable)("starts", "");
    std::string s = d.str();
    for (int64_t x : starts) s += std::to_string(x) + ",";
    if (!fails.add(matches(dst, want, "dst"), "pack_panels", s)) return;
  }
}

// dst[n*ld_n + t] = sum_{q < nq} src[q*ld_q + t*ld_t + n] for t < taps, n < nn:
// chunks of 16 taps, the interleaved runs (ld_n == taps <= 9), the staged runs
// (AVX-512 17..64; AVX2 17..64, and 1..15 when streamed), whole-line streaming.
TEST_P(BwwMicrokernels, TransposeTapsMatchScalar) {
  Rng rng(26);
  Failures fails;
  for (int64_t taps : {1, 2, 3, 4, 5, 7, 8, 9, 10, 15, 16, 17, 23, 27, 32, 33, 48, 64, 65, 70})
    for (int nn : {1, 5, 16, static_cast<int>(rng.uni(2, 15))})
      for (int f = 0; f < 3; ++f) {
        // f: 0 contiguous runs (ld_n == taps), 1 a gap between runs, 2 runs
        // at 64-byte lines.
        const int64_t ld_n = f == 0 ? taps : f == 1 ? taps + rng.uni(1, 5) : round_up(taps, 16);
        const bool stream = f != 1 && rng.coin();
        const int nq = static_cast<int>(rng.uni(1, 3));
        const int64_t ld_t = rng.pick(std::vector<int64_t>{nn, 16, nn + 3});
        const int64_t ld_q = taps * ld_t + rng.uni(0, 5);
        Buf src = Buf::input((nq - 1) * ld_q + (taps - 1) * ld_t + nn);
        for (int q = 0; q < nq; ++q)
          for (int64_t t = 0; t < taps; ++t)
            for (int n = 0; n < nn; ++n) src[q * ld_q + t * ld_t + n] = rng.val();
        // Contiguous runs streamed start anywhere in a line too (AVX2 stages
        // them and streams the whole lines between plain-stored ends).
        const int64_t shift = f == 2 || (f == 0 && stream && rng.coin()) ? 0 : rng.uni(0, 15);
        Buf dst = Buf::output((nn - 1) * ld_n + taps, shift);
        Expect want(dst);
        for (int n = 0; n < nn; ++n)
          for (int64_t t = 0; t < taps; ++t) {
            float s = 0.f;
            for (int q = 0; q < nq; ++q) s += src[q * ld_q + t * ld_t + n];
            want[n * ld_n + t] = s;
          }
        tab->transpose_taps(src.data(), ld_t, ld_q, nq, taps, nn, dst.data(), ld_n, stream);
        tab->store_fence();
        const std::string d = Desc()("taps", taps)("nn", nn)("nq", nq)("ld_t", ld_t)("ld_q", ld_q)(
                                   "ld_n", ld_n)("stream", stream).str();
        if (!fails.add(matches(dst, want, "dst"), "transpose_taps", d)) return;
      }
}

INSTANTIATE_TEST_SUITE_P(Tables, BwwMicrokernels, ::testing::ValuesIn(kBwwTables),
                         table_name<BwdWeightsF32Table>);

}  // namespace
}  // namespace mkt
}  // namespace tct
