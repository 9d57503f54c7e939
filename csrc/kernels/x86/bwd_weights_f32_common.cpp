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
//
// The driver plans first (plan_bwd_weights: every decision, from the problem,
// the gradient's strides, the ISA's BwdWeightsF32Table and the thread count),
// then runs the plan (run_bwd_weights), reading nothing else.
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <memory>
#include <new>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <vector>

#include "buffers.h"
#include "bwd_weights_f32.h"
#include "plan_memo.h"
#include "tiling.h"
#include "x86.h"

namespace tct {
namespace x86 {
namespace {

using bww::BwdWeightsF32Table;
using bww::BwdWeightsPlan;
using bww::Item;
using bww::Pix;
using bww::TileArgs;
using Route = BwdWeightsPlan::Route;
using Kernel = BwdWeightsPlan::Kernel;
using Final = BwdWeightsPlan::Final;

constexpr int64_t kElem = sizeof(float);  // bytes per element of the activations and gradient
constexpr int64_t kLine = 64;             // bytes per cache line
constexpr int64_t kKiB = 1024, kMiB = 1024 * 1024;

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

// A row piece of a pixel block: src pixels x0 .. x1-1 of row (n, i0, i1).
struct Seg {
  int64_t n, i0, i1, x0, x1;
};

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

// The one place that names the ISAs: their micro-kernel tables.
const BwdWeightsF32Table* table_for(Isa isa) {
  switch (vector_isa(isa)) {
    case Isa::Avx512:
      return avx512_broadcast_loads(active_uarch()) ? bww::bwd_weights_f32_table_avx512_intel()
                                         : bww::bwd_weights_f32_table_avx512();
    case Isa::Avx2: return bww::bwd_weights_f32_table_avx2();
    default: return nullptr;
  }
}

// Vectors of the ISA's width that c floats take.
int64_t vecs(const BwdWeightsPlan& pl, int64_t c) {
  return (c + pl.tab->lanes - 1) / pl.tab->lanes;
}

// Vectors of one GEMM n-block for groups of Mg x Ng channels (m side x
// vector side) without fused taps: the whole group when it fits the widest
// tile; else the widest tile where Mg fits its rows (few rows, e.g. 96 -> 3:
// each broadcast feeds more FMAs), else 2 vectors (14x32 tiles on AVX-512).
int block_vecs(const BwdWeightsPlan& pl, int64_t Mg, int64_t Ng) {
  const int max_vecs = pl.tab->max_vecs;
  const int64_t nv = vecs(pl, Ng);
  return nv <= max_vecs                ? static_cast<int>(nv)
         : Mg <= pl.tab->rows[max_vecs] ? max_vecs
                                        : std::min(max_vecs, 2);
}

// ---------------------------------------------------------------- the plan

// Output offset of each tap, and per axis the box of src positions whose
// tapped dst position lies inside diff_dst: lo <= i < hi. Returns the
// (image, src pixel) pairs inside per tap; sets all_pixels to their sum.
std::vector<double> plan_taps(BwdWeightsPlan& pl, const WeightsView& diff_w) {
  const ConvProblem& p = pl.p;
  pl.koff.resize(pl.taps);
  for (int ax = 0; ax < kAxes; ++ax) {
    pl.lo[ax].resize(p.K[ax]);
    pl.hi[ax].resize(p.K[ax]);
    for (int64_t k = 0; k < p.K[ax]; ++k)
      std::tie(pl.lo[ax][k], pl.hi[ax][k]) = p.tap_src_range(ax, k);
  }
  const std::vector<int64_t>*lo = pl.lo, *hi = pl.hi;
  std::vector<double> tap_pixels(pl.taps);
  pl.all_pixels = 0;
  for (int64_t t = 0; t < pl.taps; ++t) {
    const int64_t k0 = t / (p.K[1] * p.K[2]), k1 = (t / p.K[2]) % p.K[1], k2 = t % p.K[2];
    pl.koff[t] = k0 * diff_w.sk[0] + k1 * diff_w.sk[1] + k2 * diff_w.sk[2];
    tap_pixels[t] = static_cast<double>(p.N) * (hi[0][k0] - lo[0][k0]) *
                    (hi[1][k1] - lo[1][k1]) * (hi[2][k2] - lo[2][k2]);
    pl.all_pixels += tap_pixels[t];
  }
  return tap_pixels;
}

// Mg * Ng from which tiles use packed panels; with shared A panels (below)
// from 64 x 64 (U-Net k2 s2 128->64: 1.15-1.25x; 64 x 32 gains nothing).
constexpr int64_t kWide = 128 * 128, kWideShared = 64 * 64;

// How much of the (tap, src pixel) pairs lies inside: low_waste, share_ok.
void plan_waste(BwdWeightsPlan& pl) {
  const double taps = static_cast<double>(pl.taps);
  // Near 1 when every tap covers (almost) every pixel (1D with long rows,
  // kernels that tile the output, 1x1).
  pl.low_waste = pl.all_pixels >= 0.98 * taps * pl.F;
  // Shared A panels (below) multiply zero B rows where a tap falls outside;
  // wide layers take up to 15 % of such waste for packing A once per block
  // instead of once per tap (and, with one block, local n-blocks): DCGAN's
  // k4 s2 p1 512 -> 256 on 8x8 (88 % inside) and 512 -> 256 on 32x32 (97 %)
  // 1.05x on Zen 5, interleaved A/B.
  pl.share_ok =
      pl.low_waste || (pl.p.ICg * pl.p.OCg >= kWide && pl.all_pixels >= 0.85 * taps * pl.F);
}

// Shape of the GEMMs. vec_b: n = diff_dst channel b, m = src channel a
// (A = src); else n = a, m = b (A = diff_dst). Depthwise (ICg == OCg == 1):
// n runs over the groups, with vec_b's addressing. direct: piece 0
// accumulates in the output (its vector side is contiguous there).
void choose_sides(BwdWeightsPlan& pl) {
  const BwdWeightsF32Table& tab = *pl.tab;
  const int64_t G = pl.p.G, ICg = pl.p.ICg, OCg = pl.p.OCg, si = pl.si, so = pl.so;
  // Vector FMAs per pixel plus a share for the broadcasts of the m side.
  auto gemm_cost = [&](int64_t Mg, int64_t Ng) {
    return static_cast<double>(vecs(pl, Ng) * Mg) + 0.25 * Mg;
  };
  // The same with the broadcasts counted per m row and n-block (choose_tiles'
  // n-blocks: the whole group up to the widest tile, else 2 vectors), where the
  // widest tile holds 4 vectors (AVX-512: a group of up to 64 columns is one
  // n-block, the other side's 128 four). Used where both sides go through
  // scratch: DCGAN 128 -> 64 k4 s2 on 32x32 then takes the 128 rows x 64 columns
  // of 6x64 tiles over 64 rows x 128 columns of 14x32, 1.34x on Ice Lake-SP (one
  // thread, alternating builds, 4 rounds; 1.2-1.4x at 2 threads); AlexNet's
  // 256 -> 96 g2 k5 the same way, a tie. On AVX2 (3-vector tiles) both sides of
  // such groups split into 2-vector blocks, and the count only broke ties. The
  // direct choices below (measured with gemm_cost) keep the per-row count.
  auto blocked_cost = [&](int64_t Mg, int64_t Ng) {
    if (tab.max_vecs < 4) return gemm_cost(Mg, Ng);
    const int64_t nv = vecs(pl, Ng), per_block = block_vecs(pl, Mg, Ng);
    const int64_t nblocks = (nv + per_block - 1) / per_block;
    return static_cast<double>(nv * Mg) + 0.25 * static_cast<double>(Mg * nblocks);
  };
  // Grouped with few channels per group: the vector side holds 2, 4 (or 8
  // on AVX-512) channels of each of several groups, the other side at most
  // as many; the plain GEMM would leave most lanes idle.
  auto grouped_ok = [&](int64_t m, int64_t n) {
    return G > 1 && (n == 2 || n == 4 || n == 8) && n <= tab.grouped_max_cols && m <= n;
  };
  bool vec_b = true, direct = false;
  pl.kernel = Kernel::Gemm;
  if (ICg == 1 && OCg == 1) {
    pl.kernel = Kernel::Depthwise;
    direct = si == 1 || G == 1;
  } else if (grouped_ok(ICg, OCg) || grouped_ok(OCg, ICg)) {
    pl.kernel = Kernel::Grouped;
    const bool ok_b = grouped_ok(ICg, OCg), ok_a = grouped_ok(OCg, ICg);
    vec_b = ok_b && (so == 1 || !ok_a);
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
          pl.low_waste || (pl.share_ok && OCg % (2 * int64_t{tab.lanes}) == 0);
      vec_b = blocked_cost(ICg, OCg) <=
              blocked_cost(OCg, ICg) * (prefer_src && ICg * OCg >= kWideShared ? 1.1 : 1.0);
    }
  }
  pl.vec_b = vec_b, pl.direct = direct;
  pl.Mg = vec_b ? ICg : OCg, pl.Ng = vec_b ? OCg : ICg;
  // Packed panels (see choose_blocks).
  pl.packed = pl.kernel == Kernel::Gemm &&
              pl.Mg * pl.Ng >= (pl.low_waste && vec_b ? kWideShared : kWide);
}

// The GEMM tiles: fused innermost taps, vectors per tile, the m-blocks.
void choose_tiles(BwdWeightsPlan& pl, const WeightsView& diff_w) {
  const BwdWeightsF32Table& tab = *pl.tab;
  const int64_t Mg = pl.Mg, Ng = pl.Ng;
  const int* rows_of = tab.rows;
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
  if (!pl.vec_b && pl.kernel == Kernel::Gemm && innermost_taps_fusable(pl.p) &&
      (!pl.direct || diff_w.sk[2] == Mg * pl.so))
    kf = static_cast<int>(std::min<int64_t>(pl.p.K[2], rows_of[2] / Mg));
  if (kf < 2) kf = 1;
  pl.kf = kf;
  pl.gemm_vecs = kf > 1 ? 2 : block_vecs(pl, Mg, Ng);
  // One m-blocking for all n-blocks (rows_of shrinks with the vectors, so the
  // narrower tail n-block takes these rows too).
  pl.rows_main = rows_of[std::min<int64_t>(pl.gemm_vecs, vecs(pl, Ng))];
  pl.mblocks = (Mg + pl.rows_main - 1) / pl.rows_main;
  pl.m_starts.resize(static_cast<size_t>(pl.mblocks + 1));  // m-blocks of nearly equal size
  for (int64_t j = 0; j <= pl.mblocks; ++j) pl.m_starts[j] = part_start(Mg, pl.mblocks, j);
}

// Work items. GEMM: tap-major; within a tap the m-blocks of one n-block are
// adjacent, so the B panel of that n-block stays in L1 across them.
// Depthwise: channel-block-major, so a block's pixels of those channels stay
// in L1 across the taps. Grouped: per tap, runs of consecutive groups.
void make_dw_items(BwdWeightsPlan& pl, const std::vector<double>& tap_pixels) {
  const int64_t G = pl.p.G, width = static_cast<int64_t>(pl.tab->lanes) * pl.tab->dw_vecs;
  for (int64_t c0 = 0; c0 < G; c0 += width) {
    const int cols = static_cast<int>(std::min(width, G - c0));
    for (int64_t t = 0; t < pl.taps; ++t)
      pl.items.push_back({t, c0, 0, 0, 1, cols, tap_pixels[t] * (2.0 * vecs(pl, cols) + 1.0)});
    pl.max_cols = std::max(pl.max_cols, cols);
  }
}

void make_grouped_items(BwdWeightsPlan& pl, const std::vector<double>& tap_pixels) {
  const BwdWeightsF32Table& tab = *pl.tab;
  const int64_t G = pl.p.G, Mg = pl.Mg, Ng = pl.Ng;
  const int64_t per_vec = tab.lanes / Ng;
  const int64_t per_call = per_vec * (Mg <= 4 ? tab.grouped_vecs_few_rows : tab.grouped_vecs);
  for (int64_t t = 0; t < pl.taps; ++t)
    for (int64_t g0 = 0; g0 < G; g0 += per_call) {
      const int64_t ng = std::min(per_call, G - g0);
      Item it{t, g0, 0, 0, static_cast<int>(Mg), static_cast<int>(Ng),
              tap_pixels[t] * (1.5 * Mg + 1.0) * vecs(pl, ng * Ng)};
      it.groups = static_cast<int>(ng);
      pl.items.push_back(it);
    }
  pl.max_cols = 4 * tab.lanes;
}

// Fused taps: one m-block (kf * Mg rows), groups of kf innermost taps.
void make_fused_items(BwdWeightsPlan& pl, const std::vector<double>& tap_pixels) {
  const int64_t K2 = pl.p.K[2], Mg = pl.Mg, Ng = pl.Ng, lanes = pl.tab->lanes;
  for (int64_t t = 0, fk = 0; t < pl.taps; t += fk) {  // groups end at the end of a row of taps
    fk = std::min<int64_t>(pl.kf, K2 - t % K2);
    double px = 0;
    for (int j = 0; j < fk; ++j) px += tap_pixels[t + j];
    for (int64_t n0 = 0; n0 < Ng;) {
      const int nv = static_cast<int>(std::min<int64_t>(2, vecs(pl, Ng - n0)));
      const int cols = static_cast<int>(std::min<int64_t>(Ng - n0, int64_t{nv} * lanes));
      Item it{t, 0, 0, n0, static_cast<int>(fk * Mg), cols, px * (Mg * nv + 3.0)};
      it.fk = static_cast<int>(fk);
      pl.items.push_back(it);
      pl.max_cols = std::max(pl.max_cols, cols);
      n0 += cols;
    }
  }
}

// GEMM tiles on 16-bit pixel lists: at most this many widening loads per
// element of src and diff_dst (SPR VM, bf16 and f16 against the widened
// copies: 4.6 loads per element 1.13-1.44x, 6.8 0.92-1.07x, 7.6 0.90-1.02x,
// 15-42 0.76-0.96x).
constexpr double kMaxListWiden = 6.0;

// The tiles on pixel lists over 16-bit rows widen every element they load:
// those loads per element of src and diff_dst (what a widened copy of both
// would convert once).
double list_widen_ratio(const BwdWeightsPlan& pl, const std::vector<double>& tap_pixels) {
  double loads = 0;
  for (const Item& it : pl.items) {
    double px = 0;  // (tap, src pixel) pairs of the item's taps
    for (int j = 0; j < it.fk; ++j) px += tap_pixels[it.tap + j];
    switch (pl.kernel) {
      case Kernel::Depthwise: loads += px * 2.0 * it.cols; break;
      case Kernel::Grouped: loads += px * it.groups * (it.rows + it.cols); break;
      case Kernel::Gemm: loads += px / it.fk * (it.rows + it.cols); break;
    }
  }
  const ConvProblem& p = pl.p;
  const double elems = static_cast<double>(p.N) *
                       (static_cast<double>(p.src_spatial()) * p.IC() +
                        static_cast<double>(p.dst_spatial()) * p.OC());
  return elems > 0 ? loads / elems : 0;
}

// Packed: runs of mper m-blocks per item, enough items for the threads'
// chunks to balance and few enough to build them cheaply (one item per
// tile made 22K items, 0.5 ms of a 9 ms layer, for hifigan 512->256 k16).
// Unpacked tiles are short (pixel blocks of ~100), one per item.
void make_gemm_items(BwdWeightsPlan& pl, const std::vector<double>& tap_pixels) {
  const int64_t G = pl.p.G, Ng = pl.Ng, mblocks = pl.mblocks, lanes = pl.tab->lanes;
  const std::vector<int64_t>& m_starts = pl.m_starts;
  const int64_t nr = int64_t{pl.gemm_vecs} * lanes;  // columns of a full n-block
  const int64_t nblocks_n = (Ng + nr - 1) / nr;
  const int64_t tiles = pl.taps * G * nblocks_n * mblocks;
  const int64_t mper =
      pl.packed ? std::clamp<int64_t>(tiles / (64 * int64_t{pl.nt}), 1, mblocks) : 1;
  pl.mper = mper;
  pl.items.reserve(static_cast<size_t>(pl.taps * G * nblocks_n * ((mblocks + mper - 1) / mper)));
  for (int64_t t = 0; t < pl.taps; ++t)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t n0 = 0; n0 < Ng;) {
        const int64_t left = Ng - n0;
        const int nv = static_cast<int>(std::min<int64_t>(pl.gemm_vecs, vecs(pl, left)));
        const int cols = static_cast<int>(std::min<int64_t>(left, int64_t{nv} * lanes));
        for (int64_t j = 0; j < mblocks; j += mper) {
          const int64_t j1 = std::min(mblocks, j + mper);
          const int64_t m0 = m_starts[j];
          Item it{t, g, m0, n0, static_cast<int>(m_starts[j + 1] - m0), cols,
                  tap_pixels[t] * ((m_starts[j1] - m0) * nv + 3.0 * (j1 - j))};
          it.mj = j;
          it.mj_end = j1;
          pl.items.push_back(it);
        }
        pl.max_cols = std::max(pl.max_cols, cols);
        n0 += cols;
      }
}

// Local n-blocks: an item is an n-block x a run of run_mb m-blocks, all taps.
void make_local_items(BwdWeightsPlan& pl) {
  const int64_t G = pl.p.G, Ng = pl.Ng, mblocks = pl.mblocks, lanes = pl.tab->lanes;
  const std::vector<int64_t>& m_starts = pl.m_starts;
  pl.items.clear();
  pl.local_rows = 0;  // rows of the largest run
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n0 = 0; n0 < Ng;) {
      const int nv = static_cast<int>(std::min<int64_t>(pl.gemm_vecs, vecs(pl, Ng - n0)));
      const int cols = static_cast<int>(std::min<int64_t>(Ng - n0, int64_t{nv} * lanes));
      for (int64_t j = 0; j < mblocks; j += pl.run_mb) {
        const int64_t j1 = std::min(mblocks, j + pl.run_mb);
        const int64_t m0 = m_starts[j];
        Item it{0, g, m0, n0, static_cast<int>(m_starts[j + 1] - m0), cols,
                pl.all_pixels * ((m_starts[j1] - m0) * nv + 3.0 * (j1 - j) + 0.1 * cols)};
        it.mj = j;
        it.mj_end = j1;
        pl.items.push_back(it);
        pl.local_rows = std::max(pl.local_rows, m_starts[j1] - m0);
      }
      n0 += cols;
    }
}

