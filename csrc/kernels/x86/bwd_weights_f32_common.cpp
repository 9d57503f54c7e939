// Driver of the f32 backward-weights pass on dense channels-last activations:
//   diff_W[g*ICg+a, b, k] = sum_n sum_i src[n, i, g*ICg+a] * diff_dst[n, i*s-pb+k*d, g*OCg+b].
// Per kernel tap this is a GEMM C[m][n] += sum_p A[p][m] * B[p][n] whose
// reduction runs over the src pixels p whose tapped dst position is inside
// diff_dst (per tap a box of src positions). One side is broadcast (m), the
// other is the vector side (n): src channels x diff_dst channels or the
// transpose, whichever the output layout and the channel counts favour.
// There is no im2col buffer: a block of pixels gets, per tap, a list of
// (A row, B row) pointer pairs, and register-tile micro-kernels (see
// bwd_weights_f32.h) reduce over that list into an accumulator tile in memory.
// Wide layers (Mg*Ng >= 128*128; 64*64 with shared panels) first copy the
// listed rows into packed panels (per thread: up to 1024 pixels x all m,
// plus one n-block), so that tiles stream contiguous memory and one long
// block covers most layers: each accumulator tile is then written once
// (fresh), not re-read. When the taps cover nearly every src pixel (1D,
// k = s, 1x1), the src panels of a block are packed once for all taps
// instead of per tap (shared panels).
// Depthwise (ICg == OCg == 1) vectorizes over the groups instead.
//
// Work items are the tiles (tap, group, n-block, m-block; packed layers: runs
// of m-blocks). Threads split the items (no extra memory; every thread reads
// all pixels) and the pixels are split into P = reduction_pieces()
// partitions with a copy of the gradient each, summed at the end in
// partition order. P and the pixel blocks are functions of the problem, never
// of the thread count, and each tile sums its partition's blocks in order, so
// the bits are the same for any thread count (SPEC 5). Partition 0
// accumulates straight into the output when its layout has the vector side
// contiguous (XOI, XIO), else into a scratch copy that is written out in the
// output's strides (layouts with the taps innermost, IOX/OIX: 16x16 register
// transposes); with one pixel block for all pixels, each item instead runs
// all taps of its tiles into a per-thread buffer and writes them out itself
// (local n-blocks, no scratch copy). Extra memory: at most P copies of the
// weight gradient (P <= 8, their size within a quarter of the activations or
// 512 KiB unless P = 1), plus per-thread pixel lists and packed panels (at most
// ~1.3 MiB per thread) and the local n-block buffer (at most 512 KiB per
// thread; with one group the A panels of all pixels, at most 4 MiB, shared).
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <memory>
#include <sstream>
#include <tuple>
#include <vector>

#include "bwd_weights_f32.h"
#include "x86.h"

namespace tct {
namespace x86 {
namespace {

using bww::BwdWeightsPlan;
using bww::Item;
using bww::Pix;
using bww::TileArgs;

// Where the tiles of one pixel partition accumulate: element (tap, g, m, n)
// lives at base + tap_off[tap] + g*g_stride + m*m_stride + n.
struct Target {
  float* base;
  const int64_t* tap_off;
  int64_t g_stride, m_stride;
  float* tile(const Item& it) const {
    return base + tap_off[it.tap] + it.g * g_stride + it.m0 * m_stride + it.n0;
  }
};

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// A buffer of n floats, 64-byte aligned. Large ones (scratch copies of the
// weight gradient) start on a 2 MiB boundary and their whole 2 MiB chunks
// are marked for huge pages (no rounding up: no extra memory): each call gets
// fresh memory, and first-touch faults of 4 KiB pages cost ~2 ms per 8 MiB
// (vocoder 512->256 k16 scratch) during the tiles' stores.
float* alloc_floats(size_t n) {
  const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
  constexpr size_t kHuge = size_t{2} << 20;
  if (bytes < 2 * kHuge) return static_cast<float*>(std::aligned_alloc(64, bytes));
  void* p = nullptr;
  if (posix_memalign(&p, kHuge, bytes) != 0) return nullptr;
#ifdef MADV_HUGEPAGE
  madvise(p, bytes / kHuge * kHuge, MADV_HUGEPAGE);
#endif
  return static_cast<float*>(p);
}

// Contiguous split of the items over `parts` threads with balanced cost.
// Returns the largest per-thread cost; bounds gets parts+1 item indices.
double split_items(const std::vector<Item>& items, int parts, std::vector<int64_t>& bounds) {
  double total = 0;
  for (const Item& it : items) total += it.cost;
  bounds.assign(parts + 1, 0);
  int64_t idx = 0;
  double cum = 0;
  for (int j = 1; j < parts; ++j) {
    const double goal = total * j / parts;
    while (idx < static_cast<int64_t>(items.size()) && cum + items[idx].cost * 0.5 < goal)
      cum += items[idx++].cost;
    bounds[j] = idx;
  }
  bounds[parts] = static_cast<int64_t>(items.size());
  double worst = 0;
  for (int j = 0; j < parts; ++j) {
    double c = 0;
    for (int64_t i = bounds[j]; i < bounds[j + 1]; ++i) c += items[i].cost;
    worst = std::max(worst, c);
  }
  return worst;
}

// Splits n into k nearly equal parts; returns the start of part j.
int64_t part_start(int64_t n, int64_t k, int64_t j) { return n / k * j + std::min(j, n % k); }


const bww::BwdWeightsF32Table* table_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return bww::bwd_weights_f32_table_avx512();
    case Isa::Avx2: return bww::bwd_weights_f32_table_avx2();
    default: return nullptr;
  }
}

}  // namespace

int reduction_pieces(double act_floats, double grad_floats, int64_t units) {
  const double budget = std::max(0.25 * act_floats, 131072.0);  // floats of the extra copies
  const double by_memory = budget / std::max(1.0, grad_floats);
  const double n = std::min({static_cast<double>(kMaxReductionPieces),
                             static_cast<double>(units), 1.0 + by_memory});
  return std::max(1, static_cast<int>(n));
}

bool innermost_taps_fusable(const ConvProblem& p) {
  return p.G == 1 && p.d[2] == 1 && p.K[2] > 1 && p.ICg * p.OCg < 128 * 128;
}

