// x86::backward_weights_f32 against reference_backward_weights, per ISA the CPU
// has. Data are small integers, so every sum is exact and the compare is ==.
#include <gtest/gtest.h>

#include "dense_views.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "kernels/x86/bwd_weights_f32.h"
#include "kernels/x86/x86.h"
#include "problem.h"

namespace tct {
namespace {

struct Case {
  int S = 2;
  int64_t N = 1, G = 1, ICg = 1, OCg = 1;
  std::vector<int64_t> I, K, s, d, pb, pe, op;
  WeightsFormat wf = WeightsFormat::IOX;
};

std::string describe(const Case& c) {
  auto list = [](const std::vector<int64_t>& v) {
    std::ostringstream o;
    o << "[";
    for (size_t i = 0; i < v.size(); ++i) o << (i ? "," : "") << v[i];
    o << "]";
    return o.str();
  };
  std::ostringstream o;
  o << "S=" << c.S << " N=" << c.N << " G=" << c.G << " ICg=" << c.ICg << " OCg=" << c.OCg
    << " I=" << list(c.I) << " K=" << list(c.K) << " s=" << list(c.s) << " d=" << list(c.d)
    << " pb=" << list(c.pb) << " pe=" << list(c.pe) << " op=" << list(c.op)
    << " wf=" << to_string(c.wf);
  return o.str();
}

ActView nxc_view(const ConvProblem&, const std::array<int64_t, kAxes>& sp, int64_t C,
                 float* data) {
  return testing_views::dense_nxc_view(data, sp, C);
}

WeightsView weights_view(const ConvProblem& p, WeightsFormat wf, float* data) {
  return testing_views::dense_weights_view(data, weights_shape(p, wf), wf, p.spatial_rank);
}

// Runs one case for every supported ISA; records a failure on any mismatch.
void check_case(const Case& c, int nthreads, std::mt19937& rng) {
  SCOPED_TRACE(describe(c));
  const int S = c.S;
  Attributes a;
  a.strides = c.s;
  a.dilations = c.d;
  a.pads_begin = c.pb;
  a.pads_end = c.pe;
  a.groups = c.G;
  a.data_format = DataFormat::NXC;
  a.weights_format = c.wf;
  Shape src_shape{c.N}, dst_shape{c.N}, w_shape;
  for (int i = 0; i < S; ++i) {
    src_shape.push_back(c.I[i]);
    const int64_t O = c.s[i] * (c.I[i] - 1) + c.d[i] * (c.K[i] - 1) + 1 + c.op[i] - c.pb[i] -
                      c.pe[i];
    dst_shape.push_back(O);
  }
  src_shape.push_back(c.G * c.ICg);
  dst_shape.push_back(c.G * c.OCg);
  {
    ConvProblem q;
    q.spatial_rank = S;
    q.G = c.G;
    q.ICg = c.ICg;
    q.OCg = c.OCg;
    for (int i = 0; i < S; ++i) q.K[kAxes - S + i] = c.K[i];
    w_shape = weights_shape(q, c.wf);
  }
  const ConvProblem p = resolve_backward_weights(src_shape, dst_shape, w_shape, a);

  std::uniform_int_distribution<int> val(-3, 3);
  std::vector<float> src(static_cast<size_t>(p.N * p.src_spatial() * p.IC()));
  std::vector<float> dd(static_cast<size_t>(p.N * p.dst_spatial() * p.OC()));
  for (float& v : src) v = static_cast<float>(val(rng));
  for (float& v : dd) v = static_cast<float>(val(rng));
  const size_t wn = static_cast<size_t>(p.IC() * p.OCg * p.taps());
  std::vector<float> expect(wn, -1.f);
  reference_backward_weights(p, DType::F32, nxc_view(p, p.I, p.IC(), src.data()),
                             nxc_view(p, p.O, p.OC(), dd.data()),
                             weights_view(p, c.wf, expect.data()), nthreads);
  for (Isa isa : {Isa::Avx512, Isa::Avx2}) {
    if (!isa_supported(isa)) continue;
    SCOPED_TRACE(isa_name(isa));
    // Every element must be written; the result 64-byte aligned like torch's
    // allocations (the streaming stores of large IOX results need it).
    std::vector<float> buf(wn + 16, std::nanf(""));
    float* got = testing_views::aligned64(buf);
    const bool ok = x86::backward_weights_f32(isa, p, src.data(), dd.data(),
                                              weights_view(p, c.wf, got), nthreads);
    ASSERT_TRUE(ok) << "not covered";
    size_t bad = 0, first = wn;
    for (size_t i = 0; i < wn; ++i)
      if (!(got[i] == expect[i])) {
        if (!bad) first = i;
        ++bad;
      }
    ASSERT_EQ(bad, 0u) << "first mismatch at " << first << ": got " << got[first]
                       << " expected " << expect[first];
  }
}

const WeightsFormat kFormats[] = {WeightsFormat::IOX, WeightsFormat::XOI, WeightsFormat::OIX,
                                  WeightsFormat::XIO};

// A random valid case: per axis the output padding is below max(s, d) and
// the dst size positive.
Case random_case(std::mt19937& rng, int S, int64_t G, int64_t ICg, int64_t OCg, int64_t N,
                 int64_t max_i) {
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Case c;
  c.S = S;
  c.N = N;
  c.G = G;
  c.ICg = ICg;
  c.OCg = OCg;
  c.wf = kFormats[uni(0, 3)];
  for (int i = 0; i < S; ++i) {
    for (;;) {
      const int64_t I = uni(1, max_i), K = uni(1, S == 3 ? 3 : 4), s = uni(1, 3),
                    d = uni(1, 100) < 70 ? 1 : uni(2, 3);
      const int64_t ek = d * (K - 1) + 1;
      const int64_t pb = uni(0, ek), pe = uni(0, ek), op = uni(0, std::max(s, d) - 1);
      if (s * (I - 1) + ek + op - pb - pe < 1) continue;
      c.I.push_back(I), c.K.push_back(K), c.s.push_back(s), c.d.push_back(d);
      c.pb.push_back(pb), c.pe.push_back(pe), c.op.push_back(op);
      break;
    }
  }
  return c;
}

Case simple_case(int S, int64_t N, int64_t G, int64_t ICg, int64_t OCg, int64_t I, int64_t K,
                 int64_t s, int64_t pad, WeightsFormat wf) {
  Case c;
  c.S = S;
  c.N = N;
  c.G = G;
  c.ICg = ICg;
  c.OCg = OCg;
  c.wf = wf;
  for (int i = 0; i < S; ++i) {
    c.I.push_back(I), c.K.push_back(K), c.s.push_back(s), c.d.push_back(1);
    c.pb.push_back(pad), c.pe.push_back(pad), c.op.push_back(0);
  }
  return c;
}

TEST(FastBackwardWeights, RealisticLayers) {
  std::mt19937 rng(1);
  for (WeightsFormat wf : kFormats) {
    check_case(simple_case(2, 2, 1, 64, 32, 12, 4, 2, 1, wf), 2, rng);   // k4 s2 p1
    check_case(simple_case(2, 2, 1, 48, 40, 9, 3, 1, 1, wf), 2, rng);    // tails both sides
    check_case(simple_case(2, 1, 1, 96, 80, 7, 3, 2, 1, wf), 2, rng);    // 14x32 + 14x16
    check_case(simple_case(1, 3, 1, 33, 70, 50, 5, 3, 2, wf), 2, rng);   // 1D
    check_case(simple_case(3, 2, 1, 20, 17, 5, 3, 2, 1, wf), 2, rng);    // 3D
    check_case(simple_case(2, 1, 1, 16, 16, 6, 1, 1, 0, wf), 2, rng);    // 1x1
    check_case(simple_case(2, 2, 4, 8, 8, 7, 3, 1, 1, wf), 2, rng);      // grouped
    check_case(simple_case(2, 2, 37, 1, 1, 9, 3, 2, 1, wf), 2, rng);     // depthwise
    check_case(simple_case(2, 2, 70, 1, 1, 6, 4, 2, 1, wf), 2, rng);     // depthwise, > 64 ch
    check_case(simple_case(2, 2, 6, 1, 3, 6, 3, 1, 1, wf), 2, rng);      // channel multiplier
    check_case(simple_case(2, 2, 5, 3, 1, 6, 3, 1, 1, wf), 2, rng);
  }
}

TEST(FastBackwardWeights, GroupedFewChannels) {
  // Several groups per vector (2, 4, 8 channels), tails of groups, both sides.
  std::mt19937 rng(8);
  const int64_t shapes[][3] = {{13, 2, 2}, {7, 4, 4}, {5, 1, 8}, {9, 2, 8}, {6, 8, 4},
                               {3, 8, 8},  {17, 1, 2}, {4, 4, 2}, {11, 3, 4}};
  for (const auto& sh : shapes)
    for (WeightsFormat wf : kFormats) {
      check_case(simple_case(2, 2, sh[0], sh[1], sh[2], 6, 3, 2, 1, wf), 2, rng);
      check_case(simple_case(1, 1, sh[0], sh[1], sh[2], 9, 2, 1, 0, wf), 1, rng);
    }
}

TEST(FastBackwardWeights, DilationsAsymmetricPadsOutputPadding) {
  std::mt19937 rng(9);
  for (WeightsFormat wf : kFormats) {
    Case c = simple_case(2, 2, 1, 21, 35, 7, 3, 2, 0, wf);
    c.d = {2, 3};
    c.pb = {0, 4};
    c.pe = {3, 1};
    c.op = {1, 2};  // below max(s, d)
    check_case(c, 2, rng);
    Case c3 = simple_case(3, 1, 3, 5, 6, 4, 2, 1, 0, wf);
    c3.d = {2, 1, 3};
    c3.pb = {1, 0, 2};
    c3.pe = {0, 1, 0};
    check_case(c3, 2, rng);
  }
}

TEST(FastBackwardWeights, StridesLargerThanKernel) {
  std::mt19937 rng(2);
  for (WeightsFormat wf : kFormats) {
    check_case(simple_case(2, 2, 1, 17, 19, 5, 2, 4, 0, wf), 2, rng);
    check_case(simple_case(1, 2, 1, 5, 23, 9, 1, 3, 0, wf), 2, rng);
  }
}

TEST(FastBackwardWeights, BatchZeroWritesZeros) {
  std::mt19937 rng(3);
  for (WeightsFormat wf : kFormats) {
    check_case(simple_case(2, 0, 1, 20, 24, 5, 3, 1, 1, wf), 2, rng);
    check_case(simple_case(1, 0, 8, 1, 1, 5, 3, 2, 1, wf), 2, rng);
  }
}

TEST(FastBackwardWeights, PadsHideEveryTap) {
  // Large pads: some taps never reach diff_dst and must come out zero.
  std::mt19937 rng(4);
  Case c = simple_case(1, 2, 1, 5, 7, 3, 5, 1, 0, WeightsFormat::XOI);
  c.pb = {4};  // dst size 3 + 5 - 1 - 4 = 3: taps 0 and 1 hit nothing
  c.pe = {0};
  check_case(c, 2, rng);
}

TEST(FastBackwardWeights, ThreadCounts) {
  std::mt19937 rng(5);
  // A weight gradient large enough that the threads split the items (not the
  // pixels), several chunks per thread; in the output and in scratch.
  for (int nt : {2, 3})
    for (WeightsFormat wf : {WeightsFormat::XOI, WeightsFormat::IOX})
      check_case(simple_case(2, 1, 1, 64, 128, 5, 4, 1, 1, wf), nt, rng);
  for (int nt : {1, 2, 3, 4}) {
    check_case(simple_case(2, 3, 1, 16, 16, 5, 1, 1, 0, WeightsFormat::IOX), nt, rng);
    check_case(simple_case(2, 3, 1, 30, 50, 6, 3, 2, 1, WeightsFormat::XOI), nt, rng);
    check_case(simple_case(2, 1, 20, 1, 1, 6, 3, 2, 1, WeightsFormat::XIO), nt, rng);
  }
}

TEST(FastBackwardWeights, WideLayersPacked) {
  // Wide channel counts (packed panels): long 1D kernels with stride (many
  // taps, vocoder-like k16 s8), dilation, tails of both tile sides, pixel
  // blocks shorter than the partition (N * I > 1024 / blocks), 1 to 3 threads.
  std::mt19937 rng(10);
  for (WeightsFormat wf : kFormats) {
    check_case(simple_case(1, 1, 1, 130, 136, 37, 16, 8, 4, wf), 2, rng);
    check_case(simple_case(1, 2, 1, 144, 129, 29, 12, 3, 2, wf), 1, rng);
    Case d = simple_case(1, 2, 1, 128, 160, 30, 7, 2, 3, wf);
    d.d = {3};
    d.op = {1};
    check_case(d, 2, rng);
    check_case(simple_case(2, 1, 2, 130, 128, 6, 4, 2, 1, wf), 3, rng);
    check_case(simple_case(1, 2, 1, 300, 64, 1000, 1, 1, 0, wf), 2, rng);  // several blocks
  }
  for (int nt : {1, 2, 3})
    check_case(simple_case(3, 1, 1, 200, 96, 4, 3, 1, 1, WeightsFormat::XOI), nt, rng);
}

TEST(FastBackwardWeights, CopiesOutweighActivations) {
  // Few multiply-adds per activation byte, but a weight gradient larger than
  // the activations (3D k2 s2 on 3^3, like U-Net's 320->320 on 7x7x5): the
  // threads split the tiles (one partition), reading every pixel each.
  std::mt19937 rng(16);
  for (WeightsFormat wf : kFormats)
    for (int nt : {2, 3}) check_case(simple_case(3, 1, 1, 136, 128, 3, 2, 2, 0, wf), nt, rng);
}

TEST(FastBackwardWeights, SharedPanels) {
  // Wide layers whose taps cover (nearly) every src pixel, or 85 % of them
  // when wide (128 x 128 channels and more): the A panels of a pixel block
  // serve all taps, and a tap's pixels outside get zero B rows.
  // Blocks across images (1D, N = 3: zero rows at each image's ends), no
  // waste at all (2D k2 s2, row pieces of several images), several blocks
  // per partition (1D k2 s2 on 2500 pixels); IOX/OIX pick A = src for it.
  std::mt19937 rng(14);
  for (WeightsFormat wf : kFormats)
    for (int nt : {1, 2, 3}) {
      check_case(simple_case(1, 3, 1, 128, 136, 100, 3, 1, 1, wf), nt, rng);
      check_case(simple_case(2, 2, 1, 130, 128, 7, 2, 2, 0, wf), nt, rng);
      check_case(simple_case(3, 1, 1, 64, 72, 5, 2, 2, 0, wf), nt, rng);  // 64x64+: packed too
      check_case(simple_case(2, 2, 1, 136, 130, 8, 4, 2, 1, wf), nt, rng);  // 88 % inside (DCGAN)
      check_case(simple_case(2, 2, 1, 136, 128, 8, 4, 2, 1, wf), nt, rng);  // same, A = src
    }
  check_case(simple_case(1, 1, 1, 129, 128, 2500, 2, 2, 0, WeightsFormat::XOI), 1, rng);
  check_case(simple_case(1, 1, 1, 129, 128, 2500, 2, 2, 0, WeightsFormat::IOX), 2, rng);
}

TEST(FastBackwardWeights, LargeIoxStreamed) {
  // An IOX gradient of 8 MiB (vocoder-like 512 -> 256, k16 s8): the final
  // pass writes whole runs of 16 taps with streaming stores.
  std::mt19937 rng(12);
  for (int nt : {1, 2}) check_case(simple_case(1, 1, 1, 512, 256, 2, 16, 8, 4, WeightsFormat::IOX), nt, rng);
}

TEST(FastBackwardWeights, LocalNBlocks) {
  // Taps-innermost results (IOX, OIX) of one pixel block whose taps cover
  // every src pixel: each item (an n-block x a run of m-blocks) runs all taps
  // into a per-thread buffer and writes its part of the result itself. Runs
  // split the m-blocks (several per n-block), tail n-blocks (144 = 4 x 32 + 16,
  // 136), two groups, 1 to 3 threads.
  std::mt19937 rng(21);
  for (WeightsFormat wf : {WeightsFormat::IOX, WeightsFormat::OIX})
    for (int nt : {1, 2, 3}) {
      check_case(simple_case(2, 2, 1, 160, 144, 3, 3, 2, 0, wf), nt, rng);  // 512 -> 512 k3 s2 on 4x4
      check_case(simple_case(3, 1, 2, 136, 130, 3, 2, 2, 0, wf), nt, rng);
    }
  // One group, 676 pixels of 800 channels (A panels beyond the usual block of
  // 327 pixels): one block with the A panels packed once for the threads.
  for (int nt : {1, 2}) check_case(simple_case(2, 1, 1, 800, 48, 26, 2, 2, 0, WeightsFormat::IOX), nt, rng);
}

TEST(FastBackwardWeights, FusedInnermostTaps) {
  // 1-3 diff_dst channels on the broadcast side, one group, dilation 1
  // innermost: groups of innermost taps share one tile; pixels at the line
  // ends that only some taps of a group reach go through per-tap tiles.
  // Odd K2 (a last group of one tap), pads (uneven tap ranges), strides,
  // the XOI result written in place and IOX through scratch, 1-3 threads.
  std::mt19937 rng(13);
  for (WeightsFormat wf : {WeightsFormat::XOI, WeightsFormat::IOX})
    for (int nt : {1, 2, 3}) {
      check_case(simple_case(2, 2, 1, 40, 3, 23, 11, 4, 3, wf), nt, rng);
      check_case(simple_case(1, 3, 1, 33, 2, 30, 5, 2, 2, wf), nt, rng);
      check_case(simple_case(1, 1, 1, 20, 1, 17, 4, 1, 3, wf), nt, rng);
      check_case(simple_case(3, 1, 1, 17, 3, 5, 3, 2, 1, wf), nt, rng);
      Case c = simple_case(2, 2, 1, 24, 2, 9, 3, 3, 0, wf);
      c.pb = {1, 2};
      c.pe = {0, 3};
      c.op = {1, 2};
      check_case(c, nt, rng);
      // A line of one pixel: no pixel is inside all taps of a group (each
      // tap's own pixels must still count).
      Case e = simple_case(2, 3, 1, 3, 2, 2, 3, 1, 1, wf);
      e.I = {2, 1};
      e.s = {3, 1};
      check_case(e, nt, rng);
    }
}

TEST(FastBackwardWeights, FewRowsWideTiles) {
  // One side of at most 6 channels, the other over 64 (AVX-512: 4-vector
  // tiles with the tail tile), as alexnet's 96->3 k11 s4 (fused taps, above)
  // would be without taps to fuse: dilation 2 innermost.
  std::mt19937 rng(11);
  for (WeightsFormat wf : kFormats) {
    check_case(simple_case(2, 2, 1, 100, 3, 9, 5, 4, 0, wf), 2, rng);
    check_case(simple_case(2, 1, 1, 6, 130, 7, 3, 2, 1, wf), 2, rng);
    check_case(simple_case(1, 2, 1, 5, 70, 30, 11, 4, 2, wf), 1, rng);
    Case c = simple_case(2, 2, 1, 100, 3, 9, 5, 4, 0, wf);
    c.d = {1, 2};
    c.pe = {0, 4};
    check_case(c, 2, rng);
  }
}

TEST(FastBackwardWeights, OneVectorTiles) {
  // One side within one vector (AVX-512 <= 16 channels, AVX2 <= 8) and the
  // other split into m-blocks of near-equal rows, at most the tile's (AVX-512
  // 14, AVX2 12): full tiles (12/8, 8/12: AVX2 12x8; 28/16: AVX-512 14x16),
  // tiles of fewer rows (10/8, 30/16), and tail column blocks of one vector
  // after wider ones (100/72, 72/100). All run on pixel pointer lists (the
  // packed panels' one-vector tiles: RealisticLayers, SharedPanels).
  std::mt19937 rng(12);
  for (WeightsFormat wf : kFormats) {
    check_case(simple_case(2, 2, 1, 12, 8, 6, 3, 1, 1, wf), 2, rng);
    check_case(simple_case(2, 2, 1, 8, 12, 6, 3, 1, 1, wf), 2, rng);
    check_case(simple_case(2, 1, 1, 28, 16, 5, 3, 1, 1, wf), 1, rng);
    check_case(simple_case(2, 2, 1, 10, 8, 5, 3, 1, 1, wf), 2, rng);
    check_case(simple_case(1, 2, 1, 30, 16, 40, 4, 1, 1, wf), 2, rng);
    check_case(simple_case(2, 1, 1, 100, 72, 7, 3, 2, 1, wf), 2, rng);
    check_case(simple_case(2, 1, 1, 72, 100, 7, 3, 1, 1, wf), 2, rng);
  }
}

TEST(FastBackwardWeights, RandomDense) {
  std::mt19937 rng(6);
  for (int it = 0; it < 200; ++it) {
    const int S = 1 + it % 3;
    auto uni = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    const int64_t ICg = uni(1, 70), OCg = uni(1, 70), N = uni(1, 3);
    const int64_t max_i = S == 1 ? 40 : S == 2 ? 9 : 5;
    check_case(random_case(rng, S, 1, ICg, OCg, N, max_i), 1 + it % 2, rng);
    if (HasFatalFailure()) return;
  }
}

TEST(FastBackwardWeights, RandomGrouped) {
  std::mt19937 rng(7);
  for (int it = 0; it < 200; ++it) {
    const int S = 1 + it % 3;
    auto uni = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    const int64_t kind = it % 4;
    const int64_t G = kind == 0 ? uni(2, 80) : uni(2, 6);
    const int64_t ICg = kind == 0 ? 1 : kind == 1 ? uni(1, 4) : uni(1, 24);
    const int64_t OCg = kind == 0 ? 1 : kind == 1 ? uni(1, 4) : uni(1, 24);
    const int64_t max_i = S == 1 ? 30 : S == 2 ? 8 : 4;
    check_case(random_case(rng, S, G, ICg, OCg, uni(1, 3), max_i), 2, rng);
    if (HasFatalFailure()) return;
  }
}

// The final transposes into taps-innermost layouts, alone. `run` writes a
// tile of `taps` x `nn` channels summed over nq copies of src (rows ld_t,
// copies ld_q apart) into dst as runs of ld_n floats; checks every float of
// dst (64-byte aligned, `span` floats): the runs, and nothing written past.
template <typename Run>
void check_tap_runs(Isa isa, const std::vector<float>& src, int64_t ld_t, int64_t ld_q, int nq,
                    int64_t taps, int nn, int64_t ld_n, bool stream, int64_t span, Run run) {
  std::vector<float> buf(static_cast<size_t>(span + 16), -7.f);
  float* dst = testing_views::aligned64(buf);
  run(dst);
  if (stream) (isa == Isa::Avx512 ? x86::bww::store_fence_avx512 : x86::bww::store_fence_avx2)();
  for (int64_t i = 0; i < span; ++i) {
    const int64_t n = i / ld_n, t = i % ld_n;
    float want = -7.f;
    if (n < nn && t < taps) {
      want = 0.f;
      for (int q = 0; q < nq; ++q) want += src[q * ld_q + t * ld_t + n];
    }
    ASSERT_EQ(dst[i], want) << isa_name(isa) << " nq " << nq << " taps " << taps << " nn " << nn
                            << " ld_n " << ld_n << " stream " << stream << " at " << i;
  }
}

std::vector<Isa> simd_isas() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::Avx512, Isa::Avx2})
    if (isa_supported(isa)) v.push_back(isa);
  return v;
}