// Pixel lists: at most ~1 MiB per thread (many taps, tiny channel counts).
constexpr int64_t kPixListEntries = kMiB / static_cast<int64_t>(sizeof(Pix));

// Floats of one copy of the weight gradient.
int64_t gradient_floats(const BwdWeightsPlan& pl) { return pl.taps * pl.p.G * pl.Mg * pl.Ng; }

// Whether a pass that writes the whole gradient does so with streaming stores
// (beyond two L2s and more).
bool stream_gradient(const BwdWeightsPlan& pl) {
  return static_cast<double>(kElem) * gradient_floats(pl) >= 8.0 * kMiB;
}

// Pixel partitions (the reduction pieces) and the pixel block size.
void choose_blocks(BwdWeightsPlan& pl) {
  const ConvProblem& p = pl.p;
  const int64_t F = pl.F, Mg = pl.Mg, Ng = pl.Ng;
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
  const double act_floats =
      static_cast<double>(F) * p.IC() + static_cast<double>(p.N) * p.dst_spatial() * p.OC();
  pl.P = reduction_pieces(act_floats, static_cast<double>(gradient_floats(pl)), F / 64);
  pl.per_part = std::max(1, pl.nt / pl.P);

  // Pixel block size. GEMM: one tile call reads a line of A and max_cols
  // floats of B per pixel; keep those of a block within ~24 KiB of L1.
  // Depthwise: the block's src and tapped diff_dst rows of one channel block.
  // The table's l1_b_blocks: the B rows of that many n-blocks.
  const int l1b = pl.tab->l1_b_blocks;
  const int64_t b_width = l1b > 1 ? std::min<int64_t>(Ng, int64_t{l1b} * pl.max_cols) : pl.max_cols;
  int64_t block = pl.kernel == Kernel::Depthwise ? 16 * kKiB / (kElem * pl.max_cols)
                                                 : 24 * kKiB / (kLine + kElem * b_width);
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
  // A partition a little longer than that is one block when its A panels
  // stay within 2 MiB (L3): each accumulator tile is then written once instead
  // of loaded and stored per block (3D U-Net k3 512 -> 256 on 8x9x9, 648
  // pixels: 14 MB of accumulators, Zen 5 1.05-1.08x).
  if (pl.packed) {
    block = std::clamp<int64_t>(kMiB / (kElem * Mg), 16, 1024);
    const int64_t part_pixels = (F + pl.P - 1) / pl.P;
    if (part_pixels > block && part_pixels <= 1024 && part_pixels * Mg * kElem <= 2 * kMiB)
      block = part_pixels;
  }
  pl.block = block;
}