namespace bww {

BwdWeightsPlan plan_bwd_weights(Isa isa, const ConvProblem& p, const WeightsView& diff_w,
                                int nthreads) {
  BwdWeightsPlan pl;
  pl.tab = table_for(isa);
  pl.p = p;
  if (!pl.tab) return pl;  // Route::Reference
  const BwdWeightsF32Table& tab = *pl.tab;
  const int nt = std::max(1, nthreads);
  pl.nt = nt;
  const int64_t G = p.G, ICg = p.ICg, OCg = p.OCg, IC = p.IC(), OC = p.OC();
  const int64_t taps = p.taps();
  pl.taps = taps;
  pl.route = BwdWeightsPlan::Route::Empty;
  if (G <= 0 || ICg <= 0 || OCg <= 0 || taps <= 0) return pl;  // no element to write
  const int64_t si = diff_w.si, so = diff_w.so;
  pl.si = si, pl.so = so;

  // Output offset of each tap, and per axis the box of src positions whose
  // tapped dst position lies inside diff_dst: lo <= i < hi.
  std::vector<int64_t>& koff = pl.koff;
  koff.resize(taps);
  std::vector<int64_t>* lo = pl.lo;
  std::vector<int64_t>* hi = pl.hi;
  for (int ax = 0; ax < kAxes; ++ax) {
    lo[ax].resize(p.K[ax]);
    hi[ax].resize(p.K[ax]);
    for (int64_t k = 0; k < p.K[ax]; ++k) std::tie(lo[ax][k], hi[ax][k]) = p.tap_src_range(ax, k);
  }
  std::vector<double> tap_pixels(taps);
  double all_pixels = 0;
  for (int64_t t = 0; t < taps; ++t) {
    const int64_t k0 = t / (p.K[1] * p.K[2]), k1 = (t / p.K[2]) % p.K[1], k2 = t % p.K[2];
    koff[t] = k0 * diff_w.sk[0] + k1 * diff_w.sk[1] + k2 * diff_w.sk[2];
    tap_pixels[t] = static_cast<double>(p.N) * (hi[0][k0] - lo[0][k0]) *
                    (hi[1][k1] - lo[1][k1]) * (hi[2][k2] - lo[2][k2]);
    all_pixels += tap_pixels[t];
  }
  pl.all_pixels = all_pixels;
  if (all_pixels == 0) {  // N == 0, or no tap ever inside diff_dst: all zeros
    pl.route = BwdWeightsPlan::Route::Zeros;
    return pl;
  }
  pl.route = BwdWeightsPlan::Route::Tiles;

  // Share of the (tap, src pixel) pairs whose tapped position is inside:
  // near 1 when every tap covers (almost) every pixel (1D with long rows,
  // kernels that tile the output, 1x1).
  const int64_t F = p.N * p.src_spatial();  // flat src pixels (n, i0, i1, i2)
  pl.F = F;
  const bool low_waste = all_pixels >= 0.98 * static_cast<double>(taps) * F;
  // Mg * Ng from which tiles use packed panels; with shared A panels (below)
  // from 64 x 64 (U-Net k2 s2 128->64: 1.15-1.25x; 64 x 32 gains nothing).
  constexpr int64_t kWide = 128 * 128, kWideShared = 64 * 64;
  // Shared A panels (below) multiply zero B rows where a tap falls outside;
  // wide layers take up to 15 % of such waste for packing A once per block
  // instead of once per tap (and, with one block, local n-blocks): DCGAN's
  // k4 s2 p1 512 -> 256 on 8x8 (88 % inside) and 512 -> 256 on 32x32 (97 %)
  // 1.05x on Zen 5, interleaved A/B.
  const bool share_ok =
      low_waste || (ICg * OCg >= kWide && all_pixels >= 0.85 * static_cast<double>(taps) * F);
  pl.low_waste = low_waste, pl.share_ok = share_ok;

  const int lanes = tab.lanes;
  const int max_vecs = tab.max_vecs;
  const int* rows_of = tab.rows;

  // Shape of the GEMMs. vec_b: n = diff_dst channel b, m = src channel a
  // (A = src); else n = a, m = b (A = diff_dst). Depthwise (ICg == OCg == 1):
  // n runs over the groups, with vec_b's addressing.
  const bool depthwise = ICg == 1 && OCg == 1;
  auto vecs = [&](int64_t c) { return (c + lanes - 1) / lanes; };
  // Vector FMAs per pixel plus a share for the broadcasts of the m side.
  auto gemm_cost = [&](int64_t Mg, int64_t Ng) {
    return static_cast<double>(vecs(Ng) * Mg) + 0.25 * Mg;
  };
  // Grouped with few channels per group: the vector side holds 2, 4 (or 8
  // on AVX-512) channels of each of several groups, the other side at most
  // as many; the plain GEMM would leave most lanes idle.
  auto grouped_ok = [&](int64_t m, int64_t n) {
    return G > 1 && (n == 2 || n == 4 || n == 8) && n <= tab.grouped_max_cols && m <= n;
  };
  bool vec_b = true, direct = false, grouped = false;
  if (depthwise) {
    direct = si == 1 || G == 1;
  } else if (grouped_ok(ICg, OCg) || grouped_ok(OCg, ICg)) {
    grouped = true;
    const bool ok_b = grouped_ok(ICg, OCg), ok_a = grouped_ok(OCg, ICg);
    if (ok_b && (so == 1 || !ok_a)) vec_b = true;
    else vec_b = false;
    direct = vec_b ? so == 1 : si == 1;
  } else {
    const double cost_b = gemm_cost(ICg, OCg), cost_a = gemm_cost(OCg, ICg);
    const bool direct_b = so == 1 || OCg == 1, direct_a = si == 1 || ICg == 1;
    const double best = std::min(cost_b, cost_a);
    if (direct_b && cost_b <= 1.05 * best) {
      vec_b = true, direct = true;
    } else if (direct_a && cost_a <= 1.05 * best) {
      vec_b = false, direct = true;
    } else {
      // Through scratch either way; A = src can share its panels across taps
      // (below), worth a few % more FMAs.
      // Also when 85 % of the pairs are inside (share_ok) and the diff_dst
      // channels fill whole two-vector tiles: DCGAN k4 s2 512 -> 256 1.12x,
      // 256 -> 128 1.03x, 512 -> 256 on 32x32 1.05-1.07x (NXC and NCX, Zen 5;
      // GoogLeNet 4d's 144 channels, 4.5 tiles, ran 10 % slower that way).
      const bool prefer_src =
          low_waste || (share_ok && OCg % (2 * int64_t{lanes}) == 0);
      vec_b = cost_b <= cost_a * (prefer_src && ICg * OCg >= kWideShared ? 1.1 : 1.0);
    }
  }
  const int64_t Mg = vec_b ? ICg : OCg, Ng = vec_b ? OCg : ICg;
  // Packed panels (see the pixel block size below).
  const bool packed =
      !depthwise && !grouped && Mg * Ng >= (low_waste && vec_b ? kWideShared : kWide);
  pl.kernel = depthwise ? BwdWeightsPlan::Kernel::Depthwise
              : grouped ? BwdWeightsPlan::Kernel::Grouped
                        : BwdWeightsPlan::Kernel::Gemm;
  pl.vec_b = vec_b, pl.direct = direct, pl.Mg = Mg, pl.Ng = Ng, pl.packed = packed;

  // Work items. GEMM: tap-major; within a tap the m-blocks of one n-block
  // are adjacent, so the B panel of that n-block stays in L1 across them.
  // Depthwise: channel-block-major, so a block's pixels of those channels stay
  // in L1 across the taps. Grouped: per tap, runs of consecutive groups.
  // n-blocks: the whole group when it fits one tile (up to 6x64 on AVX-512),
  // else 2 vectors (14x32 tiles: half the B panel of 6x64, so a longer pixel
  // block stays in L1; both measured alike on wide layers).
  // Few rows (m side within the widest tile's rows, e.g. 96->3): the widest
  // tiles, so that each broadcast feeds more FMAs.
  // Fused taps: with few diff_dst channels on the broadcast side (one
  // group, dilation 1 on the innermost axis), the (k2, b) pairs of kf
  // consecutive innermost taps are consecutive floats of diff_dst, so one
  // tile of kf*Mg rows x 2 vectors serves kf taps (AlexNet's 96->3 k11: AVX2
  // 6x16 tiles instead of 3x24, each src row loaded once for two taps;
  // AVX-512 12x32 instead of 3x64, 1.15x on Zen 4, DCGAN's 64->3 1.35x). The
  // pixels inside all kf taps' ranges go through the fused tile, the others
  // through per-tap tiles of the same item. The weight gradient's rows must
  // then be evenly spaced across those taps (direct: k2 stride Mg * so;
  // scratch: planes without padding).
  int kf = 1;
  if (!vec_b && !depthwise && !grouped && innermost_taps_fusable(p) &&
      (!direct || diff_w.sk[2] == Mg * so))
    kf = static_cast<int>(std::min<int64_t>(p.K[2], rows_of[2] / Mg));
  if (kf < 2) kf = 1;
  const int gemm_vecs = kf > 1                              ? 2
                        : vecs(Ng) <= max_vecs              ? static_cast<int>(vecs(Ng))
                        : Mg <= rows_of[max_vecs] ? max_vecs
                                                  : std::min(max_vecs, 2);
  // One m-blocking for all n-blocks (rows_of shrinks with the vectors, so the
  // narrower tail n-block takes these rows too).
  const int rows_main = rows_of[std::min<int64_t>(gemm_vecs, vecs(Ng))];
  const int64_t mblocks = (Mg + rows_main - 1) / rows_main;
  std::vector<int64_t> m_starts(static_cast<size_t>(mblocks + 1));  // m-blocks of nearly equal size
  for (int64_t j = 0; j <= mblocks; ++j) m_starts[j] = part_start(Mg, mblocks, j);
  std::vector<Item>& items = pl.items;
  int max_cols = 0;
  if (depthwise) {
    const int64_t width = static_cast<int64_t>(lanes) * tab.dw_vecs;
    for (int64_t c0 = 0; c0 < G; c0 += width) {
      const int cols = static_cast<int>(std::min(width, G - c0));
      for (int64_t t = 0; t < taps; ++t)
        items.push_back({t, c0, 0, 0, 1, cols, tap_pixels[t] * (2.0 * vecs(cols) + 1.0)});
      max_cols = std::max(max_cols, cols);
    }
  } else if (grouped) {
    const int64_t per_vec = lanes / Ng;
    const int64_t per_call = per_vec * (Mg <= 4 ? tab.grouped_vecs_few_rows : tab.grouped_vecs);
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t g0 = 0; g0 < G; g0 += per_call) {
        const int64_t ng = std::min(per_call, G - g0);
        Item it{t, g0, 0, 0, static_cast<int>(Mg), static_cast<int>(Ng),
                tap_pixels[t] * (1.5 * Mg + 1.0) * vecs(ng * Ng)};
        it.groups = static_cast<int>(ng);
        items.push_back(it);
      }
    max_cols = 4 * lanes;
  } else if (kf > 1) {  // one m-block (kf * Mg rows), groups of kf innermost taps
    for (int64_t t = 0, fk = 0; t < taps; t += fk) {  // groups end at the end of a row of taps
      fk = std::min<int64_t>(kf, p.K[2] - t % p.K[2]);
      double px = 0;
      for (int j = 0; j < fk; ++j) px += tap_pixels[t + j];
      for (int64_t n0 = 0; n0 < Ng;) {
        const int nv = static_cast<int>(std::min<int64_t>(2, vecs(Ng - n0)));
        const int cols = static_cast<int>(std::min<int64_t>(Ng - n0, int64_t{nv} * lanes));
        Item it{t, 0, 0, n0, static_cast<int>(fk * Mg), cols, px * (Mg * nv + 3.0)};
        it.fk = static_cast<int>(fk);
        items.push_back(it);
        max_cols = std::max(max_cols, cols);
        n0 += cols;
      }
    }
  } else {
    // Packed: runs of mper m-blocks per item, enough items for the threads'
    // chunks to balance and few enough to build them cheaply (one item per
    // tile made 22K items, 0.5 ms of a 9 ms layer, for hifigan 512->256 k16).
    // Unpacked tiles are short (pixel blocks of ~100), one per item.
    const int64_t nblocks_n = (Ng + int64_t{gemm_vecs} * lanes - 1) / (int64_t{gemm_vecs} * lanes);
    const int64_t tiles = taps * G * nblocks_n * mblocks;
    const int64_t mper = packed ? std::clamp<int64_t>(tiles / (64 * int64_t{nt}), 1, mblocks) : 1;
    pl.mper = mper;
    items.reserve(static_cast<size_t>(taps * G * nblocks_n * ((mblocks + mper - 1) / mper)));
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t g = 0; g < G; ++g)
        for (int64_t n0 = 0; n0 < Ng;) {
          const int64_t left = Ng - n0;
          const int nv = static_cast<int>(std::min<int64_t>(gemm_vecs, vecs(left)));
          const int cols = static_cast<int>(std::min<int64_t>(left, int64_t{nv} * lanes));
          for (int64_t j = 0; j < mblocks; j += mper) {
            const int64_t j1 = std::min(mblocks, j + mper);
            const int64_t m0 = m_starts[j];
            Item it{t, g, m0, n0, static_cast<int>(m_starts[j + 1] - m0), cols,
                    tap_pixels[t] * ((m_starts[j1] - m0) * nv + 3.0 * (j1 - j))};
            it.mj = j;
            it.mj_end = j1;
            items.push_back(it);
          }
          max_cols = std::max(max_cols, cols);
          n0 += cols;
        }
  }

  // Pixel partitions. Splitting the items over threads (P = 1) needs no
  // extra memory, but every thread then reads all pixels once per chunk of
  // items. Splitting the pixels too (each partition with its own copy of the
  // weight gradient, summed at the end) balances few items and saves the
  // re-reads, while the copies stay small next to the activations (summing
  // them otherwise costs more than the re-reads; Zen 4: 3D U-Net 320->320
  // k2 s2 on 7x7x5, copies 1.1x the activations, 1.2x faster with P = 1,
  // the z -> 4x4 generator layer 1.5x). The count is reduction_pieces(): a
  // function of the problem (up to 8 partitions of at least 64 pixels, the
  // copies within a quarter of the activations or 512 KiB), not of the
  // threads, which run the partitions as tasks, several each when there are
  // more partitions than threads.
  const int64_t wsize = taps * G * Mg * Ng;
  const double act_floats =
      static_cast<double>(F) * IC + static_cast<double>(p.N) * p.dst_spatial() * OC;
  const int P = reduction_pieces(act_floats, static_cast<double>(wsize), F / 64);
  const int per_part = std::max(1, nt / P);

  // Pixel block size. GEMM: one tile call reads a line of A and max_cols
  // floats of B per pixel; keep those of a block within ~24 KiB of L1.
  // Depthwise: the block's src and tapped diff_dst rows of one channel block.
  // AVX2 (Zen 3, 1-7 %): the B rows of up to four n-blocks, so that the
  // block's src rows stay in L1 across the n-blocks of a tap.
  const int64_t b_width =
      tab.l1_b_blocks > 1 ? std::min<int64_t>(Ng, int64_t{tab.l1_b_blocks} * max_cols) : max_cols;
  int64_t block = depthwise ? 16384 / (4 * max_cols) : 24576 / (64 + 4 * b_width);
  block = std::clamp<int64_t>(block, 16, 1024);
  // Packed GEMM, for wide layers: per pixel block and tap, the A side of
  // all m-blocks is copied into contiguous panels and the B side of one
  // n-block into one panel, reused by every m-block. The tiles then stream
  // contiguous memory: unpacked, the pixel rows of a strided layer lie s*C
  // floats apart (vocoder k16 s8: 8 KiB), so a tile's rows share one L1 set
  // and each pixel is on another page. Packing makes long pixel blocks
  // possible (up to 1024 pixels, A panels within 1 MiB of L2), so the
  // accumulator tiles are loaded and stored once per long block; with one
  // block per partition each tile is written once, never read (fresh).
  // Narrow layers (64x32 channels) lose: the copies cost as much as the FMAs.
  // Shared A panels: with A = src and low waste, the block's A panels are
  // packed once for all taps (not per tap), and each tap's list holds every
  // pixel of the block, its B row zero where the tap falls outside (hifigan
  // 512->256 k16: 16x fewer A copies).
  const int64_t ldb_max = static_cast<int64_t>(gemm_vecs) * lanes;
  // A partition a little longer than that is one block when its A panels
  // stay within 2 MiB (L3): each accumulator tile is then written once instead
  // of loaded and stored per block (3D U-Net k3 512 -> 256 on 8x9x9, 648
  // pixels: 14 MB of accumulators, Zen 5 1.05-1.08x).
  if (packed) {
    block = std::clamp<int64_t>(262144 / Mg, 16, 1024);
    const int64_t part_pixels = (F + P - 1) / P;
    if (part_pixels > block && part_pixels <= 1024 && part_pixels * Mg <= 524288)
      block = part_pixels;
  }

  // Output with the taps innermost (IOX, OIX: each (m, n) has its taps at
  // +0, +1, ...): written from scratch [tap][m][n] by a final transposing pass.
  bool taps_inner = !direct && taps > 1;
  for (int64_t t = 0; t < taps && taps_inner; ++t) taps_inner = koff[t] == t;
  // Local n-blocks: when one pixel block covers all pixels (one partition,
  // packed, A = src shared by the taps), an item is an n-block x a run of
  // m-blocks with all its taps, computed into a per-thread buffer
  // [tap][m][n] of at most 512 KiB (L2) and written out in the output's order
  // right after (taps innermost: runs of taps x 16 channels). The whole
  // scratch copy of the weight gradient (written by the tiles, read back by
  // the final pass: the 512 -> 512 k3 s2 layer's 9.4 MB twice) never
  // reaches memory; the B panel of each (n-block, tap) is packed once per run
  // of m-blocks instead of once (a copy of block x 32 floats per run of
  // 100+ rows of FMAs).
  // Items are single tasks, claimed dynamically: runs of m-blocks short
  // enough for 4 items per thread (10 items on 2 threads left one thread
  // idle for a fifth of the 3D U-Net 320 -> 320 layer; 8 per thread, more B
  // panel copies, were 1-8 % slower in rotated A/B runs).
  const int64_t ln_cols = int64_t{gemm_vecs} * lanes;
  const int64_t nblocks_local = G * ((Ng + ln_cols - 1) / ln_cols);
  int64_t run_mb =
      std::min<int64_t>(mblocks, (512 * 1024 / 4) / std::max<int64_t>(1, taps * rows_main * ln_cols));
  if (run_mb >= 1) {
    const int64_t want = (4 * int64_t{nt} + nblocks_local - 1) / nblocks_local;
    const int64_t runs = std::min(mblocks, std::max((mblocks + run_mb - 1) / run_mb, want));
    run_mb = (mblocks + runs - 1) / runs;
  }
  const bool local_shape = !depthwise && !grouped && packed && kf == 1 && P == 1 &&
                           taps_inner && vec_b && share_ok && F <= 65536 / taps && run_mb >= 1;
  // One group: the A panels of all pixels are packed once, shared by the
  // threads, so a longer block is worth it: up to 2048 pixels whose panels
  // fit in 4 MiB (L3) make one block (U-Net 1024 -> 512 k2 s2 on 23x30, 690
  // pixels, 2.8 MB of panels, was 3 blocks of 256 into an 8 MB scratch:
  // 1.14-1.19x NXC, 1.11x NCX on Zen 5).
  if (local_shape && G == 1 && F > block && F <= 2048 && F * Mg <= (int64_t{1} << 20)) block = F;
  const bool local = local_shape && F <= block;
  const bool local_shared_a = local && G == 1;
  int64_t local_rows = 0;  // rows of the largest run
  const bool local_stream = 4.0 * wsize >= 8.0 * 1024 * 1024;  // as the final pass
  if (local) {
    items.clear();
    for (int64_t g = 0; g < G; ++g)
      for (int64_t n0 = 0; n0 < Ng;) {
        const int nv = static_cast<int>(std::min<int64_t>(gemm_vecs, vecs(Ng - n0)));
        const int cols = static_cast<int>(std::min<int64_t>(Ng - n0, int64_t{nv} * lanes));
        for (int64_t j = 0; j < mblocks; j += run_mb) {
          const int64_t j1 = std::min(mblocks, j + run_mb);
          const int64_t m0 = m_starts[j];
          Item it{0, g, m0, n0, static_cast<int>(m_starts[j + 1] - m0), cols,
                  all_pixels * ((m_starts[j1] - m0) * nv + 3.0 * (j1 - j) + 0.1 * cols)};
          it.mj = j;
          it.mj_end = j1;
          items.push_back(it);
          local_rows = std::max(local_rows, m_starts[j1] - m0);
        }
        n0 += cols;
      }
  }


  pl.kf = kf, pl.gemm_vecs = gemm_vecs, pl.rows_main = rows_main, pl.mblocks = mblocks;
  pl.m_starts = m_starts;
  pl.max_cols = max_cols;
  pl.P = P, pl.per_part = per_part;
  pl.taps_inner = taps_inner, pl.run_mb = run_mb, pl.local = local;
  pl.local_shared_a = local_shared_a, pl.local_stream = local_stream;
  pl.ln_cols = ln_cols, pl.local_rows = local_rows;

  // Targets: partition 0 writes the output (direct) or scratch 0.
  // Scratch: per copy the taps' planes of G*Mg*Ng floats, each padded by a
  // line so that the final pass's reads of one row of every tap (planes a
  // multiple of 4 KiB apart, e.g. 512 KiB) do not all fall in one cache set.
  pl.plane = kf > 1 ? G * Mg * Ng : (G * Mg * Ng + 15) / 16 * 16 + 16;
  pl.wstride = taps * pl.plane;  // floats per scratch copy
  pl.nbuf = local ? 0 : direct ? P - 1 : P;

  // Tasks: (pixel partition, chunk of items), claimed dynamically, so that a
  // thread that starts late (shared machine) or runs slow takes fewer. Two
  // chunks per thread of a partition keep the tail short; each chunk re-reads
  // the partition's pixels, so a partition of one thread is one chunk.
  const int nchunks = local           ? static_cast<int>(items.size())
                      : per_part == 1 ? 1
                                      : static_cast<int>(std::max<int64_t>(
                                            1, std::min<int64_t>(items.size(), 2 * per_part)));
  std::vector<int64_t>& chunk = pl.chunk;
  split_items(items, nchunks, chunk);
  pl.nchunks = nchunks;
  pl.ntasks = static_cast<int64_t>(P) * nchunks;
  // Per thread: a pixel list per tap (of its chunk's tap span) of a block.
  int64_t max_span = 1;
  for (int c = 0; c < nchunks; ++c) {
    int64_t lo_t = taps, hi_t = -1;
    for (int64_t i = chunk[c]; i < chunk[c + 1]; ++i)
      lo_t = std::min(lo_t, items[i].tap), hi_t = std::max(hi_t, items[i].tap);
    max_span = std::max(max_span, hi_t - lo_t + 1);
  }
  if (local) max_span = taps;  // an item runs every tap
  pl.max_span = max_span;
  // At most ~1 MiB of pixel lists per thread (many taps, tiny channel counts);
  // capped by the taps, not by the chunk's span (the chunks follow the
  // threads, the blocks must not: they set the order of the sums).
  block = std::min(block, std::max<int64_t>(16, 65536 / taps));
  pl.block = block;
  pl.pack_floats =
      !packed          ? 0
      : local_shared_a ? block * ldb_max
                       : block * (Mg + ldb_max) + mblocks * bww::kPanelSlack;
  pl.shared_a_floats = local_shared_a ? block * Mg + mblocks * bww::kPanelSlack : 0;
  pl.local_floats = local ? taps * local_rows * ln_cols : 0;
  pl.gbuf_floats = grouped ? 4 * lanes * lanes : 0;

  pl.a_is_src = vec_b || depthwise;
  pl.a_len = pl.a_is_src ? IC : OC;  // floats of an A pixel row
  pl.shared_a = packed && pl.a_is_src && share_ok;
  pl.src_step = IC, pl.dst_step = p.s[2] * OC;
  pl.a_gstride = pl.a_is_src ? ICg : OCg, pl.b_gstride = pl.a_is_src ? OCg : ICg;
  pl.prefetch = !depthwise;

  // The final pass over the pieces' copies.
  if (local || !(P > 1 || !direct)) {
    pl.final = BwdWeightsPlan::Final::None;
  } else if (taps_inner) {
    pl.final = BwdWeightsPlan::Final::Transpose;
    const int64_t on = vec_b ? so : si, om = vec_b ? si : so;
    pl.final_stream = 4.0 * wsize >= 8.0 * 1024 * 1024;  // output beyond 2 L2s and more
    // Walk the output in its order (the dim of larger stride outer):
    // across the far rows it would take a TLB miss per run of taps.
    pl.final_n_outer = std::abs(on) > std::abs(om);
  } else {
    pl.final = BwdWeightsPlan::Final::Sum;
    const int64_t om = vec_b ? si : so, on = vec_b ? so : si;  // output strides of m, n
    // Dims 0 = tap, 1 = m, 2 = n, sorted by output stride: ord[0] innermost.
    const int64_t tap_stride = taps > 1 ? std::abs(koff[1] - koff[0]) : 0;
    const int64_t dim_stride[3] = {tap_stride, std::abs(om), std::abs(on)};
    int* ord = pl.final_ord;
    std::sort(ord, ord + 3, [&](int x, int y) { return dim_stride[x] < dim_stride[y]; });
  }
  return pl;
}