// One chunk of up to 16 taps: every tap count (contiguous runs dst[n*nt + t]
// of 2-9 taps take the interleave path, the rest the 16x16 transpose),
// channel tails, 1-3 summed copies, a run stride larger than the taps,
// streaming stores.
TEST(FastBackwardWeights, TapTransposeMatchesNaive) {
  const int64_t ld_t = 37, ld_q = 16 * 37 + 5;
  std::vector<float> src(3 * ld_q);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i % 251) - 100.f;
  for (Isa isa : simd_isas()) {
    auto fn = isa == Isa::Avx512 ? x86::bww::transpose_avx512 : x86::bww::transpose_avx2;
    for (int nq = 1; nq <= 3; ++nq)
      for (int nt = 1; nt <= 16; ++nt)
        for (int nn = 1; nn <= 16; ++nn)
          for (int64_t ld_n : {int64_t{nt}, int64_t{nt} + 3, int64_t{16}})
            for (bool stream : {false, true}) {
              if (ld_n < nt) continue;
              check_tap_runs(isa, src, ld_t, ld_q, nq, nt, nn, ld_n, stream, 16 * 19 + 48,
                             [&](float* dst) { fn(src.data(), ld_t, ld_q, nq, nt, nn, dst, ld_n, stream); });
              if (HasFatalFailure()) return;
            }
  }
}