// Local n-blocks (and whether the output has the taps innermost).
void choose_local(BwdWeightsPlan& pl) {
  const int64_t G = pl.p.G, F = pl.F, taps = pl.taps, mblocks = pl.mblocks;
  // Output with the taps innermost (IOX, OIX: each (m, n) has its taps at
  // +0, +1, ...): written from scratch [tap][m][n] by a final transposing pass.
  pl.taps_inner = !pl.direct && taps > 1;
  for (int64_t t = 0; t < taps && pl.taps_inner; ++t) pl.taps_inner = pl.koff[t] == t;
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
  pl.ln_cols = int64_t{pl.gemm_vecs} * pl.tab->lanes;
  const int64_t nblocks_local = G * ((pl.Ng + pl.ln_cols - 1) / pl.ln_cols);
  int64_t run_mb = std::min<int64_t>(
      mblocks, (512 * kKiB / kElem) / std::max<int64_t>(1, taps * pl.rows_main * pl.ln_cols));
  if (run_mb >= 1) {
    const int64_t want = (4 * int64_t{pl.nt} + nblocks_local - 1) / nblocks_local;
    const int64_t runs = std::min(mblocks, std::max((mblocks + run_mb - 1) / run_mb, want));
    run_mb = (mblocks + runs - 1) / runs;
  }
  pl.run_mb = run_mb;
  const bool local_shape = pl.kernel == Kernel::Gemm && pl.packed && pl.kf == 1 && pl.P == 1 &&
                           pl.taps_inner && pl.vec_b && pl.share_ok &&
                           F <= kPixListEntries / taps && run_mb >= 1;
  // One group: the A panels of all pixels are packed once, shared by the
  // threads, so a longer block is worth it: up to 2048 pixels whose panels
  // fit in 4 MiB (L3) make one block (U-Net 1024 -> 512 k2 s2 on 23x30, 690
  // pixels, 2.8 MB of panels, was 3 blocks of 256 into an 8 MB scratch:
  // 1.14-1.19x NXC, 1.11x NCX on Zen 5).
  if (local_shape && G == 1 && F > pl.block && F <= 2048 && F * pl.Mg * kElem <= 4 * kMiB)
    pl.block = F;
  pl.local = local_shape && F <= pl.block;
  pl.local_shared_a = pl.local && G == 1;
  pl.local_stream = stream_gradient(pl);  // as the final pass
  if (pl.local) make_local_items(pl);
}

// Scratch copies, tasks and the per-thread buffers.
void plan_tasks(BwdWeightsPlan& pl) {
  const int64_t G = pl.p.G, Mg = pl.Mg, Ng = pl.Ng, taps = pl.taps;
  const bool depthwise = pl.kernel == Kernel::Depthwise, local = pl.local;
  // Partition 0 writes the output (direct) or scratch copy 0. Scratch: per
  // copy the taps' planes of G*Mg*Ng floats, each padded by a line so that
  // the final pass's reads of one row of every tap (planes a multiple of
  // 4 KiB apart, e.g. 512 KiB) do not all fall in one cache set.
  pl.plane = pl.kf > 1 ? G * Mg * Ng : (G * Mg * Ng + 15) / 16 * 16 + 16;
  pl.wstride = taps * pl.plane;  // floats per scratch copy
  pl.nbuf = local ? 0 : pl.direct ? pl.P - 1 : pl.P;

  // Tasks: (pixel partition, chunk of items), claimed dynamically, so that a
  // thread that starts late (shared machine) or runs slow takes fewer. Two
  // chunks per thread of a partition keep the tail short; each chunk re-reads
  // the partition's pixels, so a partition of one thread is one chunk.
  const int64_t nitems = static_cast<int64_t>(pl.items.size());
  pl.nchunks = local             ? static_cast<int>(nitems)
               : pl.per_part == 1 ? 1
                                  : static_cast<int>(std::max<int64_t>(
                                        1, std::min<int64_t>(nitems, 2 * pl.per_part)));
  split_items(pl.items, pl.nchunks, pl.chunk);
  pl.ntasks = static_cast<int64_t>(pl.P) * pl.nchunks;
  // Per thread: a pixel list per tap (of its chunk's tap span) of a block.
  pl.max_span = 1;
  for (int c = 0; c < pl.nchunks; ++c) {
    int64_t lo_t = taps, hi_t = -1;
    for (int64_t i = pl.chunk[c]; i < pl.chunk[c + 1]; ++i)
      lo_t = std::min(lo_t, pl.items[i].tap), hi_t = std::max(hi_t, pl.items[i].tap);
    pl.max_span = std::max(pl.max_span, hi_t - lo_t + 1);
  }
  if (local) pl.max_span = taps;  // an item runs every tap
  // The pixel lists' cap, by the taps, not by the chunk's span (the chunks
  // follow the threads, the blocks must not: they set the order of the sums).
  pl.block = std::min(pl.block, std::max<int64_t>(16, kPixListEntries / taps));

  // A panels: one per m-block (bww::pack_panels_avx2's layout; the other
  // ISAs pack each m-block when its first tile needs it), one B panel.
  const int64_t block = pl.block, ldb_max = int64_t{pl.gemm_vecs} * pl.tab->lanes;
  // B panels (packed, not local): the n-blocks of one (tap, group) within
  // kBSpanBytes of each pixel row packed at once, the row read in one run
  // instead of one strided line per n-block pass (Zen 3, AVX2, 4 n-blocks
  // against 1: ResNet 1x1 s2 1.07-1.14x, HiFi-GAN 128 -> 64 1.11x, 3D U-Net
  // 128 -> 64 1.09x, none slower; 8 n-blocks 3-7 % slower than 4).
  constexpr int64_t kBSpanBytes = 256;
  const int64_t span_blocks = local ? 1 : std::max<int64_t>(1, kBSpanBytes / (kElem * ldb_max));
  pl.b_span = std::min((Ng + ldb_max - 1) / ldb_max, span_blocks) * ldb_max;
  pl.pack_floats = !pl.packed          ? 0
                   : pl.local_shared_a ? block * pl.b_span
                                       : block * (Mg + pl.b_span) + pl.mblocks * bww::kPanelSlack;
  // Local n-blocks of one group: the A panels of all m-blocks (the block is
  // every pixel, in flat order), packed once before the tiles.
  pl.shared_a_floats = pl.local_shared_a ? block * Mg + pl.mblocks * bww::kPanelSlack : 0;
  pl.local_floats = local ? taps * pl.local_rows * pl.ln_cols : 0;
  pl.gbuf_floats = pl.kernel == Kernel::Grouped ? 4 * pl.tab->lanes * pl.tab->lanes : 0;

  pl.a_is_src = pl.vec_b || depthwise;
  pl.a_len = pl.a_is_src ? pl.p.IC() : pl.p.OC();  // floats of an A pixel row
  pl.shared_a = pl.packed && pl.a_is_src && pl.share_ok;
  pl.src_step = pl.p.IC(), pl.dst_step = pl.p.s[2] * pl.p.OC();
  pl.a_gstride = pl.a_is_src ? pl.p.ICg : pl.p.OCg;
  pl.b_gstride = pl.a_is_src ? pl.p.OCg : pl.p.ICg;
  // Prefetch of the next pixel block (GEMM and grouped tiles).
  pl.prefetch = !depthwise;
}

// The final pass, which sums the pieces' copies into the output.
void plan_final(BwdWeightsPlan& pl) {
  const int64_t si = pl.si, so = pl.so;
  if (pl.local || !(pl.P > 1 || !pl.direct)) {
    pl.final = Final::None;
  } else if (pl.taps_inner) {
    pl.final = Final::Transpose;
    const int64_t on = pl.vec_b ? so : si, om = pl.vec_b ? si : so;
    pl.final_stream = stream_gradient(pl);
    // Walk the output in its order (the dim of larger stride outer):
    // across the far rows it would take a TLB miss per run of taps.
    pl.final_n_outer = std::abs(on) > std::abs(om);
  } else {
    pl.final = Final::Sum;
    const int64_t om = pl.vec_b ? si : so, on = pl.vec_b ? so : si;  // output strides of m, n
    // Dims 0 = tap, 1 = m, 2 = n, sorted by output stride: ord[0] innermost.
    const int64_t tap_stride = pl.taps > 1 ? std::abs(pl.koff[1] - pl.koff[0]) : 0;
    const int64_t dim_stride[3] = {tap_stride, std::abs(om), std::abs(on)};
    int* ord = pl.final_ord;
    std::sort(ord, ord + 3, [&](int x, int y) { return dim_stride[x] < dim_stride[y]; });
    // n contiguous in the output as in the copies (vec_b with OI* layouts'
    // so == 1, e.g. IOX 1x1): whole rows summed in vectors, not 16^3 blocks
    // scattered element by element (GoogLeNet 4a 1x1 NXC, 6 pieces: the
    // blocks took 11 % of the call on Zen 3).
    pl.final_rows = on == 1;
  }
}

}  // namespace