int64_t BwdWeightsPlan::scratch_bytes() const {
  return static_cast<int64_t>(sizeof(float)) * nbuf * wstride;
}

int64_t BwdWeightsPlan::shared_bytes() const {
  return static_cast<int64_t>(sizeof(float)) * shared_a_floats +
         (local_shared_a ? static_cast<int64_t>(sizeof(Pix)) * F : 0);
}

int64_t BwdWeightsPlan::per_thread_bytes() const {
  if (route != Route::Tiles) return 0;
  const int64_t pix = max_span * block + (kf > 1 ? (kf + 1) * block : 0);
  return static_cast<int64_t>(sizeof(Pix)) * pix +
         static_cast<int64_t>(sizeof(float)) * (pack_floats + local_floats + gbuf_floats) +
         (packed ? mblocks : 0) + static_cast<int64_t>(sizeof(int64_t)) * (taps + 1) +
         static_cast<int64_t>(5 * sizeof(int64_t)) * block;
}



bool run_bwd_weights(const BwdWeightsPlan& pl, const float* src, const float* diff_dst,
                     float* out) {
  using Route = BwdWeightsPlan::Route;
  if (pl.route == Route::Reference) return false;
  if (pl.route == Route::Empty) return true;
  const ConvProblem& p = pl.p;
  const BwdWeightsF32Table& tab = *pl.tab;
  const int nt = pl.nt;
  const int64_t G = p.G, ICg = p.ICg, OCg = p.OCg, IC = p.IC(), OC = p.OC();
  const int64_t taps = pl.taps;
  const int64_t si = pl.si, so = pl.so;
  const std::vector<int64_t>& koff = pl.koff;
  const std::vector<int64_t>* lo = pl.lo;
  const std::vector<int64_t>* hi = pl.hi;
  if (pl.route == Route::Zeros) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t ic = 0; ic < IC; ++ic)
      for (int64_t b = 0; b < OCg; ++b)
        for (int64_t t = 0; t < taps; ++t) out[ic * si + b * so + koff[t]] = 0.f;
    return true;
  }
  const int64_t F = pl.F;
  const int lanes = tab.lanes;
  void (*gemm_tile)(const TileArgs&) = tab.gemm;
  void (*dw_tile)(const TileArgs&) = tab.dw;
  void (*pack)(const Pix*, int64_t, bool, int64_t, int, int64_t, float*) = tab.pack;
  void (*grouped_tile)(const TileArgs&) = tab.grouped;
  void (*pack_panels)(const Pix*, int64_t, int64_t, int64_t, const int64_t*, int64_t, int64_t,
                      float*) = tab.pack_panels;
  const bool depthwise = pl.kernel == BwdWeightsPlan::Kernel::Depthwise;
  const bool grouped = pl.kernel == BwdWeightsPlan::Kernel::Grouped;
  auto vecs = [&](int64_t c) { return (c + lanes - 1) / lanes; };
  const bool vec_b = pl.vec_b, direct = pl.direct, packed = pl.packed;
  const int64_t Mg = pl.Mg, Ng = pl.Ng;
  const int kf = pl.kf;
  const int64_t mblocks = pl.mblocks;
  const std::vector<int64_t>& m_starts = pl.m_starts;
  const std::vector<Item>& items = pl.items;
  const int P = pl.P;
  const int64_t block = pl.block;
  const int64_t ldb_max = static_cast<int64_t>(pl.gemm_vecs) * lanes;
  const bool taps_inner = pl.taps_inner, local = pl.local, local_shared_a = pl.local_shared_a;
  const bool local_stream = pl.local_stream;
  const int64_t ln_cols = pl.ln_cols;
  const int64_t plane = pl.plane, wstride = pl.wstride;
  const int nbuf = pl.nbuf;
  const std::vector<int64_t>& chunk = pl.chunk;
  const int64_t ntasks = pl.ntasks, max_span = pl.max_span;
  const int64_t pack_floats = pl.pack_floats, local_floats = pl.local_floats;
  const bool a_is_src = pl.a_is_src, shared_a = pl.shared_a;
  const int64_t a_len = pl.a_len, a_gstride = pl.a_gstride, b_gstride = pl.b_gstride;
  const int64_t src_step = pl.src_step, dst_step = pl.dst_step;
  (void)taps_inner;


  // Targets: partition 0 writes the output (direct) or scratch 0.
  std::vector<int64_t> scratch_off(taps);
  for (int64_t t = 0; t < taps; ++t) scratch_off[t] = t * plane;
  std::unique_ptr<float, FreeDeleter> scratch;
  if (nbuf > 0) {
    scratch.reset(alloc_floats(static_cast<size_t>(nbuf * wstride)));
    if (!scratch) return false;  // caller falls back to the reference
  }
  std::vector<Target> targets(P);
  for (int q = 0; q < P; ++q) {
    if (q == 0 && direct) {
      // vec_b: m = a (stride si), n = b (stride so == 1); vec_a: m = b, n = a.
      targets[q] = {out, koff.data(), ICg * si, vec_b ? si : so};
    } else {
      const int buf = direct ? q - 1 : q;
      targets[q] = {local ? nullptr : scratch.get() + buf * wstride, scratch_off.data(), Mg * Ng, Ng};
    }
  }

  std::vector<Pix> pix_all(static_cast<size_t>(nt * max_span * block));
  std::vector<Pix> fpix_all(kf > 1 ? static_cast<size_t>(nt) * (kf + 1) * block : 0);
  // Local n-blocks of one group: the A panels of all m-blocks (the block is
  // every pixel, in flat order), packed once before the tiles.
  std::unique_ptr<float, FreeDeleter> shared_ap;
  std::vector<Pix> a_rows;
  if (local_shared_a) {
    shared_ap.reset(static_cast<float*>(std::aligned_alloc(
        64, (static_cast<size_t>(pl.shared_a_floats) * sizeof(float) + 63) / 64 * 64)));
    if (!shared_ap) return false;
    a_rows.resize(static_cast<size_t>(F));
    for (int64_t f = 0; f < F; ++f) a_rows[f] = {src + f * IC, nullptr};
  }
  std::unique_ptr<float, FreeDeleter> pack_all;
  if (packed) {
    pack_all.reset(static_cast<float*>(
        std::aligned_alloc(64, (nt * pack_floats * sizeof(float) + 63) / 64 * 64)));
    if (!pack_all) return false;
  }
  std::vector<char> a_done_all(packed ? static_cast<size_t>(nt * mblocks) : 0);
  // Local n-blocks: the group whose A panels a thread holds (one pixel block,
  // so they stay valid from one item to the next), -1 for none.
  std::vector<int64_t> local_a_g(static_cast<size_t>(nt), -1);
  std::unique_ptr<float, FreeDeleter> local_all;
  if (local) {
    local_all.reset(static_cast<float*>(
        std::aligned_alloc(64, (nt * local_floats * sizeof(float) + 63) / 64 * 64)));
    if (!local_all) return false;
  }

  std::vector<float> gbufs(static_cast<size_t>(nt * pl.gbuf_floats));
  std::vector<int64_t> pix_count(static_cast<size_t>(taps) * nt);
  struct Seg {
    int64_t n, i0, i1, x0, x1;
  };
  std::vector<Seg> segs_all(static_cast<size_t>(nt) * block);

  const int64_t I0 = p.I[0], I1 = p.I[1], I2 = p.I[2];
  const int64_t O0 = p.O[0], O1 = p.O[1], O2 = p.O[2];

  // One task: items [ib, ie) over the pixels of partition `part`, by thread tid.
  auto work = [&](int tid, int part, int64_t ib, int64_t ie) {
    if (ib >= ie) return;
    const Target& tg = targets[part];
    // Items are tap-ordered within a chunk (depthwise: per channel block).
    int64_t tap_lo = taps, tap_hi = -1, tiles_in_chunk = 0;
    for (int64_t i = ib; i < ie; ++i) {
      tap_lo = std::min(tap_lo, items[i].tap), tap_hi = std::max(tap_hi, items[i].tap);
      tiles_in_chunk += std::max<int64_t>(1, items[i].mj_end - items[i].mj);
    }
    if (local) tap_lo = 0, tap_hi = taps - 1;  // every item runs every tap
    // Tiles start at zero: GEMM tiles by their first tile call (fresh), or
    // here if their tap has no pixel in the first block; others here.
    const bool gemm = !depthwise && !grouped;
    auto zero_tile = [&](const Item& it) {
      const int64_t rows = it.mj_end > it.mj + 1 ? m_starts[it.mj_end] - it.m0 : it.rows;
      for (int gl = 0; gl < it.groups; ++gl) {
        float* c = tg.tile(it) + gl * tg.g_stride;
        for (int64_t r = 0; r < rows; ++r)
          std::memset(c + r * tg.m_stride, 0, sizeof(float) * it.cols);
      }
    };
    for (int64_t i = ib; i < ie && !gemm; ++i) {
      for (int gl = 0; gl < items[i].groups; ++gl) {
        float* c = tg.tile(items[i]) + gl * tg.g_stride;
        for (int r = 0; r < items[i].rows; ++r)
          std::memset(c + r * tg.m_stride, 0, sizeof(float) * items[i].cols);
      }
    }
    float* gbuf = gbufs.data() + static_cast<size_t>(tid) * pl.gbuf_floats;
    const int64_t f_end = part_start(F, P, part + 1);
    Pix* pix = pix_all.data() + static_cast<size_t>(tid) * max_span * block;
    int64_t* count = pix_count.data() + static_cast<size_t>(tid) * taps;
    Seg* segs = segs_all.data() + static_cast<size_t>(tid) * block;
    float* bpack = packed ? pack_all.get() + tid * pack_floats : nullptr;
    float* apack = bpack + (packed ? block * ldb_max : 0);
    char* a_done = packed ? a_done_all.data() + static_cast<size_t>(tid) * mblocks : nullptr;
    int64_t a_tap = -1, a_g = -1, b_tap = -1, b_g = -1, b_n0 = -1;
    // Segment sg's pixels under tap `tap` with src x in [xlo, xhi): sets
    // [x0, x1) to those inside the tap's box and returns the diff_dst row
    // tapped by x0 (null when there is none).
    auto tapped = [&](const Seg& sg, int64_t tap, int64_t xlo, int64_t xhi, int64_t& x0,
                      int64_t& x1) -> const float* {
      const int64_t k0 = tap / (p.K[1] * p.K[2]), k1 = (tap / p.K[2]) % p.K[1],
                    k2 = tap % p.K[2];
      x0 = x1 = sg.x1;
      if (sg.i0 < lo[0][k0] || sg.i0 >= hi[0][k0] || sg.i1 < lo[1][k1] || sg.i1 >= hi[1][k1])
        return nullptr;
      x0 = std::max({sg.x0, lo[2][k2], xlo});
      x1 = std::min({sg.x1, hi[2][k2], xhi});
      if (x0 >= x1) return nullptr;
      const int64_t o0 = sg.i0 * p.s[0] - p.pb[0] + k0 * p.d[0];
      const int64_t o1 = sg.i1 * p.s[1] - p.pb[1] + k1 * p.d[1];
      const int64_t o2 = x0 * p.s[2] - p.pb[2] + k2 * p.d[2];
      return diff_dst + (((sg.n * O0 + o0) * O1 + o1) * O2 + o2) * OC;
    };
    auto src_at = [&](const Seg& sg, int64_t x) {
      return src + (((sg.n * I0 + sg.i0) * I1 + sg.i1) * I2 + x) * IC;
    };
    // The (A, B) pixel pairs of the block's pixels for one tap, with src x
    // in [xlo, xhi) (within the tap's range), appended at out_pix[n].
    auto build_into = [&](int64_t tap, int64_t nseg, int64_t xlo, int64_t xhi, Pix* out_pix,
                          int64_t n) {
      for (int64_t s = 0; s < nseg; ++s) {
        int64_t x0, x1;
        const float* dp = tapped(segs[s], tap, xlo, xhi, x0, x1);
        if (!dp) continue;
        const float* sp = src_at(segs[s], x0);
        if (a_is_src) {
          for (int64_t x = x0; x < x1; ++x, sp += src_step, dp += dst_step) out_pix[n++] = {sp, dp};
        } else {
          for (int64_t x = x0; x < x1; ++x, sp += src_step, dp += dst_step) out_pix[n++] = {dp, sp};
        }
      }
      return n;
    };
    // Shared A panels: every pixel of the block in order, b null where the
    // tapped diff_dst position is outside (A = src).
    auto build_full = [&](int64_t tap, int64_t nseg, Pix* out_pix) {
      int64_t n = 0;
      for (int64_t s = 0; s < nseg; ++s) {
        const Seg& sg = segs[s];
        int64_t x0, x1;
        const float* dp = tapped(sg, tap, 0, I2, x0, x1);
        const float* sp = src_at(sg, sg.x0);
        for (int64_t x = sg.x0; x < sg.x1; ++x, sp += src_step) {
          const bool in = x >= x0 && x < x1;
          out_pix[n++] = {sp, in ? dp : nullptr};
          if (in) dp += dst_step;
        }
      }
      return n;
    };
    auto build = [&](int64_t tap, int64_t nseg) {
      Pix* out_pix = pix + (tap - tap_lo) * block;
      count[tap] =
          shared_a ? build_full(tap, nseg, out_pix) : build_into(tap, nseg, 0, I2, out_pix, 0);
    };
    Pix* const fpix = fpix_all.data() + static_cast<size_t>(tid) * (kf + 1) * block;
    // A fused item: the pixels inside every tap's range through one tile of
    // fk*Mg rows (fresh on the first block), then each tap's other pixels.
    // The lists of the last fused group built in this block (its n-blocks
    // are adjacent items): fcount[0] fused, fcount[1 + j] tap j's others.
    int64_t f_tap = -1;
    std::vector<int64_t> fcount(static_cast<size_t>(kf + 1));
    auto run_fused = [&](const Item& item, int64_t nseg, bool first) {
      if (item.tap != f_tap) {
        const int64_t k2a = item.tap % p.K[2];
        int64_t xlo = 0, xhi = I2;
        for (int j = 0; j < item.fk; ++j)
          xlo = std::max(xlo, lo[2][k2a + j]), xhi = std::min(xhi, hi[2][k2a + j]);
        if (xlo >= xhi) xlo = xhi = I2;  // no pixel in every tap: all per tap
        fcount[0] = xlo < xhi ? build_into(item.tap, nseg, xlo, xhi, fpix, 0) : 0;
        for (int j = 0; j < item.fk; ++j) {  // x outside [xlo, xhi)
          Pix* lp = fpix + (j + 1) * block;
          const int64_t n = build_into(item.tap + j, nseg, 0, xlo, lp, 0);
          fcount[1 + j] = build_into(item.tap + j, nseg, xhi, I2, lp, n);
        }
        f_tap = item.tap;
      }
      TileArgs ta{};
      ta.c = tg.tile(item);
      ta.ldc = tg.m_stride;
      ta.cols = item.cols;
      ta.b_off = item.n0;
      ta.pix = fpix;
      ta.npix = fcount[0];
      ta.rows = item.rows;
      ta.fresh = first;
      if (ta.npix > 0) {
        gemm_tile(ta);
      } else if (first) {
        zero_tile(item);
      }
      ta.rows = static_cast<int>(Mg);
      ta.fresh = 0;
      for (int j = 0; j < item.fk; ++j) {
        if (fcount[1 + j] == 0) continue;
        ta.pix = fpix + (j + 1) * block;
        ta.npix = fcount[1 + j];
        ta.c = tg.tile(item) + j * Mg * tg.m_stride;
        gemm_tile(ta);
      }
    };
    // A panels of packed tiles, from pixel list px (np pixels) of group g:
    // marked stale (AVX2 packs every m-block at once here), then m-block mj's
    // panel, packed when first used (AVX-512).
    auto stale_a_panels = [&](const Pix* px, int64_t np, int64_t g) {
      if (pack_panels)
        pack_panels(px, np, g * a_gstride, a_len - g * a_gstride, m_starts.data(), mblocks, block,
                    apack);
      else
        std::memset(a_done, 0, mblocks);
    };
    auto a_panel = [&](const Pix* px, int64_t np, int64_t g, int64_t mj) {
      const int64_t mb0 = m_starts[mj];
      const int mrows = static_cast<int>(m_starts[mj + 1] - mb0);
      float* pa = apack + mb0 * block + mj * bww::kPanelSlack;
      if (!pack_panels && !a_done[mj]) {
        a_done[mj] = 1;
        pack(px, np, false, g * a_gstride + mb0, mrows, mrows, pa);
      }
      return pa;
    };
    // Local n-blocks: the item's m-blocks for every tap into the thread's
    // buffer lb[tap][m - m0][n] (fresh: one pixel block), then written out.
    float* const lb = local ? local_all.get() + tid * local_floats : nullptr;
    auto run_local = [&](const Item& item, int64_t nseg) {
      const int64_t m0 = item.m0, rows = m_starts[item.mj_end] - m0;
      const int64_t ldl = ln_cols, ld_t = rows * ldl;
      const int64_t ldb = vecs(item.cols) * lanes;
      for (int64_t t = 0; t < taps; ++t) {
        // Shared panels list every pixel of the block for every tap (zero
        // B rows where the tap falls outside): np is the whole block.
        if (count[t] < 0) build(t, nseg);
        float* lt = lb + t * ld_t;
        const Pix* px = pix + t * block;
        const int64_t np = count[t];
        if (!local_shared_a && local_a_g[tid] != item.g) {  // A panels: shared by the taps and items
          local_a_g[tid] = item.g;
          stale_a_panels(px, np, item.g);
        }
        pack(px, np, true, item.g * b_gstride + item.n0, item.cols, ldb, bpack);
        for (int64_t mj = item.mj; mj < item.mj_end; ++mj) {
          const int64_t mb0 = m_starts[mj];
          const int mrows = static_cast<int>(m_starts[mj + 1] - mb0);
          float* pa = local_shared_a ? shared_ap.get() + mb0 * block + mj * bww::kPanelSlack
                                     : a_panel(px, np, item.g, mj);
          TileArgs ta{};
          ta.fresh = 1;
          ta.npix = np;
          ta.c = lt + (mb0 - m0) * ldl;
          ta.ldc = ldl;
          ta.rows = mrows;
          ta.cols = item.cols;
          ta.pa = pa;
          ta.lda = mrows;
          ta.pb = bpack;
          ta.ldb = ldb;
          gemm_tile(ta);
        }
      }
      // Out in the output's order: per row m, 16 channels x all taps at a time.
      auto transpose = tab.transpose_taps;
      float* o = out + item.g * ICg * si;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t n = 0; n < item.cols; n += 16)
          transpose(lb + r * ldl + n, ld_t, 0, 1, taps,
                    static_cast<int>(std::min<int64_t>(16, item.cols - n)),
                    o + (m0 + r) * si + (item.n0 + n) * so, so, local_stream);
    };
    const int64_t f_begin = part_start(F, P, part);
    if (gemm && f_begin >= f_end)
      for (int64_t i = ib; i < ie; ++i) zero_tile(items[i]);
    for (int64_t f = f_begin; f < f_end;) {
      const bool first_block = f == f_begin;
      // Next block of pixels: row pieces totalling at most `block` pixels.
      int64_t nseg = 0, total = 0;
      while (f < f_end && total < block) {
        const int64_t row = f / I2, x = f % I2;
        const int64_t len = std::min({I2 - x, f_end - f, block - total});
        segs[nseg++] = {row / (I0 * I1), (row / I1) % I0, row % I1, x, x + len};
        total += len;
        f += len;
      }
      for (int64_t t = tap_lo; t <= tap_hi; ++t) count[t] = -1;
      f_tap = -1;
      a_tap = b_tap = -1;  // packed panels are of the previous block
      // Prefetch the next block's src pixels and the diff_dst range its taps
      // reach into L2, spread over this block's tile calls: a layer with few
      // taps reads each pixel a few times only, and the strided first touch
      // of every line would otherwise wait on memory.
      const char* pf[2] = {nullptr, nullptr};
      const char* pf_end[2] = {nullptr, nullptr};
      if (pl.prefetch && f < f_end) {
        const int64_t g0 = f, g1 = std::min(f_end, f + block) - 1;
        pf[0] = reinterpret_cast<const char*>(src + g0 * IC);
        pf_end[0] = reinterpret_cast<const char*>(src + (g1 + 1) * IC);
        const int64_t r0 = g0 / I2, r1 = g1 / I2;
        const int64_t lo_flat =
            ((r0 / (I0 * I1) * O0 + std::clamp<int64_t>((r0 / I1) % I0 * p.s[0] - p.pb[0], 0, O0 - 1)) * O1 +
             std::clamp<int64_t>(r0 % I1 * p.s[1] - p.pb[1], 0, O1 - 1)) * O2;
        const int64_t hi_flat =
            ((r1 / (I0 * I1) * O0 + std::clamp<int64_t>((r1 / I1) % I0 * p.s[0] - p.pb[0] + (p.K[0] - 1) * p.d[0], 0, O0 - 1)) * O1 +
             std::clamp<int64_t>(r1 % I1 * p.s[1] - p.pb[1] + (p.K[1] - 1) * p.d[1], 0, O1 - 1) + 1) * O2;
        if ((hi_flat - lo_flat) * OC <= 4 * (g1 + 1 - g0) * IC) {
          pf[1] = reinterpret_cast<const char*>(diff_dst + lo_flat * OC);
          pf_end[1] = reinterpret_cast<const char*>(diff_dst + hi_flat * OC);
        }
      }
      const int64_t pf_lines = ((pf_end[0] - pf[0]) + (pf_end[1] - pf[1])) / 64;
      const int64_t pf_quota = pf_lines / std::max<int64_t>(1, tiles_in_chunk) + 1;
      int pf_r = pf[0] ? 0 : 2;  // range being prefetched; 2 = done
      for (int64_t i = ib; i < ie; ++i) {
        const Item& whole = items[i];
        if (local) {
          run_local(whole, nseg);
          continue;
        }
        if (whole.fk > 1) {
          run_fused(whole, nseg, first_block);
          continue;
        }
        // Each m-block of a ranged item is one tile.
        const int64_t mj_hi = whole.mj_end > whole.mj + 1 ? whole.mj_end : whole.mj + 1;
        for (int64_t mj = whole.mj; mj < mj_hi; ++mj) {
          for (int64_t q = 0; q < pf_quota && pf_r < 2; ++q) {
            __builtin_prefetch(pf[pf_r], 0, 2);
            pf[pf_r] += 64;
            if (pf[pf_r] >= pf_end[pf_r]) pf_r = (pf_r == 0 && pf[1]) ? 1 : 2;
          }
          Item sub;
          if (mj_hi > whole.mj + 1) {
            sub = whole;
            sub.m0 = m_starts[mj];
            sub.rows = static_cast<int>(m_starts[mj + 1] - sub.m0);
            sub.mj = mj;
            sub.mj_end = 0;
          }
          const Item& item = mj_hi > whole.mj + 1 ? sub : whole;
          if (count[item.tap] < 0) build(item.tap, nseg);
          if (count[item.tap] == 0) {
            if (gemm && first_block) zero_tile(item);
            continue;
          }
          TileArgs ta{};
          ta.fresh = gemm && first_block;
          ta.pix = pix + (item.tap - tap_lo) * block;
          ta.npix = count[item.tap];
          ta.c = tg.tile(item);
          ta.ldc = tg.m_stride;
          ta.rows = item.rows;
          ta.cols = item.cols;
          if (depthwise) {
            ta.b_off = item.g;
            dw_tile(ta);
          } else if (grouped) {
            ta.a_off = item.g * a_gstride;
            ta.b_off = item.g * b_gstride;
            ta.c = gbuf;
            ta.ldc = lanes;
            ta.groups = item.groups;
            grouped_tile(ta);
            const int per_vec = lanes / item.cols;
            for (int gl = 0; gl < item.groups; ++gl) {
              float* c = tg.tile(item) + gl * tg.g_stride;
              const float* sums =
                  gbuf + (gl / per_vec) * item.rows * lanes + (gl % per_vec) * item.cols;
              for (int r = 0; r < item.rows; ++r)
                for (int n = 0; n < item.cols; ++n) c[r * tg.m_stride + n] += sums[r * lanes + n];
            }
          } else if (packed) {
            const Pix* px = ta.pix;
            const int64_t np = ta.npix;
            if (a_tap < 0 || (item.tap != a_tap && !shared_a) || item.g != a_g) {
              a_tap = item.tap, a_g = item.g;
              stale_a_panels(px, np, item.g);
            }
            float* pa = a_panel(px, np, item.g, item.mj);
            const int64_t ldb = vecs(item.cols) * lanes;
            if (item.tap != b_tap || item.g != b_g || item.n0 != b_n0) {
              b_tap = item.tap, b_g = item.g, b_n0 = item.n0;
              pack(px, np, true, item.g * b_gstride + item.n0, item.cols, ldb, bpack);
            }
            ta.pix = nullptr;
            ta.pa = pa;
            ta.lda = item.rows;
            ta.pb = bpack;
            ta.ldb = ldb;
            gemm_tile(ta);
          } else {
            ta.a_off = item.g * a_gstride + item.m0;
            ta.b_off = item.g * b_gstride + item.n0;
            gemm_tile(ta);
          }
        }  // m-blocks of the item
      }
    }
  };

  std::atomic<int64_t> next_task{0};
  const float* scr = scratch.get();