// The pieces' copies summed (the final passes): hand-computed sums in piece
// order, written contiguously (whole rows) or at a stride, runs around the
// 64-float chunk, copies far apart; nothing else of dst touched.
TEST(FastBackwardWeights, SumPiecesAddsPiecesInOrder) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int n : {1, 2, 5, 8})
    for (int64_t len : {1, 7, 63, 64, 65, 200})
      for (int64_t stride : {1, 3})
        for (bool acc : {false, true}) {
          const int64_t ld = len + 13;
          std::vector<float> copies(static_cast<size_t>(n * ld));
          for (float& v : copies) v = u(rng);
          std::vector<float> dst(static_cast<size_t>(len * stride) + 8), want;
          for (float& v : dst) v = u(rng);
          want = dst;
          for (int64_t i = 0; i < len; ++i) {
            float s = copies[i];
            for (int q = 1; q < n; ++q) s += copies[q * ld + i];
            want[i * stride] = acc ? want[i * stride] + s : s;
          }
          x86::sum_pieces(copies.data(), ld, n, len, dst.data(), stride, acc);
          for (size_t i = 0; i < dst.size(); ++i)
            ASSERT_EQ(dst[i], want[i]) << "n " << n << " len " << len << " stride " << stride
                                       << " acc " << acc << " i " << i;
        }
}

// All taps of a tile at once (the chunks of 16; AVX-512 stages contiguous
// runs of 17-64 taps in L1): tap counts around the chunk and staging limits.
TEST(FastBackwardWeights, AllTapsTransposeMatchesNaive) {
  const int64_t ld_t = 19, ld_q = 70 * 19 + 3;
  std::vector<float> src(2 * ld_q);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i % 241) - 120.f;
  for (Isa isa : simd_isas()) {
    auto fn = isa == Isa::Avx512 ? x86::bww::transpose_taps_avx512 : x86::bww::transpose_taps_avx2;
    for (int nq = 1; nq <= 2; ++nq)
      for (int64_t taps : {1, 9, 16, 17, 27, 32, 33, 64, 65, 70})
        for (int nn : {1, 5, 15, 16})
          for (int64_t extra : {0, 2})
            for (bool stream : {false, true}) {
              const int64_t ld_n = taps + extra;
              check_tap_runs(isa, src, ld_t, ld_q, nq, taps, nn, ld_n, stream, 16 * 72 + 16,
                             [&](float* dst) { fn(src.data(), ld_t, ld_q, nq, taps, nn, dst, ld_n, stream); });
              if (HasFatalFailure()) return;
            }
  }
}

}  // namespace
}  // namespace tct