namespace bww {

namespace {

// Every input of build_bwd_weights_plan (the table stands for the ISA's and
// the microarchitecture's choices).
struct PlanKey {
  const BwdWeightsF32Table* tab;
  Isa isa;
  ConvProblem p;
  int64_t si, so;
  std::array<int64_t, kAxes> sk;
  int nthreads, in16;
  bool operator==(const PlanKey& o) const {
    return tab == o.tab && isa == o.isa && si == o.si && so == o.so && sk == o.sk &&
           nthreads == o.nthreads && in16 == o.in16 && p == o.p;
  }
};

BwdWeightsPlan build_bwd_weights_plan(Isa isa, const ConvProblem& p, const WeightsView& diff_w,
                                      int nthreads, int in16);

}  // namespace

std::shared_ptr<const BwdWeightsPlan> plan_bwd_weights(Isa isa, const ConvProblem& p,
                                                       const WeightsView& diff_w, int nthreads,
                                                       int in16) {
  thread_local PlanMemo<PlanKey, BwdWeightsPlan> memo;
  const PlanKey key{table_for(isa), isa, p, diff_w.si, diff_w.so,
                    {diff_w.sk[0], diff_w.sk[1], diff_w.sk[2]}, nthreads, in16};
  return memo.get(key, [&] { return build_bwd_weights_plan(isa, p, diff_w, nthreads, in16); });
}

namespace {

BwdWeightsPlan build_bwd_weights_plan(Isa isa, const ConvProblem& p, const WeightsView& diff_w,
                                      int nthreads, int in16) {
  BwdWeightsPlan pl;
  pl.tab = table_for(isa);
  pl.p = p;
  pl.in16 = in16;
  if (!pl.tab || (in16 && !pl.tab->pack16)) return pl;  // Route::Reference
  pl.nt = std::max(1, nthreads);
  pl.taps = p.taps();
  pl.route = Route::Empty;
  if (p.G <= 0 || p.ICg <= 0 || p.OCg <= 0 || pl.taps <= 0) return pl;  // no element to write
  pl.si = diff_w.si, pl.so = diff_w.so;
  const std::vector<double> tap_pixels = plan_taps(pl, diff_w);
  if (pl.all_pixels == 0) {  // N == 0, or no tap ever inside diff_dst: all zeros
    pl.route = Route::Zeros;
    return pl;
  }
  pl.route = Route::Tiles;
  pl.F = p.N * p.src_spatial();  // flat src pixels (n, i0, i1, i2)
  plan_waste(pl);
  choose_sides(pl);
  choose_tiles(pl, diff_w);
  // 16-bit rows: the f32 plan's kernels, each reading them itself. Packed
  // GEMM tiles widen them as they pack; the tiles on pixel lists (few
  // channels, fused taps, depthwise, grouped) as they load (heuristics A14).
  // A kernel the table has no 16-bit form of routes to the reference, which
  // the call plan replaces by the chunked f32 route.
  if (in16) {
    const BwdWeightsF32Table& t = *pl.tab;
    const bool has16 = pl.kernel == Kernel::Depthwise ? t.dw16 != nullptr
                       : pl.kernel == Kernel::Grouped ? t.grouped16 != nullptr
                       : t.gemm16 != nullptr || (pl.packed && pl.kf == 1);
    if (!has16) {
      pl.route = Route::Reference;
      return pl;
    }
  }
  if (pl.kernel == Kernel::Depthwise) make_dw_items(pl, tap_pixels);
  else if (pl.kernel == Kernel::Grouped) make_grouped_items(pl, tap_pixels);
  else if (pl.kf > 1) make_fused_items(pl, tap_pixels);
  else make_gemm_items(pl, tap_pixels);
  // (backward_weights16_applies weighs it against the copies)
  if (in16 && !pl.packed) pl.widen_ratio = list_widen_ratio(pl, tap_pixels);
  choose_blocks(pl);
  choose_local(pl);
  plan_tasks(pl);
  plan_final(pl);
  return pl;
}

}  // namespace

int64_t BwdWeightsPlan::scratch_bytes() const { return kElem * nbuf * wstride; }

int64_t BwdWeightsPlan::shared_bytes() const {
  return kElem * shared_a_floats + (local_shared_a ? static_cast<int64_t>(sizeof(Pix)) * F : 0);
}

int64_t BwdWeightsPlan::per_thread_bytes() const {
  if (route != Route::Tiles) return 0;
  const int64_t pix = max_span * block + (kf > 1 ? (kf + 1) * block : 0);
  return static_cast<int64_t>(sizeof(Pix)) * pix +
         kElem * (pack_floats + local_floats + gbuf_floats) + (packed ? mblocks : 0) +
         static_cast<int64_t>(sizeof(int64_t)) * (taps + 1) +
         static_cast<int64_t>(sizeof(Seg)) * block;
}

// One line: every decision that changes the work, key=value, in a fixed order.
std::string describe(const BwdWeightsPlan& pl) {
  std::ostringstream o;
  o << "route=";
  switch (pl.route) {
    case Route::Reference: return "route=reference";
    case Route::Empty: return "route=empty";
    case Route::Zeros: o << "zeros threads=" << pl.nt; return o.str();
    case Route::Tiles: break;
  }
  const BwdWeightsF32Table& tab = *pl.tab;
  const char* kernel = pl.kernel == Kernel::Depthwise ? "dw"
                       : pl.kernel == Kernel::Grouped ? "grouped"
                                                      : "gemm";
  // The widest tile: rows x columns.
  int64_t mr = 0, nr = 0;
  switch (pl.kernel) {
    case Kernel::Depthwise: mr = 1, nr = int64_t{tab.lanes} * tab.dw_vecs; break;
    case Kernel::Grouped: mr = pl.Mg, nr = pl.Ng; break;
    case Kernel::Gemm:
      mr = pl.kf > 1 ? pl.kf * pl.Mg : pl.rows_main;
      nr = int64_t{pl.kf > 1 ? 2 : pl.gemm_vecs} * tab.lanes;
      break;
  }
  // The items and their split into chunks, as one number (FNV-1a).
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](int64_t v) {
    for (int b = 0; b < 8; ++b)
      h = (h ^ ((static_cast<uint64_t>(v) >> (8 * b)) & 0xff)) * 1099511628211ull;
  };
  for (const Item& it : pl.items) {
    mix(it.tap), mix(it.g), mix(it.m0), mix(it.n0), mix(it.rows), mix(it.cols), mix(it.groups);
    mix(it.mj), mix(it.mj_end), mix(it.fk);
  }
  for (int64_t c : pl.chunk) mix(c);
  const char* final_pass = pl.final == Final::Transpose ? "transpose"
                           : pl.final == Final::Sum     ? "sum"
                                                        : "none";
  o << "tiles tile=bwd_weights_f32_" << kernel << "_" << tab.isa << "_" << mr << "x" << nr
    << " vec=" << (pl.vec_b ? "b" : "a") << " direct=" << pl.direct << " M=" << pl.Mg
    << " N=" << pl.Ng << " mblocks=" << pl.mblocks << " kf=" << pl.kf << " packed=" << pl.packed
    << " shared_a=" << pl.shared_a;
  if (pl.in16) o << " in16=" << (pl.in16 == 2 ? "f16" : "bf16");
  if (pl.widen_ratio > 0) o << " widen=" << std::fixed << std::setprecision(2) << pl.widen_ratio << std::defaultfloat;
  if (pl.packed && !pl.local) o << " mper=" << pl.mper << " b_span=" << pl.b_span;
  o << " block=" << pl.block << " pieces=" << pl.P << " chunks=" << pl.nchunks
    << " tasks=" << pl.ntasks << " items=" << pl.items.size() << " span=" << pl.max_span
    << " split=" << std::hex << std::setw(8) << std::setfill('0') << (h & 0xffffffffu) << std::dec
    << " pf=" << pl.prefetch << " taps_inner=" << pl.taps_inner << " local=" << pl.local;
  if (pl.local)
    o << " local_shared_a=" << pl.local_shared_a << " run_mb=" << pl.run_mb
      << " local_rows=" << pl.local_rows << " local_stream=" << pl.local_stream;
  o << " copies=" << pl.nbuf << " final=" << final_pass;
  if (pl.final == Final::Transpose)
    o << " final_stream=" << pl.final_stream << " n_outer=" << pl.final_n_outer;
  if (pl.final == Final::Sum && pl.final_rows) o << " order=rows";
  else if (pl.final == Final::Sum)
    o << " order=" << pl.final_ord[0] << pl.final_ord[1] << pl.final_ord[2];
  o << " scratch=" << pl.scratch_bytes() << " shared=" << pl.shared_bytes()
    << " thread=" << pl.per_thread_bytes() << " threads=" << pl.nt;
  return o.str();
}

}  // namespace bww

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