#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num();
    if (local_shared_a) {
#pragma omp for schedule(static)
      for (int64_t mj = 0; mj < mblocks; ++mj) {
        const int64_t m0 = m_starts[mj];
        const int rows = static_cast<int>(m_starts[mj + 1] - m0);
        pack(a_rows.data(), F, false, m0, rows, rows,
             shared_ap.get() + m0 * block + mj * bww::kPanelSlack);
      }
    }
    for (;;) {
      const int64_t k = next_task.fetch_add(1, std::memory_order_relaxed);
      if (k >= ntasks) break;
      const int64_t c = k / P;
      work(tid, static_cast<int>(k % P), chunk[c], chunk[c + 1]);
    }
    if (local) {
      if (local_stream) tab.store_fence();
    } else if (pl.final != BwdWeightsPlan::Final::None) {
#pragma omp barrier
      // Sum the partitions into the output, in tiles of 16 m x 16 n x 16
      // taps, through a buffer in L1: the scratch is read in runs of 16
      // floats, and the output is written in the order of its strides
      // (innermost the dim of smallest stride). Writing along n or m with a
      // large stride (IOX: 16 ic rows 16 KiB apart) maps a tile's output
      // lines to one L1 set; row by row, one float per output line per tap.
      constexpr int kTb = 16;
      if (pl.final == BwdWeightsPlan::Final::Transpose) {
        // Per (g, m) and 16 n: the 16 scratch rows of a chunk of 16 taps
        // (one line each) transposed in registers into 16 runs of taps.
        const int64_t ntl = (Ng + kTb - 1) / kTb;
        const int64_t on = vec_b ? so : si, om = vec_b ? si : so;
        auto transpose = tab.transpose_taps;
        const bool stream = pl.final_stream;
        const bool n_outer = pl.final_n_outer;
#pragma omp for schedule(static) nowait
        for (int64_t r = 0; r < G * Mg * ntl; ++r) {
          const int64_t g = r / (Mg * ntl);
          const int64_t m = n_outer ? r % Mg : (r / ntl) % Mg;
          const int64_t n0 = (n_outer ? (r / Mg) % ntl : r % ntl) * kTb;
          const int nn = static_cast<int>(std::min<int64_t>(kTb, Ng - n0));
          transpose(scr + (g * Mg + m) * Ng + n0, plane, wstride, nbuf, taps, nn,
                    out + g * ICg * si + m * om + n0 * on, on, stream);
        }
        tab.store_fence();  // then the region's barrier
      } else {
        const int64_t mt = (Mg + kTb - 1) / kTb, ntl = (Ng + kTb - 1) / kTb;
        const int64_t tt = (taps + kTb - 1) / kTb;
        const int64_t om = vec_b ? si : so, on = vec_b ? so : si;  // output strides of m, n
        const int* ord = pl.final_ord;  // dims 0 = tap, 1 = m, 2 = n, innermost first
        int64_t lstride[3];  // strides of the dims in the buffer
        lstride[ord[0]] = 1, lstride[ord[1]] = kTb, lstride[ord[2]] = kTb * kTb;
  #pragma omp for schedule(static)
        for (int64_t tile = 0; tile < G * mt * ntl * tt; ++tile) {
          const int64_t g = tile / (mt * ntl * tt), m0 = (tile / (ntl * tt)) % mt * kTb;
          const int64_t t0 = (tile / ntl) % tt * kTb, n0 = tile % ntl * kTb;
          const int64_t ext[3] = {std::min<int64_t>(kTb, taps - t0), std::min<int64_t>(kTb, Mg - m0),
                                  std::min<int64_t>(kTb, Ng - n0)};
          float buf[kTb * kTb * kTb];
          for (int64_t tc = 0; tc < ext[0]; ++tc)
            for (int64_t mc = 0; mc < ext[1]; ++mc) {
              const float* s0 = scr + (t0 + tc) * plane + ((g * Mg) + m0 + mc) * Ng + n0;
              float* b = buf + tc * lstride[0] + mc * lstride[1];
              const int64_t ls = lstride[2];
              // The tile with the next n0 reads the next line of each row.
              for (int q = 0; q < nbuf; ++q) __builtin_prefetch(s0 + q * wstride + kTb, 0, 3);
              for (int64_t nc = 0; nc < ext[2]; ++nc) {
                float acc = s0[nc];
                for (int q = 1; q < nbuf; ++q) acc += s0[q * wstride + nc];
                b[nc * ls] = acc;
              }
            }
          int64_t off[3][kTb];  // output offsets along each dim
          for (int64_t i = 0; i < ext[0]; ++i) off[0][i] = koff[t0 + i];
          for (int64_t i = 0; i < ext[1]; ++i) off[1][i] = (m0 + i) * om;
          for (int64_t i = 0; i < ext[2]; ++i) off[2][i] = (n0 + i) * on;
          float* o = out + g * ICg * si;
          const int d0 = ord[0], d1 = ord[1], d2 = ord[2];
          for (int64_t i2 = 0; i2 < ext[d2]; ++i2)
            for (int64_t i1 = 0; i1 < ext[d1]; ++i1) {
              float* oo = o + off[d2][i2] + off[d1][i1];
              const float* b = buf + i2 * lstride[d2] + i1 * lstride[d1];
              const int64_t* o0 = off[d0];
              if (direct) {  // partition 0 is in the output already
                for (int64_t i0 = 0; i0 < ext[d0]; ++i0) oo[o0[i0]] += b[i0];
              } else {
                for (int64_t i0 = 0; i0 < ext[d0]; ++i0) oo[o0[i0]] = b[i0];
              }
            }
        }
      }
    }
  }
  return true;
}