namespace {

// ------------------------------------------------------------ execution

// No tap ever inside diff_dst: every element of the gradient is zero.
void write_zeros(const BwdWeightsPlan& pl, float* out) {
  const int64_t IC = pl.p.IC(), OCg = pl.p.OCg, taps = pl.taps, si = pl.si, so = pl.so;
  const std::vector<int64_t>& koff = pl.koff;
#pragma omp parallel for schedule(static) num_threads(pl.nt)
  for (int64_t ic = 0; ic < IC; ++ic)
    for (int64_t b = 0; b < OCg; ++b)
      for (int64_t t = 0; t < taps; ++t) out[ic * si + b * so + koff[t]] = 0.f;
}

// n floats, 64-byte aligned, null when the memory is not there. The panels
// and per-thread buffers keep the plain allocation they were measured with
// (aligned_buffer marks 4 MiB and more for huge pages: the scratch copies).
AlignedBuf<float> plain_floats(int64_t n) {
  return AlignedBuf<float>(static_cast<float*>(
      std::aligned_alloc(64, (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64)));
}

// The buffers of one call, sized by the plan, and where each piece accumulates.
struct CallBuffers {
  AlignedBuf<float> scratch;    // the pieces' gradient copies
  AlignedBuf<float> shared_ap;  // local n-blocks of one group: the A panels of all pixels
  AlignedBuf<float> pack_all;   // per thread: packed A and B panels
  AlignedBuf<float> local_all;  // per thread: local n-block tiles [tap][m][n]
  std::vector<int64_t> scratch_off;
  std::vector<Target> targets;  // per piece
  std::vector<Pix> pix_all, fpix_all, a_rows;
  std::vector<char> a_done_all;
  std::vector<int64_t> pix_count;
  std::vector<float> gbufs;
  std::vector<Seg> segs_all;
};

// False when a buffer is not there (the caller then runs the reference).
template <class TA>
bool allocate(const BwdWeightsPlan& pl, const TA* src, float* out, CallBuffers& b) {
  const size_t nt = static_cast<size_t>(pl.nt);
  if (pl.nbuf > 0) {
    try {
      b.scratch = aligned_buffer<float>(pl.nbuf * pl.wstride);
    } catch (const std::bad_alloc&) {
      return false;
    }
  }
  b.scratch_off.resize(pl.taps);
  for (int64_t t = 0; t < pl.taps; ++t) b.scratch_off[t] = t * pl.plane;
  b.targets.resize(pl.P);
  for (int q = 0; q < pl.P; ++q) {
    if (q == 0 && pl.direct) {
      // vec_b: m = a (stride si), n = b (stride so == 1); vec_a: m = b, n = a.
      b.targets[q] = {out, pl.koff.data(), pl.p.ICg * pl.si, pl.vec_b ? pl.si : pl.so};
    } else {
      const int buf = pl.direct ? q - 1 : q;
      b.targets[q] = {pl.local ? nullptr : b.scratch.get() + buf * pl.wstride,
                      b.scratch_off.data(), pl.Mg * pl.Ng, pl.Ng};
    }
  }
  b.pix_all.resize(nt * pl.max_span * pl.block);
  b.fpix_all.resize(pl.kf > 1 ? nt * (pl.kf + 1) * pl.block : 0);
  if (pl.local_shared_a) {
    b.shared_ap = plain_floats(pl.shared_a_floats);
    if (!b.shared_ap) return false;
    b.a_rows.resize(static_cast<size_t>(pl.F));
    for (int64_t f = 0; f < pl.F; ++f)
      b.a_rows[f] = {reinterpret_cast<const float*>(src + f * pl.p.IC()), nullptr};
  }
  if (pl.packed) {
    b.pack_all = plain_floats(static_cast<int64_t>(nt) * pl.pack_floats);
    if (!b.pack_all) return false;
  }
  b.a_done_all.resize(pl.packed ? nt * pl.mblocks : 0);
  if (pl.local) {
    b.local_all = plain_floats(static_cast<int64_t>(nt) * pl.local_floats);
    if (!b.local_all) return false;
  }
  b.gbufs.resize(nt * pl.gbuf_floats);
  b.pix_count.resize(pl.taps * nt);
  b.segs_all.resize(nt * pl.block);
  return true;
}

// One thread's share of the tasks: its buffers and the state of the pixel
// block it works on. run() is one task: a chunk of items over the pixels of
// one piece.
// TA: the activations' storage: float, or uint16_t (plan in16: bf16 / f16
// rows, which only the packing reads: the Pix pointers point at them).
template <class TA>
class TaskRunner {
 public:
  TaskRunner(const BwdWeightsPlan& pl, CallBuffers& cb, const TA* src, const TA* diff_dst,
             float* out, int tid);
  void run(int part, int64_t ib, int64_t ie);

 private:
  void begin_task(int part, int64_t ib, int64_t ie);
  void zero_tile(const Item& it) const;
  int64_t next_block(int64_t& f, int64_t f_end);
  void start_prefetch(int64_t f, int64_t f_end);
  void prefetch_some();
  const TA* tapped(const Seg& sg, int64_t tap, int64_t xlo, int64_t xhi, int64_t& x0,
                   int64_t& x1) const;
  const TA* src_at(const Seg& sg, int64_t x) const;
  // A row of TA as the Pix lists hold it.
  static const float* rows(const TA* r) { return reinterpret_cast<const float*>(r); }
  // The table's packing for TA (16-bit: widened as copied).
  void pack(const Pix* px, int64_t n, bool side_b, int64_t off, int width, int64_t ld,
            float* dst) const {
    if constexpr (std::is_same_v<TA, float>) tab.pack(px, n, side_b, off, width, ld, dst);
    else tab.pack16(px, n, side_b, off, width, ld, dst, pl.in16);
  }
  // The tiles on pixel lists for TA (16-bit: widened as loaded; plan_bwd_weights
  // takes in16 only where the table has them).
  void gemm_on_lists(const TileArgs& ta) const {
    if constexpr (std::is_same_v<TA, float>) tab.gemm(ta);
    else tab.gemm16(ta, pl.in16);
  }
  void dw_on_lists(const TileArgs& ta) const {
    if constexpr (std::is_same_v<TA, float>) tab.dw(ta);
    else tab.dw16(ta, pl.in16);
  }
  void grouped_on_lists(const TileArgs& ta) const {
    if constexpr (std::is_same_v<TA, float>) tab.grouped(ta);
    else tab.grouped16(ta, pl.in16);
  }
  int64_t build_into(int64_t tap, int64_t xlo, int64_t xhi, Pix* out_pix, int64_t n) const;
  int64_t build_full(int64_t tap, Pix* out_pix) const;
  void build(int64_t tap);
  void run_fused(const Item& item, bool first);
  void stale_a_panels(const Pix* px, int64_t np, int64_t g);
  float* a_panel(const Pix* px, int64_t np, int64_t g, int64_t mj);
  void run_local(const Item& item);
  void run_item(const Item& whole, bool first_block);
  void run_tile(const Item& item, bool first_block);
  void grouped_tile(TileArgs& ta, const Item& item);
  void packed_tile(TileArgs& ta, const Item& item);

  const BwdWeightsPlan& pl;
  const ConvProblem& p;
  const BwdWeightsF32Table& tab;
  const CallBuffers& cb;
  const TA* const src;
  const TA* const diff_dst;
  float* const out;
  const bool gemm;  // GEMM tiles (not depthwise, not grouped)
  // This thread's buffers.
  float* const gbuf;     // grouped tiles' sums
  Pix* const pix;        // a pixel list per tap of the task's span
  int64_t* const count;  // pixels of each tap's list; -1: not built for this block
  Seg* const segs;       // the block's row pieces
  float* const bpack;    // packed B panel
  float* const apack;    // packed A panels
  char* const a_done;    // A panel of each m-block packed
  Pix* const fpix;       // fused items: the fused list, then each tap's others
  float* const lb;       // local n-blocks: [tap][m - m0][n]
  // Local n-blocks: the group whose A panels this thread holds (one pixel
  // block, so they stay valid from one item to the next), -1 for none.
  int64_t local_a_g = -1;
  // The lists of the last fused group built in this block (its n-blocks are
  // adjacent items): fcount[0] fused, fcount[1 + j] tap j's others.
  std::vector<int64_t> fcount;
  // The task: its target, tap span, tiles; the panels' current contents.
  const Target* tg = nullptr;
  int64_t tap_lo = 0, tap_hi = -1, tiles_in_chunk = 0;
  int64_t a_tap = -1, a_g = -1, b_tap = -1, b_g = -1, b_n0 = -1, f_tap = -1;
  int64_t b_cols = 0, b_ld = 0;  // the packed B panel: columns from b_n0, row stride
  // The block: its row pieces; the prefetch of the next one.
  int64_t nseg = 0;
  const char* pf[2] = {nullptr, nullptr};
  const char* pf_end[2] = {nullptr, nullptr};
  int64_t pf_quota = 0;
  int pf_r = 2;  // range being prefetched; 2 = done
};

template <class TA>
TaskRunner<TA>::TaskRunner(const BwdWeightsPlan& pl, CallBuffers& cb, const TA* src,
                           const TA* diff_dst, float* out, int tid)
    : pl(pl),
      p(pl.p),
      tab(*pl.tab),
      cb(cb),
      src(src),
      diff_dst(diff_dst),
      out(out),
      gemm(pl.kernel == Kernel::Gemm),
      gbuf(cb.gbufs.data() + static_cast<size_t>(tid) * pl.gbuf_floats),
      pix(cb.pix_all.data() + static_cast<size_t>(tid) * pl.max_span * pl.block),
      count(cb.pix_count.data() + static_cast<size_t>(tid) * pl.taps),
      segs(cb.segs_all.data() + static_cast<size_t>(tid) * pl.block),
      bpack(pl.packed ? cb.pack_all.get() + tid * pl.pack_floats : nullptr),
      apack(bpack + (pl.packed ? pl.block * pl.b_span : 0)),
      a_done(pl.packed ? cb.a_done_all.data() + static_cast<size_t>(tid) * pl.mblocks : nullptr),
      fpix(cb.fpix_all.data() + static_cast<size_t>(tid) * (pl.kf + 1) * pl.block),
      lb(pl.local ? cb.local_all.get() + tid * pl.local_floats : nullptr),
      fcount(static_cast<size_t>(pl.kf + 1)) {}

template <class TA>
void TaskRunner<TA>::run(int part, int64_t ib, int64_t ie) {
  if (ib >= ie) return;
  begin_task(part, ib, ie);
  const int64_t f_begin = part_start(pl.F, pl.P, part), f_end = part_start(pl.F, pl.P, part + 1);
  if (gemm && f_begin >= f_end)
    for (int64_t i = ib; i < ie; ++i) zero_tile(pl.items[i]);
  for (int64_t f = f_begin; f < f_end;) {
    const bool first_block = f == f_begin;
    nseg = next_block(f, f_end);
    for (int64_t t = tap_lo; t <= tap_hi; ++t) count[t] = -1;
    f_tap = -1;
    a_tap = b_tap = -1;  // packed panels are of the previous block
    start_prefetch(f, f_end);
    for (int64_t i = ib; i < ie; ++i) {
      const Item& whole = pl.items[i];
      if (pl.local) run_local(whole);
      else if (whole.fk > 1) run_fused(whole, first_block);
      else run_item(whole, first_block);
    }
  }
}

template <class TA>
void TaskRunner<TA>::begin_task(int part, int64_t ib, int64_t ie) {
  tg = &cb.targets[part];
  // Items are tap-ordered within a chunk (depthwise: per channel block).
  tap_lo = pl.taps, tap_hi = -1, tiles_in_chunk = 0;
  for (int64_t i = ib; i < ie; ++i) {
    const Item& it = pl.items[i];
    tap_lo = std::min(tap_lo, it.tap), tap_hi = std::max(tap_hi, it.tap);
    tiles_in_chunk += std::max<int64_t>(1, it.mj_end - it.mj);
  }
  if (pl.local) tap_lo = 0, tap_hi = pl.taps - 1;  // every item runs every tap
  // Tiles start at zero: GEMM tiles by their first tile call (fresh), or
  // when their tap has no pixel in the first block; others here.
  if (!gemm)
    for (int64_t i = ib; i < ie; ++i) zero_tile(pl.items[i]);
  a_tap = a_g = b_tap = b_g = b_n0 = f_tap = -1;
}

template <class TA>
void TaskRunner<TA>::zero_tile(const Item& it) const {
  const int64_t rows = it.mj_end > it.mj + 1 ? pl.m_starts[it.mj_end] - it.m0 : it.rows;
  for (int gl = 0; gl < it.groups; ++gl) {
    float* c = tg->tile(it) + gl * tg->g_stride;
    for (int64_t r = 0; r < rows; ++r)
      std::memset(c + r * tg->m_stride, 0, sizeof(float) * it.cols);
  }
}

// The next block of pixels from f: row pieces totalling at most `block` pixels.
template <class TA>
int64_t TaskRunner<TA>::next_block(int64_t& f, int64_t f_end) {
  const int64_t I0 = p.I[0], I1 = p.I[1], I2 = p.I[2];
  int64_t n = 0, total = 0;
  while (f < f_end && total < pl.block) {
    const int64_t row = f / I2, x = f % I2;
    const int64_t len = std::min({I2 - x, f_end - f, pl.block - total});
    segs[n++] = {row / (I0 * I1), (row / I1) % I0, row % I1, x, x + len};
    total += len;
    f += len;
  }
  return n;
}

// Prefetch the next block's src pixels (from f) and the diff_dst range its
// taps reach into L2, spread over this block's tile calls: a layer with few
// taps reads each pixel a few times only, and the strided first touch of
// every line would otherwise wait on memory.
template <class TA>
void TaskRunner<TA>::start_prefetch(int64_t f, int64_t f_end) {
  const int64_t I0 = p.I[0], I1 = p.I[1], I2 = p.I[2], O0 = p.O[0], O1 = p.O[1], O2 = p.O[2];
  const int64_t IC = p.IC(), OC = p.OC();
  pf[0] = pf[1] = pf_end[0] = pf_end[1] = nullptr;
  if (pl.prefetch && f < f_end) {
    const int64_t g0 = f, g1 = std::min(f_end, f + pl.block) - 1;
    pf[0] = reinterpret_cast<const char*>(src + g0 * IC);
    pf_end[0] = reinterpret_cast<const char*>(src + (g1 + 1) * IC);
    const int64_t r0 = g0 / I2, r1 = g1 / I2;
    // The diff_dst rows of src row i's first (last) tap on axis a, clamped to diff_dst.
    auto at = [&](int64_t i, int a, bool last) {
      const TapAxis ax = p.axis(a);
      return std::clamp<int64_t>(ax.dst_of(i, last ? ax.K - 1 : 0), 0, ax.O - 1);
    };
    const int64_t lo_flat = ((r0 / (I0 * I1) * O0 + at((r0 / I1) % I0, 0, false)) * O1 +
                             at(r0 % I1, 1, false)) * O2;
    const int64_t hi_flat =
        ((r1 / (I0 * I1) * O0 + at((r1 / I1) % I0, 0, true)) * O1 + at(r1 % I1, 1, true) + 1) *
        O2;
    if ((hi_flat - lo_flat) * OC <= 4 * (g1 + 1 - g0) * IC) {
      pf[1] = reinterpret_cast<const char*>(diff_dst + lo_flat * OC);
      pf_end[1] = reinterpret_cast<const char*>(diff_dst + hi_flat * OC);
    }
  }
  const int64_t pf_lines = ((pf_end[0] - pf[0]) + (pf_end[1] - pf[1])) / kLine;
  pf_quota = pf_lines / std::max<int64_t>(1, tiles_in_chunk) + 1;
  pf_r = pf[0] ? 0 : 2;
}

// This tile's share of the prefetch.
template <class TA>
inline void TaskRunner<TA>::prefetch_some() {
  for (int64_t q = 0; q < pf_quota && pf_r < 2; ++q) {
    __builtin_prefetch(pf[pf_r], 0, 2);
    pf[pf_r] += kLine;
    if (pf[pf_r] >= pf_end[pf_r]) pf_r = (pf_r == 0 && pf[1]) ? 1 : 2;
  }
}

// Segment sg's pixels under tap `tap` with src x in [xlo, xhi): sets [x0, x1)
// to those inside the tap's box and returns the diff_dst row tapped by x0
// (null when there is none).
template <class TA>
inline const TA* TaskRunner<TA>::tapped(const Seg& sg, int64_t tap, int64_t xlo, int64_t xhi,
                                       int64_t& x0, int64_t& x1) const {
  const std::vector<int64_t>*lo = pl.lo, *hi = pl.hi;
  const int64_t k0 = tap / (p.K[1] * p.K[2]), k1 = (tap / p.K[2]) % p.K[1], k2 = tap % p.K[2];
  x0 = x1 = sg.x1;
  if (sg.i0 < lo[0][k0] || sg.i0 >= hi[0][k0] || sg.i1 < lo[1][k1] || sg.i1 >= hi[1][k1])
    return nullptr;
  x0 = std::max({sg.x0, lo[2][k2], xlo});
  x1 = std::min({sg.x1, hi[2][k2], xhi});
  if (x0 >= x1) return nullptr;
  const int64_t o0 = sg.i0 * p.s[0] - p.pb[0] + k0 * p.d[0];
  const int64_t o1 = sg.i1 * p.s[1] - p.pb[1] + k1 * p.d[1];
  const int64_t o2 = x0 * p.s[2] - p.pb[2] + k2 * p.d[2];
  return diff_dst + (((sg.n * p.O[0] + o0) * p.O[1] + o1) * p.O[2] + o2) * p.OC();
}

template <class TA>
inline const TA* TaskRunner<TA>::src_at(const Seg& sg, int64_t x) const {
  return src + (((sg.n * p.I[0] + sg.i0) * p.I[1] + sg.i1) * p.I[2] + x) * p.IC();
}

// The (A, B) pixel pairs of the block's pixels for one tap, with src x in
// [xlo, xhi) (within the tap's range), appended at out_pix[n].
template <class TA>
int64_t TaskRunner<TA>::build_into(int64_t tap, int64_t xlo, int64_t xhi, Pix* out_pix,
                               int64_t n) const {
  const int64_t src_step = pl.src_step, dst_step = pl.dst_step;
  for (int64_t s = 0; s < nseg; ++s) {
    int64_t x0, x1;
    const TA* dp = tapped(segs[s], tap, xlo, xhi, x0, x1);
    if (!dp) continue;
    const TA* sp = src_at(segs[s], x0);
    if (pl.a_is_src) {
      for (int64_t x = x0; x < x1; ++x, sp += src_step, dp += dst_step)
        out_pix[n++] = {rows(sp), rows(dp)};
    } else {
      for (int64_t x = x0; x < x1; ++x, sp += src_step, dp += dst_step)
        out_pix[n++] = {rows(dp), rows(sp)};
    }
  }
  return n;
}

// Shared A panels: every pixel of the block in order, b null where the
// tapped diff_dst position is outside (A = src).
template <class TA>
int64_t TaskRunner<TA>::build_full(int64_t tap, Pix* out_pix) const {
  const int64_t src_step = pl.src_step, dst_step = pl.dst_step;
  int64_t n = 0;
  for (int64_t s = 0; s < nseg; ++s) {
    const Seg& sg = segs[s];
    int64_t x0, x1;
    const TA* dp = tapped(sg, tap, 0, p.I[2], x0, x1);
    const TA* sp = src_at(sg, sg.x0);
    for (int64_t x = sg.x0; x < sg.x1; ++x, sp += src_step) {
      const bool in = x >= x0 && x < x1;
      out_pix[n++] = {rows(sp), in ? rows(dp) : nullptr};
      if (in) dp += dst_step;
    }
  }
  return n;
}

template <class TA>
void TaskRunner<TA>::build(int64_t tap) {
  Pix* out_pix = pix + (tap - tap_lo) * pl.block;
  count[tap] = pl.shared_a ? build_full(tap, out_pix) : build_into(tap, 0, p.I[2], out_pix, 0);
}

// A fused item: the pixels inside every tap's range through one tile of
// fk*Mg rows (fresh on the first block), then each tap's other pixels.
template <class TA>
void TaskRunner<TA>::run_fused(const Item& item, bool first) {
  const int64_t block = pl.block, Mg = pl.Mg;
  if (item.tap != f_tap) {
    const int64_t k2a = item.tap % p.K[2];
    int64_t xlo = 0, xhi = p.I[2];
    for (int j = 0; j < item.fk; ++j)
      xlo = std::max(xlo, pl.lo[2][k2a + j]), xhi = std::min(xhi, pl.hi[2][k2a + j]);
    if (xlo >= xhi) xlo = xhi = p.I[2];  // no pixel in every tap: all per tap
    fcount[0] = xlo < xhi ? build_into(item.tap, xlo, xhi, fpix, 0) : 0;
    for (int j = 0; j < item.fk; ++j) {  // x outside [xlo, xhi)
      Pix* lp = fpix + (j + 1) * block;
      const int64_t n = build_into(item.tap + j, 0, xlo, lp, 0);
      fcount[1 + j] = build_into(item.tap + j, xhi, p.I[2], lp, n);
    }
    f_tap = item.tap;
  }
  TileArgs ta{};
  ta.c = tg->tile(item);
  ta.ldc = tg->m_stride;
  ta.cols = item.cols;
  ta.b_off = item.n0;
  ta.pix = fpix;
  ta.npix = fcount[0];
  ta.rows = item.rows;
  ta.fresh = first;
  if (ta.npix > 0) {
    gemm_on_lists(ta);
  } else if (first) {
    zero_tile(item);
  }
  ta.rows = static_cast<int>(Mg);
  ta.fresh = 0;
  for (int j = 0; j < item.fk; ++j) {
    if (fcount[1 + j] == 0) continue;
    ta.pix = fpix + (j + 1) * block;
    ta.npix = fcount[1 + j];
    ta.c = tg->tile(item) + j * Mg * tg->m_stride;
    gemm_on_lists(ta);
  }
}

// A panels of packed tiles, from pixel list px (np pixels) of group g:
// marked stale (or, with the table's pack_panels, every m-block packed at
// once here), then m-block mj's panel, packed when first used.
template <class TA>
void TaskRunner<TA>::stale_a_panels(const Pix* px, int64_t np, int64_t g) {
  if (tab.pack_panels) {
    const int64_t off = g * pl.a_gstride, readable = pl.a_len - g * pl.a_gstride;
    if constexpr (std::is_same_v<TA, float>)
      tab.pack_panels(px, np, off, readable, pl.m_starts.data(), pl.mblocks, pl.block, apack);
    else
      tab.pack_panels16(px, np, off, readable, pl.m_starts.data(), pl.mblocks, pl.block, apack,
                        pl.in16);
  } else
    std::memset(a_done, 0, pl.mblocks);
}

template <class TA>
float* TaskRunner<TA>::a_panel(const Pix* px, int64_t np, int64_t g, int64_t mj) {
  const int64_t mb0 = pl.m_starts[mj];
  const int mrows = static_cast<int>(pl.m_starts[mj + 1] - mb0);
  float* pa = apack + mb0 * pl.block + mj * bww::kPanelSlack;
  if (!tab.pack_panels && !a_done[mj]) {
    a_done[mj] = 1;
    pack(px, np, false, g * pl.a_gstride + mb0, mrows, mrows, pa);
  }
  return pa;
}

// Local n-blocks: the item's m-blocks for every tap into the thread's buffer
// lb[tap][m - m0][n] (fresh: one pixel block), then written out.
template <class TA>
void TaskRunner<TA>::run_local(const Item& item) {
  const int64_t block = pl.block, lanes = tab.lanes;
  const int64_t m0 = item.m0, rows = pl.m_starts[item.mj_end] - m0;
  const int64_t ldl = pl.ln_cols, ld_t = rows * ldl;
  const int64_t ldb = vecs(pl, item.cols) * lanes;
  for (int64_t t = 0; t < pl.taps; ++t) {
    // Shared panels list every pixel of the block for every tap (zero
    // B rows where the tap falls outside): np is the whole block.
    if (count[t] < 0) build(t);
    float* lt = lb + t * ld_t;
    const Pix* px = pix + t * block;
    const int64_t np = count[t];
    if (!pl.local_shared_a && local_a_g != item.g) {  // A panels: shared by the taps and items
      local_a_g = item.g;
      stale_a_panels(px, np, item.g);
    }
    pack(px, np, true, item.g * pl.b_gstride + item.n0, item.cols, ldb, bpack);
    for (int64_t mj = item.mj; mj < item.mj_end; ++mj) {
      const int64_t mb0 = pl.m_starts[mj];
      const int mrows = static_cast<int>(pl.m_starts[mj + 1] - mb0);
      float* pa = pl.local_shared_a ? cb.shared_ap.get() + mb0 * block + mj * bww::kPanelSlack
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
      tab.gemm(ta);
    }
  }
  // Out in the output's order: per row m, 16 channels x all taps at a time.
  float* o = out + item.g * p.ICg * pl.si;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t n = 0; n < item.cols; n += 16)
      tab.transpose_taps(lb + r * ldl + n, ld_t, 0, 1, pl.taps,
                         static_cast<int>(std::min<int64_t>(16, item.cols - n)),
                         o + (m0 + r) * pl.si + (item.n0 + n) * pl.so, pl.so, pl.local_stream);
}

// The tiles of an item, one per m-block of its run.
template <class TA>
void TaskRunner<TA>::run_item(const Item& whole, bool first_block) {
  const int64_t mj_hi = whole.mj_end > whole.mj + 1 ? whole.mj_end : whole.mj + 1;
  for (int64_t mj = whole.mj; mj < mj_hi; ++mj) {
    prefetch_some();
    Item sub;
    if (mj_hi > whole.mj + 1) {
      sub = whole;
      sub.m0 = pl.m_starts[mj];
      sub.rows = static_cast<int>(pl.m_starts[mj + 1] - sub.m0);
      sub.mj = mj;
      sub.mj_end = 0;
    }
    run_tile(mj_hi > whole.mj + 1 ? sub : whole, first_block);
  }
}

// One tile over this block's pixels of its tap.
template <class TA>
void TaskRunner<TA>::run_tile(const Item& item, bool first_block) {
  if (count[item.tap] < 0) build(item.tap);
  if (count[item.tap] == 0) {
    if (gemm && first_block) zero_tile(item);
    return;
  }
  TileArgs ta{};
  ta.fresh = gemm && first_block;
  ta.pix = pix + (item.tap - tap_lo) * pl.block;
  ta.npix = count[item.tap];
  ta.c = tg->tile(item);
  ta.ldc = tg->m_stride;
  ta.rows = item.rows;
  ta.cols = item.cols;
  switch (pl.kernel) {
    case Kernel::Depthwise:
      ta.b_off = item.g;
      dw_on_lists(ta);
      break;
    case Kernel::Grouped:
      grouped_tile(ta, item);
      break;
    case Kernel::Gemm:
      if (pl.packed) {
        packed_tile(ta, item);
      } else {
        ta.a_off = item.g * pl.a_gstride + item.m0;
        ta.b_off = item.g * pl.b_gstride + item.n0;
        gemm_on_lists(ta);
      }
      break;
  }
}

// Grouped tiles write fresh sums into gbuf, added here into the target.
template <class TA>
void TaskRunner<TA>::grouped_tile(TileArgs& ta, const Item& item) {
  const int lanes = tab.lanes;
  ta.a_off = item.g * pl.a_gstride;
  ta.b_off = item.g * pl.b_gstride;
  ta.c = gbuf;
  ta.ldc = lanes;
  ta.groups = item.groups;
  grouped_on_lists(ta);
  const int per_vec = lanes / item.cols;
  for (int gl = 0; gl < item.groups; ++gl) {
    float* c = tg->tile(item) + gl * tg->g_stride;
    const float* sums = gbuf + (gl / per_vec) * item.rows * lanes + (gl % per_vec) * item.cols;
    for (int r = 0; r < item.rows; ++r)
      for (int n = 0; n < item.cols; ++n) c[r * tg->m_stride + n] += sums[r * lanes + n];
  }
}

// Packed tiles: the A panels of the item's tap and group, its B panel.
template <class TA>
void TaskRunner<TA>::packed_tile(TileArgs& ta, const Item& item) {
  const Pix* px = ta.pix;
  const int64_t np = ta.npix;
  if (a_tap < 0 || (item.tap != a_tap && !pl.shared_a) || item.g != a_g) {
    a_tap = item.tap, a_g = item.g;
    stale_a_panels(px, np, item.g);
  }
  float* pa = a_panel(px, np, item.g, item.mj);
  // B: the item's n-block and those after it in the group, up to b_span
  // columns, packed at once (each pixel row read in one run); the tiles of
  // the following items read their columns of it.
  if (item.tap != b_tap || item.g != b_g || item.n0 < b_n0 || item.n0 + item.cols > b_n0 + b_cols) {
    b_tap = item.tap, b_g = item.g, b_n0 = item.n0;
    b_cols = std::min<int64_t>(pl.b_span, pl.Ng - item.n0);
    b_ld = vecs(pl, b_cols) * tab.lanes;
    pack(px, np, true, item.g * pl.b_gstride + item.n0, static_cast<int>(b_cols), b_ld, bpack);
  }
  ta.pix = nullptr;
  ta.pa = pa;
  ta.lda = item.rows;
  ta.pb = bpack + (item.n0 - b_n0);
  ta.ldb = b_ld;
  tab.gemm(ta);
}

// Local n-blocks of one group: the A panels of every m-block over all pixels,
// packed once by the threads together (inside the parallel region).
template <class TA>
void pack_shared_a_panels(const BwdWeightsPlan& pl, CallBuffers& cb) {
  const std::vector<int64_t>& m_starts = pl.m_starts;
#pragma omp for schedule(static)
  for (int64_t mj = 0; mj < pl.mblocks; ++mj) {
    const int64_t m0 = m_starts[mj];
    const int rows = static_cast<int>(m_starts[mj + 1] - m0);
    float* const dst = cb.shared_ap.get() + m0 * pl.block + mj * bww::kPanelSlack;
    if constexpr (std::is_same_v<TA, float>)
      pl.tab->pack(cb.a_rows.data(), pl.F, false, m0, rows, rows, dst);
    else
      pl.tab->pack16(cb.a_rows.data(), pl.F, false, m0, rows, rows, dst, pl.in16);
  }
}

// The final pass, taps innermost (IOX, OIX): per (g, m) and 16 n, the 16
// scratch rows of a chunk of 16 taps (one line each) transposed in registers
// into 16 runs of taps, summed over the copies. Inside the parallel region.
void final_transpose(const BwdWeightsPlan& pl, const float* scr, float* out) {
  constexpr int kTb = 16;
  const int64_t Mg = pl.Mg, Ng = pl.Ng, G = pl.p.G, ICg = pl.p.ICg, si = pl.si, so = pl.so;
  const int64_t ntl = (Ng + kTb - 1) / kTb;
  const int64_t on = pl.vec_b ? so : si, om = pl.vec_b ? si : so;
  const bool n_outer = pl.final_n_outer;
#pragma omp for schedule(static) nowait
  for (int64_t r = 0; r < G * Mg * ntl; ++r) {
    const int64_t g = r / (Mg * ntl);
    const int64_t m = n_outer ? r % Mg : (r / ntl) % Mg;
    const int64_t n0 = (n_outer ? (r / Mg) % ntl : r % ntl) * kTb;
    const int nn = static_cast<int>(std::min<int64_t>(kTb, Ng - n0));
    pl.tab->transpose_taps(scr + (g * Mg + m) * Ng + n0, pl.plane, pl.wstride, pl.nbuf, pl.taps,
                           nn, out + g * ICg * si + m * om + n0 * on, on, pl.final_stream);
  }
  pl.tab->store_fence();  // then the region's barrier
}

// The final pass, other layouts: the copies summed in tiles of 16 m x 16 n x
// 16 taps through a buffer in L1: the scratch is read in runs of 16 floats,
// and the output is written in the order of its strides (innermost the dim
// of smallest stride). Writing along n or m with a large stride (IOX: 16 ic
// rows 16 KiB apart) maps a tile's output lines to one L1 set; row by row,
// one float per output line per tap. Inside the parallel region.
void final_sum(const BwdWeightsPlan& pl, const float* scr, float* out) {
  constexpr int kTb = 16;
  const int64_t Mg = pl.Mg, Ng = pl.Ng, G = pl.p.G, ICg = pl.p.ICg, si = pl.si, so = pl.so;
  const int64_t taps = pl.taps, plane = pl.plane, wstride = pl.wstride;
  const int nbuf = pl.nbuf;
  if (pl.final_rows) {  // per (tap, g, m): the row of Ng n at +1 in both
    const int64_t om = pl.vec_b ? si : so;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < taps * G * Mg; ++r) {
      const int64_t t = r / (G * Mg), gm = r % (G * Mg), g = gm / Mg, m = gm % Mg;
      sum_pieces(scr + t * plane + gm * Ng, wstride, nbuf, Ng,
                 out + g * ICg * si + m * om + pl.koff[t], 1, pl.direct);
    }
    return;
  }
  const int64_t mt = (Mg + kTb - 1) / kTb, ntl = (Ng + kTb - 1) / kTb;
  const int64_t tt = (taps + kTb - 1) / kTb;
  const int64_t om = pl.vec_b ? si : so, on = pl.vec_b ? so : si;  // output strides of m, n
  const int* ord = pl.final_ord;  // dims 0 = tap, 1 = m, 2 = n, innermost first
  int64_t lstride[3];             // strides of the dims in the buffer
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
        // The tile with the next n0 reads the next line of each row.
        for (int q = 0; q < nbuf; ++q) __builtin_prefetch(s0 + q * wstride + kTb, 0, 3);
        sum_pieces(s0, wstride, nbuf, ext[2], buf + tc * lstride[0] + mc * lstride[1],
                   lstride[2], false);
      }
    int64_t off[3][kTb];  // output offsets along each dim
    for (int64_t i = 0; i < ext[0]; ++i) off[0][i] = pl.koff[t0 + i];
    for (int64_t i = 0; i < ext[1]; ++i) off[1][i] = (m0 + i) * om;
    for (int64_t i = 0; i < ext[2]; ++i) off[2][i] = (n0 + i) * on;
    float* o = out + g * ICg * si;
    const int d0 = ord[0], d1 = ord[1], d2 = ord[2];
    for (int64_t i2 = 0; i2 < ext[d2]; ++i2)
      for (int64_t i1 = 0; i1 < ext[d1]; ++i1) {
        float* oo = o + off[d2][i2] + off[d1][i1];
        const float* b = buf + i2 * lstride[d2] + i1 * lstride[d1];
        const int64_t* o0 = off[d0];
        if (pl.direct) {  // partition 0 is in the output already
          for (int64_t i0 = 0; i0 < ext[d0]; ++i0) oo[o0[i0]] += b[i0];
        } else {
          for (int64_t i0 = 0; i0 < ext[d0]; ++i0) oo[o0[i0]] = b[i0];
        }
      }
  }
}

// Every task, claimed dynamically (pieces x chunks), then the final pass.
template <class TA>
void run_tasks(const BwdWeightsPlan& pl, CallBuffers& cb, const TA* src, const TA* diff_dst,
               float* out) {
  std::atomic<int64_t> next_task{0};
#pragma omp parallel num_threads(pl.nt)
  {
    const int tid = omp_get_thread_num();
    if (pl.local_shared_a) pack_shared_a_panels<TA>(pl, cb);
    TaskRunner<TA> runner(pl, cb, src, diff_dst, out, tid);
    for (;;) {
      const int64_t k = next_task.fetch_add(1, std::memory_order_relaxed);
      if (k >= pl.ntasks) break;
      const int64_t c = k / pl.P;
      runner.run(static_cast<int>(k % pl.P), pl.chunk[c], pl.chunk[c + 1]);
    }
    if (pl.local) {
      if (pl.local_stream) pl.tab->store_fence();
    } else if (pl.final != Final::None) {
#pragma omp barrier
      if (pl.final == Final::Transpose) final_transpose(pl, cb.scratch.get(), out);
      else final_sum(pl, cb.scratch.get(), out);
    }
  }
}

}  // namespace

void sum_pieces(const float* copies, int64_t ld_copy, int n, int64_t len, float* dst,
                int64_t dst_stride, bool accumulate) {
  // In runs of kRun: the copies (contiguous) added in piece order into acc,
  // in loops the compiler vectorizes, then acc into dst at its stride.
  constexpr int64_t kRun = 64;
  float acc[kRun];
  for (int64_t i0 = 0; i0 < len; i0 += kRun) {
    const int64_t k = std::min(kRun, len - i0);
    const float* c = copies + i0;
    for (int64_t j = 0; j < k; ++j) acc[j] = c[j];
    for (int q = 1; q < n; ++q) {
      const float* cq = c + q * ld_copy;
      for (int64_t j = 0; j < k; ++j) acc[j] += cq[j];
    }
    float* d = dst + i0 * dst_stride;
    if (dst_stride == 1) {  // (a loop of its own: vectorized)
      if (accumulate) {
        for (int64_t j = 0; j < k; ++j) d[j] += acc[j];
      } else {
        for (int64_t j = 0; j < k; ++j) d[j] = acc[j];
      }
    } else if (accumulate) {
      for (int64_t j = 0; j < k; ++j) d[j * dst_stride] += acc[j];
    } else {
      for (int64_t j = 0; j < k; ++j) d[j * dst_stride] = acc[j];
    }
  }
}