std::string describe(const BwdWeightsPlan& pl) {
  using Route = BwdWeightsPlan::Route;
  std::ostringstream o;
  o << "route=";
  switch (pl.route) {
    case Route::Reference: return "route=reference";
    case Route::Empty: return "route=empty";
    case Route::Zeros: o << "zeros threads=" << pl.nt; return o.str();
    case Route::Tiles: break;
  }
  const BwdWeightsF32Table& tab = *pl.tab;
  const char* kernel = pl.kernel == BwdWeightsPlan::Kernel::Depthwise ? "dw"
                       : pl.kernel == BwdWeightsPlan::Kernel::Grouped ? "grouped"
                                                                      : "gemm";
  // The widest tile: rows x columns.
  int64_t mr = 0, nr = 0;
  switch (pl.kernel) {
    case BwdWeightsPlan::Kernel::Depthwise: mr = 1, nr = int64_t{tab.lanes} * tab.dw_vecs; break;
    case BwdWeightsPlan::Kernel::Grouped: mr = pl.Mg, nr = pl.Ng; break;
    case BwdWeightsPlan::Kernel::Gemm:
      mr = pl.kf > 1 ? pl.kf * pl.Mg : pl.rows_main;
      nr = int64_t{pl.kf > 1 ? 2 : pl.gemm_vecs} * tab.lanes;
      break;
  }
  // The items and their split into chunks, as one number (FNV-1a).
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](int64_t v) {
    for (int b = 0; b < 8; ++b) h = (h ^ ((static_cast<uint64_t>(v) >> (8 * b)) & 0xff)) * 1099511628211ull;
  };
  for (const Item& it : pl.items) {
    mix(it.tap), mix(it.g), mix(it.m0), mix(it.n0), mix(it.rows), mix(it.cols), mix(it.groups);
    mix(it.mj), mix(it.mj_end), mix(it.fk);
  }
  for (int64_t c : pl.chunk) mix(c);
  const char* final_pass = pl.final == BwdWeightsPlan::Final::Transpose ? "transpose"
                           : pl.final == BwdWeightsPlan::Final::Sum     ? "sum"
                                                                        : "none";
  o << "tiles tile=bwd_weights_f32_" << kernel << "_" << tab.isa << "_" << mr << "x" << nr
    << " vec=" << (pl.vec_b ? "b" : "a") << " direct=" << pl.direct << " M=" << pl.Mg
    << " N=" << pl.Ng << " mblocks=" << pl.mblocks << " kf=" << pl.kf << " packed=" << pl.packed
    << " shared_a=" << pl.shared_a;
  if (pl.packed && !pl.local) o << " mper=" << pl.mper;
  o << " block=" << pl.block << " pieces=" << pl.P << " chunks=" << pl.nchunks
    << " tasks=" << pl.ntasks << " items=" << pl.items.size() << " span=" << pl.max_span
    << " split=" << std::hex << std::setw(8) << std::setfill('0') << (h & 0xffffffffu) << std::dec
    << " pf=" << pl.prefetch << " taps_inner=" << pl.taps_inner << " local=" << pl.local;
  if (pl.local)
    o << " local_shared_a=" << pl.local_shared_a << " run_mb=" << pl.run_mb
      << " local_rows=" << pl.local_rows << " local_stream=" << pl.local_stream;
  o << " copies=" << pl.nbuf << " final=" << final_pass;
  if (pl.final == BwdWeightsPlan::Final::Transpose)
    o << " final_stream=" << pl.final_stream << " n_outer=" << pl.final_n_outer;
  if (pl.final == BwdWeightsPlan::Final::Sum)
    o << " order=" << pl.final_ord[0] << pl.final_ord[1] << pl.final_ord[2];
  o << " scratch=" << pl.scratch_bytes() << " shared=" << pl.shared_bytes()
    << " thread=" << pl.per_thread_bytes() << " threads=" << pl.nt;
  return o.str();
}

}  // namespace bww

bool backward_weights_f32(Isa isa, const ConvProblem& p, const float* src, const float* diff_dst,
                          WeightsView diff_w, int nthreads) {
  const bww::BwdWeightsPlan plan = bww::plan_bwd_weights(isa, p, diff_w, nthreads);
  return bww::run_bwd_weights(plan, src, diff_dst, static_cast<float*>(diff_w.data));
}

std::string describe_bwd_weights_f32(Isa isa, const ConvProblem& p, int nthreads,
                                     WeightsFormat wf) {
  // The gradient is dense in layout wf, as the ops allocate it.
  std::vector<int64_t> stride(static_cast<size_t>(p.spatial_rank + 2), 1);
  const Shape shape = weights_shape(p, wf);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i) stride[i] = stride[i + 1] * shape[i + 1];
  const std::vector<int> dims = weights_dims(wf, p.spatial_rank);
  WeightsView w{nullptr, stride[dims[0]], stride[dims[1]], {0, 0, 0}};
  for (int i = 0; i < p.spatial_rank; ++i) w.sk[kAxes - p.spatial_rank + i] = stride[dims[2 + i]];
  return bww::describe(bww::plan_bwd_weights(isa, p, w, nthreads));
}

}  // namespace x86
}  // namespace tct