namespace bww {

template <class TA>
bool run_bwd_weights_t(const BwdWeightsPlan& pl, const TA* src, const TA* diff_dst,
                       float* diff_w) {
  switch (pl.route) {
    case Route::Reference: return false;
    case Route::Empty: return true;
    case Route::Zeros: write_zeros(pl, diff_w); return true;
    case Route::Tiles: break;
  }
  CallBuffers cb;
  if (!allocate(pl, src, diff_w, cb)) return false;
  run_tasks(pl, cb, src, diff_dst, diff_w);
  return true;
}

bool run_bwd_weights(const BwdWeightsPlan& pl, const float* src, const float* diff_dst,
                     float* diff_w) {
  if (pl.in16) return false;
  return run_bwd_weights_t(pl, src, diff_dst, diff_w);
}

bool run_bwd_weights16(const BwdWeightsPlan& pl, const uint16_t* src, const uint16_t* diff_dst,
                       float* diff_w) {
  if (!pl.in16) return false;
  return run_bwd_weights_t(pl, src, diff_dst, diff_w);
}

}  // namespace bww

namespace {
// The gradient dense in layout wf, as the ops allocate it (no data).
WeightsView dense_weights_view(const ConvProblem& p, WeightsFormat wf) {
  const Shape shape = weights_shape(p, wf);
  std::vector<int64_t> stride(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    stride[i] = stride[i + 1] * shape[i + 1];
  const std::vector<int> dims = weights_dims(wf, p.spatial_rank);
  WeightsView w{nullptr, stride[dims[0]], stride[dims[1]], {0, 0, 0}};
  for (int i = 0; i < p.spatial_rank; ++i) w.sk[kAxes - p.spatial_rank + i] = stride[dims[2 + i]];
  return w;
}
}  // namespace

bool backward_weights_f32(Isa isa, const ConvProblem& p, const float* src, const float* diff_dst,
                          WeightsView diff_w, int nthreads) {
  const auto plan = bww::plan_bwd_weights(isa, p, diff_w, nthreads);
  return bww::run_bwd_weights(*plan, src, diff_dst, static_cast<float*>(diff_w.data));
}

bool backward_weights16_applies(Isa isa, const ConvProblem& p, int nthreads, int kind) {
  // (the kernel family does not depend on the gradient's strides; the tiles'
  // loads per element do, a little: decided once, here, on IOX)
  const auto plan =
      bww::plan_bwd_weights(isa, p, dense_weights_view(p, WeightsFormat::IOX), nthreads, kind);
  if (plan->route == bww::BwdWeightsPlan::Route::Reference) return false;
  // GEMM tiles on pixel lists widen each element they load, a µop or two on
  // the FMA ports per broadcast or vector; past kMaxListWiden loads per
  // element a widened copy of both tensors is cheaper (heuristics A14). The
  // depthwise and grouped tiles load an element per FMA or two and won at
  // every ratio measured (up to 18).
  return !(plan->kernel == bww::BwdWeightsPlan::Kernel::Gemm && !plan->packed &&
           plan->widen_ratio > kMaxListWiden);
}

bool backward_weights16(Isa isa, const ConvProblem& p, const uint16_t* src,
                        const uint16_t* diff_dst, WeightsView diff_w, int nthreads, int kind) {
  const auto plan = bww::plan_bwd_weights(isa, p, diff_w, nthreads, kind);
  return bww::run_bwd_weights16(*plan, src, diff_dst, static_cast<float*>(diff_w.data));
}

std::string describe_bwd_weights16(Isa isa, const ConvProblem& p, int nthreads, int kind,
                                   WeightsFormat wf) {
  return bww::describe(*bww::plan_bwd_weights(isa, p, dense_weights_view(p, wf), nthreads, kind));
}

std::string describe_bwd_weights_f32(Isa isa, const ConvProblem& p, int nthreads,
                                     WeightsFormat wf) {
  return bww::describe(*bww::plan_bwd_weights(isa, p, dense_weights_view(p, wf), nthreads));
}

}  // namespace x86
}  // namespace tct
