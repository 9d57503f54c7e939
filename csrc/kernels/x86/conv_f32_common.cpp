// Driver of the f32 forward and backward-data passes (AVX-512 / AVX2).
//
// Both passes are one gather-style implicit GEMM on channels-last data:
//   out[row, g*ncol + j] = bias + sum_{tap, c} in[pixel(row, tap), g*cred + c] * Wg[tap][c][j]
// with rows = output pixels and j = output channels of group g.
//   forward:       in = src,      out = dst,      cred = ICg, ncol = OCg
//   backward-data: in = diff_dst, out = diff_src, cred = OCg, ncol = ICg
// The forward pass is split into stride phases (per axis, the output
// positions with equal (o + pb) mod s): inside a phase every output row uses
// the same subset of taps, each tap hitting a real input pixel or padding, so
// no inserted zero is ever multiplied and nothing is scattered. Backward-data
// is a plain strided convolution: one phase with every tap.
//
// In 1D and 2D the images are the unused outer axis, so a phase's rows run
// across the batch (tiles and row blocks do not stop at image ends).
// Per block of rows, an indirection buffer (one pointer per row and tap: the
// input pixel, or a zero vector for padding) feeds the ISA micro-kernels of
// conv_f32_kernels.h; all groups share it (the kernels add channel offsets).
// GEMM tiles whose rows see every tap inside the input skip it (row mode):
// one base pointer per row plus the phase's per-tap offsets, which saves
// building taps x rows pointers (a third of the time when the reduction per
// tap is a few channels).
// Kernels by shape:
//   GEMM register tiles (MR rows x NR columns of one group), weights packed
//     once per call to [g][column block][chunk of c][phase-ordered tap][c][NR];
//   depthwise (ICg = OCg = 1): elementwise over all channels, weights [tap][C];
//     long lines (rows of an image) tile by tile along each line
//     (run_lines, as the fused backward-data below), short ones (small
//     images) in the tiles above;
//   small groups (AVX-512, <= 8 columns per group): 16 channels of several
//     groups per vector, inputs permuted into place, weights [tap][c][OC].
//   few columns (<= 4 columns, reduction >= 16): dot-product tiles
//     vectorized over the reduction, weights [tap][c/16][j][16];
//   forward where the kernel tiles the output (K == s, one group, OCg small):
//     one GEMM per input pixel over taps x OCg columns, scattered (run_patch);
//   backward-data with a short reduction per tap: the K2 taps of the
//     innermost axis fused into one reduction run of K2 * OCg floats;
//   phases with many padding taps (forward, and backward-data without fused
//     taps): rows regrouped by valid taps.
// Extra memory: one packed copy of the weights (by columns with lazy
// packing: one column block per thread) plus, per thread, the indirection
// buffer of one row block.
//
// plan_conv() takes every decision of a call once (route, the tile from the
// ISA's ConvTable, phases and row orders, packing, chunks, schedule,
// streaming, workspace) into a ConvPlan; describe() prints it in one line;
// run_conv() and the functions below it only execute a plan.
#include <omp.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <numeric>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "../types.h"
#include "buffers.h"
#include "conv_f32_kernels.h"
#include "conv_f32_plan.h"
#include "plan_memo.h"
#include "tiling.h"
#include "transpose.h"
#include "x86.h"

namespace tct {
namespace x86 {
namespace {

// One axis of one phase: rows (output coordinates) x taps -> input coordinate.
struct AxisMap {
  int64_t rows = 0, taps = 0;
  std::vector<int64_t> out;  // [rows] output coordinate
  std::vector<int64_t> tap;  // [taps] kernel index
  std::vector<int64_t> in;   // [rows * taps] input coordinate, -1 where padding
  // The same in elements of the tensors (coordinate x the axis' stride), so a
  // pixel's offset is the sum over the axes; kPad where padding.
  std::vector<int64_t> out_off, in_off;
  // Rows whose every tap is inside the input ("interior"), and for those the
  // offset of tap t relative to tap 0 (the same for every interior row).
  std::vector<char> interior;
  std::vector<int64_t> delta;
  // The map is affine: row j's output coordinate out0 + j * ostep, tap t's
  // input coordinate j * istep + c[t], padding outside [0, extent). Long
  // axes (lazy, axis 2 only: rows x taps beyond kLazyEntries) keep no
  // tables (out, in, out_off, in_off, interior stay empty): the tiles build
  // the rows of a block into per-thread windows (fill_window), so the extra
  // memory does not grow with the signal (a 2**23-position 1D backward-data
  // had kept 1.3 GB of tables for a 32 MB diff_dst).
  int64_t out0 = 0, ostep = 1, istep = 1, extent = 0;
  std::vector<int64_t> c;
  int64_t in_stride = 0, out_stride = 0;
  bool lazy = false;
};

// Table entries (rows x taps) of an axis beyond which it goes lazy: 512 KiB
// of int64 per table at most; the benchmark layers stay below (16384).
constexpr int64_t kLazyEntries = int64_t{1} << 16;
// 1D problems (axis 2 the only one) from 4096 entries: their tables only
// regroup the two ends' rows, and building and streaming them cost more
// than computing the windows (SPR, f32 NXC forward 64 -> 32 k16 s8 on 32768
// positions: 40 ms with tables, 23 ms lazy; bf16 slabs of a 2**18 signal
// 153 -> 124 ms).
constexpr int64_t kLazyEntries1d = int64_t{1} << 12;

bool lazy_axis(const ConvProblem& p, int ax, int64_t entries) {
  const bool one_d = p.I[0] * p.I[1] * p.O[0] * p.O[1] == 1;
  return ax == kAxes - 1 && (entries > kLazyEntries || (one_d && entries > kLazyEntries1d));
}

// Offset of a padding tap: the sum with two valid offsets stays negative.
constexpr int64_t kPad = INT64_MIN / 4;

// Element and pointer sizes (the storage type is f32), floats per 64-byte
// cache line.
constexpr int64_t kFloatBytes = sizeof(float);
constexpr int64_t kPointerBytes = sizeof(const float*);
constexpr int64_t kLineFloats = 64 / kFloatBytes;

// Rows [j0, j0 + n) of a lazy (or any) map into windows: in_off [n][taps],
// out_off [n], interior [n], as set_offsets computes them.
void fill_window(const AxisMap& m, int64_t j0, int64_t n, int64_t* in_off, int64_t* out_off,
                 char* interior) {
  const int64_t T = m.taps;
  for (int64_t jj = 0; jj < n; ++jj) {
    const int64_t j = j0 + jj;
    out_off[jj] = (m.out0 + j * m.ostep) * m.out_stride;
    bool all = T > 0;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = j * m.istep + m.c[t];
      const bool ok = i >= 0 && i < m.extent;
      in_off[jj * T + t] = ok ? i * m.in_stride : kPad;
      all = all && ok;
    }
    interior[jj] = all;
  }
}

void set_offsets(AxisMap& m, int64_t in_stride, int64_t out_stride) {
  m.in_stride = in_stride;
  m.out_stride = out_stride;
  if (m.lazy) {
    // Interior rows: j * istep + min(c) >= 0 and j * istep + max(c) < extent.
    m.delta.clear();
    if (m.taps == 0) return;
    const int64_t cmin = *std::min_element(m.c.begin(), m.c.end());
    const int64_t cmax = *std::max_element(m.c.begin(), m.c.end());
    const int64_t lo = cmin >= 0 ? 0 : (-cmin + m.istep - 1) / m.istep;
    const int64_t top = m.extent - 1 - cmax;  // j * istep <= top
    const int64_t hi = top < 0 ? -1 : top / m.istep;
    if (lo <= std::min(hi, m.rows - 1))
      for (int64_t t = 0; t < m.taps; ++t) m.delta.push_back((m.c[t] - m.c[0]) * in_stride);
    return;
  }
  m.out_off.resize(m.rows);
  m.in_off.resize(m.in.size());
  for (int64_t j = 0; j < m.rows; ++j) m.out_off[j] = m.out[j] * out_stride;
  for (size_t e = 0; e < m.in.size(); ++e) m.in_off[e] = m.in[e] >= 0 ? m.in[e] * in_stride : kPad;
  // Interior rows and their tap offsets (input coordinates are a row part
  // plus a tap part in both passes; checked, not assumed).
  m.interior.assign(static_cast<size_t>(m.rows), 0);
  m.delta.clear();
  for (int64_t j = 0; j < m.rows; ++j) {
    bool all = m.taps > 0;
    for (int64_t t = 0; t < m.taps && all; ++t) all = m.in[j * m.taps + t] >= 0;
    if (!all) continue;
    const int64_t* o = m.in_off.data() + j * m.taps;
    if (m.delta.empty()) {
      for (int64_t t = 0; t < m.taps; ++t) m.delta.push_back(o[t] - o[0]);
    } else {
      for (int64_t t = 0; t < m.taps && all; ++t) all = o[t] - o[0] == m.delta[t];
    }
    m.interior[j] = all;
  }
}

struct Phase {
  AxisMap ax[kAxes];
  int64_t rows = 0, taps = 0;
  int64_t tap_off = 0;  // first packed tap of this phase
  int64_t blocks = 0;   // row blocks per image
  // Row order (empty: the natural one): phase row indices, -1 for a dummy
  // row; rows counts these entries then.
  std::vector<int64_t> perm;
  // Row mode (ConvTileArgs::rows): per tap, its offset from tap 0 for rows
  // interior on every axis; per fused tap (t0, t1) the same.
  std::vector<int64_t> tapoff, tapoff_fused;
};

// Per axis of a phase: each coordinate's class (its set of valid taps), the
// classes' tap masks and tap counts; groups = classes of the three axes.
struct TapClasses {
  std::vector<int32_t> cls[kAxes];
  std::vector<int64_t> ntap[kAxes];
  std::vector<uint64_t> masks[kAxes];
  int64_t n1 = 0, n2 = 0, ngroups = 0;

  int64_t group_of(int64_t j0, int64_t j1, int64_t j2) const {
    return (cls[0][j0] * n1 + cls[1][j1]) * n2 + cls[2][j2];
  }
  double work_of(int64_t g) const {
    return static_cast<double>(ntap[0][g / (n1 * n2)]) * ntap[1][(g / n2) % n1] * ntap[2][g % n2];
  }
};

// A tile of MR rows keeping the taps in the per-axis masks o.
double tile_work(int MR, const uint64_t o[kAxes]) {
  return static_cast<double>(MR) * __builtin_popcountll(o[0]) * __builtin_popcountll(o[1]) *
         __builtin_popcountll(o[2]);
}

// The classes of the phase's rows; false when an axis has more than 64 taps.
bool classify_rows(const Phase& ph, TapClasses& tc) {
  for (int ax = 0; ax < kAxes; ++ax) {
    const AxisMap& m = ph.ax[ax];
    if (m.taps > 64) return false;
    tc.cls[ax].resize(static_cast<size_t>(m.rows));
    for (int64_t j = 0; j < m.rows; ++j) {
      uint64_t mk = 0;
      for (int64_t t = 0; t < m.taps; ++t)
        if (m.in[j * m.taps + t] >= 0) mk |= uint64_t{1} << t;
      size_t c = 0;
      while (c < tc.masks[ax].size() && tc.masks[ax][c] != mk) ++c;
      if (c == tc.masks[ax].size()) {
        tc.masks[ax].push_back(mk);
        tc.ntap[ax].push_back(__builtin_popcountll(mk));
      }
      tc.cls[ax][j] = static_cast<int32_t>(c);
    }
  }
  tc.n1 = static_cast<int64_t>(tc.ntap[1].size());
  tc.n2 = static_cast<int64_t>(tc.ntap[2].size());
  tc.ngroups = static_cast<int64_t>(tc.ntap[0].size()) * tc.n1 * tc.n2;
  return true;
}

// The share of rows on some border (taps missing), summed over the axes: at
// most that much can be saved.
double border_share(const Phase& ph, const TapClasses& tc) {
  double border = 0;
  for (int ax = 0; ax < kAxes; ++ax) {
    int64_t nb = 0;
    for (int32_t c : tc.cls[ax]) nb += tc.ntap[ax][c] < ph.ax[ax].taps;
    border += static_cast<double>(nb) / std::max<int64_t>(1, ph.ax[ax].rows);
  }
  return border;
}

// Estimated multiply-adds (rows x kept taps) in the natural order, tile by
// tile (a tap is kept when any row needs it: approximated per axis); counts
// the rows of each group.
double natural_work(const Phase& ph, const TapClasses& tc, int MR, std::vector<int64_t>& count) {
  const int64_t R1 = ph.ax[1].rows, R2 = ph.ax[2].rows;
  double natural = 0;
  int64_t j0 = 0, j1 = 0, j2 = 0;
  for (int64_t r0 = 0; r0 < ph.rows; r0 += MR) {
    uint64_t o[kAxes] = {0, 0, 0};
    for (int64_t r = r0; r < std::min(ph.rows, r0 + MR); ++r) {
      ++count[tc.group_of(j0, j1, j2)];
      o[0] |= tc.masks[0][tc.cls[0][j0]];
      o[1] |= tc.masks[1][tc.cls[1][j1]];
      o[2] |= tc.masks[2][tc.cls[2][j2]];
      if (++j2 == R2) {
        j2 = 0;
        if (++j1 == R1) {
          j1 = 0;
          ++j0;
        }
      }
    }
    natural += tile_work(MR, o);
  }
  return natural;
}

// The groups chained back to back (no padding), ordered so that the tiles
// spanning two groups keep few extra taps: per axis the classes by their
// first tap, then more taps first ({0,1,2}, {0,1}, {0}, {1,2}, {2}: each
// next to one it shares taps with), lexicographic over the axes (3D U-Net
// k3 on 8x9x9, 6-row tiles: 6 % over the useful multiply-adds against 14 %
// padded, 29 % natural).
std::vector<int64_t> chained_order(const TapClasses& tc) {
  std::vector<int64_t> rank[kAxes];
  for (int ax = 0; ax < kAxes; ++ax) {
    rank[ax].resize(tc.masks[ax].size());
    for (size_t c = 0; c < tc.masks[ax].size(); ++c) rank[ax][c] = static_cast<int64_t>(c);
    const std::vector<uint64_t>& mk = tc.masks[ax];
    std::sort(rank[ax].begin(), rank[ax].end(), [&](int64_t x, int64_t y) {
      const int fx = mk[x] ? __builtin_ctzll(mk[x]) : 64;
      const int fy = mk[y] ? __builtin_ctzll(mk[y]) : 64;
      if (fx != fy) return fx < fy;
      const int px = __builtin_popcountll(mk[x]), py = __builtin_popcountll(mk[y]);
      if (px != py) return px > py;
      return mk[x] < mk[y];
    });
  }
  std::vector<int64_t> order;
  for (int64_t c0 : rank[0])
    for (int64_t c1 : rank[1])
      for (int64_t c2 : rank[2]) order.push_back((c0 * tc.n1 + c1) * tc.n2 + c2);
  return order;
}

// Estimated multiply-adds of the groups chained in `order`.
double chained_work(const TapClasses& tc, const std::vector<int64_t>& order,
                    const std::vector<int64_t>& count, int MR) {
  const int64_t n1 = tc.n1, n2 = tc.n2;
  double chained = 0;
  uint64_t o[kAxes] = {0, 0, 0};
  int64_t in_tile = 0;
  for (int64_t g : order) {
    const int64_t c[kAxes] = {g / (n1 * n2), (g / n2) % n1, g % n2};
    for (int64_t left = count[g]; left > 0;) {
      const int64_t take = std::min(left, MR - in_tile);
      for (int ax = 0; ax < kAxes; ++ax) o[ax] |= tc.masks[ax][c[ax]];
      in_tile += take;
      left -= take;
      if (in_tile == MR) {
        chained += tile_work(MR, o);
        o[0] = o[1] = o[2] = 0;
        in_tile = 0;
      }
    }
  }
  if (in_tile > 0) chained += tile_work(MR, o);
  return chained;
}

// Forward phases (and backward-data's) where many taps fall outside the
// input (small images, dilation): a tile keeps a tap when any of its rows
// reads a real pixel, so consecutive rows with different valid taps multiply
// many zeros. Rows are then regrouped by their set of valid taps (per axis):
// each group padded to whole tiles, or the groups chained back to back
// (chained_order), whichever estimate is lower, when it is below max_share
// of the natural one. GEMM tiles 0.97:
// on Zen 5, rotated A/B against 0.85 (AVX-512) and 0.9 (AVX2, from the 3D
// U-Net k3 forward on 8x9x9 on Zen 3: an 11 % saving, 7 % faster), GoogLeNet
// 4d's k3 p1 on 14x14 1.06-1.08x, DCGAN 512 -> 256 k4 s2 p1 on 8x8 1.07x,
// AlexNet's k3 p1 layers 1.02-1.05x, the rest even, on both ISAs. Dot tiles
// 0.85 (AVX-512; the 64 -> 3 k7 s2 d2 layer ran 4 % slower at 0.97) and 0.9
// (ConvTable::regroup_dot_share).
void group_rows_by_taps(Phase& ph, int MR, double max_share) {
  // (Only small phases: in large images the borders are a small share.)
  if (ph.rows < 2 * MR || ph.rows > (1 << 16) || ph.taps < 2 || ph.ax[kAxes - 1].lazy) return;
  TapClasses tc;
  if (!classify_rows(ph, tc) || border_share(ph, tc) < 0.15 || tc.ngroups < 2) return;
  std::vector<int64_t> count(static_cast<size_t>(tc.ngroups), 0);
  const double natural = natural_work(ph, tc, MR, count);
  // Grouped, each group padded to whole tiles (groups in discovery order).
  auto padded = [&](int64_t g) { return (count[g] + MR - 1) / MR * MR; };
  double grouped = 0;
  for (int64_t g = 0; g < tc.ngroups; ++g) grouped += padded(g) * tc.work_of(g);
  const std::vector<int64_t> order = chained_order(tc);
  const double chained = chained_work(tc, order, count, MR);
  const bool chain = chained <= grouped;
  if (!(std::min(chained, grouped) < max_share * natural)) return;
  // Counting sort of the rows by group; padded groups end with dummies (-1).
  std::vector<int64_t> start(static_cast<size_t>(tc.ngroups), 0);
  int64_t total = 0;
  if (chain) {
    for (int64_t g : order) start[g] = total, total += count[g];
  } else {
    for (int64_t g = 0; g < tc.ngroups; ++g) start[g] = total, total += padded(g);
  }
  std::vector<int64_t> perm(static_cast<size_t>(total), -1);
  int64_t r = 0;
  for (int64_t j0 = 0; j0 < ph.ax[0].rows; ++j0)
    for (int64_t j1 = 0; j1 < ph.ax[1].rows; ++j1)
      for (int64_t j2 = 0; j2 < ph.ax[2].rows; ++j2, ++r)
        perm[start[tc.group_of(j0, j1, j2)]++] = r;
  ph.perm = std::move(perm);
  ph.rows = total;
}

// Forward, axis ax, phase q: the dst positions o with (o + pb) mod s == q,
// row j = o's index among them, and the taps k with k*d mod s == q, whose src
// position for row j is j + c[t].
AxisMap forward_axis(const ConvProblem& p, int ax, int64_t q) {
  const TapAxis g = p.axis(ax);
  AxisMap m;
  const int64_t first = floor_mod(q - g.pb, g.s);
  m.rows = first < g.O ? ceil_div(g.O - first, g.s) : 0;
  for (int64_t k = 0; k < g.K; ++k)
    if (g.reaches(first, k)) m.tap.push_back(k);
  m.taps = static_cast<int64_t>(m.tap.size());
  m.out0 = first;
  m.ostep = g.s;
  m.istep = 1;
  m.extent = g.I;
  for (int64_t t = 0; t < m.taps; ++t) m.c.push_back(g.src_floor(first, m.tap[t]));  // exact
  m.lazy = lazy_axis(p, ax, m.rows * m.taps);
  if (m.lazy) return m;
  m.out.resize(m.rows);
  m.in.resize(m.rows * m.taps);
  for (int64_t j = 0; j < m.rows; ++j) {
    const int64_t o = first + j * g.s;
    m.out[j] = o;
    for (int64_t t = 0; t < m.taps; ++t) m.in[j * m.taps + t] = g.src_at(o, m.tap[t]);
  }
  return m;
}

// Backward-data, axis ax: row i = src position i, tap k reads diff_dst at
// i*s + c[k] (c[k] = k*d - pb).
AxisMap backward_axis(const ConvProblem& p, int ax) {
  const TapAxis g = p.axis(ax);
  AxisMap m;
  m.rows = g.I;
  m.taps = g.K;
  m.tap.resize(m.taps);
  for (int64_t k = 0; k < m.taps; ++k) m.tap[k] = k;
  m.out0 = 0;
  m.ostep = 1;
  m.istep = g.s;
  m.extent = g.O;
  for (int64_t k = 0; k < m.taps; ++k) m.c.push_back(g.dst_of(0, k));
  m.lazy = lazy_axis(p, ax, m.rows * m.taps);
  if (m.lazy) return m;
  m.out.resize(m.rows);
  m.in.resize(m.rows * m.taps);
  for (int64_t i = 0; i < m.rows; ++i) {
    m.out[i] = i;
    for (int64_t k = 0; k < m.taps; ++k) m.in[i * m.taps + k] = g.dst_at(i, k);
  }
  return m;
}


// The micro-kernel table of the ISA (null: no kernels, the reference runs).
const ConvTable* table_for(Isa isa) {
  switch (vector_isa(isa)) {
    case Isa::Avx512:
      return avx512_broadcast_loads(active_uarch()) ? conv_f32_table_avx512_intel() : conv_f32_table_avx512();
    case Isa::Avx2:
      return active_uarch() == Uarch::Zen3 ? conv_f32_table_avx2_zen3() : conv_f32_table_avx2();
    default:
      return nullptr;
  }
}

// The register tile for ncol output columns: least padded work per unit
// speed (the rows are padded per phase, whichever tile).
const ConvGemmTile& choose_gemm_tile(const ConvTable& tab, int64_t ncol) {
  return *cheapest(tab.gemm, tab.gemm + tab.ngemm, [&](const ConvGemmTile& k) {
    const int64_t padded = cover_cost(1, ncol, 1, k.nr, [&](int64_t, int64_t) { return k.nr; });
    return static_cast<double>(padded) / k.eff;
  });
}

// Forward when the kernel tiles the output (per axis K == s, no dilation,
// every output pixel inside the inputs' patches), one group: each output pixel
// gets exactly one tap of one input pixel. A plain GEMM then computes, per
// input pixel (row), all taps x OCg columns at once (vectors filled even when
// OCg is small), into a per-thread tile buffer, and each tap's OCg outputs are
// copied to their pixel (along the innermost axis the taps' pixels are
// consecutive: one run of K2 * OCg floats). A one-pixel src (the "z -> 4x4"
// first layer of a generator) is the same for any stride and any OCg: the
// row-per-output-pixel GEMM would keep one tap of the tile's rows in six.
// (Only for OCg below one vector.)
bool patch_applies(const ConvTable& tab, const ConvProblem& p) {
  if (p.G != 1 || p.ICg < 1 || p.taps() < 2) return false;
  const bool one_pixel = p.src_spatial() == 1;
  if (!one_pixel && p.OCg >= tab.lanes) return false;
  for (int ax = 0; ax < kAxes; ++ax) {
    const int64_t s = one_pixel ? p.K[ax] : p.s[ax];  // (one input: the stride is unused)
    if (p.d[ax] != 1 || p.K[ax] != s || p.pb[ax] + p.O[ax] > s * p.I[ax]) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------
// The plan: every decision of a call, made once before any work.

// The kernel family the driver runs.
enum class Route {
  Nothing,    // nothing to write (empty output)
  Reference,  // no kernels for this ISA / shape: the entry point returns false
  Patch,      // forward, kernel tiles the output: a GEMM per input pixel, scattered
  Gemm,       // register tiles of MR rows x NR columns of one group
  Depthwise,  // ICg = OCg = 1: elementwise over all channels
  Grouped,    // small groups, vectorized over 16 output channels of several groups
  Dot,        // few columns, long reduction: vectorized over the reduction
};
const char* route_name(Route r) {
  switch (r) {
    case Route::Nothing: return "none";
    case Route::Reference: return "reference";
    case Route::Patch: return "patch";
    case Route::Gemm: return "gemm";
    case Route::Depthwise: return "depthwise";
    case Route::Grouped: return "grouped";
    case Route::Dot: return "dot";
  }
  return "?";
}

// How the row blocks meet the column blocks (see plan_schedule).
enum class Schedule { Rows, Columns, Lines };
const char* schedule_name(Schedule s) {
  return s == Schedule::Rows ? "rows" : s == Schedule::Columns ? "columns" : "lines";
}

// Loop order of the weight packing (up front, or a lazy item's own block).
enum class PackOrder {
  Depthwise,  // [tap][C]
  Grouped,    // [tap][c][OC padded]
  Dot,        // [g][tap][c/16][j][16]
  Blocks16,   // reduction channels contiguous in W: 16 channels per step
  Columns,    // columns outermost in W (<= 16 taps): 16 columns per step
  Channels,   // channel by channel, every column block
};
const char* pack_order_name(PackOrder o) {
  switch (o) {
    case PackOrder::Depthwise: return "depthwise";
    case PackOrder::Grouped: return "grouped";
    case PackOrder::Dot: return "dot";
    case PackOrder::Blocks16: return "blocks16";
    case PackOrder::Columns: return "columns";
    case PackOrder::Channels: return "channels";
  }
  return "?";
}
// How pack_block moves a range of channels of one column block, by W's
// unit-stride dimension: the columns (row copies), the reduction channels (a
// transpose per tap), the taps, dense (per channel a [column][tap] transpose
// straight into the taps' rows); anything else pack_slab.
enum class PackMove { Copy, Transpose, TapTranspose, Slab };
const char* pack_move_name(PackMove m) {
  return m == PackMove::Copy ? "copy" : m == PackMove::Transpose ? "transpose"
         : m == PackMove::TapTranspose ? "tap_transpose" : "slab";
}

// A run of consecutive lines of one (image, phase, axis-0 row) (run_lines).
struct LineItem {
  int32_t phase;
  int64_t n, j0, j1, nl;
};

// VNNI tiles' per-thread buffer of gathered inputs, for runs of column
// blocks (SPR VM, GoogLeNet 4d 3x3 288 -> 144 on 14x14, bf16: every row
// gathered once per tile instead of once per column block).
constexpr int64_t kVnniStageBytes = 512 << 10;

// Per-thread buffers of the row-block tiles, in elements (one source for
// their allocation and the workspace sum).
struct RowBufSizes {
  int64_t ind = 0;        // pointers: TB tiles x taps x MR
  int64_t outp = 0;       // pointers: TB x MR
  int64_t scratch = 0;    // floats: the dummy rows' output
  int64_t tile_wtap = 0;  // int32: TB x taps
  int64_t tiles = 0;      // TB (per-tile flags and counts)
  int64_t win_in = 0;     // int64: a lazy axis 2's window of tap offsets
  int64_t win = 0;        // a lazy axis 2's window of rows
  int64_t stage = 0;      // bytes: VNNI tiles' gathered inputs (column block runs)
};
// Per-thread buffers of run_lines, in elements.
struct LineBufSizes {
  int64_t per_line = 0;  // taps + 1
  int64_t ind = 0;       // pointers: MR x taps
  int64_t scratch = 0;   // floats
};

// The forward of route Patch.
struct PatchPlan {
  int64_t ncol = 0;   // taps x OCg columns
  int64_t ldS = 0;    // floats per row of a tile buffer (NB x NR)
  int64_t rows = 0;   // input pixels of all images
  int64_t tiles = 0;  // tiles of MR rows
  int64_t TB = 0;     // tiles per work item
  int64_t items = 0;
  int64_t run = 0;    // K2 x OCg: one tap row's consecutive outputs
  bool stream = false;
  std::vector<int64_t> tap_off;  // per tap (k0, k1, k2), its offset in W
};

struct ConvPlan {
  Isa isa = Isa::Reference;
  Pass pass = Pass::Forward;
  bool fwd = true;
  int nthreads = 1;
  ConvProblem p;
  Route route = Route::Reference;
  // The implicit GEMM: cred reduction channels per tap and group, ncol
  // columns per group; in / out: src / dst (forward), diff_dst / diff_src.
  int64_t N = 0, cred = 0, ncol = 0, in_c = 0, out_c = 0, in_pix = 0, out_pix = 0;
  // The micro-kernel.
  std::string tile;  // the tile's name
  ConvTileFn fn = nullptr;
  const ConvTileFn* partial = nullptr;  // GEMM tiles: partial[m] for m < MR rows
  ConvGroupedFn grouped = nullptr;
  int MR = 0;
  // Column block NR (depthwise: all channels; small groups: ncp), column
  // blocks per group NB, the driver's group loop G, columns per group the
  // kernel sees, the reduction padded to 16 (dot), the channels padded to 16.
  int64_t NR = 0, NB = 0, G = 0, cols = 0, credp = 0, ncp = 0;
  bool dw = false, vg = false, whole_pixel = false, dot = false;
  std::vector<int32_t> vg_base, vg_idx;  // small groups: per 16-channel block
  // Phases (stride phases; backward-data: one), their tap ranges in the
  // packed weights; 1D/2D fold the images into axis 0 (NI = 1).
  bool fold_batch = false;
  int64_t NI = 0, T = 0, Tmax = 0, T2max = 0, in_img = 0, out_img = 0;
  bool any_lazy = false;
  std::vector<Phase> phases;
  // Packing: per packed tap its offset in W (-1: not packed), the packed
  // taps that are read, W's strides of a group / column / reduction channel.
  PackOrder pack_order = PackOrder::Channels;
  PackMove pack_move = PackMove::Slab;
  std::vector<int64_t> koff, ptap, pkoff, tap_of_koff;
  // 16-bit weights (route convert16, direct16): widened by w16 as the
  // packing reads them (null: f32), in spans of w16_span elements: the
  // Channels order a channel's run per column (its taps), the Columns order
  // a column's every channel and tap.
  Widen16Fn w16 = nullptr;
  // Route Patch with a 16-bit input / result: a tile's input rows widened
  // into a stage, its buffer rounded. GEMM tiles with stage16: each tile's
  // 16-bit rows (every tap) widened into the thread's stage (RowBufs::stage)
  // before the f32 tile runs on them.
  Widen16Fn widen16 = nullptr;
  Narrow16Fn narrow16 = nullptr;
  bool stage16 = false;
  int64_t w16_span = 0;
  int64_t w_si = 0, group_stride = 0, col_stride = 0, red_stride = 0;
  int64_t block_floats = 0;  // packed floats of one (group, column block)
  int64_t nc16 = 0;
  bool stream_pack = false;
  ConvTransposeRowsFn tr_pack = nullptr, tr_lazy = nullptr;
  // The reduction in chunks of CB channels; fused innermost taps (K2 > 1).
  int64_t CB = 0, nchunks = 0, K2 = 1;
  // A 16-bit result (plan_f32_out16) needs one reduction chunk: the f32
  // tiles' chunks may then hold up to this many bytes of packed weights per
  // column block where that makes one chunk (heuristics A16); 0: C12's
  // 512 KiB chunks only.
  int64_t one_chunk_bytes = 0;
  bool fuse = false;
  // Schedule.
  Schedule schedule = Schedule::Rows;
  bool lazy = false;
  int64_t ncolblocks = 0, rsplit = 1, TB = 1, CG = 1, blocks_per_img = 0, all_blocks = 0;
  std::vector<std::pair<int32_t, int64_t>> block_order;  // (phase, block) of an image
  std::vector<LineItem> line_items;
  int64_t LB = 1;  // longest line run
  // Stores and prefetch.
  bool stream = false;
  int64_t prefetch = 0;
  // The input prefetch covers every line of a tap's run (ConvTileArgs::
  // prefetch_run), and (schedule by rows) only a row block's first pass
  // prefetches: the first column block of its range, and each group's first
  // (the others find the rows in the caches).
  bool prefetch_run = false, prefetch_first = false;
  int64_t prefetch_out = 0;  // ConvTileArgs::prefetch_out
  // The activations' element bytes (4: f32; 2: bf16, read by VNNI tiles
  // from bf16 weights packed as pairs: pairs16).
  int in_bytes = 4;
  bool vnni = false;
  bool stage_inputs = false;  // the table's tiles stage gathered inputs (ConvTable)
  int64_t fused_copy = 0;  // VNNI + fused taps: the offset of the fused pair rows in a block
  ConvPairsTapsFn pairs_taps = nullptr;
  ConvPairsRowFn pairs_row = nullptr;
  void (*thread_begin)() = nullptr;  // the table's per-thread set-up and clean-up
  void (*thread_end)() = nullptr;
  // The output's element bytes: 2 (rounded once by the tiles to out16: 1 =
  // bf16, 2 = f16) where the caller asks for it and the reduction is one
  // chunk (no accumulation).
  int out_bytes = 4;
  int out16 = 0;
  // Small groups as super-groups (ConvTable::merge_cols, heuristics C28):
  // merge = f groups a super-group, p the merged problem (G / f groups of
  // f x ICg, f x OCg channels); run_conv builds its block-diagonal weights,
  // dense IOX (merged_weights), from the caller's, at strides merge_si (input
  // channel), merge_so (output channel) and merge_tap_off (tap t); dense:
  // each input channel's (oc, tap) run is dense there, copied whole.
  int64_t merge = 1;
  bool merge_reads_zeros = true;  // false: the tile skips the zero blocks (diag2)
  int64_t merge_si = 0, merge_so = 0;
  std::vector<int64_t> merge_tap_off;
  bool merge_dense = false;
  // Workspace.
  int64_t wp_floats = 0, bias_floats = 0, zeros_floats = 0;
  RowBufSizes row_bufs;
  LineBufSizes line_bufs;
  PatchPlan patch;
};

// The longest run (K2 * OCg) of a 16-bit patch row that is streamed (the
// run is gathered into a stage of MR rows of it, patch_stream).
constexpr int64_t kMaxPatchRun16 = 64;

// Whether the patch route writes whole tiles with streaming stores
// (run_patch), for results of `bytes` each: 4M results and more (16 MiB of
// f32, saving the read for ownership of every output line: 36 <- 4 k3 s3 to
// 1080x1920, 33 MB, on Zen 5 6.1 -> 4.8 ms interleaved with torch; 16-bit
// results from the same count, heuristics A20), where a tile's run of
// results is whole 64-byte lines; f32 rows are streamed in 16-byte pieces,
// 16-bit rows staged first.
bool patch_streams(const ConvPlan& c, int64_t bytes) {
  const PatchPlan& pp = c.patch;
  const bool rows = bytes == kFloatBytes ? pp.run % 4 == 0 : pp.run <= kMaxPatchRun16;
  return rows && (c.MR * pp.run * bytes) % 64 == 0 &&
         static_cast<double>(c.N) * c.out_pix * c.p.OCg >= 4.0 * (1 << 20);
}

// Each tap's offset in weights of wv's strides, taps in (k0, k1, k2) order.
std::vector<int64_t> weight_tap_offsets(const ConvProblem& p, const WeightsView& wv) {
  std::vector<int64_t> off(static_cast<size_t>(p.taps()));
  for (int64_t k0 = 0, t = 0; k0 < p.K[0]; ++k0)
    for (int64_t k1 = 0; k1 < p.K[1]; ++k1)
      for (int64_t k2 = 0; k2 < p.K[2]; ++k2, ++t)
        off[static_cast<size_t>(t)] = k0 * wv.sk[0] + k1 * wv.sk[1] + k2 * wv.sk[2];
  return off;
}

// Route Patch: the GEMM tile over taps x OCg columns, reduction chunks,
// tiles per item, streaming.
void plan_patch(ConvPlan& c, const ConvTable& tab, const WeightsView& wv) {
  const ConvProblem& p = c.p;
  PatchPlan& pp = c.patch;
  const int64_t IC = p.ICg, OC = p.OCg, T = p.taps();
  pp.ncol = T * OC;
  const ConvGemmTile& kern = choose_gemm_tile(tab, pp.ncol);
  c.route = Route::Patch;
  c.tile = kern.name;
  c.fn = kern.fn;
  c.MR = kern.mr;
  c.NR = kern.nr;
  c.NB = (pp.ncol + c.NR - 1) / c.NR;
  pp.ldS = c.NB * c.NR;
  pp.rows = c.N * c.in_pix;
  // Reduction chunks whose packed weights ([c][NR] per column block) stay in L2.
  c.CB = std::max<int64_t>(16, std::min<int64_t>((IC + 15) / 16 * 16,
                                                 (512 << 10) / (c.NR * kFloatBytes) / 16 * 16));
  c.nchunks = (IC + c.CB - 1) / c.CB;
  pp.tap_off = weight_tap_offsets(p, wv);
  c.w_si = wv.si;
  c.col_stride = wv.so;
  pp.tiles = (pp.rows + c.MR - 1) / c.MR;
  // Tiles per work item: up to 16, at least 4 items per thread when the
  // tiles allow (a one-pixel src has one row per image).
  pp.TB = std::clamp<int64_t>(pp.tiles / (4 * static_cast<int64_t>(c.nthreads)), 1, 16);
  pp.items = (pp.tiles + pp.TB - 1) / pp.TB;
  pp.run = p.K[2] * OC;
  pp.stream = patch_streams(c, kFloatBytes);
  c.wp_floats = c.NB * IC * c.NR;
  c.bias_floats = pp.ldS + 16;
}

// Few columns, long reduction: the problems of the dot tiles (vectorized
// over the reduction), where a table has them.
bool dot_shape(int64_t ncol, int64_t cred) { return ncol <= kMaxDotColumns && cred >= 16; }

// The kernel family, its tile and column blocks. False: no kernel (the
// reference runs).
bool plan_kernel(ConvPlan& c, const ConvTable& tab) {
  const ConvProblem& p = c.p;
  const int64_t cred = c.cred, ncol = c.ncol, out_c = c.out_c;
  // Depthwise: vectorize over the channels of all groups instead.
  c.dw = p.ICg == 1 && p.OCg == 1 && p.G > 1;
  // Small groups: vectorize over 16 output channels of several groups,
  // permuting each lane's input channel into place, when the inputs of every
  // 16-channel block lie within 32 channels. (A GEMM per group would use
  // ncol of the 16 lanes.)
  c.ncp = (out_c + 15) / 16 * 16;
  c.vg = tab.grouped && !c.dw && p.G > 1 && ncol <= 8 && cred >= 1;
  if (c.vg) {
    c.vg_base.resize(static_cast<size_t>(c.ncp / 16));
    c.vg_idx.resize(static_cast<size_t>(c.ncp * cred));
    for (int64_t v = 0; v < c.ncp / 16 && c.vg; ++v) {
      const int64_t base = (16 * v / ncol) * cred;
      c.vg_base[v] = static_cast<int32_t>(base);
      for (int64_t ch = 0; ch < cred; ++ch)
        for (int64_t l = 0; l < 16; ++l) {
          const int64_t oc = 16 * v + l;
          const int64_t in = oc < out_c ? (oc / ncol) * cred + ch - base : 0;
          if (in >= 32) c.vg = false;
          c.vg_idx[(v * cred + ch) * 16 + l] = static_cast<int32_t>(in);
        }
    }
    if (!c.vg) c.vg_base.clear(), c.vg_idx.clear();
  }
  c.whole_pixel = c.dw || c.vg;  // one kernel call covers every channel
  // Few columns, long reduction: vectorize over the reduction.
  // (A table without dot tiles, the AMX one, runs them as GEMMs.)
  c.dot = !c.whole_pixel && dot_shape(ncol, cred) && tab.dot[ncol] != nullptr;
  c.credp = (cred + 15) / 16 * 16;
  c.G = c.whole_pixel ? 1 : p.G;          // group loop of the driver
  c.cols = c.whole_pixel ? out_c : ncol;  // columns per group seen by the kernel
  if (c.dw) {
    c.route = Route::Depthwise;
    c.tile = std::string(tab.isa) + "_dw";
    c.fn = tab.dw;
    c.MR = tab.dw_rows;
    c.NR = c.cols;
  } else if (c.vg) {
    c.route = Route::Grouped;
    c.tile = std::string(tab.isa) + "_grouped";
    c.grouped = tab.grouped;
    c.MR = tab.grouped_rows;
    c.NR = c.ncp;
  } else if (c.dot) {
    c.route = Route::Dot;
    c.tile = std::string(tab.isa) + "_dot" + std::to_string(ncol);
    c.fn = tab.dot[ncol];
    c.MR = tab.dot_rows[ncol];
    c.NR = ncol;
  } else {
    if (tab.ngemm < 1) return false;
    const ConvGemmTile& k = choose_gemm_tile(tab, ncol);
    c.route = Route::Gemm;
    c.tile = k.name;
    c.fn = k.fn;
    c.partial = k.partial;
    c.MR = k.mr;
    c.NR = k.nr;
  }
  c.NB = c.whole_pixel ? 1 : (ncol + c.NR - 1) / c.NR;
  return c.vg ? c.grouped != nullptr : c.fn != nullptr;
}

// The phases (per axis maps, combined), their tap ranges in the packed
// weights, rows regrouped by valid taps, row mode's tap offsets.
void plan_phases(ConvPlan& c, const ConvTable& tab) {
  const ConvProblem& p = c.p;
  const bool fwd = c.fwd;
  const std::array<int64_t, kAxes> in_dims = fwd ? p.I : p.O;
  const std::array<int64_t, kAxes> out_dims = fwd ? p.O : p.I;
  c.fold_batch = p.spatial_rank < kAxes && p.K[0] == 1 && p.s[0] == 1 && p.pb[0] == 0 &&
                 in_dims[0] == 1 && out_dims[0] == 1;
  c.NI = c.fold_batch ? 1 : c.N;  // images the driver loops over
  c.in_img = c.fold_batch ? 0 : c.in_pix * c.in_c;
  c.out_img = c.fold_batch ? 0 : c.out_pix * c.out_c;
  std::vector<AxisMap> axes[kAxes];
  for (int ax = 0; ax < kAxes; ++ax) {
    if (fwd && p.s[ax] <= p.O[ax]) {
      for (int64_t q = 0; q < p.s[ax]; ++q) axes[ax].push_back(forward_axis(p, ax, q));
    } else if (fwd) {
      // More phases than outputs: only the O phases that hold one (a stride of
      // 2**31 on a tiny output must not build 2**31 empty phases).
      for (int64_t o = 0; o < p.O[ax]; ++o)
        axes[ax].push_back(forward_axis(p, ax, floor_mod(o + p.pb[ax], p.s[ax])));
    } else {
      axes[ax].push_back(backward_axis(p, ax));
    }
    int64_t in_stride = c.in_c, out_stride = c.out_c;  // elements per step along ax
    for (int b = ax + 1; b < kAxes; ++b) {
      in_stride *= in_dims[b];
      out_stride *= out_dims[b];
    }
    // 1D/2D: the unused outer axis carries the images instead (one tap,
    // input coordinate = image), so that the rows of all images form one
    // phase: row blocks, tiles and the regrouping by taps run across
    // images (small images: fewer partial tiles; 4x4 planes of a k3 s2
    // phase hold 4-9 rows per image).
    if (ax == 0 && c.fold_batch) {
      AxisMap& m = axes[0][0];
      m.rows = c.N;
      m.out.resize(c.N);
      m.in.resize(c.N);
      for (int64_t n = 0; n < c.N; ++n) m.out[n] = m.in[n] = n;
      m.out0 = 0;
      m.ostep = m.istep = 1;
      m.extent = c.N;
      m.c.assign(1, 0);
    }
    for (AxisMap& m : axes[ax]) set_offsets(m, in_stride, out_stride);
  }
  for (const AxisMap& a0 : axes[0])
    for (const AxisMap& a1 : axes[1])
      for (const AxisMap& a2 : axes[2]) {
        Phase ph;
        ph.ax[0] = a0;
        ph.ax[1] = a1;
        ph.ax[2] = a2;
        ph.rows = a0.rows * a1.rows * a2.rows;
        ph.taps = a0.taps * a1.taps * a2.taps;
        ph.tap_off = c.T;
        c.T += ph.taps;
        if (ph.rows == 0) continue;
        c.Tmax = std::max(c.Tmax, ph.taps);
        c.phases.push_back(std::move(ph));
      }
  if (fwd && !c.whole_pixel)
    for (Phase& ph : c.phases)
      group_rows_by_taps(ph, c.MR, !c.dot ? tab.regroup_gemm_share : tab.regroup_dot_share);
  // Backward-data likewise (its one phase: src pixels whose taps read padding),
  // unless taps may be fused (build_rows fuses in the natural row order).
  // Zen 5, rotated A/B against none, AVX-512 and AVX2 alike: GoogLeNet 4d's
  // k3 p1 on 14x14, AlexNet's dilated k3 and DCGAN 512 -> 256 1.06-1.09x,
  // AlexNet's 1D k3 p1 and DCGAN 256 -> 128 1.03-1.04x, the rest even
  // (0.9 of the natural estimate gained nothing).
  if (!fwd && !c.whole_pixel && !backward_data_fuses_taps(p))
    for (Phase& ph : c.phases) group_rows_by_taps(ph, c.MR, tab.regroup_gemm_share);
  // Row mode for the GEMM and depthwise tiles (natural row order): tap
  // offsets of the interior rows, summed over the axes in the indirection's
  // tap order.
  const bool row_mode = !c.vg && !c.dot;
  for (Phase& ph : c.phases) {
    const AxisMap &a0 = ph.ax[0], &a1 = ph.ax[1], &a2 = ph.ax[2];
    if (!row_mode || !ph.perm.empty() || a0.delta.empty() || a1.delta.empty() || a2.delta.empty())
      continue;
    for (int64_t t0 = 0; t0 < a0.taps; ++t0)
      for (int64_t t1 = 0; t1 < a1.taps; ++t1) {
        ph.tapoff_fused.push_back(a0.delta[t0] + a1.delta[t1]);
        for (int64_t t2 = 0; t2 < a2.taps; ++t2)
          ph.tapoff.push_back(a0.delta[t0] + a1.delta[t1] + a2.delta[t2]);
      }
  }
  c.any_lazy = std::any_of(c.phases.begin(), c.phases.end(),
                           [](const Phase& ph) { return ph.ax[2].lazy; });
  for (const Phase& ph : c.phases) c.T2max = std::max(c.T2max, ph.ax[2].taps);
}

// Per packed tap, the offset of its kernel position in W; the packed taps
// that are read; the packing order and move; the reduction chunks; fused
// taps; streamed packing.
void plan_packing(ConvPlan& c, const ConvTable& tab, const WeightsView& wv) {
  const ConvProblem& p = c.p;
  const int64_t T = c.T, cred = c.cred;
  // Per packed tap: the offset of its kernel position in W (-1: its phase has
  // no rows, never read, not packed).
  c.koff.assign(static_cast<size_t>(T), -1);
  for (const Phase& ph : c.phases) {
    const AxisMap &a0 = ph.ax[0], &a1 = ph.ax[1], &a2 = ph.ax[2];
    int64_t t = ph.tap_off;
    for (int64_t t0 = 0; t0 < a0.taps; ++t0)
      for (int64_t t1 = 0; t1 < a1.taps; ++t1)
        for (int64_t t2 = 0; t2 < a2.taps; ++t2, ++t)
          c.koff[t] = a0.tap[t0] * wv.sk[0] + a1.tap[t1] * wv.sk[1] + a2.tap[t2] * wv.sk[2];
  }
  // Column j / reduction c of group g: forward W[g*ICg + c, j], backward W[g*ICg + j, c].
  c.w_si = wv.si;
  c.group_stride = p.ICg * wv.si;
  c.col_stride = c.fwd ? wv.so : wv.si;
  c.red_stride = c.fwd ? wv.si : wv.so;
  // Packed weights of one (g, nb); dot: [tap][c/16][j][16].
  c.block_floats = c.dot ? T * c.credp * c.NR : T * cred * c.NR;
  for (int64_t t = 0; t < T; ++t)
    if (c.koff[t] >= 0) {
      c.ptap.push_back(t);
      c.pkoff.push_back(c.koff[t]);
    }
  int64_t tap_stride = INT64_MAX;
  for (int ax = 0; ax < kAxes; ++ax)
    if (p.K[ax] > 1) tap_stride = std::min<int64_t>(tap_stride, std::abs(wv.sk[ax]));
  bool taps_dense = static_cast<int64_t>(c.ptap.size()) == T && T > 1;
  c.tap_of_koff.assign(static_cast<size_t>(T), -1);
  for (int64_t t = 0; t < T && taps_dense; ++t) {
    if (c.koff[t] < 0 || c.koff[t] >= T || c.tap_of_koff[c.koff[t]] >= 0) taps_dense = false;
    else c.tap_of_koff[c.koff[t]] = t;
  }
  c.pack_move = c.col_stride == 1               ? PackMove::Copy
                : c.red_stride == 1             ? PackMove::Transpose
                : taps_dense && tap_stride == 1 ? PackMove::TapTranspose
                                                : PackMove::Slab;
  // The reduction is cut into chunks of CB channels (all taps of a phase)
  // only when a column block's packed weights, [tap][c][NR], outgrow the
  // table's chunk_bytes (512 KiB, about a quarter of SPR's L2): the tiles of
  // a row block then accumulate chunk by chunk, each chunk's weights staying
  // in L2. (Chunks small enough for L1 were measured slower: the extra passes
  // over the outputs cost more than the L2-resident weights, which the tiles
  // stream at full speed. On Zen 3, 512 KiB is all of L2, and one chunk of
  // up to 1 MiB ran faster: the zen3 table's chunk_bytes.)
  // CB is a multiple of 16, so that the packing can split the channels in
  // blocks of 16 that each lie in one chunk.
  // VNNI tiles: bf16 pairs, and a budget of 1 MiB (AMX cores have 2 MiB of
  // L2; SPR VM, 3D U-Net k3 512 -> 256 bf16 forward: one chunk of 512
  // channels by columns ran 2.x faster than 4 chunks of 128 by rows). The
  // VDPBF16PS tiles take the same, not measured (Zen 4 / 5: 1 MiB of L2).
  const int64_t f32_row = std::max<int64_t>(c.Tmax, 1) * c.NR * kFloatBytes;
  int64_t cb_cap = c.vnni ? (1 << 20) / (std::max<int64_t>(c.Tmax, 1) * c.NR * 2) / 32 * 32
                          : tab.chunk_bytes / f32_row / 16 * 16;
  if (!c.vnni && c.one_chunk_bytes / f32_row / 16 * 16 >= (cred + 15) / 16 * 16)
    cb_cap = c.one_chunk_bytes / f32_row / 16 * 16;
  c.CB = c.dot ? std::max<int64_t>(cred, 1)
               : std::max<int64_t>(16, std::min<int64_t>((cred + 15) / 16 * 16, cb_cap));
  // VNNI tiles reduce 32 channels per step: whole steps per chunk.
  if (c.vnni && c.CB < cred) c.CB = std::max<int64_t>(32, c.CB / 32 * 32);
  c.nchunks = (cred + c.CB - 1) / c.CB;
  c.nc16 = (cred + 15) / 16;  // packing work per column block
  // Backward-data with a short reduction per tap: along the innermost axis
  // (dilation 1) the K2 taps of a row read K2 consecutive pixels, one run of
  // K2 * cred floats (one group), and the packed taps are in (t0, t1, t2)
  // order, so [tap][c][NR] is also [(t0, t1)][(t2, c)][NR]. Tiles whose rows
  // all have every axis-2 tap inside diff_dst run K0*K1 fused taps of
  // K2 * cred channels: a third of the pointers and of the per-tap overhead.
  c.fuse = !c.fwd && backward_data_fuses_taps(p) && !c.whole_pixel && !c.dot &&
           cred == c.in_c && c.nchunks == 1;
  c.K2 = c.fuse ? p.K[2] : 1;
  // VNNI tiles pair consecutive reduction rows: a fused tap's K2 * cred rows
  // pair across its taps where cred is odd, so its packed block gets a
  // second copy, paired along the fused rows, after the per-tap one (RGB
  // backward-data: 3 channels per tap, 33 per fused tap of a k11 kernel).
  c.fused_copy = c.vnni && c.fuse ? c.block_floats : 0;
  c.block_floats += c.fused_copy;
  // Packed weights of 2 MiB and more (beyond both L2s) are written with
  // non-temporal stores, in whole lines (NR a multiple of 16): regular stores
  // read every line for ownership first, at random from 16-64 streams (one
  // per packed tap and column block), and packing then ran at 8-15 GB/s of
  // W; streamed it runs near memcpy speed, and the tiles read the packed
  // weights back once from memory. Zen 5, rotated A/B against the regular
  // stores: the 16 deep layers' forward and backward-data 1.06x (NXC) and
  // 1.08x (NCX) in geometric mean, 512 -> 512 k3 s2 on 4x4 1.3-1.5x, DCGAN
  // 512 -> 256 and HiFi-GAN k16 s8 forward 1.15x; AVX2 alike (1.12x on
  // six of them). AlexNet's 1D 384 -> 256 (1.2 MB, which stays in L2) was
  // 2-4 % slower streamed.
  c.stream_pack = c.NR % kLineFloats == 0 && !c.whole_pixel && !c.dot &&
                  static_cast<double>(kFloatBytes) * c.G * c.NB * c.block_floats >= 2.0 * (1 << 20);
  c.tr_pack = c.stream_pack ? tab.transpose_rows_stream : tab.transpose_rows;
  c.tr_lazy = tab.transpose_rows;
  // W with the columns outermost and (channel, tap) runs contiguous per
  // column (IOX backward-data, OIX forward): packed 16 columns at a time,
  // each column's run read in order (16 streams, where channel by channel
  // reads one line of every column: 512 streams for 512 columns). Zen 5,
  // backward-data interleaved with torch: U-Net 1024 -> 512 k2 s2 1.15x,
  // 512 -> 512 k3 s2 on 4x4 1.2x, the k4 s2 and k16 s8 layers of 512 -> 256
  // 1.05-1.07x; 27 taps (3D k3, two transposes per channel) 2-3 % slower, so
  // only up to 16 taps.
  const bool columns_outer = !c.whole_pixel && !c.dot && taps_dense && tap_stride == 1 &&
                             c.col_stride > c.red_stride && T <= 16;
  c.pack_order = c.dw                ? PackOrder::Depthwise
                 : c.vg              ? PackOrder::Grouped
                 : c.dot             ? PackOrder::Dot
                 : c.red_stride == 1 ? PackOrder::Blocks16
                 : columns_outer     ? PackOrder::Columns
                                     : PackOrder::Channels;
}

// Row blocks per image of TB = tb tiles (sets Phase::blocks), and the bytes
// of weights they stream (wtraffic, when not null).
int64_t count_blocks(ConvPlan& c, int64_t tb, double* wtraffic) {
  const int64_t MR = c.MR;
  int64_t blocks = 0;
  double wt = 0;
  for (Phase& ph : c.phases) {
    // Lazy axis 2: blocks do not cross a line (their rows are one window).
    ph.blocks = ph.ax[2].lazy ? ph.ax[0].rows * ph.ax[1].rows *
                                    ((ph.ax[2].rows + tb * MR - 1) / (tb * MR))
                              : (ph.rows + tb * MR - 1) / (tb * MR);
    blocks += ph.blocks;
    wt += static_cast<double>(kFloatBytes) * ph.blocks * ph.taps * c.cred * c.ncolblocks * c.NR;
  }
  if (wtraffic) *wtraffic = wt;
  return blocks;
}

// Row blocks: TB tiles of MR rows whose inputs stay in L2. By rows, the
// work items are (image, phase, row block, range of column blocks; the
// column blocks of all groups are numbered q = g*NB + nb, so the groups
// share one indirection buffer). Each item streams its column blocks'
// weights once per row block and its rows' inputs once per column range:
// pick (TB, CG ranges) with the least such traffic among those giving every
// thread a few items.
void plan_row_blocks(ConvPlan& c, bool by_columns) {
  const int64_t MR = c.MR, Tmax = c.Tmax, cred = c.cred, nthreads = c.nthreads;
  // By rows, a reduction in chunks runs a row block chunk by chunk: the
  // inputs in use at a time are one chunk's channels of its rows, and every
  // row block streams all the packed weights (14 MB for the 3D U-Net k3
  // 512 -> 256), so larger blocks cut that traffic: Sapphire Rapids, that
  // layer's forward 23.5 -> 17.4 ms (TB 4 -> 32), its dilated twin 1.24-1.34x,
  // their backward-data 1.03-1.07x, other deep layers unchanged (alternating
  // builds). By columns a block's weights stay in L2 whatever TB.
  const int64_t chunk_c = c.nchunks > 1 && !by_columns ? std::min(c.CB, cred) : cred;
  const int64_t row_bytes =
      std::max<int64_t>(Tmax, 1) * std::max<int64_t>(chunk_c, 1) * kFloatBytes;
  // (The inputs a block points at overlap between taps, so 2 MB of pointed-at
  // rows is far less in cache; the indirection buffer stays below 256 KB.)
  // VNNI tiles (32 rows, a 32-channel step per tile load): no cap on the
  // pointed-at rows, whose weights chunk is then reused by TB tiles.
  const int64_t tb_cap = std::max<int64_t>(
      1, std::min<int64_t>({64, c.vnni ? int64_t{64} : (2048 << 10) / (MR * row_bytes),
                            (256 << 10) / (MR * std::max<int64_t>(Tmax, 1) * kPointerBytes)}));
  double abytes = 0;  // input rows of all phases, once
  for (const Phase& ph : c.phases)
    abytes += static_cast<double>(kFloatBytes) * ph.rows * ph.taps * std::max<int64_t>(cred, 1);
  // At least 4 items per thread; forward GEMM tiles also want a multiple of
  // the threads below 8 per thread: AlexNet's 1D 384 -> 256 on 13 (one
  // phase of 416 rows) got 9 blocks, one thread waiting for the other's
  // fifth, 1.13x with 18 on Zen 5 (rotated A/B; GoogLeNet 4d 3x3 2 % slower;
  // backward-data and the depthwise tiles lost 2-7 % with the rule, and 8
  // items per thread flat made the 3D U-Net 320 k2 s2 forward 5 % slower).
  const int64_t want = 4 * nthreads;
  const bool even_items = c.fwd && !c.whole_pixel;
  auto enough = [&](int64_t n) {
    return n >= want && (!even_items || n % nthreads == 0 || n >= 2 * want);
  };
  c.TB = tb_cap;
  c.CG = 1;
  if (!by_columns) {
    double best_traffic = 0;
    int64_t best_items = -1;
    for (int64_t tb = 1; tb <= tb_cap; tb *= 2)
      for (int64_t cg = 1; cg <= c.ncolblocks; cg = cg < 8 ? cg + 1 : cg * 2) {
        double wt = 0;
        const int64_t items = c.NI * count_blocks(c, tb, &wt) * cg;
        const double traffic = wt + cg * abytes;
        const bool better =
            best_items < 0 ||
            (enough(items) ? (!enough(best_items) || traffic < best_traffic)
                           : (!enough(best_items) && items > best_items));
        if (better) {
          best_traffic = traffic;
          best_items = items;
          c.TB = tb;
          c.CG = cg;
        }
      }
  }
  // By columns with row parts: row blocks enough for 4 per part.
  if (c.rsplit > 1)
    while (c.TB > 1 && c.NI * count_blocks(c, c.TB, nullptr) < 4 * c.rsplit) c.TB = (c.TB + 1) / 2;
  c.blocks_per_img = count_blocks(c, c.TB, nullptr);
  c.all_blocks = c.NI * c.blocks_per_img;
  // The row blocks of an image in item order, (phase, block): phases taken
  // round-robin, so that the threads work on different phases at once. With
  // K < s (ResNet's 1x1 s2) 3 of 4 phases have no tap and only write the
  // bias, a memory-bound stream that then runs beside the other thread's
  // FMAs instead of after them (Zen 5, forward 1.08-1.1x; the k4 s2 and
  // k2 s2 layers 1-4 %, their phases' blocks read the same src rows).
  c.block_order.reserve(static_cast<size_t>(c.blocks_per_img));
  for (int64_t b = 0; static_cast<int64_t>(c.block_order.size()) < c.blocks_per_img; ++b)
    for (size_t i = 0; i < c.phases.size(); ++i)
      if (b < c.phases[i].blocks) c.block_order.push_back({static_cast<int32_t>(i), b});
}

// Whether a depthwise plan writes its result (elements of elem_bytes) with
// streaming stores: whole 64-byte lines per pixel, from 2 MiB of output
// (the k4 s2 upsampler, 2-8 MiB: f32 on Zen 3 forward -20 %, backward-data
// -12 %; Zen 4 AVX-512 forward -40 %. bf16 / f16 on Zen 3, 4 MiB: forward
// 2x faster, where each tile's stores waited on reads for ownership).
bool dw_streams(const ConvPlan& c, int64_t elem_bytes) {
  const double bytes = static_cast<double>(elem_bytes) * c.N * c.out_pix * c.out_c;
  return c.dw && (c.out_c * elem_bytes) % 64 == 0 && bytes >= 2.0 * (1 << 20);
}

// Whether the tiles go line by line (run_lines).
bool lines_preferred(const ConvPlan& c, bool by_columns, double w_bytes) {
  // Tiles line by line (run_lines): depthwise, and backward-data with fused
  // taps (a few diff_dst channels) whose packed weights stay in L1 (every
  // tile runs all column blocks), when lines are long enough that whole
  // tiles leave at most 1/8 of the rows over. Zen 5, rotated A/B: DCGAN's
  // 64 <- 3 k4 s2 1.08-1.12x, the 36 <- 4 k3 s3 on 360x640 1.1-1.14x
  // (AVX2: 1.03-1.05x; with 139 KB of weights, AlexNet's 96 <- 3 k11 s4
  // ran 3.5 % slower there, so it stays below). Shorter lines (small
  // images) share tiles across lines and images below (benchdnn's 5-pixel
  // depthwise layers ran 10-15 % slower line by line).
  const ConvProblem& p = c.p;
  const int64_t MR = c.MR;
  bool by_lines = c.dw || (c.fuse && !c.vnni && !by_columns && w_bytes <= (64 << 10));
  for (const Phase& ph : c.phases) {
    // Long lines without tables: row blocks (run_lines needs the tables, and
    // gives one item per line: one thread for a 1D signal).
    if (ph.ax[2].lazy) by_lines = false;
    const int64_t padded = (ph.ax[2].rows + MR - 1) / MR * MR;
    if (8 * (padded - ph.ax[2].rows) <= padded) continue;
    // Short lines: GEMM tiles (fused backward-data, one phase) still go line
    // by line (partial tiles, no dummy rows) when most (pixel, tap) pairs are
    // padding, which a line's outer taps drop as a whole: benchdnn's 3D
    // ic-tail backward-data (8^3, pads 3/2, 24 % inside) 1.1-1.2x; at 77 %
    // inside (pads 1) 6 % slower.
    if (c.dw || 2 * ph.ax[2].rows < MR || valid_tap_share(p) >= 0.5) by_lines = false;
  }
  return by_lines;
}

// Schedule: by rows, by columns (lazy packing, row parts) or line by line;
// row blocks of TB tiles and ranges of CG column blocks; streaming stores
// and prefetch.
void plan_schedule(ConvPlan& c, const ConvTable& tab) {
  const ConvProblem& p = c.p;
  const bool fwd = c.fwd;
  const int64_t nthreads = c.nthreads, MR = c.MR, cred = c.cred;
  // Two schedules.
  //  by rows (default): the weights are packed once up front; work items are
  //    (image, phase, block of TB row tiles, range of column blocks).
  //  by columns: when the weights dwarf the activations (deep layers, small
  //    images, batch 1), each work item is one column block (g, nb), whose
  //    thread sweeps every row with that block's packed weights, so they are
  //    read once and stay in L2 while used. Not for a forward pass whose
  //    reduction is cut into chunks: it would sweep every row once per chunk
  //    (3D U-Net k3 512->256, 8 chunks: by rows 3-8 % faster on Zen 4).
  //  By rows packs the weights up front (W read in order). By columns, each
  //  item packs its own block into its thread's buffer right before using
  //  it (lazy): the packed block is used from L2/L3 and never written to
  //  memory and read back, and one thread packs while the other computes.
  //  For the forward pass only when the weights are 8x the activations or
  //  more: its blocks are read from W in runs of a few KiB (per channel),
  //  which costs more than the up-front pass saves when the packing is a
  //  small share of the time (U-Net 1024 -> 512 k2 s2 on 23x30, 2.9x:
  //  3 % slower). Zen 5, rotated A/B against packing up front: 512 -> 512 k3
  //  s2 on 4x4 forward 1.12-1.14x, backward-data 1.32-1.36x; DCGAN 512 ->
  //  256 and HiFi-GAN / vocoder k16 s8 backward-data 1.05-1.15x, forward
  //  1.04-1.05x; 3D U-Net k3 backward-data 1.04-1.07x; the rest even.
  const double w_bytes = static_cast<double>(kFloatBytes) * c.G * c.NB * c.block_floats;
  const double in_bytes = static_cast<double>(kFloatBytes) * c.N * c.in_pix * c.in_c;
  c.ncolblocks = c.G * c.NB;
  const int64_t ncolblocks = c.ncolblocks;
  //  Backward-data goes by columns as soon as the weights outweigh the
  //  activations; when its column blocks do not split evenly over the
  //  threads, each block's rows go in rsplit parts (at most 2), one item
  //  each, so that the items split evenly (each part packs its block again). Zen 5, against by
  //  rows (rotated A/B, and alternating processes of the two builds):
  //  512 -> 256 k4 s2 on 32x32 (8 MB of weights, 4 MB of diff_dst)
  //  1.07-1.14x, the 3D U-Net k2 s2 320 -> 320 (5 column blocks, 2 parts)
  //  1.06-1.24x, U-Net 1024 -> 512 1.0-1.06x, the rest even. (The forward
  //  of that 3D layer ran 5 % slower by columns in parts.)
  const bool cols_balanced = ncolblocks >= nthreads &&
                             (ncolblocks >= 4 * nthreads || ncolblocks % nthreads == 0);
  const int64_t rsplit_odd =
      nthreads / std::gcd<int64_t>(std::max<int64_t>(ncolblocks, 1), nthreads);
  bool by_columns =
      !c.whole_pixel && !c.dot && w_bytes > (1 << 20) &&
      (fwd ? w_bytes > 2 * in_bytes && c.nchunks == 1 && cols_balanced
           : w_bytes > in_bytes && ncolblocks >= nthreads && (cols_balanced || rsplit_odd <= 2));
  // VNNI tiles (AMX: measured; VDPBF16PS: taken alike, not measured)
  // compute several times faster than the f32 ones, so
  // re-reading a packed block per row block costs more: by columns as soon
  // as the weights outweigh the activations, in either pass.
  const bool by_columns_vnni = c.vnni && !c.whole_pixel && w_bytes > in_bytes &&
                               ncolblocks >= nthreads && (cols_balanced || rsplit_odd <= 2);
  by_columns = by_columns || by_columns_vnni;
  c.rsplit = by_columns && !cols_balanced ? rsplit_odd : 1;
  c.lazy = by_columns && (!fwd || w_bytes >= 8 * in_bytes);

  // Outputs beyond the caches: written with streaming stores (whole 64-byte
  // lines), saving the read for ownership of every output line. Depthwise:
  // dw_streams. GEMM tiles written in one pass from the table's
  // stream_gemm_bytes: AVX-512 16 MiB (measured on Zen 5, interleaved with
  // torch: 36 <- 4 k3 s3 backward-data, 33 MB, and ResNet's 1x1 s2 forward,
  // 26 MB, 1.2x faster; the same outputs as NCX workspaces that are
  // transposed right after, no change; 4 MiB outputs, which stay in L3, up
  // to 10 % slower). AVX2 4 MiB, and only where every tile row is whole
  // lines (its vectors are half lines; a half streamed alone costs a partial
  // write-combining flush: the 36 <- 4 backward-data, 36 channels a pixel,
  // ran 4x slower streamed): Zen 3 (heuristics C20).
  const double out_bytes = kFloatBytes * static_cast<double>(c.N) * c.out_pix * c.out_c;
  const bool half_line_vectors = tab.lanes < kLineFloats;
  const bool whole_lines =
      c.NR % kLineFloats == 0 && c.ncol % kLineFloats == 0 && c.out_c % kLineFloats == 0;
  c.stream = dw_streams(c, kFloatBytes) ||
             (tab.stream_gemm_bytes > 0 && !c.whole_pixel && !c.dot && c.nchunks == 1 &&
              (whole_lines || !half_line_vectors) && out_bytes >= tab.stream_gemm_bytes);

  // Short reductions per tap (a few channels, or the fused taps of a few):
  // a tile's inputs are a few cache lines per row, consumed faster than the
  // hardware prefetcher runs ahead; each tap of a tile then prefetches, per
  // row, the first line of the input four tiles on (consecutive rows step by
  // s (backward) or 1 (forward phase) pixels along the innermost axis; rows
  // that are not consecutive prefetch a useless line). Zen 5, AVX-512:
  // 36 <- 4 k3 s3 on 1080x1920 backward-data 1.3x, the few-channel and
  // small benchdnn layers unchanged or 1-10 % faster; the AVX2 kernels on Zen 5
  // (with the column-order packing): 36 <- 4 backward-data 1.2-1.4x, none slower.
  // The VDPBF16PS pair tiles the same (elements on, 16-bit ones): Zen 5, the
  // 36 <- 4 bf16 backward-data NXC on one thread 1.08-1.18x (4.2-4.45 ->
  // 3.76-3.92 ms; torch 3.3-3.6), in cache unchanged.
  // Depthwise tiles (AVX2 table; heuristics C21): each prefetches, per tap
  // and row, the line it reads (one per 16 channels) one tile on. A tile
  // reads 16 taps x 4 pixels scattered over 4 input rows of the k4 s2
  // upsampler, which the hardware prefetcher did not fetch in time: Zen 3,
  // its backward-data NXC (64 channels, 8 MB of diff_dst) 2.3-2.5x on one
  // thread (2.8 -> 1.2 ms; torch 1.3), 1.55-1.77x on two, the forward
  // 1.1-1.25x; two tiles on 1.7x; the 17-channel layers within the caches
  // unchanged (16-bit inputs: none, plan_convert16).
  // No prefetch where the distance would pass 2^30 floats (huge strides): useless there,
  // and the product could overflow.
  const int64_t tap_run = cred * c.K2;
  int64_t dist = 0;
  if ((c.dw && tab.dw_prefetch) || (!c.dw && !c.whole_pixel && !c.dot && tap_run <= 64)) {
    const int64_t ahead = c.dw ? 1 : 4;  // tiles on
    if (__builtin_mul_overflow(ahead * MR, c.in_c, &dist) ||
        __builtin_mul_overflow(dist, fwd ? int64_t{1} : p.s[2], &dist) ||
        dist > (int64_t{1} << 30))
      dist = 0;
  }
  c.prefetch = dist;

  plan_row_blocks(c, by_columns);

  const bool by_lines = lines_preferred(c, by_columns, w_bytes);
  c.schedule = by_lines ? Schedule::Lines : by_columns ? Schedule::Columns : Schedule::Rows;

  // AVX2 (table prefetch_runs): where every input element is read by one tap
  // of one row only (forward: 1x1 kernels; backward-data: K <= s / gcd(s, d)
  // on each axis, e.g. the k2 s2 upsamplers), all of the run's lines: nothing
  // else brings them in ahead of the tile. And by rows, only a row block's
  // first pass prefetches: the later column blocks read the rows it brought
  // into the caches, and their prefetches only took load slots (line by line
  // and by columns every call prefetches: there a call is the first over
  // its rows, or follows right after). Zen 3, 2 threads,
  // alternating calls in one process (with / without both), over the 40
  // layer-passes that have an input prefetch, two runs: GoogLeNet k7 d2
  // backward-data NXC 1.27x, 3D U-Net 128 -> 64 k2 s2 backward-data
  // 1.08-1.20x, 2D U-Net 128 -> 64 1.06-1.12x, AlexNet k11 s4 1.04-1.13x,
  // HiFi-GAN 128 -> 64 1.03-1.07x, geomean 1.02 (the small layers within
  // noise; the 3D 1x1 s2 in cache 0.90-0.97x). All lines where the inputs
  // are re-read (AlexNet k5 g2) ran 2-8 % slower, hence "read once".
  if (dist > 0 && tab.prefetch_runs && !c.dw) {
    bool once = true;
    for (int ax = 0; ax < kAxes; ++ax)
      once = once && (fwd ? p.K[ax] == 1 : p.K[ax] <= p.s[ax] / std::gcd(p.s[ax], p.d[ax]));
    c.prefetch_run = once;
    c.prefetch_first = c.schedule == Schedule::Rows;
  }

  // GEMM tiles line by line whose f32 outputs go out of the caches without
  // streaming stores (rows of a few lines, not whole lines): each tile
  // prefetches its rows' first lines four tiles on for writing, so that the
  // reads for ownership overlap the tiles (heuristics C21). Zen 3, the 36 <-
  // 4 k3 s3 backward-data NXC on 360x640 (33 MB of diff_src, 36 channels a
  // pixel), alternating calls in one process: 1.10x on one thread, 1.14x on
  // two; two tiles on the same. Outputs within the caches (1D GoogLeNet,
  // 0.9 MB) gained nothing: from 4 MiB.
  // (A forward's phase rows are s apart along the output line.)
  int64_t dout = 0;
  if (tab.prefetch_out && by_lines && !c.dw && !c.stream && out_bytes >= 4.0 * (1 << 20) &&
      !__builtin_mul_overflow(int64_t{4} * MR, c.out_c, &dout) &&
      !__builtin_mul_overflow(dout, fwd ? p.s[2] : int64_t{1}, &dout) &&
      dout <= (int64_t{1} << 30))
    c.prefetch_out = dout;
}

// Line runs (run_lines): per (image, phase, axis-0 row), its axis-1 lines
// split into k runs of equal length (at most 64 lines), k the smallest
// giving every thread 4 items (runs of unequal length left a thread waiting:
// AlexNet's 55 lines per image in runs of 6 and a last of 1 ran 7 % slower).
void plan_lines(ConvPlan& c) {
  int64_t groups = 0;
  for (const Phase& ph : c.phases) groups += c.NI * ph.ax[0].rows;
  const int64_t k_want =
      (4 * c.nthreads + std::max<int64_t>(groups, 1) - 1) / std::max<int64_t>(groups, 1);
  c.LB = 1;
  for (int64_t n = 0; n < c.NI; ++n)
    for (size_t pi = 0; pi < c.phases.size(); ++pi) {
      const Phase& ph = c.phases[pi];
      const int64_t R1 = ph.ax[1].rows;
      const int64_t k = std::clamp<int64_t>(k_want, (R1 + 63) / 64, std::max<int64_t>(R1, 1));
      for (int64_t j0 = 0; j0 < ph.ax[0].rows; ++j0)
        for (int64_t r = 0; r < k; ++r) {
          const int64_t lo = R1 * r / k, hi = R1 * (r + 1) / k;
          if (hi > lo) c.line_items.push_back({static_cast<int32_t>(pi), n, j0, lo, hi - lo});
          c.LB = std::max(c.LB, hi - lo);
        }
    }
}

// The buffers of a call: packed weights, padded bias, zero vector; per
// thread those of its schedule.
void plan_workspace(ConvPlan& c) {
  const int64_t T = c.T, MR = c.MR, TB = c.TB, Tm = std::max<int64_t>(c.Tmax, 1);
  if (c.dw) c.wp_floats = T * c.cols;
  else if (c.vg) c.wp_floats = T * c.cred * c.ncp;
  else c.wp_floats = (c.lazy ? c.nthreads : c.G * c.NB) * c.block_floats;
  // Bias padded to whole column blocks (zeros without bias / for backward).
  c.bias_floats = c.G * c.NB * c.NR + 16;
  // Zero vector for padding taps, read at channel offsets up to in_c.
  c.zeros_floats = std::max(c.in_c * c.K2, c.cols) + 16;
  if (c.schedule == Schedule::Lines) {
    LineBufSizes& b = c.line_bufs;
    b.per_line = c.Tmax + 1;
    b.ind = MR * Tm;
    b.scratch = c.NB * c.NR + 16;
    return;
  }
  RowBufSizes& b = c.row_bufs;
  b.ind = TB * MR * Tm;
  b.outp = TB * MR;
  b.scratch = c.out_c + c.NB * c.NR + 16;
  b.tile_wtap = TB * Tm;
  b.tiles = TB;
  b.win_in = c.any_lazy ? TB * MR * std::max<int64_t>(c.T2max, 1) : 0;
  b.win = c.any_lazy ? TB * MR : 0;
  // VNNI tiles run the column blocks of a row block's range in one call
  // (run_by_rows), their inputs gathered once into this (a tile's taps x 32
  // rows x its reduction steps; more and they gather per block).
  b.stage = c.stage_inputs && c.schedule == Schedule::Rows ? kVnniStageBytes : 0;
}

// Bytes of all the buffers of a call (packed weights, bias, zeros, every
// thread's buffers).
int64_t workspace_bytes(const ConvPlan& c) {
  constexpr int64_t F = sizeof(float), P = sizeof(void*), I = sizeof(int64_t);
  int64_t shared = (std::max<int64_t>(c.wp_floats, 16) + c.bias_floats + c.zeros_floats) * F;
  int64_t thread = 0;
  if (c.route == Route::Patch) {
    thread = c.MR * c.patch.ldS * F + 2 * c.MR * P;
  } else if (c.schedule == Schedule::Lines) {
    const LineBufSizes& b = c.line_bufs;
    thread = c.LB * b.per_line * (2 * sizeof(int32_t) + 2 * I) + 3 * c.LB * I + b.ind * P +
             2 * c.MR * P + b.scratch * F;
  } else {
    const RowBufSizes& b = c.row_bufs;
    thread = (b.ind + 2 * b.outp) * P + b.scratch * F + b.tile_wtap * sizeof(int32_t) +
             b.tiles * (I + sizeof(int) + 3) + b.win_in * I + b.win * (I + 1) + b.stage;
  }
  return shared + c.nthreads * thread;
}

WeightsView dense_iox_strides(const ConvProblem& p);

// The groups a super-group (ConvTable::merge_cols; 1: none). Zen 3, 2
// threads, channels-last, alternating with torch in one process, the
// block-diagonal weights built in Python against the plain groups: 8
// channels a group (N=4 128 -> 128 g16 32x32 k4 s2, 256 -> 256 g32 16x16)
// f = 2: forward 1.38-1.43x, backward-data 1.2-1.5x; 4 channels (g32 of 128)
// f = 4: forward 1.8x (f = 2 1.33x, f = 8 1.18x), backward-data 1.17-1.24x;
// 2 channels (g32 of 64, k3) f = 8: forward 2.3x, backward-data 2.9x. The
// 12x8 tile reads 32 bytes of each 512-byte pixel per group pass and stores
// as much, so each pass over a row block refetches every line; merged, the
// 6x16 tile reads and writes whole runs of 64 bytes. (Backward-weights has
// its own grouped tiles, and ran 0.6-0.9x merged: not merged.) Only where
// the super-group fills the tile's columns exactly (f x the wider side =
// merge_cols): benchdnn's 4 -> 5 channels a group (f = 2, 10 or 8 merged
// columns) ran 0.8-1.1x merged, its 3D 4 -> 4 (f = 4) 1.3-1.6x. Only as
// many channels a group on both sides (all of the above; ICg != OCg, where
// the narrow side's merged columns would take other tiles, unmeasured). The
// merged weights stay below 8 MiB.
int64_t merge_factor(const ConvTable& tab, const ConvProblem& p) {
  if (tab.merge_cols <= 0 || p.G < 2 || p.ICg != p.OCg || p.ICg == 1) return 1;
  const int64_t f = tab.merge_cols / p.ICg;
  const double merged_bytes = 4.0 * f * p.IC() * p.OCg * p.taps();
  return f > 1 && f * p.ICg == tab.merge_cols && p.G % f == 0 && merged_bytes <= 8.0 * (1 << 20)
             ? f
             : 1;
}

ConvPlan build_plan_of(const ConvTable* tab, Isa isa, Pass pass, const ConvProblem& p,
                       const WeightsView& wv, int nthreads, int64_t one_chunk_bytes);

// The plan of one forward / backward-data call on this ISA with nthreads
// threads, for weights with wv's strides (wv.data is not read): pure, and
// its only allocations are the geometry tables it holds (the phases' axis
// maps, bounded by kLazyEntries per axis; the row orders; the line runs).
// plan_conv (below) keeps the last few per thread. merge_ok: small groups may
// be planned as super-groups (merge_factor; the caller guards non-finite
// inputs, run_merged, or takes only plans that skip the zeros, plan_conv16).
ConvPlan build_conv_plan(const ConvTable* tab, Isa isa, Pass pass, const ConvProblem& p,
                         const WeightsView& wv, int nthreads, int64_t one_chunk_bytes,
                         bool merge_ok) {
  const int64_t f = merge_ok && tab && pass != Pass::BackwardWeights ? merge_factor(*tab, p) : 1;
  if (f == 1) return build_plan_of(tab, isa, pass, p, wv, nthreads, one_chunk_bytes);
  ConvProblem q = p;
  q.G = p.G / f;
  q.ICg = p.ICg * f;
  q.OCg = p.OCg * f;
  ConvPlan c = build_plan_of(tab, isa, pass, q, dense_iox_strides(q), nthreads, one_chunk_bytes);
  // Two groups of one vector of columns each in a two-vector tile: its
  // block-diagonal form skips the zero blocks (the reduction's halves feed
  // one vector each; not with fused taps, whose reduction interleaves them).
  const ConvGemmTile* d = tab->diag2;
  if (d && f == 2 && c.route == Route::Gemm && !c.fuse && c.nchunks == 1 && c.NR == d->nr &&
      c.MR == d->mr && c.ncol == 2 * tab->lanes && c.cred % 2 == 0) {
    c.tile = d->name;
    c.fn = d->fn;
    c.partial = d->partial;
    c.merge_reads_zeros = false;
  }
  c.merge = f;
  c.merge_si = wv.si;
  c.merge_so = wv.so;
  c.merge_tap_off = weight_tap_offsets(p, wv);
  c.merge_dense = wv.so == p.taps();
  for (int64_t t = 0; t < p.taps(); ++t)
    c.merge_dense = c.merge_dense && c.merge_tap_off[static_cast<size_t>(t)] == t;
  return c;
}

ConvPlan build_plan_of(const ConvTable* tab, Isa isa, Pass pass, const ConvProblem& p,
                       const WeightsView& wv, int nthreads, int64_t one_chunk_bytes) {
  ConvPlan c;
  c.one_chunk_bytes = one_chunk_bytes;
  c.isa = isa;
  c.pass = pass;
  c.fwd = pass == Pass::Forward;
  c.nthreads = std::max(nthreads, 1);
  c.p = p;
  if (!tab || pass == Pass::BackwardWeights) return c;  // Route::Reference
  c.in_bytes = tab->in_bytes;
  c.vnni = tab->pairs16;
  c.stage_inputs = tab->stage_inputs;
  c.pairs_taps = tab->pairs_taps;
  c.pairs_row = tab->pairs_row;
  c.thread_begin = tab->thread_begin;
  c.thread_end = tab->thread_end;
  const bool fwd = c.fwd;
  c.N = p.N;
  c.cred = fwd ? p.ICg : p.OCg;
  c.ncol = fwd ? p.OCg : p.ICg;
  c.in_c = fwd ? p.IC() : p.OC();
  c.out_c = fwd ? p.OC() : p.IC();
  c.in_pix = fwd ? p.src_spatial() : p.dst_spatial();
  c.out_pix = fwd ? p.dst_spatial() : p.src_spatial();
  if (c.N <= 0 || c.ncol <= 0 || c.out_pix <= 0 || p.G <= 0) {
    c.route = Route::Nothing;  // nothing to write
    return c;
  }
  if (fwd && tab->ngemm > 0 && !tab->pairs16 && patch_applies(*tab, p)) {
    plan_patch(c, *tab, wv);
    return c;
  }
  if (!plan_kernel(c, *tab)) {
    c.route = Route::Reference;
    return c;
  }
  plan_phases(c, *tab);
  plan_packing(c, *tab, wv);
  plan_schedule(c, *tab);
  if (c.schedule == Schedule::Lines) plan_lines(c);
  plan_workspace(c);
  return c;
}

// A fingerprint of the phases' row orders (regrouped rows), for describe().
uint32_t row_order_hash(const ConvPlan& c) {
  uint32_t h = 2166136261u;
  for (const Phase& ph : c.phases)
    for (int64_t r : ph.perm) h = (h ^ static_cast<uint32_t>(r)) * 16777619u;
  return h;
}

std::string describe(const ConvPlan& c) {
  std::ostringstream o;
  const char* pass = c.pass == Pass::Forward        ? "forward"
                     : c.pass == Pass::BackwardData ? "backward_data"
                                                    : "backward_weights";
  o << "conv pass=" << pass << " route=" << route_name(c.route);
  if (c.route == Route::Nothing || c.route == Route::Reference) return o.str();
  if (c.merge > 1) o << " merge=" << c.merge;
  o << " tile=" << c.tile << " mr=" << c.MR << " nr=" << c.NR << " nb=" << c.NB;
  if (c.route == Route::Patch) {
    const PatchPlan& pp = c.patch;
    o << " cols=" << pp.ncol << " cb=" << c.CB << " chunks=" << c.nchunks << " tb=" << pp.TB
      << " items=" << pp.items << " stream=" << pp.stream
      << " workspace=" << workspace_bytes(c);
    return o.str();
  }
  int64_t rows = 0, regrouped = 0, rowmode = 0;
  for (const Phase& ph : c.phases) {
    rows += ph.rows;
    regrouped += !ph.perm.empty();
    rowmode += !ph.tapoff.empty();
  }
  o << " g=" << c.G << " cols=" << c.cols << " cred=" << c.cred << " phases=" << c.phases.size()
    << " taps=" << c.T << " tmax=" << c.Tmax << " rows=" << rows << " fold=" << c.fold_batch
    << " lazy_axis=" << c.any_lazy << " rowmode=" << rowmode << " regrouped=" << regrouped;
  if (regrouped) o << " roworder=" << std::hex << row_order_hash(c) << std::dec;
  o << " cb=" << c.CB << " chunks=" << c.nchunks << " fuse=" << c.fuse
    << " pack=" << pack_order_name(c.pack_order);
  if (c.pack_order == PackOrder::Blocks16 || c.pack_order == PackOrder::Channels)
    o << ":" << pack_move_name(c.pack_move);
  if (c.w16) o << ":w16";
  o << " stream_pack=" << c.stream_pack << " schedule=" << schedule_name(c.schedule);
  if (c.schedule == Schedule::Rows) {
    o << " tb=" << c.TB << " cg=" << c.CG << " blocks=" << c.blocks_per_img
      << " items=" << c.all_blocks * c.CG;
  } else if (c.schedule == Schedule::Columns) {
    o << " tb=" << c.TB << " blocks=" << c.blocks_per_img << " rsplit=" << c.rsplit
      << " lazy=" << c.lazy << " items=" << c.ncolblocks * c.rsplit;
  } else {
    o << " items=" << c.line_items.size() << " lb=" << c.LB;
  }
  o << " stream=" << c.stream << " prefetch=" << c.prefetch;
  if (c.prefetch_first) o << " prefetch_first=1";
  if (c.prefetch_run) o << " prefetch_run=1";
  if (c.prefetch_out) o << " prefetch_out=" << c.prefetch_out;
  o << " workspace=" << workspace_bytes(c);
  return o.str();
}

// Dense IOX weights (the torch layout) of the problem: strides only.
WeightsView dense_iox_strides(const ConvProblem& p) {
  WeightsView w{};
  w.sk[2] = 1;
  w.sk[1] = p.K[2];
  w.sk[0] = p.K[1] * p.K[2];
  w.so = p.taps();
  w.si = p.OCg * p.taps();
  return w;
}

// ---------------------------------------------------------------------------
// Execution: functions over the plan and the call's pointers; no decision
// is taken below this line.

// The pointers of one call.
struct ConvCall {
  const void* in;      // float, or bf16 (uint16_t) where the plan's in_bytes is 2
  void* out;           // float, or bf16 where out_bytes is 2
  const void* W;       // the weights, with the plan's strides: float, or bf16 (vnni)
  float* wp;           // packed weights
  const float* biasp;  // bias padded to whole column blocks
  const float* zeros;  // >= the longest read of zeros
};

// dst[c*ldd + r] = src[r*lds + c] for r < R, c < C, in 16x16 register blocks.
void transpose(ConvTransposeRowsFn tr, const float* src, int64_t lds, int64_t R, int64_t C,
               float* dst, int64_t ldd) {
  float* rows[16];
  for (int64_t c0 = 0; c0 < C; c0 += 16)
    for (int64_t r0 = 0; r0 < R; r0 += 16) {
      const int nc = static_cast<int>(std::min<int64_t>(16, C - c0));
      for (int j = 0; j < nc; ++j) rows[j] = dst + (c0 + j) * ldd + r0;
      tr(src + r0 * lds + c0, lds, static_cast<int>(std::min<int64_t>(16, R - r0)), nc, rows);
    }
}

// Prefetches (into L1) the first line of each of n rows `stride` floats apart.
void prefetch_rows(const float* q, int64_t n, int64_t stride) {
  for (int64_t j = 0; j < n; ++j) _mm_prefetch(reinterpret_cast<const char*>(q + j * stride), _MM_HINT_T0);
}

// dst[c*NR + j] = src[c*rs + j*cs] for j < jn, 0 for jn <= j < NR, for
// c in [c0, c1). 16x16 blocks, the inner loop along the source's contiguous
// side, so that both the reads and the writes stay within a few cache lines.
void pack_slab(const float* src, int64_t rs, int64_t cs, int64_t c0, int64_t c1, int64_t jn,
               int64_t NR, float* dst) {
  constexpr int64_t B = 16;
  for (int64_t j0 = 0; j0 < NR; j0 += B) {
    const int64_t j1 = std::min(NR, j0 + B), jv = std::min(j1, jn);
    if (std::abs(cs) <= std::abs(rs)) {
      for (int64_t c = c0; c < c1; ++c) {
        for (int64_t j = j0; j < jv; ++j) dst[c * NR + j] = src[c * rs + j * cs];
        for (int64_t j = std::max(j0, jv); j < j1; ++j) dst[c * NR + j] = 0.f;
      }
    } else {
      for (int64_t j = j0; j < jv; ++j)
        for (int64_t c = c0; c < c1; ++c) dst[c * NR + j] = src[c * rs + j * cs];
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t j = std::max(j0, jv); j < j1; ++j) dst[c * NR + j] = 0.f;
    }
  }
}

// Offset of row (packed tap t, channel ch) in a column block's packed GEMM
// weights, [chunk of CB channels][tap][c][NR], ch in the chunk starting at c0
// (the packing loops know their chunk: no division per packed row, 512 ->
// 512 k3 s2 on 4x4, Zen 5, alternating runs: 1.08x forward, 1.15x
// backward-data); packed_offset finds the chunk itself.
inline int64_t chunk_offset(const ConvPlan& c, int64_t c0, int64_t t, int64_t ch) {
  return (c.T * c0 + t * std::min(c.CB, c.cred - c0) + (ch - c0)) * c.NR;
}
inline int64_t packed_offset(const ConvPlan& c, int64_t t, int64_t ch) {
  return chunk_offset(c, ch / c.CB * c.CB, t, ch);
}

// Packing reads W from memory or L3 in runs the hardware prefetcher does
// not keep ahead of (a channel's [column][tap] block per step, 16 column
// streams of T taps, or per tap 16 channels of each column): the
// transposes below fetch the rows of the channel kPackAhead on (distances
// 2-8 measured alike), or of the tap kPackTapsAhead on (XOI forward: 5-7 %
// faster). Zen 5, bench.py (weights read from memory), interleaved runs:
// 512 -> 512 k3 s2 on 4x4 1.3-1.45x, DCGAN 512 -> 256 and 3D U-Net 320 ->
// 320 k2 s2 forward 1.2x, HiFi-GAN / vocoder 512 -> 256 k16 s8
// 1.07-1.14x, the 16 deep layers' forward and backward-data 1.06x in
// geometric mean.
constexpr int64_t kPackAhead = 4;
constexpr size_t kPackTapsAhead = 2;

// Packs channels [c_begin, c_end), within one block of 16 (so within one
// chunk), of column block nb of group g into dst_block, the block's
// [chunk][tap][c][NR] weights, the plan's way (PackMove). src: the weights
// of (g, column nb * NR, channel c_begin), with the plan's strides (in W, or
// in a widened copy of 16-bit weights: ahead false, no prefetch past it).
void pack_block(const ConvPlan& pl, const float* src, int64_t nb, int64_t c_begin,
                int64_t c_end, float* dst_block, ConvTransposeRowsFn tr, bool ahead = true) {
  const int64_t NR = pl.NR, CB = pl.CB, T = pl.T, cred = pl.cred;
  const int64_t col_stride = pl.col_stride, red_stride = pl.red_stride;
  const std::vector<int64_t>& ptap = pl.ptap;
  const std::vector<int64_t>& pkoff = pl.pkoff;
  const int64_t c0 = c_begin / CB * CB;                  // its chunk
  const int64_t c_lo = c_begin - c0, c_hi = c_end - c0;  // in the chunk
  const int64_t jn = std::min<int64_t>(NR, pl.ncol - nb * NR);
  const size_t nt = ptap.size();
  // Packed row of tap t, channel c0 + c of the chunk; channel c0 + c's weights.
  auto row = [&](int64_t t, int64_t c) { return dst_block + chunk_offset(pl, c0, t, c0 + c); };
  auto chan = [&](int64_t c) { return src + (c - c_lo) * red_stride; };
  auto zero_tail = [&](float* d) {  // columns jn..NR of the rows packed here
    for (int64_t c = c_lo; c < c_hi; ++c) std::fill(d + c * NR + jn, d + c * NR + NR, 0.f);
  };
  switch (pl.pack_move) {
    case PackMove::Copy:
      for (size_t i = 0; i < nt; ++i) {
        float* d = row(ptap[i], 0);
        for (int64_t c = c_lo; c < c_hi; ++c) {
          const float* sp = chan(c) + pkoff[i];
          std::copy(sp, sp + jn, d + c * NR);
        }
        zero_tail(d);
      }
      break;
    case PackMove::Transpose:  // (red_stride 1)
      for (size_t i = 0; i < nt; ++i) {
        if (ahead && i + kPackTapsAhead < nt) prefetch_rows(src + pkoff[i + kPackTapsAhead], jn, col_stride);
        float* d = row(ptap[i], 0);
        transpose(tr, src + pkoff[i], col_stride, jn, c_hi - c_lo, d + c_lo * NR, NR);
        zero_tail(d);
      }
      break;
    case PackMove::TapTranspose: {
      // Per channel a [column][tap] block (contiguous for IOX forward), each
      // tap's run of columns transposed straight into its packed row.
      float* rows[16];
      for (int64_t c = c_lo; c < c_hi; ++c) {
        for (int64_t k0 = 0; k0 < T; k0 += 16) {
          const int nk = static_cast<int>(std::min<int64_t>(16, T - k0));
          for (int64_t j0 = 0; j0 < jn; j0 += 16) {
            for (int k = 0; k < nk; ++k)
              rows[k] = row(pl.tap_of_koff[k0 + k], c) + j0;
            const int64_t nj = std::min<int64_t>(16, jn - j0);
            if (ahead && c0 + c + kPackAhead < cred)
              prefetch_rows(chan(c + kPackAhead) + j0 * col_stride + k0, nj, col_stride);
            tr(chan(c) + j0 * col_stride + k0, col_stride, static_cast<int>(nj), nk, rows);
          }
        }
      }
      for (int64_t t = 0; t < T; ++t) zero_tail(row(t, 0));
      break;
    }
    case PackMove::Slab:
      for (size_t i = 0; i < nt; ++i)
        pack_slab(src + pkoff[i], red_stride, col_stride, 0, c_hi - c_lo, jn, NR,
                  row(ptap[i], 0) + c_lo * NR);
      break;
  }
}

// The f32 weights of (g, column nb * NR, channel c) in W.
inline const float* weights_at(const ConvPlan& pl, const void* W, int64_t g, int64_t nb,
                               int64_t c) {
  return static_cast<const float*>(W) + g * pl.group_stride + nb * pl.NR * pl.col_stride +
         c * pl.red_stride;
}

// 16-bit weights (pl.w16): channel c of group g, columns from nb * NR on
// (ncols of them, every tap), widened into stage; returns the stage.
inline const float* widen_channel(const ConvPlan& pl, const void* W, int64_t g, int64_t nb,
                                  int64_t c, int64_t ncols, float* stage) {
  const int64_t off = g * pl.group_stride + nb * pl.NR * pl.col_stride + c * pl.red_stride;
  pl.w16(static_cast<const uint16_t*>(W) + off, stage, (ncols - 1) * pl.col_stride + pl.w16_span);
  return stage;
}

// Packs columns [j0, j0 + 16) (within NR) of column block nb of group g,
// every channel and tap, into dst_block ([chunk][tap][c][NR]; zeros past
// the block's columns). W: the f32 weights, or with pl.w16 the 16-bit ones,
// the strip's columns widened first into stage (one span of w16_span floats
// per column: its every channel and tap), read from there.
void pack_columns(const ConvPlan& pl, const void* W, int64_t g, int64_t nb, int64_t j0,
                  float* dst_block, ConvTransposeRowsFn tr, std::vector<float>& stage) {
  const int64_t NR = pl.NR, CB = pl.CB, T = pl.T, cred = pl.cred;
  const int64_t red_stride = pl.red_stride;
  const int64_t jw = std::min<int64_t>(16, NR - j0);                      // strip width
  const int64_t nj = std::clamp<int64_t>(pl.ncol - nb * NR - j0, 0, jw);  // real columns
  const int64_t off = g * pl.group_stride + (nb * NR + j0) * pl.col_stride;
  const float* src = static_cast<const float*>(W) + off;
  int64_t col_stride = pl.col_stride;
  if (pl.w16) {
    stage.resize(static_cast<size_t>(std::max<int64_t>(1, nj * pl.w16_span)));
    for (int64_t j = 0; j < nj; ++j)
      pl.w16(static_cast<const uint16_t*>(W) + off + j * pl.col_stride,
             stage.data() + j * pl.w16_span, pl.w16_span);
    src = stage.data();
    col_stride = pl.w16_span;
  }
  float* rows[16];
  int64_t c0 = 0;  // the chunk of channel c
  for (int64_t c = 0; c < cred; ++c) {
    if (c == c0 + CB) c0 = c;
    for (int64_t t = 0; t < T; ++t)
      rows[t] = dst_block + chunk_offset(pl, c0, pl.tap_of_koff[t], c) + j0;
    if (!pl.w16 && c + kPackAhead < cred)
      prefetch_rows(src + (c + kPackAhead) * red_stride, nj, col_stride);
    if (nj > 0)
      tr(src + c * red_stride, col_stride, static_cast<int>(nj), static_cast<int>(T), rows);
    for (int64_t t = 0; t < T; ++t) std::fill(rows[t] + nj, rows[t] + jw, 0.f);
  }
}

// Packs all of column block (g, nb) into dst (lazy: the item's own block).
// 16-bit weights: channel by channel through stage (w16_span floats per column).
void pack_whole(const ConvPlan& pl, const void* W, int64_t g, int64_t nb, float* dst,
                ConvTransposeRowsFn tr, std::vector<float>& stage) {
  const int64_t cred = pl.cred;
  if (pl.w16 && pl.pack_order == PackOrder::Channels) {
    const int64_t jn = std::min<int64_t>(pl.NR, pl.ncol - nb * pl.NR);
    stage.resize(static_cast<size_t>((jn - 1) * pl.col_stride + pl.w16_span));
    for (int64_t c = 0; c < cred; ++c)
      pack_block(pl, widen_channel(pl, W, g, nb, c, jn, stage.data()), nb, c, c + 1, dst, tr,
                 false);
  } else if (pl.pack_order == PackOrder::Blocks16) {
    for (int64_t c16 = 0; c16 < pl.nc16; ++c16)
      pack_block(pl, weights_at(pl, W, g, nb, c16 * 16), nb, c16 * 16,
                 std::min(cred, c16 * 16 + 16), dst, tr);
  } else if (pl.pack_order == PackOrder::Columns) {
    for (int64_t j0 = 0; j0 < pl.NR; j0 += 16) pack_columns(pl, W, g, nb, j0, dst, tr, stage);
  } else {
    for (int64_t c = 0; c < cred; ++c)
      pack_block(pl, weights_at(pl, W, g, nb, c), nb, c, c + 1, dst, tr);
  }
}

// Depthwise weights [tap][C]; small groups [tap][c][OC padded]; dot tiles
// [g][tap][c/16][j][16]. (Worksharing loops of the caller's parallel region.)
void pack_depthwise(const ConvPlan& pl, const float* W, float* wp) {
  const int64_t T = pl.T, cols = pl.cols;
#pragma omp for schedule(static) nowait
  for (int64_t t = 0; t < T; ++t) {
    if (pl.koff[t] < 0) continue;
    for (int64_t ch = 0; ch < cols; ++ch) wp[t * cols + ch] = W[ch * pl.w_si + pl.koff[t]];
  }
}

void pack_grouped(const ConvPlan& pl, const float* W, float* wp) {
  const int64_t T = pl.T, cred = pl.cred, ncp = pl.ncp, out_c = pl.out_c, ncol = pl.ncol;
#pragma omp for schedule(static) nowait
  for (int64_t t = 0; t < T; ++t) {
    if (pl.koff[t] < 0) continue;
    for (int64_t c = 0; c < cred; ++c) {
      float* d = wp + (t * cred + c) * ncp;
      for (int64_t oc = 0; oc < ncp; ++oc)
        d[oc] = oc < out_c ? W[(oc / ncol) * pl.group_stride + (oc % ncol) * pl.col_stride +
                               c * pl.red_stride + pl.koff[t]]
                           : 0.f;
    }
  }
}

void pack_dot(const ConvPlan& pl, const float* W, float* wp) {
  const int64_t G = pl.G, T = pl.T, NR = pl.NR, credp = pl.credp, cred = pl.cred;
#pragma omp for collapse(2) schedule(static) nowait
  for (int64_t g = 0; g < G; ++g)
    for (int64_t t = 0; t < T; ++t) {
      if (pl.koff[t] < 0) continue;
      const float* src = W + g * pl.group_stride + pl.koff[t];
      float* d = wp + g * pl.block_floats + t * credp * NR;
      for (int64_t c16 = 0; c16 < credp / 16; ++c16)
        for (int64_t j = 0; j < NR; ++j)
          for (int64_t l = 0; l < 16; ++l) {
            const int64_t c = c16 * 16 + l;
            d[(c16 * NR + j) * 16 + l] =
                c < cred ? src[j * pl.col_stride + c * pl.red_stride] : 0.f;
          }
    }
}

// VNNI tiles (bf16): pair rows [gp0, gp1) of column block (g, nb), straight
// from the bf16 weights into each chunk's [tap][c / 2][NR] 32-bit slots:
// (W[2i][j], W[2i + 1][j]), zero past the reduction and the columns
// (chunks hold an even number of channels, so no pair straddles two).
// Taps innermost in the loops: W's taps are its contiguous runs in IOX / OIX.
void pack_pairs(const ConvPlan& pl, const uint16_t* W, int64_t g, int64_t nb, int64_t gp0,
                int64_t gp1, float* dst_block) {
  const int64_t NR = pl.NR, cred = pl.cred, cs = pl.col_stride, rs = pl.red_stride;
  const int64_t jn = std::min<int64_t>(NR, pl.ncol - nb * NR);
  const uint16_t* const src = W + g * pl.group_stride + nb * NR * cs;
  const size_t nt = pl.ptap.size();
  for (int64_t gp = gp0; gp < gp1; ++gp) {
    const int64_t c = 2 * gp, c0 = c / pl.CB * pl.CB;
    const bool two = c + 1 < cred;
    uint32_t* rows[64];
    uint32_t** r = nt <= 64 ? rows : nullptr;
    std::vector<uint32_t*> more;
    if (!r) more.resize(nt), r = more.data();
    for (size_t k = 0; k < nt; ++k)
      r[k] = reinterpret_cast<uint32_t*>(dst_block + chunk_offset(pl, c0, pl.ptap[k], c0)) +
             (c - c0) / 2 * NR;
    const uint16_t* s0 = src + c * rs;
    const uint16_t* s1 = two ? s0 + rs : nullptr;
    if (pl.pack_move == PackMove::TapTranspose) {
      // every tap packed, W's taps one contiguous run per column: by 16 x 16
      // blocks (koff is a permutation of the taps)
      uint32_t* by_koff[64];
      std::vector<uint32_t*> more;
      uint32_t** bk = nt <= 64 ? by_koff : (more.resize(nt), more.data());
      for (size_t k = 0; k < nt; ++k) bk[pl.pkoff[k]] = r[k];
      pl.pairs_taps(s0, s1, cs, static_cast<int64_t>(nt), jn, bk);
    } else if (cs == 1) {
      for (size_t k = 0; k < nt; ++k)
        pl.pairs_row(s0 + pl.pkoff[k], s1 ? s1 + pl.pkoff[k] : nullptr, jn, r[k]);
    } else {
      for (int64_t j = 0; j < jn; ++j, s0 += cs)
        for (size_t k = 0; k < nt; ++k) {
          const int64_t o = pl.pkoff[k];
          r[k][j] = s0[o] | (two ? static_cast<uint32_t>(s0[o + rs]) << 16 : 0u);
        }
    }
    for (size_t k = 0; k < nt; ++k) std::fill(r[k] + jn, r[k] + NR, 0u);
  }
}

// VNNI + fused taps: the fused pair rows of column block (g, nb) at
// dst_block + fused_copy: per fused tap f (K2 consecutive packed taps), row
// i pairs rows 2i and 2i + 1 of its K2 * cred (tap, channel) rows.
void pack_pairs_fused(const ConvPlan& pl, const uint16_t* W, int64_t g, int64_t nb,
                      float* dst_block) {
  const int64_t NR = pl.NR, cred = pl.cred, cs = pl.col_stride, rs = pl.red_stride;
  const int64_t jn = std::min<int64_t>(NR, pl.ncol - nb * NR), run = pl.K2 * cred;
  const uint16_t* const src = W + g * pl.group_stride + nb * NR * cs;
  uint32_t* const d0 = reinterpret_cast<uint32_t*>(dst_block + pl.fused_copy);
  for (int64_t f = 0; f < pl.T / pl.K2; ++f)
    for (int64_t i = 0; i < (run + 1) / 2; ++i) {
      uint32_t* d = d0 + (f * run + i) * NR;
      for (int64_t j = 0; j < jn; ++j) {
        uint32_t slot = 0;
        for (int h = 0; h < 2; ++h) {
          const int64_t r = 2 * i + h;
          if (r >= run) break;
          const int64_t t = f * pl.K2 + r / cred, koff = pl.koff[t];
          if (koff >= 0) slot |= static_cast<uint32_t>(src[j * cs + (r % cred) * rs + koff]) << (16 * h);
        }
        d[j] = slot;
      }
      std::fill(d + jn, d + NR, 0u);
    }
}

// Packs every block of the weights up front (not lazy), in the plan's order;
// worksharing loops of the caller's parallel region (no barrier).
void pack_up_front(const ConvPlan& pl, const ConvCall& call) {
  float* const wp = call.wp;
  if (pl.vnni) {  // bf16 pairs: (column block, 16 pair rows) items
    const int64_t np = (pl.cred + 1) / 2, n16 = (np + 15) / 16;
#pragma omp for collapse(2) schedule(static) nowait
    for (int64_t q = 0; q < pl.G * pl.NB; ++q)
      for (int64_t b = 0; b < n16; ++b)
        pack_pairs(pl, static_cast<const uint16_t*>(call.W), q / pl.NB, q % pl.NB, 16 * b,
                   std::min(np, 16 * b + 16), wp + q * pl.block_floats);
    if (pl.fused_copy) {
#pragma omp for schedule(static) nowait
      for (int64_t q = 0; q < pl.G * pl.NB; ++q)
        pack_pairs_fused(pl, static_cast<const uint16_t*>(call.W), q / pl.NB, q % pl.NB,
                         wp + q * pl.block_floats);
    }
    return;
  }
  const float* const W = static_cast<const float*>(call.W);
  const int64_t G = pl.G, NB = pl.NB, NR = pl.NR, cred = pl.cred, bf = pl.block_floats;
  const ConvTransposeRowsFn tr = pl.tr_pack;
  switch (pl.pack_order) {
    case PackOrder::Depthwise:
      pack_depthwise(pl, W, wp);
      break;
    case PackOrder::Grouped:
      pack_grouped(pl, W, wp);
      break;
    case PackOrder::Dot:
      pack_dot(pl, W, wp);
      break;
    case PackOrder::Blocks16:  // 16 channels per transpose
#pragma omp for collapse(3) schedule(static) nowait
      for (int64_t g = 0; g < G; ++g)
        for (int64_t nb = 0; nb < NB; ++nb)
          for (int64_t c16 = 0; c16 < pl.nc16; ++c16)
            pack_block(pl, weights_at(pl, W, g, nb, c16 * 16), nb, c16 * 16,
                       std::min(cred, c16 * 16 + 16), wp + (g * NB + nb) * bf, tr);
      break;
    case PackOrder::Columns: {
      std::vector<float> stage;  // 16-bit weights: the strip's widened columns
#pragma omp for collapse(3) schedule(static) nowait
      for (int64_t g = 0; g < G; ++g)
        for (int64_t nb = 0; nb < NB; ++nb)
          for (int64_t j0 = 0; j0 < NR; j0 += 16)
            pack_columns(pl, call.W, g, nb, j0, wp + (g * NB + nb) * bf, tr, stage);
      break;
    }
    case PackOrder::Channels:
      // A channel's columns (or columns x taps) are contiguous or regularly
      // spaced in W: channel by channel, every column block, so that each
      // thread reads W in order (IOX, 512 x 512 x 9 from memory: 2x faster
      // than column block by column block, whose rows lie 18 KiB apart).
      // 16-bit weights: each channel's run widened once into a stage (in L1 /
      // L2), packed from there.
      if (pl.w16) {
        std::vector<float> stage(static_cast<size_t>((pl.ncol - 1) * pl.col_stride + pl.w16_span));
#pragma omp for collapse(2) schedule(static) nowait
        for (int64_t g = 0; g < G; ++g)
          for (int64_t c = 0; c < cred; ++c) {
            const float* s = widen_channel(pl, call.W, g, 0, c, pl.ncol, stage.data());
            for (int64_t nb = 0; nb < NB; ++nb)
              pack_block(pl, s + nb * NR * pl.col_stride, nb, c, c + 1, wp + (g * NB + nb) * bf,
                         tr, false);
          }
        break;
      }
#pragma omp for collapse(2) schedule(static) nowait
      for (int64_t g = 0; g < G; ++g)
        for (int64_t c = 0; c < cred; ++c)
          for (int64_t nb = 0; nb < NB; ++nb)
            pack_block(pl, weights_at(pl, W, g, nb, c), nb, c, c + 1, wp + (g * NB + nb) * bf,
                       tr);
      break;
  }
}


// Route Patch (see patch_applies): per input pixel one GEMM row over taps x
// OCg columns into a per-thread tile buffer, each tap's outputs then copied
// to their pixel.

// Row r of the patch GEMM = input pixel (n, i0, i1, i2).
struct Pixel {
  int64_t n, i0, i1, i2;
};
inline Pixel patch_pixel(const ConvProblem& p, int64_t in_pix, int64_t r) {
  const int64_t ip = r % in_pix;
  return Pixel{r / in_pix, ip / (p.I[2] * p.I[1]), (ip / p.I[2]) % p.I[1], ip % p.I[2]};
}

// Calls f(k0 * K1 + k1, output pixel of (k0, k1) at axis-2 position 0, in
// its image) for the taps (k0, k1) of pixel q that land inside dst.
template <class F>
inline __attribute__((always_inline)) void for_each_tap01(const ConvProblem& p, const Pixel& q,
                                                          F&& f) {
  for (int64_t k0 = 0; k0 < p.K[0]; ++k0) {
    const int64_t o0 = q.i0 * p.s[0] - p.pb[0] + k0;
    if (o0 < 0 || o0 >= p.O[0]) continue;
    for (int64_t k1 = 0; k1 < p.K[1]; ++k1) {
      const int64_t o1 = q.i1 * p.s[1] - p.pb[1] + k1;
      if (o1 >= 0 && o1 < p.O[1]) f(k0 * p.K[1] + k1, (o0 * p.O[1] + o1) * p.O[2]);
    }
  }
}

// Packed [nb][c][NR], column j = tap * OC + oc, taps in (k0, k1, k2) order
// (a worksharing loop of the caller's region, with its barrier).
void pack_patch_weights(const ConvPlan& pl, const float* W, float* wp) {
  const int64_t IC = pl.p.ICg, OC = pl.p.OCg, T = pl.p.taps(), NB = pl.NB, NR = pl.NR;
  const std::vector<int64_t>& tap_off = pl.patch.tap_off;
#pragma omp for schedule(static)
  for (int64_t c = 0; c < IC; ++c) {
    // Column j = t * OC + oc, walked by (t, oc): no divisions per element.
    const float* src = W + c * pl.w_si;
    int64_t t = 0, oc = 0;
    for (int64_t nb = 0; nb < NB; ++nb) {
      float* d = wp + (nb * IC + c) * NR;
      for (int64_t jj = 0; jj < NR; ++jj) {
        if (t >= T) {
          d[jj] = 0.f;
          continue;
        }
        d[jj] = src[oc * pl.col_stride + tap_off[t]];
        if (++oc == OC) {
          oc = 0;
          ++t;
        }
      }
    }
  }
}

// The GEMM of a tile of nr rows (consecutive pixels: row m at rows + m*IC)
// into the tile buffer (o).
inline __attribute__((always_inline)) void patch_gemm(const ConvPlan& pl, const float* rows,
                                                      const float* wp, const float* biasp,
                                                      const float** a, float* const* o,
                                                      int64_t nr) {
  const int MR = pl.MR;
  const int64_t IC = pl.p.ICg, NR = pl.NR, NB = pl.NB, CB = pl.CB, ncol = pl.patch.ncol;
  for (int m = 0; m < MR; ++m) a[m] = rows + std::min<int64_t>(m, nr - 1) * IC;
  ConvTileArgs args;
  args.a = a;
  args.out = o;
  args.wtap = nullptr;
  args.ntaps = 1;
  for (int64_t nb = 0; nb < NB; ++nb) {
    args.bias = biasp + nb * NR;
    args.col_off = nb * NR;
    args.ncols = std::min<int64_t>(NR, ncol - nb * NR);
    for (int64_t cb = 0; cb < pl.nchunks; ++cb) {
      const int64_t c0 = cb * CB;
      args.w = wp + (nb * IC + c0) * NR;
      args.cred = std::min(CB, IC - c0);
      args.a_off = c0;
      args.accumulate = cb > 0;
      pl.fn(&args);
    }
  }
}

// Streamed: a full tile of consecutive pixels of one image row, every
// axis-2 tap inside: per (k0, k1) its outputs are one contiguous run of
// MR * K2 * OCg elements, written as whole 64-byte lines when each run starts
// a line (16-bit: the run gathered from the tile's rows into an aligned
// stage first, its rows' pieces not being whole 16-byte units). False
// (nothing written) for the other tiles.
template <class TO>
inline __attribute__((always_inline)) bool patch_stream(const ConvPlan& pl, TO* out,
                                                        const TO* tile, int64_t r0,
                                                        int64_t nr) {
#if defined(__SSE2__)
  const ConvProblem& p = pl.p;
  const int64_t OC = p.OCg, ldS = pl.patch.ldS, run = pl.patch.run;
  const Pixel q = patch_pixel(p, pl.in_pix, r0);
  const int64_t b2 = q.i2 * p.s[2] - p.pb[2];
  bool whole = nr == pl.MR && q.i2 + nr <= p.I[2] && b2 >= 0 &&
               (q.i2 + nr - 1) * p.s[2] - p.pb[2] + p.K[2] <= p.O[2];
  TO* const obase = out + (q.n * pl.out_pix + b2) * OC;
  if (whole)
    for_each_tap01(p, q, [&](int64_t, int64_t orow) {
      whole = whole && (reinterpret_cast<uintptr_t>(obase + orow * OC) & 63) == 0;
    });
  if (!whole) return false;
  for_each_tap01(p, q, [&](int64_t t01, int64_t orow) {
    TO* const dp = obase + orow * OC;
    if constexpr (std::is_same_v<TO, float>) {
      for (int64_t m = 0; m < nr; ++m) {
        const float* sp = tile + m * ldS + t01 * run;
        for (int64_t e = 0; e < run; e += 4) _mm_stream_ps(dp + m * run + e, _mm_loadu_ps(sp + e));
      }
    } else {
      alignas(64) TO buf[kMaxGemmRows * kMaxPatchRun16];
      for (int64_t m = 0; m < nr; ++m)
        std::memcpy(buf + m * run, tile + m * ldS + t01 * run, run * sizeof(TO));
      for (int64_t e = 0; e < nr * run; e += 16 / sizeof(TO))
        _mm_stream_si128(reinterpret_cast<__m128i*>(dp + e),
                         _mm_load_si128(reinterpret_cast<const __m128i*>(buf + e)));
    }
  });
  return true;
#else
  return false;
#endif
}

// Scatter: row r = input pixel (n, i0, i1, i2), each tap's outputs copied
// (TO uint16_t: from the tile buffer already rounded to 16 bits).
template <class TO>
inline __attribute__((always_inline)) void patch_scatter(const ConvPlan& pl, TO* out,
                                                         const TO* tile, int64_t r0,
                                                         int64_t nr) {
  const ConvProblem& p = pl.p;
  const int64_t OC = p.OCg, ldS = pl.patch.ldS, run = pl.patch.run;
  for (int64_t m = 0; m < nr; ++m) {
    const Pixel q = patch_pixel(p, pl.in_pix, r0 + m);
    const TO* srow = tile + m * ldS;
    // Axis 2: taps [k2a, k2b) land inside the output.
    const int64_t b2 = q.i2 * p.s[2] - p.pb[2];
    const int64_t k2a = std::max<int64_t>(0, -b2), k2b = std::min(p.K[2], p.O[2] - b2);
    if (k2a >= k2b) continue;
    TO* const obase = out + (q.n * pl.out_pix + b2 + k2a) * OC;
    const int64_t len = (k2b - k2a) * OC;  // short: no memmove call
    for_each_tap01(p, q, [&](int64_t t01, int64_t orow) {
      const TO* sp = srow + t01 * run + k2a * OC;
      TO* dp = obase + orow * OC;
      int64_t e = 0;
#if defined(__SSE2__)
      constexpr int64_t kVec = 16 / sizeof(TO);  // elements per 16 bytes
      auto copy16 = [&](int64_t i) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dp + i),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(sp + i)));
      };
      for (; e + kVec <= len; e += kVec) copy16(e);
      // A tail of a run of at least one vector: the run's last 16 bytes again.
      if (e < len && len >= kVec) {
        copy16(len - kVec);
        e = len;
      }
#endif
      for (; e < len; ++e) dp[e] = sp[e];
    });
  }
}

// TA, TO: the input's and result's storage (uint16_t: each tile's input rows,
// one run of consecutive pixels, widened into a stage, pl.widen16; a 16-bit
// result rounded from each tile buffer, pl.narrow16).
template <class TA, class TO>
void run_patch(const ConvPlan& pl, const TA* in, const float* W, const float* bias, TO* out) {
  const PatchPlan& pp = pl.patch;
  const int MR = pl.MR;
  const int64_t OC = pl.p.OCg, ldS = pp.ldS, tiles = pp.tiles, TB = pp.TB;
  AlignedBuf<float> wp = aligned_buffer<float>(pl.wp_floats, 16);
  std::vector<float> biasp(static_cast<size_t>(pl.bias_floats), 0.f);
  for (int64_t j = 0; j < pp.ncol; ++j) biasp[j] = bias ? bias[j % OC] : 0.f;
#pragma omp parallel num_threads(pl.nthreads)
  {
    pack_patch_weights(pl, W, wp.get());
    AlignedBuf<float> tile = aligned_buffer<float>(MR * ldS, 16);
    std::vector<TO> tile16(std::is_same_v<TO, float> ? 0 : static_cast<size_t>(MR * ldS));
    AlignedBuf<float> stage =
        aligned_buffer<float>(std::is_same_v<TA, float> ? 0 : MR * pl.p.ICg, 16);
    std::vector<const float*> a(static_cast<size_t>(MR));
    std::vector<float*> o(static_cast<size_t>(MR));
    for (int m = 0; m < MR; ++m) o[m] = tile.get() + m * ldS;
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t it = 0; it < pp.items; ++it) {
      const int64_t t_hi = std::min(tiles, (it + 1) * TB);
      for (int64_t ti = it * TB; ti < t_hi; ++ti) {
        const int64_t r0 = ti * MR, nr = std::min<int64_t>(MR, pp.rows - r0);
        const TA* const rows = in + r0 * pl.p.ICg;
        if constexpr (std::is_same_v<TA, float>) {
          patch_gemm(pl, rows, wp.get(), biasp.data(), a.data(), o.data(), nr);
        } else {
          pl.widen16(rows, stage.get(), nr * pl.p.ICg);
          patch_gemm(pl, stage.get(), wp.get(), biasp.data(), a.data(), o.data(), nr);
        }
        if constexpr (std::is_same_v<TO, float>) {
          if (pp.stream && patch_stream(pl, out, tile.get(), r0, nr)) continue;
          patch_scatter(pl, out, tile.get(), r0, nr);
        } else {  // each result rounded once, from its f32 sum
          pl.narrow16(tile.get(), tile16.data(), nr * ldS);
          if (pp.stream && patch_stream(pl, out, tile16.data(), r0, nr)) continue;
          patch_scatter(pl, out, tile16.data(), r0, nr);
        }
      }
    }
#if defined(__SSE2__)
    if (pp.stream) _mm_sfence();  // the streamed outputs, before the region's barrier
#endif
  }
}

// Tiles line by line (depthwise layers; backward-data with fused taps, see
// lines_preferred). A line is one (image, phase, axis-0 row, axis-1 row): its
// taps along axes 0 and 1 are either inside the input or padding for all of
// its pixels, so a line lists the valid ones once (wtap) and its tiles of MR
// pixels along axis 2 read no zeros there. Tiles whose pixels are interior
// along axis 2 run in row mode (a base pointer per pixel plus the line's tap
// offsets; fused: one tap per valid (t0, t1), a run of K2 pixels); the
// others (image borders along axis 2) get pointers per (tap, pixel), a zero
// vector for padding. Items are runs of up to 64 consecutive lines
// (plan_lines), walked strip by strip (the same tile position in every line
// of the run, then the next): consecutive lines read overlapping input rows,
// which a strip still finds in L1. Zen 5, the depthwise k4 s2 upsampler's
// backward-data (rotated A/B): 1.2x over the tiles across lines of the row
// blocks (whose border tiles built pointers for every tap and pixel), strips
// 1.15x over line-by-line order, runs of 32 lines 2-5 % over runs of 8;
// strips two tiles wide and software prefetch of the next line's tile no
// faster.

// Per-thread buffers of run_lines (sizes: ConvPlan::line_bufs, LB, MR).
struct LineBufs {
  // Per line of an item: its valid taps (packed index, row-mode offset) and
  // its valid (t0, t1) pairs (fused tap index, offset: also the fused
  // row-mode offsets), its tap counts and output base; per tile: pointers.
  size_t per_line;
  std::vector<int32_t> wtap, wtap_f;
  std::vector<int64_t> tapoff, off01;
  std::vector<int64_t> ntap, n01, obase;
  std::vector<const float*> ind, rows;
  std::vector<float*> outp;
  std::vector<float> scratch;
  std::vector<int64_t> jl;                         // positions along axis 2 in tile order
  std::vector<std::pair<int64_t, int64_t>> tiles;  // (first position in jl, rows)

  explicit LineBufs(const ConvPlan& pl)
      : per_line(static_cast<size_t>(pl.line_bufs.per_line)),
        wtap(pl.LB * per_line),
        wtap_f(pl.LB * per_line),
        tapoff(pl.LB * per_line),
        off01(pl.LB * per_line),
        ntap(static_cast<size_t>(pl.LB)),
        n01(static_cast<size_t>(pl.LB)),
        obase(static_cast<size_t>(pl.LB)),
        ind(static_cast<size_t>(pl.line_bufs.ind)),
        rows(static_cast<size_t>(pl.MR)),
        outp(static_cast<size_t>(pl.MR)),
        scratch(static_cast<size_t>(pl.line_bufs.scratch)) {}
};

// The valid taps of each line of the item.
void list_line_taps(const Phase& ph, const LineItem& item, LineBufs& lb) {
  const AxisMap &a0 = ph.ax[0], &a1 = ph.ax[1], &a2 = ph.ax[2];
  const int64_t T0 = a0.taps, T1 = a1.taps, T2 = a2.taps;
  const bool any_interior = !a2.delta.empty();
  for (int64_t l = 0; l < item.nl; ++l) {
    const int64_t j0 = item.j0, j1 = item.j1 + l;
    const size_t L = static_cast<size_t>(l) * lb.per_line;
    int64_t k = 0, v = 0;
    for (int64_t t0 = 0; t0 < T0; ++t0)
      for (int64_t t1 = 0; t1 < T1; ++t1) {
        const int64_t o = a0.in_off[j0 * T0 + t0] + a1.in_off[j1 * T1 + t1];
        if (o < 0) continue;  // padding (kPad) on axis 0 or 1
        lb.wtap_f[L + v] = static_cast<int32_t>(t0 * T1 + t1);
        lb.off01[L + v++] = o;
        for (int64_t t2 = 0; t2 < T2; ++t2, ++k) {
          lb.wtap[L + k] = static_cast<int32_t>((t0 * T1 + t1) * T2 + t2);
          lb.tapoff[L + k] = o + (any_interior ? a2.delta[t2] : 0);
        }
      }
    lb.ntap[l] = k;
    lb.n01[l] = v;
    lb.obase[l] = a0.out_off[j0] + a1.out_off[j1];
  }
}

// Tiles along a line: (first position in jl, rows). jl: the interior run,
// then the border positions. GEMM tiles (which have partial variants): the
// run in tiles from its start, then the border positions gathered into
// pointer tiles; depthwise (no partial variants): jl cut in tiles of MR
// from its start, so that the run's last tile is filled up by border
// positions (one pointer tile, not a row tile and a pointer tile, each
// partly dummy rows: 5 -> 4 tiles a line of 32 at k4 s2 p1).
void cut_line_tiles(const ConvPlan& pl, const AxisMap& a2, LineBufs& lb) {
  const int64_t MR = pl.MR, R2 = a2.rows;
  lb.jl.clear();
  lb.tiles.clear();
  int64_t lo = 0, hi = 0;
  while (lo < R2 && !a2.interior[lo]) ++lo;
  hi = lo;
  while (hi < R2 && a2.interior[hi]) ++hi;
  // Runs of positions cut into tiles of MR rows (depthwise: the last one
  // filled up with dummy rows) or, GEMM, into tiles of near-equal size
  // (no tile of one or two rows, whose weight loads serve few FMAs).
  auto cut = [&](int64_t first, int64_t len) {
    const int64_t nt = (len + MR - 1) / MR;
    for (int64_t t = 0; t < nt; ++t) {
      const int64_t a = pl.dw ? t * MR : len * t / nt;
      const int64_t b = pl.dw ? std::min(len, a + MR) : len * (t + 1) / nt;
      lb.tiles.push_back({first + a, b - a});
    }
  };
  for (int64_t j = lo; j < hi; ++j) lb.jl.push_back(j);
  for (int64_t j = 0; j < R2; ++j)
    if (j < lo || j >= hi) lb.jl.push_back(j);
  if (pl.dw) {
    cut(0, R2);
    return;
  }
  cut(0, hi - lo);
  cut(hi - lo, R2 - (hi - lo));
}

// One strip: the tile of `real` positions at jl[tj] in every line of the
// item (in_base / out_base: the item's image).
// TA: the inputs' storage (16-bit: depthwise tiles that widen as they load,
// ConvTable::dw16; the pointers handed to them as float* point at it);
// TO: the result's storage (16-bit: the tiles round it, ConvTileArgs::out16).
template <class TA, class TO>
inline __attribute__((always_inline)) void run_line_strip(
    const ConvPlan& d, const ConvCall& call, LineBufs& lb, const Phase& ph, int64_t nl,
    const TA* in_base, TO* out_base, ConvTileArgs& args, int64_t tj, int64_t real) {
  const AxisMap& a2 = ph.ax[2];
  const int64_t MR = d.MR, T2 = a2.taps;
  const size_t per_line = lb.per_line;
  const float* const zp = call.zeros;
  const bool fused = d.K2 > 1;
  // The buffers' pointers as locals (kept in registers across the tile calls).
  const int32_t* const wtap = lb.wtap.data();
  const int32_t* const wtap_f = lb.wtap_f.data();
  const int64_t* const tapoff = lb.tapoff.data();
  const int64_t* const off01 = lb.off01.data();
  const int64_t* const ntap = lb.ntap.data();
  const int64_t* const n01 = lb.n01.data();
  const int64_t* const obase = lb.obase.data();
  const float** const ind = lb.ind.data();
  const float** const rows = lb.rows.data();
  float** const outp = lb.outp.data();
  float* const scratch = lb.scratch.data();
  const int64_t* jp = lb.jl.data() + tj;
  bool interior = true;
  for (int64_t m = 0; m < real && interior; ++m) interior = a2.interior[jp[m]] != 0;
  for (int64_t l = 0; l < nl; ++l) {
    const size_t L = static_cast<size_t>(l) * per_line;
    const int64_t T = ntap[l];
    const bool row_mode = interior && T > 0;
    const bool fuse_tile = fused && row_mode;
    args.ntaps = fuse_tile ? n01[l] : T;
    args.wtap = T == ph.taps ? nullptr : fuse_tile ? wtap_f + L : wtap + L;
    args.cred = fuse_tile ? d.cred * d.K2 : d.cred;
    for (int64_t m = 0; m < MR; ++m)
      outp[m] = m < real ? reinterpret_cast<float*>(out_base + obase[l] + a2.out_off[jp[m]])
                         : scratch;
    if (row_mode) {
      for (int64_t m = 0; m < MR; ++m)
        rows[m] = reinterpret_cast<const float*>(in_base + a2.in_off[jp[std::min(m, real - 1)] * T2]);
      args.rows = rows;
      args.tapoff = fuse_tile ? off01 + L : tapoff + L;
      args.a = nullptr;
    } else {
      const int64_t* o01 = off01 + L;
      for (int64_t m = 0; m < MR; ++m) {
        const float** a = ind + m;
        if (m >= real) {
          for (int64_t t = 0; t < T; ++t) a[t * MR] = zp;
          continue;
        }
        const int64_t* i2 = a2.in_off.data() + jp[m] * T2;
        int64_t t = 0;
        for (int64_t v = 0; v < n01[l]; ++v)
          for (int64_t t2 = 0; t2 < T2; ++t2, ++t)
            a[t * MR] =
                i2[t2] >= 0 ? reinterpret_cast<const float*>(in_base + o01[v] + i2[t2]) : zp;
      }
      args.rows = nullptr;
      args.a = ind;
    }
    if (d.dw) {
      args.w = call.wp + ph.tap_off * d.cols;
      args.bias = call.biasp;
      args.ncols = d.cols;
      d.fn(&args);
      continue;
    }
    const ConvTileFn fn = real < MR ? d.partial[real] : d.fn;
    for (int64_t q = 0; q < d.NB; ++q) {
      args.w = call.wp + q * d.block_floats + ph.tap_off * d.cred * d.NR;
      args.bias = call.biasp + q * d.NR;
      args.col_off = q * d.NR;
      args.ncols = std::min(d.NR, d.cols - q * d.NR);
      fn(&args);
    }
  }
}

template <class TA, class TO>
void run_lines(const ConvPlan& pl, const ConvCall& call) {
  LineBufs lb(pl);
  const std::vector<LineItem>& items = pl.line_items;
#pragma omp for schedule(dynamic, 1) nowait
  for (size_t it = 0; it < items.size(); ++it) {
    const LineItem& item = items[it];
    const Phase& ph = pl.phases[static_cast<size_t>(item.phase)];
    const TA* const in_base = static_cast<const TA*>(call.in) + item.n * pl.in_img;
    TO* const out_base = static_cast<TO*>(call.out) + item.n * pl.out_img;
    list_line_taps(ph, item, lb);
    ConvTileArgs args;
    args.stream = pl.stream;
    args.prefetch = pl.prefetch;
    args.prefetch_run = pl.prefetch_run;
    args.prefetch_out = prefetchw_supported() ? pl.prefetch_out : 0;  // (the plan: any CPU's)
    args.out16 = pl.out_bytes == 2 ? pl.out16 : 0;
    args.out = lb.outp.data();
    cut_line_tiles(pl, ph.ax[2], lb);
    for (const auto& [tj, real] : lb.tiles)
      run_line_strip(pl, call, lb, ph, item.nl, in_base, out_base, args, tj, real);
  }
}

// Per-thread buffers of the row-block tiles (sizes: ConvPlan::row_bufs).
template <class TA, class TO>
struct RowBufs {
  std::vector<const TA*> ind;  // [tile][tap][MR]
  std::vector<TO*> outp;          // [tile][MR]
  std::vector<float> scratch;     // dummy rows' output
  // Per tile (GEMM): the taps kept and their number.
  std::vector<int32_t> tile_wtap;
  std::vector<int64_t> tile_ntaps;
  std::vector<char> tile_pad;  // tile_wtap used
  std::vector<char> tile_fused;
  std::vector<int> tile_real;  // leading rows that are not dummies
  // Row mode tiles: their rows' base pointers (tap 0's input).
  std::vector<char> tile_rowmode;
  std::vector<const TA*> row_base;
  // Windows of a lazy axis 2 (one row block's rows).
  std::vector<int64_t> win_in, win_out;
  std::vector<char> win_int;
  AlignedBuf<char> stage;

  explicit RowBufs(const RowBufSizes& s)
      : ind(static_cast<size_t>(s.ind)),
        outp(static_cast<size_t>(s.outp)),
        scratch(static_cast<size_t>(s.scratch)),
        tile_wtap(static_cast<size_t>(s.tile_wtap)),
        tile_ntaps(static_cast<size_t>(s.tiles)),
        tile_pad(static_cast<size_t>(s.tiles)),
        tile_fused(static_cast<size_t>(s.tiles)),
        tile_real(static_cast<size_t>(s.tiles)),
        tile_rowmode(static_cast<size_t>(s.tiles)),
        row_base(static_cast<size_t>(s.outp)),
        win_in(static_cast<size_t>(s.win_in)),
        win_out(static_cast<size_t>(s.win)),
        win_int(static_cast<size_t>(s.win)),
        stage(aligned_buffer<char>(s.stage)) {}
};

// The row block being built (build_rows): rows [r0, prows) of its phase
// (a lazy axis 2: of its line's window), as locals that the per-tile loops
// keep in registers (they are a large part of the time when the reduction
// per tap is short).
template <class TA, class TO>
struct BlockRows {
  const TA* in_base;
  TO* out_base;
  const TA* zp;        // zero vector
  const TA** indp;  // RowBufs::ind
  TO** outpp;          // RowBufs::outp
  TO* scr;             // RowBufs::scratch
  int64_t mr, T0, T1, T2, Tp, R1, R2, r0, prows;
  const int64_t *in0, *in1, *in2, *oo0, *oo1, *oo2;
  const char *int0, *int1, *int2;
  const int64_t* perm;  // the phase's row order, or null
};

// The next row of a phase: (c0, c1, c2) stepped with carries.
inline __attribute__((always_inline)) void next_row(int64_t R1, int64_t R2, int64_t& c0,
                                                    int64_t& c1, int64_t& c2) {
  if (++c2 == R2) {
    c2 = 0;
    if (++c1 == R1) {
      c1 = 0;
      ++c0;
    }
  }
}

// Row-mode tiles from `tile` on while each lies whole inside the current
// line (axis 2) and every row of it is interior on every axis (the common
// case): one base per line, no carries, each tile's rows known real.
// Returns the tiles built; (j0, j1, j2) stepped past them. Not inlined: in
// build_rows' loop its locals would be spilled.
template <class TA, class TO>
__attribute__((noinline)) int64_t row_mode_run(const BlockRows<TA, TO>& b, RowBufs<TA, TO>& bufs,
                                               int64_t tile, int64_t ntiles, bool fuse,
                                               int64_t& j0, int64_t& j1, int64_t& j2) {
  const int64_t mr = b.mr, T2 = b.T2, R1 = b.R1, R2 = b.R2;
  if (!b.int0[j0] || !b.int1[j1]) return 0;
  // whole tiles only: rows [r0 + t*mr, r0 + (t+1)*mr) inside the block
  const int64_t whole = std::min(ntiles, (b.prows - b.r0) / mr);
  int64_t k = 0;
  while (tile + k < whole && j2 + (k + 1) * mr <= R2) {
    bool in = true;
    for (int64_t m = 0; m < mr; ++m) in &= b.int2[j2 + k * mr + m] != 0;
    if (!in) break;
    ++k;
  }
  if (k == 0) return 0;
  const TA* const ib = b.in_base + b.in0[j0 * b.T0] + b.in1[j1 * b.T1];
  TO* const ob = b.out_base + b.oo0[j0] + b.oo1[j1];
  const TA** const rb = bufs.row_base.data() + tile * mr;
  TO** const op = b.outpp + tile * mr;
  const int64_t* const i2 = b.in2 + j2 * T2;
  const int64_t* const o2 = b.oo2 + j2;
  for (int64_t r = 0; r < k * mr; ++r) {
    rb[r] = ib + i2[r * T2];
    op[r] = ob + o2[r];
  }
  for (int64_t t = tile; t < tile + k; ++t) {
    bufs.tile_rowmode[t] = 1;
    bufs.tile_fused[t] = fuse;  // every axis-2 tap is inside
    bufs.tile_pad[t] = 0;
    bufs.tile_real[t] = static_cast<int>(mr);
  }
  j2 += k * mr - 1;  // the run's last row (inside the line), then one step on
  next_row(R1, R2, j0, j1, j2);
  return k;
}

// Row mode when every real row of the tile is interior on every axis: one
// base pointer per row, no indirection to build. False (and nothing
// stepped) when some row is not.
template <class TA, class TO>
inline __attribute__((always_inline)) bool row_mode_tile(const BlockRows<TA, TO>& b, RowBufs<TA, TO>& bufs,
                                                         int64_t tile, bool fuse, int64_t& j0,
                                                         int64_t& j1, int64_t& j2) {
  const int64_t mr = b.mr, r0 = b.r0, prows = b.prows, R1 = b.R1, R2 = b.R2;
  bool all = true;
  int64_t k0 = j0, k1 = j1, k2 = j2;
  for (int64_t m = 0; m < mr && all; ++m) {
    if (r0 + tile * mr + m >= prows) break;
    all = b.int0[k0] && b.int1[k1] && b.int2[k2];
    next_row(R1, R2, k0, k1, k2);
  }
  if (!all) return false;
  const TA** rb = bufs.row_base.data() + tile * mr;
  for (int64_t m = 0; m < mr; ++m) {
    if (r0 + tile * mr + m >= prows) {  // dummy row: row 0's inputs, scratch out
      rb[m] = rb[0];
      b.outpp[tile * mr + m] = b.scr;
      continue;
    }
    rb[m] = b.in_base + b.in0[j0 * b.T0] + b.in1[j1 * b.T1] + b.in2[j2 * b.T2];
    b.outpp[tile * mr + m] = b.out_base + b.oo0[j0] + b.oo1[j1] + b.oo2[j2];
    next_row(R1, R2, j0, j1, j2);
  }
  bufs.tile_rowmode[tile] = 1;
  bufs.tile_fused[tile] = fuse;  // every axis-2 tap is inside
  bufs.tile_pad[tile] = 0;
  return true;
}

// Fused taps (backward-data) when every real row has all its axis-2 taps
// inside: K0 x K1 pointers per row. False (nothing built) when some has not.
template <class TA, class TO>
inline __attribute__((always_inline)) bool fused_tile(const BlockRows<TA, TO>& b, RowBufs<TA, TO>& bufs,
                                                      int64_t tile, int64_t& j0, int64_t& j1,
                                                      int64_t& j2) {
  const int64_t mr = b.mr, r0 = b.r0, prows = b.prows, R1 = b.R1, R2 = b.R2;
  const int64_t T0 = b.T0, T1 = b.T1, T2 = b.T2;
  const TA* const zp = b.zp;
  bool ok = true;
  for (int64_t m = 0, jj = j2; m < mr && ok; ++m, jj = jj + 1 == R2 ? 0 : jj + 1) {
    if (r0 + tile * mr + m >= prows) break;
    for (int64_t t2 = 0; t2 < T2 && ok; ++t2) ok = b.in2[jj * T2 + t2] >= 0;
  }
  bufs.tile_fused[tile] = ok;
  if (!ok) return false;
  bool pad = false;  // some row of the tile reads padding
  const int64_t Tf = T0 * T1;
  for (int64_t m = 0; m < mr; ++m) {
    const int64_t r = r0 + tile * mr + m;
    const TA** a = b.indp + tile * b.Tp * mr + m;
    if (r >= prows) {
      b.outpp[tile * mr + m] = b.scr;
      for (int64_t t = 0; t < Tf; ++t) a[t * mr] = zp;
      pad = true;
      continue;
    }
    b.outpp[tile * mr + m] = b.out_base + b.oo0[j0] + b.oo1[j1] + b.oo2[j2];
    const int64_t* i0 = b.in0 + j0 * T0;
    const int64_t* i1 = b.in1 + j1 * T1;
    const int64_t o2 = b.in2[j2 * T2];
    for (int64_t t0 = 0; t0 < T0; ++t0)
      for (int64_t t1 = 0; t1 < T1; ++t1, a += mr) {
        const int64_t o = i0[t0] + i1[t1] + o2;
        pad |= o < 0;
        *a = o >= 0 ? b.in_base + o : zp;
      }
    next_row(R1, R2, j0, j1, j2);
  }
  bufs.tile_pad[tile] = pad;
  return true;
}

// One pointer per (tap, row): the input pixel or the zero vector (padding,
// dummy rows); rows in the phase's row order when it has one.
template <class TA, class TO>
inline __attribute__((always_inline)) void pointer_tile(const BlockRows<TA, TO>& b, RowBufs<TA, TO>& bufs,
                                                        int64_t tile, int64_t& j0, int64_t& j1,
                                                        int64_t& j2) {
  const int64_t mr = b.mr, r0 = b.r0, prows = b.prows, R1 = b.R1, R2 = b.R2, Tp = b.Tp;
  const int64_t T0 = b.T0, T1 = b.T1, T2 = b.T2;
  const TA* const zp = b.zp;
  const int64_t* const perm = b.perm;
  bool pad = false;  // some row of the tile reads padding
  for (int64_t m = 0; m < mr; ++m) {
    const int64_t r = r0 + tile * mr + m;
    const TA** a = b.indp + tile * Tp * mr + m;
    if (perm && r < prows && perm[r] >= 0) {
      j2 = perm[r] % R2;
      j1 = (perm[r] / R2) % R1;
      j0 = perm[r] / (R2 * R1);
    }
    if (r >= prows || (perm && perm[r] < 0)) {  // dummy row: zeros in, scratch out
      b.outpp[tile * mr + m] = b.scr;
      for (int64_t t = 0; t < Tp; ++t) a[t * mr] = zp;
      pad = true;
      continue;
    }
    b.outpp[tile * mr + m] = b.out_base + b.oo0[j0] + b.oo1[j1] + b.oo2[j2];
    const int64_t* i0 = b.in0 + j0 * T0;
    const int64_t* i1 = b.in1 + j1 * T1;
    const int64_t* i2 = b.in2 + j2 * T2;
    for (int64_t t0 = 0; t0 < T0; ++t0)
      for (int64_t t1 = 0; t1 < T1; ++t1) {
        const int64_t o01 = i0[t0] + i1[t1];
        for (int64_t t2 = 0; t2 < T2; ++t2, a += mr) {
          const int64_t o = o01 + i2[t2];
          pad |= o < 0;
          *a = o >= 0 ? b.in_base + o : zp;
        }
      }
    next_row(R1, R2, j0, j1, j2);
  }
  bufs.tile_pad[tile] = pad;
}

// After the pointers: each tile's real rows (dummy rows, with the scratch
// output, end a tile: the GEMM tiles skip them), and the taps that hit
// padding for every row of a tile (image borders) dropped: their FMAs would
// only add zeros. Tiles without padding keep every tap (wtap = null).
template <class TA, class TO>
void finish_tiles(const ConvPlan& pl, const BlockRows<TA, TO>& b, RowBufs<TA, TO>& bufs, int64_t ntiles) {
  const int64_t mr = b.mr, Tp = b.Tp;
  const TA* const zp = b.zp;
  for (int64_t tile = 0; tile < ntiles; ++tile) {
    if (bufs.tile_real[tile] >= 0) continue;  // (known: row_mode_run)
    int real = 0;
    while (real < mr && b.outpp[tile * mr + real] != b.scr) ++real;
    bufs.tile_real[tile] = real;
  }
  for (int64_t tile = 0; tile < ntiles; ++tile) {
    const int64_t Tt = pl.fuse && bufs.tile_fused[tile] ? Tp / pl.K2 : Tp;  // taps of the tile
    if (!bufs.tile_pad[tile] || pl.whole_pixel || bufs.tile_rowmode[tile]) {
      bufs.tile_ntaps[tile] = Tt;
      bufs.tile_pad[tile] = 0;
      continue;
    }
    const TA** a = b.indp + tile * Tp * mr;
    int32_t* wt = bufs.tile_wtap.data() + tile * Tp;
    int64_t kept = 0;
    for (int64_t t = 0; t < Tt; ++t) {
      bool any = false;
      for (int64_t m = 0; m < mr && !any; ++m) any = a[t * mr + m] != zp;
      if (!any) continue;
      if (kept != t)
        for (int64_t m = 0; m < mr; ++m) a[kept * mr + m] = a[t * mr + m];
      wt[kept++] = static_cast<int32_t>(t);
    }
    bufs.tile_ntaps[tile] = kept;
  }
}

// Indirection for row block blk of phase ph, image n: ind[tile][tap][MR]
// and outp[tile][MR], pointing at channel 0 (the kernels add the group's
// channel offsets). Returns the number of tiles.
template <class TA, class TO>
int64_t build_rows(const ConvPlan& pl, const ConvCall& call, RowBufs<TA, TO>& bufs, int64_t n,
                   const Phase& ph, int64_t blk) {
  const AxisMap &a0 = ph.ax[0], &a1 = ph.ax[1], &a2 = ph.ax[2];
  const int64_t TB = pl.TB, MR = pl.MR;
  BlockRows<TA, TO> b;
  b.Tp = ph.taps;
  b.r0 = blk * TB * MR;
  b.prows = ph.rows;
  // Lazy axis 2: the block is rows [first, first + len) of one line,
  // built into this thread's windows and walked as a phase of len rows.
  int64_t line = -1, first = 0;
  if (a2.lazy) {
    const int64_t per_line = (a2.rows + TB * MR - 1) / (TB * MR);
    line = blk / per_line;
    first = blk % per_line * TB * MR;
    b.prows = std::min(TB * MR, a2.rows - first);
    b.r0 = 0;
    fill_window(a2, first, b.prows, bufs.win_in.data(), bufs.win_out.data(), bufs.win_int.data());
  }
  const int64_t ntiles = (std::min(b.prows - b.r0, TB * MR) + MR - 1) / MR;
  b.in_base = static_cast<const TA*>(call.in) + n * pl.in_pix * pl.in_c;
  b.out_base = static_cast<TO*>(call.out) + n * pl.out_pix * pl.out_c;
  b.zp = reinterpret_cast<const TA*>(call.zeros);
  b.indp = bufs.ind.data();
  b.outpp = bufs.outp.data();
  b.scr = reinterpret_cast<TO*>(bufs.scratch.data());
  b.mr = MR;
  b.T0 = a0.taps;
  b.T1 = a1.taps;
  b.T2 = a2.taps;
  const bool lz = line >= 0;
  b.R1 = a1.rows;
  b.R2 = lz ? b.prows : a2.rows;
  b.in0 = a0.in_off.data();
  b.in1 = a1.in_off.data();
  b.in2 = lz ? bufs.win_in.data() : a2.in_off.data();
  b.oo0 = a0.out_off.data();
  b.oo1 = a1.out_off.data();
  b.oo2 = lz ? bufs.win_out.data() : a2.out_off.data();
  b.int0 = a0.interior.data();
  b.int1 = a1.interior.data();
  b.int2 = lz ? bufs.win_int.data() : a2.interior.data();
  b.perm = ph.perm.empty() ? nullptr : ph.perm.data();
  // Row r0's coordinates in the phase, then stepped with carries (or
  // looked up in the phase's row order).
  const int64_t R1 = b.R1, R2 = b.R2;
  int64_t j2 = b.r0 % R2, j1 = (b.r0 / R2) % R1, j0 = b.r0 / (R2 * R1);
  if (lz) j2 = 0, j1 = line % R1, j0 = line / R1;
  const bool rows_ok = !ph.tapoff.empty(), fuse = pl.fuse;
  for (int64_t tile = 0; tile < ntiles; ++tile) {
    if (rows_ok && !b.perm) {
      const int64_t k = row_mode_run(b, bufs, tile, ntiles, fuse, j0, j1, j2);
      if (k > 0) {
        tile += k - 1;
        continue;
      }
    }
    bufs.tile_rowmode[tile] = 0;
    bufs.tile_real[tile] = -1;  // (finish_tiles finds it)
    if (rows_ok && row_mode_tile(b, bufs, tile, fuse, j0, j1, j2)) continue;
    if (fuse && fused_tile(b, bufs, tile, j0, j1, j2)) continue;
    pointer_tile(b, bufs, tile, j0, j1, j2);
  }
  finish_tiles(pl, b, bufs, ntiles);
  return ntiles;
}

// The tiles built by build_rows, for column block q = g*NB + nb, whose
// packed weights ([chunk][tap][c][NR]) start at wblock, chunk by chunk.
template <class TA, class TO>
void run_tiles(const ConvPlan& pl, const ConvCall& call, const RowBufs<TA, TO>& bufs, const Phase& ph,
               int64_t ntiles, int64_t q, const float* wblock, int64_t nq = 1,
               bool first_pass = true) {
  const int MR = pl.MR;
  const int64_t NR = pl.NR, cols = pl.cols, cred = pl.cred, CB = pl.CB, K2 = pl.K2;
  const int64_t g = q / pl.NB, nb = q % pl.NB;
  const bool dw = pl.dw, fuse = pl.fuse;
  const ConvTileFn fn = pl.fn;
  const ConvTileFn* const partial = pl.partial;
  // The buffers' pointers as locals (kept in registers across the tile calls).
  // (16-bit activations: the kernels read a and rows as pointers to TA.)
  const float* const* const ind = reinterpret_cast<const float* const*>(bufs.ind.data());
  float* const* const outp = reinterpret_cast<float* const*>(bufs.outp.data());
  const int32_t* const tile_wtap = bufs.tile_wtap.data();
  const int64_t* const tile_ntaps = bufs.tile_ntaps.data();
  const char* const tile_pad = bufs.tile_pad.data();
  const char* const tile_fused = bufs.tile_fused.data();
  const int* const tile_real = bufs.tile_real.data();
  const char* const tile_rowmode = bufs.tile_rowmode.data();
  const float* const* const row_base = reinterpret_cast<const float* const*>(bufs.row_base.data());
  ConvTileArgs args;
  args.stream = pl.stream;
  args.out16 = pl.out_bytes == 2 ? pl.out16 : 0;
  args.prefetch = first_pass || !pl.prefetch_first ? pl.prefetch : 0;
  args.prefetch_run = pl.prefetch_run;
  args.bias = call.biasp + q * NR;
  args.col_off = g * cols + nb * NR;
  args.ncols = nq > 1 ? cols - nb * NR : std::min<int64_t>(NR, cols - nb * NR);
  args.nq = nq;
  args.wq = pl.block_floats;
  args.stage = bufs.stage.get();
  args.stage_bytes = nq > 1 ? kVnniStageBytes : 0;
  if (pl.vg) {
    ConvGroupedArgs ga{nullptr, call.wp + ph.tap_off * cred * pl.ncp, call.biasp, nullptr,
                       pl.vg_idx.data(), pl.vg_base.data(), ph.taps, cred, pl.out_c, pl.ncp,
                       pl.in_c, args.out16};
    for (int64_t tile = 0; tile < ntiles; ++tile) {
      ga.a = ind + tile * ph.taps * MR;
      ga.out = outp + tile * MR;
      pl.grouped(&ga);
    }
    return;
  }
  // One pass (bias only) when there is nothing to reduce.
  const int64_t passes = dw || ph.taps == 0 || cred == 0 ? 1 : pl.nchunks;
  for (int64_t cb = 0; cb < passes; ++cb) {
    const int64_t c0 = cb * CB, cn = dw ? cred : std::min(CB, cred - c0);
    args.w = dw       ? call.wp + ph.tap_off * cols
             : pl.dot ? wblock + ph.tap_off * pl.credp * NR
                      : wblock + packed_offset(pl, ph.tap_off, c0);
    args.cred = cn;
    args.a_off = g * cred + c0;
    args.accumulate = cb > 0;
    for (int64_t tile = 0; tile < ntiles; ++tile) {
      args.a = ind + tile * ph.taps * MR;
      args.out = outp + tile * MR;
      args.wtap = tile_pad[tile] ? tile_wtap + tile * ph.taps : nullptr;
      args.ntaps = tile_ntaps[tile];
      const bool fused = fuse && tile_fused[tile];
      args.cred = fused ? cn * K2 : cn;
      if (pl.fused_copy) args.w = wblock + (fused ? pl.fused_copy : 0) + packed_offset(pl, ph.tap_off, c0);
      args.rows = tile_rowmode[tile] ? row_base + tile * MR : nullptr;
      args.tapoff = fused ? ph.tapoff_fused.data() : ph.tapoff.data();
      // (partial tiles: the first `real` rows; the others are dummies)
      const int real = partial && tile_real[tile] < MR ? tile_real[tile] : MR;
      if constexpr (std::is_same_v<TA, uint16_t>) {
        if (pl.stage16) stage_tile16(pl, &args, real, bufs.stage.get());
      }
      (real < MR ? partial[real] : fn)(&args);
    }
  }
}

// The pointer table at the head of a stage16 buffer, whole 64-byte lines.
inline int64_t stage16_ptr_bytes(int64_t taps, int MR) {
  return (taps * MR * static_cast<int64_t>(sizeof(float*)) + 63) / 64 * 64;
}

// Plan stage16: the rows of args's tile (the first `rows` of MR, every tap,
// args->cred 16-bit elements from a_off) widened into stage, a pointer per
// row and tap first, then the rows; args then points the f32 tile at them.
inline void stage_tile16(const ConvPlan& pl, ConvTileArgs* args, int rows, char* stage) {
  const int MR = pl.MR;
  const int64_t T = args->ntaps, n = args->cred;
  const float** sa = reinterpret_cast<const float**>(stage);
  float* const data = reinterpret_cast<float*>(stage + stage16_ptr_bytes(T, MR));
  const auto* const* a = reinterpret_cast<const uint16_t* const*>(args->a);
  const auto* const* r = reinterpret_cast<const uint16_t* const*>(args->rows);
  for (int64_t t = 0; t < T; ++t)
    for (int m = 0; m < MR; ++m) {
      float* const d = data + (t * MR + m) * n;
      sa[t * MR + m] = d;
      if (m >= rows) continue;  // (dummy rows of a partial tile: not read)
      const uint16_t* src = (r ? r[m] + args->tapoff[t] : a[t * MR + m]) + args->a_off;
      pl.widen16(src, d, n);
    }
  args->a = sa;
  args->rows = nullptr;
  args->a_off = 0;
}

// A phase with no tap (K < s: ResNet's 1x1 s2, 3 of its 4 phases; 3D, 7 of
// 8) only writes the bias (zeros without one): block blk's rows get it
// copied in, the columns of blocks [q_lo, q_hi), with no indirection and no
// tile call. The GEMM routes' column layout (ConvTileArgs::col_off); not
// for a lazy axis (its rows live in per-thread windows), and not where the
// plan streams its outputs: there the tiles' whole-line streaming stores
// beat plain copies (SPR VM, ResNet 1x1 s2 forward f32, 26 MB out: copies
// 0.7-0.8x, 16-byte streaming copies 0.7x; the 3D 1x1 s2 layer in cache,
// f32 / bf16 / f16: 1.15-1.6x; ResNet f16, not streamed, 1.14-1.28x).
// bias_rows' row on the stack: columns, and column blocks (groups of few
// columns each make a block of their own).
constexpr int64_t kMaxBiasCols = 512, kMaxBiasSegs = 64;

bool bias_only(const ConvPlan& pl, const Phase& ph) {
  return ph.taps == 0 && !ph.ax[2].lazy && !pl.whole_pixel && !pl.dot && !pl.stream &&
         pl.NR <= kMaxBiasCols;
}

template <class TO>
void bias_rows(const ConvPlan& pl, const ConvCall& call, int64_t n, const Phase& ph, int64_t blk,
               int64_t q_lo, int64_t q_hi) {
  const int64_t NR = pl.NR, cols = pl.cols;
  const int64_t rows_per_block = pl.TB * pl.MR, r0 = blk * rows_per_block;
  const int64_t r1 = std::min(ph.rows, r0 + rows_per_block);
  const AxisMap &a0 = ph.ax[0], &a1 = ph.ax[1], &a2 = ph.ax[2];
  const int64_t R1 = a1.rows, R2 = a2.rows;
  const int64_t* const perm = ph.perm.empty() ? nullptr : ph.perm.data();
  TO* const base = static_cast<TO*>(call.out) + n * pl.out_pix * pl.out_c;
  // The columns in batches of column blocks that fit a row on the stack
  // (values in TO; per block its column offset and count), each batch
  // copied into every row of the block.
  TO vals[kMaxBiasCols];
  int64_t off[kMaxBiasSegs], cnt[kMaxBiasSegs];
  for (int64_t q = q_lo; q < q_hi;) {
    int64_t nseg = 0, nv = 0;
    for (; q < q_hi && nseg < kMaxBiasSegs; ++q) {
      const int64_t g = q / pl.NB, nb = q % pl.NB, nc = std::min<int64_t>(NR, cols - nb * NR);
      if (nc <= 0) continue;
      if (nv + nc > kMaxBiasCols) break;  // (NR <= kMaxBiasCols: a block always fits alone)
      off[nseg] = g * cols + nb * NR, cnt[nseg++] = nc;
      for (int64_t j = 0; j < nc; ++j) {
        const float v = call.biasp[q * NR + j];
        if constexpr (std::is_same_v<TO, float>) vals[nv + j] = v;
        else vals[nv + j] = pl.out16 == 2 ? to_f16(v).bits : to_bf16(v).bits;
      }
      nv += nc;
    }
    int64_t j2 = r0 % R2, j1 = (r0 / R2) % R1, j0 = r0 / (R2 * R1);
    for (int64_t r = r0; r < r1; ++r) {
      if (perm) {
        if (perm[r] < 0) continue;  // a dummy row
        j2 = perm[r] % R2, j1 = (perm[r] / R2) % R1, j0 = perm[r] / (R2 * R1);
      }
      TO* const row = base + a0.out_off[j0] + a1.out_off[j1] + a2.out_off[j2];
      for (int64_t sg = 0, v = 0; sg < nseg; v += cnt[sg++])
        std::memcpy(row + off[sg], vals + v, sizeof(TO) * static_cast<size_t>(cnt[sg]));
      if (!perm) next_row(R1, R2, j0, j1, j2);
    }
  }
}

// By columns: each item one column block (lazy: packed by the item into
// its thread's buffer), sweeping its part of every row block, all chunks
// per row block (backward-data: the indirection of its many taps is built
// once per row block; forward: one chunk).
template <class TA, class TO>
void run_by_columns(const ConvPlan& pl, const ConvCall& call, RowBufs<TA, TO>& bufs) {
  const int64_t rsplit = pl.rsplit, NB = pl.NB, all_blocks = pl.all_blocks;
  std::vector<float> stage;  // 16-bit weights: a channel's widened run
#pragma omp for schedule(dynamic, 1) nowait
  for (int64_t item = 0; item < pl.ncolblocks * rsplit; ++item) {
    const int64_t it = item / rsplit, part = item % rsplit;
    float* const wblock = call.wp + (pl.lazy ? omp_get_thread_num() : it) * pl.block_floats;
    if (pl.lazy && pl.vnni) {
      pack_pairs(pl, static_cast<const uint16_t*>(call.W), it / NB, it % NB, 0,
                 (pl.cred + 1) / 2, wblock);
      if (pl.fused_copy) pack_pairs_fused(pl, static_cast<const uint16_t*>(call.W), it / NB, it % NB, wblock);
    }
    else if (pl.lazy)
      pack_whole(pl, call.W, it / NB, it % NB, wblock, pl.tr_lazy, stage);
    int64_t k = 0;
    const int64_t k0 = all_blocks * part / rsplit, k1 = all_blocks * (part + 1) / rsplit;
    for (int64_t n = 0; n < pl.NI; ++n)
      for (const Phase& ph : pl.phases)
        for (int64_t blk = 0; blk < ph.blocks; ++blk, ++k)
          if (k >= k0 && k < k1) {
            if (bias_only(pl, ph)) bias_rows<TO>(pl, call, n, ph, blk, it, it + 1);
            else run_tiles(pl, call, bufs, ph, build_rows(pl, call, bufs, n, ph, blk), it, wblock);
          }
  }
}

// By rows: items (image, row block in block_order, range of CG column
// blocks), the row block's indirection built once for its column blocks.
template <class TA, class TO>
void run_by_rows(const ConvPlan& pl, const ConvCall& call, RowBufs<TA, TO>& bufs) {
  const int64_t CG = pl.CG, blocks_per_img = pl.blocks_per_img, ncolblocks = pl.ncolblocks;
  const int64_t total = pl.NI * blocks_per_img * CG;
#pragma omp for schedule(dynamic, 1) nowait
  for (int64_t it = 0; it < total; ++it) {
    const int64_t cg = it % CG;
    const int64_t blk_all = (it / CG) % blocks_per_img, n = it / CG / blocks_per_img;
    const auto [pi, blk] = pl.block_order[static_cast<size_t>(blk_all)];
    const Phase& ph = pl.phases[static_cast<size_t>(pi)];
    const int64_t q_lo = ncolblocks * cg / CG, q_hi = ncolblocks * (cg + 1) / CG;
    if (bias_only(pl, ph)) {
      bias_rows<TO>(pl, call, n, ph, blk, q_lo, q_hi);
      continue;
    }
    const int64_t ntiles = build_rows(pl, call, bufs, n, ph, blk);
    for (int64_t q = q_lo; q < q_hi;) {
      // VNNI tiles: the range's blocks of one group in one call
      const int64_t nq = pl.vnni ? std::min(q_hi, (q / pl.NB + 1) * pl.NB) - q : 1;
      // (first pass over the rows: the range's first block, or a group's)
      run_tiles(pl, call, bufs, ph, ntiles, q,
                pl.whole_pixel ? nullptr : call.wp + q * pl.block_floats, nq,
                q == q_lo || q % pl.NB == 0);
      q += nq;
    }
  }
}

// Executes the plan: the weights packed inside the parallel region (up
// front, or by each by-columns item: lazy), then the tiles by the plan's
// schedule. False: no kernel for this ISA / shape (the reference runs).
template <class TA, class TO>
void run_rows_or_columns(const ConvPlan& pl, const ConvCall& call) {
  RowBufs<TA, TO> bufs(pl.row_bufs);
  if (pl.schedule == Schedule::Columns) run_by_columns(pl, call, bufs);
  else run_by_rows(pl, call, bufs);
}

// Plan merge: the merged problem's block-diagonal weights, dense IOX, from
// the caller's W (the original problem's, at pl.merge_* strides), in W's
// element type (16 bits where the packing widens them: w16).
// Super-group g' holds groups g'f .. g'f + f-1; input channel ic of group g
// feeds columns (g mod f) x OCg .. + OCg of its super-group, zeros elsewhere.
template <class E>
void merged_weights(const ConvPlan& pl, const E* W, E* out) {
  const ConvProblem& q = pl.p;
  const int64_t f = pl.merge, ICg = q.ICg / f, OCg = q.OCg / f, T = q.taps();
  const int64_t row = q.OCg * T;  // one input channel's merged run
  const int64_t* const toff = pl.merge_tap_off.data();
  const int64_t IC = q.IC();
#pragma omp parallel for num_threads(pl.nthreads) schedule(static) if (IC * row >= (1 << 16))
  for (int64_t ic = 0; ic < IC; ++ic) {
    E* const o = out + ic * row;
    E* const blk = o + (ic / ICg) % f * OCg * T;
    std::fill(o, blk, E{});
    std::fill(blk + OCg * T, o + row, E{});
    const E* const w = W + ic * pl.merge_si;
    if (pl.merge_dense) {
      std::copy(w, w + OCg * T, blk);
      continue;
    }
    for (int64_t oc = 0; oc < OCg; ++oc)
      for (int64_t t = 0; t < T; ++t) blk[oc * T + t] = w[oc * pl.merge_so + toff[t]];
  }
}

bool run_conv(const ConvPlan& pl, const void* in, const void* W, const float* bias,
              void* out) {
  AlignedBuf<float> wmerged;
  if (pl.merge > 1 && pl.route != Route::Reference && pl.route != Route::Nothing) {
    const int64_t elems = pl.p.IC() * pl.p.OCg * pl.p.taps();
    wmerged = aligned_buffer<float>(elems, 16);  // (16-bit weights: half of it used)
    if (pl.w16)  // (the pairs tables never merge: merge_cols 0)
      merged_weights(pl, static_cast<const uint16_t*>(W), reinterpret_cast<uint16_t*>(wmerged.get()));
    else
      merged_weights(pl, static_cast<const float*>(W), wmerged.get());
    W = wmerged.get();
  }
  switch (pl.route) {
    case Route::Reference:
      return false;
    case Route::Nothing:
      return true;
    case Route::Patch: {
      const auto* w = static_cast<const float*>(W);
      const bool in16 = pl.in_bytes == 2, out16 = pl.out_bytes == 2;
      if (in16 && out16)
        run_patch(pl, static_cast<const uint16_t*>(in), w, bias, static_cast<uint16_t*>(out));
      else if (out16)
        run_patch(pl, static_cast<const float*>(in), w, bias, static_cast<uint16_t*>(out));
      else
        run_patch(pl, static_cast<const float*>(in), w, bias, static_cast<float*>(out));
      return true;
    }
    default:
      break;
  }
  AlignedBuf<float> wp = aligned_buffer<float>(pl.wp_floats, 16);
  // Bias padded to whole column blocks (zeros without bias / for backward).
  std::vector<float> biasp(static_cast<size_t>(pl.bias_floats), 0.f);
  if (pl.fwd && bias) {
    for (int64_t g = 0; g < pl.G; ++g)
      for (int64_t j = 0; j < pl.cols; ++j) biasp[g * pl.NB * pl.NR + j] = bias[g * pl.cols + j];
  }
  // Zero vector for padding taps, read at channel offsets up to in_c.
  std::vector<float> zeros(static_cast<size_t>(pl.zeros_floats), 0.f);
  const ConvCall call{in, out, W, wp.get(), biasp.data(), zeros.data()};
  // One parallel region per call: packing, then (after the barrier) the tiles.
#pragma omp parallel num_threads(pl.nthreads)
  {
    if (!pl.lazy) pack_up_front(pl, call);
#if defined(__SSE2__)
    if (pl.stream_pack) _mm_sfence();  // the streamed packed weights, before the barrier
#endif
#pragma omp barrier
    if (pl.thread_begin) pl.thread_begin();
    if (pl.schedule == Schedule::Lines && pl.in_bytes == 2) run_lines<uint16_t, uint16_t>(pl, call);
    else if (pl.schedule == Schedule::Lines && pl.out_bytes == 2) run_lines<float, uint16_t>(pl, call);
    else if (pl.schedule == Schedule::Lines) run_lines<float, float>(pl, call);
    else if (pl.in_bytes == 2 && pl.out_bytes == 2) run_rows_or_columns<uint16_t, uint16_t>(pl, call);
    else if (pl.in_bytes == 2) run_rows_or_columns<uint16_t, float>(pl, call);
    else if (pl.out_bytes == 2) run_rows_or_columns<float, uint16_t>(pl, call);
    else run_rows_or_columns<float, float>(pl, call);
    if (pl.thread_end) pl.thread_end();
#if defined(__SSE2__)
    if (pl.stream) _mm_sfence();  // the streamed outputs, before the region's barrier
#endif
  }
  return true;
}

// Every input of build_conv_plan (the table stands for the ISA's and the
// microarchitecture's choices).
struct PlanKey {
  const ConvTable* tab;
  Isa isa;
  Pass pass;
  ConvProblem p;
  int64_t si, so;
  std::array<int64_t, kAxes> sk;
  int nthreads;
  int64_t one_chunk_bytes;
  bool merge_ok;
  bool operator==(const PlanKey& o) const {
    return tab == o.tab && isa == o.isa && pass == o.pass && si == o.si && so == o.so &&
           sk == o.sk && nthreads == o.nthreads && one_chunk_bytes == o.one_chunk_bytes &&
           merge_ok == o.merge_ok && p == o.p;
  }
};
PlanKey plan_key(const ConvTable* tab, Isa isa, Pass pass, const ConvProblem& p,
                 const WeightsView& wv, int nthreads, int64_t one_chunk_bytes, bool merge_ok) {
  return {tab, isa, pass, p, wv.si, wv.so, {wv.sk[0], wv.sk[1], wv.sk[2]}, nthreads,
          one_chunk_bytes, merge_ok};
}

// build_conv_plan's result, from the thread's recent plans (plan_memo.h).
// merge_ok: small groups may run as super-groups (merge_factor; the f32
// entry points below, which guard it with run_merged).
std::shared_ptr<const ConvPlan> plan_conv(const ConvTable* tab, Isa isa, Pass pass,
                                          const ConvProblem& p, const WeightsView& wv,
                                          int nthreads, int64_t one_chunk_bytes = 0,
                                          bool merge_ok = false) {
  thread_local PlanMemo<PlanKey, ConvPlan> memo;
  const PlanKey key = plan_key(tab, isa, pass, p, wv, nthreads, one_chunk_bytes, merge_ok);
  return memo.get(key, [&] {
    return build_conv_plan(tab, isa, pass, p, wv, nthreads, one_chunk_bytes, merge_ok);
  });
}

// Whether n floats hold a NaN or an infinity (all exponent bits set).
bool any_nonfinite(const float* x, int64_t n, int nthreads) {
  bool bad = false;
#pragma omp parallel for num_threads(nthreads) reduction(|| : bad) schedule(static) if (n >= (1 << 16))
  for (int64_t b = 0; b < n; b += 4096) {
    uint32_t hit = 0;
    const int64_t e = std::min(n, b + 4096);
    for (int64_t i = b; i < e; ++i) {
      uint32_t u;
      std::memcpy(&u, x + i, sizeof u);
      hit |= (u & 0x7f800000u) == 0x7f800000u;
    }
    bad = bad || hit != 0;
  }
  return bad;
}

// A merged plan (super-groups) multiplies each group's inputs by the other
// groups' zero weights, so a NaN or infinity in one group's input would
// reach the outputs of the groups merged with it, where torch's grouped
// convolution keeps it to its own group. Such calls run the plain groups:
// the smaller side is checked, the input before (all finite: the merged
// plan) or the result after the merged run (not all finite: rerun plain;
// finite inputs give finite 0 x x terms, so the merged sums are the plain
// ones, in the same order). The block-diagonal tile (diag2) never
// multiplies the zeros: no check.
bool run_merged(const ConvTable* tab, Isa isa, Pass pass, const ConvProblem& p, const void* in,
                WeightsView w, const float* bias, void* out, int nthreads) {
  const auto plan = plan_conv(tab, isa, pass, p, w, nthreads, 0, true);
  if (plan->merge == 1 || !plan->merge_reads_zeros) return run_conv(*plan, in, w.data, bias, out);
  const ConvPlan& pl = *plan;
  const int64_t in_n = pl.N * pl.in_pix * pl.in_c, out_n = pl.N * pl.out_pix * pl.out_c;
  auto plain = [&] { return run_conv(*plan_conv(tab, isa, pass, p, w, nthreads), in, w.data, bias, out); };
  if (in_n <= out_n) {
    if (any_nonfinite(static_cast<const float*>(in), in_n, nthreads)) return plain();
    return run_conv(pl, in, w.data, bias, out);
  }
  if (!run_conv(pl, in, w.data, bias, out)) return false;
  return any_nonfinite(static_cast<const float*>(out), out_n, nthreads) ? plain() : true;
}

// The plans of the calls with 16-bit tensors (no non-finite check there):
// super-groups only where the tile never multiplies the zeros (diag2).
std::shared_ptr<const ConvPlan> plan_conv16(const ConvTable* tab, Isa isa, Pass pass,
                                            const ConvProblem& p, const WeightsView& wv,
                                            int nthreads, int64_t one_chunk_bytes = 0) {
  auto c = plan_conv(tab, isa, pass, p, wv, nthreads, one_chunk_bytes, true);
  if (c->merge > 1 && c->merge_reads_zeros) c = plan_conv(tab, isa, pass, p, wv, nthreads, one_chunk_bytes);
  return c;
}

}  // namespace

bool forward_f32(Isa isa, const ConvProblem& p, const float* src, WeightsView w,
                 const float* bias, float* dst, int nthreads) {
  return run_merged(table_for(isa), isa, Pass::Forward, p, src, w, bias, dst, nthreads);
}

bool backward_data_fuses_taps(const ConvProblem& p) {
  // (With 16 channels and at most 4 columns the dot-product tiles run.)
  return p.G == 1 && p.OCg <= 16 && p.d[2] == 1 && p.K[2] > 1 && !(p.ICg <= 4 && p.OCg >= 16);
}

double gemm_column_share(Isa isa, int64_t ncol) {
  const ConvTable* tab = table_for(isa);
  if (ncol <= 0 || !tab || tab->ngemm < 1) return 1.0;
  const int64_t nr = choose_gemm_tile(*tab, ncol).nr;
  return static_cast<double>(ncol) / static_cast<double>((ncol + nr - 1) / nr * nr);
}

bool backward_data_f32(Isa isa, const ConvProblem& p, const float* diff_dst, WeightsView w,
                       float* diff_src, int nthreads) {
  // A one-pixel src under a covering kernel (z -> 4x4): dot products (10x).
  if (dense_backward_data_f32(isa, p, diff_dst, w, diff_src, nthreads, true)) return true;
  return run_merged(table_for(isa), isa, Pass::BackwardData, p, diff_dst, w, nullptr, diff_src,
                    nthreads);
}

std::string describe_conv_f32(Isa isa, Pass pass, const ConvProblem& p, const WeightsView& w,
                              int nthreads) {
  return describe(*plan_conv(table_for(isa), isa, pass, p, w, nthreads, 0, true));
}

std::string describe_conv_f32(Isa isa, Pass pass, const ConvProblem& p, int nthreads) {
  return describe_conv_f32(isa, pass, p, dense_iox_strides(p), nthreads);
}

// --- bf16 on the pair tiles: the same driver over the AMX or AVX512_BF16
// table (in_bytes 2, VNNI) ---

const ConvTable* bf16_table_for(Isa isa) {
  if (isa == Isa::Avx512Amx) return conv_bf16_table_amx();
  if (isa == Isa::Avx512Bf16) return conv_bf16_table_avx512bf16();
  return nullptr;
}

// The tiles write 16-bit results (1 bf16, 2 f16), rounded once; the output
// prefetch, sized and measured for f32 rows, is dropped.
void set_out16(ConvPlan& c, int out16) {
  c.out_bytes = 2;
  c.out16 = out16;
  c.prefetch_out = 0;
}

// to_dst: the result goes to the caller's tensor (not a workspace read right
// after), where the table's streaming stores may write it.
ConvPlan plan_bf16_pairs(Isa isa, Pass pass, const ConvProblem& p, const WeightsView& wv,
                         int nthreads, bool to_dst = false) {
  const ConvTable* tab = bf16_table_for(isa);
  ConvPlan c = *plan_conv(tab, isa, pass, p, wv, nthreads);
  c.stream = false;
  if (c.route == Route::Gemm && c.nchunks == 1) {
    set_out16(c, 1);
    const double out_bytes = 2.0 * static_cast<double>(c.N) * c.out_pix * c.out_c;
    c.stream = to_dst && tab->stream16_bytes > 0 && c.NR == 32 && c.ncol >= 32 && !c.whole_pixel &&
               out_bytes >= tab->stream16_bytes;
  }
  return c;
}

// --- f32 kernels writing a 16-bit result (route convert16, direct) ---

// The input elements a GEMM plan's tiles broadcast (every row, tap, reduction
// channel, column block and group), and the input's size.
struct Reads {
  double bcasts, in;
};
Reads gemm_reads(const ConvPlan& c) {
  double bcasts = 0;
  for (const Phase& ph : c.phases) bcasts += static_cast<double>(ph.rows) * ph.taps;
  bcasts *= static_cast<double>(c.NI) * c.cred * c.NB * c.G;
  return {bcasts, static_cast<double>(c.N) * c.in_pix * c.in_c};
}

// Whether the GEMM tiles should read the 16-bit inputs themselves (each
// broadcast widened as loaded, heuristics A19) rather than an f32 copy made
// first: where the tiles broadcast at most half as many elements as the copy
// would widen, plus about 32K elements, the copy's fixed cost (its own pass
// and parallel region). That is where they read a fraction of the input (1x1
// stride-2 backward-data reads 1/8 of diff_dst) or the input is tiny. A
// broadcast costs one or two more instructions per multiply-add row, so the
// layers that broadcast each element many times (every column block, tap and
// phase) keep the copy: there the tiles ran 0.65-0.9x (SPR VM, f16).
bool gemm16_pays(const ConvPlan& c) {
  const Reads r = gemm_reads(c);
  return r.bcasts <= r.in / 2 + 32768;
}

// Whether GEMM tiles that do not read 16-bit inputs themselves (gemm16_pays)
// should take them through a per-tile stage (stage16, heuristics A21) rather
// than an f32 copy of the whole input: where the stage widens each input
// element at most 8 times (taps x column blocks x phases that read it) in
// runs of at least 32 (a widening call per row and tap). The k2 s2
// upsamplers and 1x1 s2 backward-data, whose copy is one more pass over a
// large input, ran 1.1-1.3x; layers that read each element 10-100 times
// 0.9-0.97x, and 3-17 channels a tap 0.5-0.8x (SPR VM, f16).
bool stage16_pays(const ConvPlan& c) {
  const Reads r = gemm_reads(c);
  return r.bcasts <= 8 * r.in && c.cred >= 32;
}

// The f32 plan with a 16-bit result (out16: 1 bf16, 2 f16) where its GEMM,
// depthwise or dot tiles round it themselves: one reduction chunk, any
// schedule, streaming stores from depthwise tiles only (dw_streams, to_dst:
// the result is the caller's tensor); else out_bytes stays 4. With in16 (the same
// kind), depthwise and dot tiles that read the 16-bit inputs themselves
// (ConvTable::dw16, dot16) where the table has them: in_bytes 2; else
// in_bytes stays 4. f32_out: a GEMM plan that needs several reduction
// chunks even so keeps them (the f32 plan's own budget) and its f32 result,
// and still packs 16-bit weights as it reads them (w16; heuristics A23).
ConvPlan build_f32_out16(Isa isa, Pass pass, const ConvProblem& p, const WeightsView& wv,
                         int nthreads, int out16, bool in16, Widen16Fn w16, bool f32_out,
                         bool to_dst) {
  const ConvTable* tab = table_for(isa);
  // One reduction chunk of up to 1 MiB (the VNNI tiles' budget, heuristics
  // A16) where 512 KiB chunks would take several; the f32 result and its
  // narrowing pass are the price where even that takes several.
  ConvPlan c = *plan_conv16(tab, isa, pass, p, wv, nthreads, 1 << 20);
  const bool wide = f32_out && c.route == Route::Gemm && c.nchunks > 1;
  if (wide) {
    c = *plan_conv16(tab, isa, pass, p, wv, nthreads);
    in16 = false;  // (the tiles that read 16-bit inputs are planned for one chunk)
  }
  // (the tile name's mark of a plan that reads the 16-bit input itself)
  const std::string in16_tag = out16 == 2 ? "_f16" : "_bf16";
  const bool rounds = c.route == Route::Gemm || c.route == Route::Depthwise ||
                      c.route == Route::Dot || c.route == Route::Grouped;
  // The patch route rounds its tile buffer (every chunk summed) as it scatters
  // it, and widens each tile's input rows (consecutive pixels: one run) into
  // a stage as it takes them, instead of a copy of the whole input
  // (heuristics A20).
  if (c.route == Route::Patch && tab->narrow16[out16]) {
    set_out16(c, out16);
    c.narrow16 = tab->narrow16[out16];
    c.patch.stream = patch_streams(c, 2);
    if (in16 && tab->widen16[out16]) {
      c.in_bytes = 2;
      c.widen16 = tab->widen16[out16];
      c.tile += in16_tag + "in";
    }
    return c;
  }
  if (rounds && (c.nchunks == 1 || wide)) {
    if (!wide) {
      set_out16(c, out16);
      // (only the depthwise tiles stream 16-bit results, and only into the
      // caller's tensor: a workspace is read right after)
      c.stream = to_dst && dw_streams(c, 2);
    }
    ConvTileFn reads16 = !in16                          ? nullptr
                         : c.route == Route::Depthwise ? tab->dw16[out16]
                         : c.route == Route::Dot       ? tab->dot16[out16][c.NR]
                                                       : nullptr;
    // Small groups: the kernel loads the 16-bit rows itself (heuristics A22).
    if (in16 && c.route == Route::Grouped && tab->grouped16[out16]) {
      c.in_bytes = 2;
      c.grouped = tab->grouped16[out16];
      c.tile += in16_tag + "in";
    }
    const ConvTileFn* partial16 = nullptr;
    if (in16 && c.route == Route::Gemm && gemm16_pays(c)) {
      for (int i = 0; i < tab->ngemm; ++i)
        if (tab->gemm[i].fn == c.fn && tab->gemm16[out16][i][0]) {
          reads16 = tab->gemm16[out16][i][0];
          partial16 = tab->gemm16[out16][i];
        }
    }
    if (reads16) {
      c.in_bytes = 2;
      c.fn = reads16;
      // (16-bit depthwise inputs: half the lines; the prefetch within noise)
      if (c.route == Route::Depthwise) c.prefetch = 0;
      if (partial16) c.partial = partial16;
      c.tile += in16_tag + "in";
    } else if (in16 && c.route == Route::Gemm && tab->widen16[out16] &&
               c.schedule != Schedule::Lines && stage16_pays(c)) {
      c.in_bytes = 2;
      c.stage16 = true;
      // (the tiles read the widened stage, in cache: nothing to prefetch)
      c.prefetch = 0;
      c.prefetch_run = c.prefetch_first = false;
      c.widen16 = tab->widen16[out16];
      const int64_t Tm = std::max<int64_t>(c.Tmax, 1);
      c.row_bufs.stage = std::max<int64_t>(
          c.row_bufs.stage, stage16_ptr_bytes(Tm, c.MR) + Tm * c.MR * c.CB * c.K2 * kFloatBytes);
      c.tile += in16_tag + "stage";
    }
    // 16-bit weights packed as read: the Channels order (a thread packs a
    // channel's every column block) where a channel's columns and taps are
    // one dense run (the taps fill at least half of each column's stride:
    // IOX forward), widened once into a stage.
    // Or the Columns order (taps contiguous) where each column's channels and
    // taps lie in a span of their own: a strip's 16 spans widened at once.
    const int64_t max_koff =
        c.pkoff.empty() ? -1 : *std::max_element(c.pkoff.begin(), c.pkoff.end());
    const int64_t col_span = (c.cred - 1) * c.red_stride + c.T;
    if (w16 && c.route == Route::Gemm && c.pack_order == PackOrder::Channels && max_koff >= 0 &&
        max_koff < c.col_stride && c.col_stride <= 2 * (max_koff + 1)) {
      c.w16 = w16;
      c.w16_span = max_koff + 1;
    } else if (w16 && c.route == Route::Gemm && c.pack_order == PackOrder::Columns &&
               c.red_stride >= c.T && col_span <= c.col_stride) {
      c.w16 = w16;
      c.w16_span = col_span;
    }
  }
  return c;
}

// build_f32_out16's plan, from the thread's recent ones (plan_memo.h): a
// 16-bit call plans it several times (the route's checks, the run), and a
// copy of a plan is many allocations (small layers, Zen 3: 7-10 us a call).
struct Out16Key {
  PlanKey f32;
  int out16;
  bool in16;
  Widen16Fn w16;
  bool f32_out, to_dst;
  bool operator==(const Out16Key& o) const {
    return out16 == o.out16 && in16 == o.in16 && w16 == o.w16 && f32_out == o.f32_out &&
           to_dst == o.to_dst && f32 == o.f32;
  }
};
std::shared_ptr<const ConvPlan> plan_f32_out16(Isa isa, Pass pass, const ConvProblem& p,
                                               const WeightsView& wv, int nthreads, int out16,
                                               bool in16 = false, Widen16Fn w16 = nullptr,
                                               bool f32_out = false, bool to_dst = false) {
  thread_local PlanMemo<Out16Key, ConvPlan, 8> memo;
  // (merge_ok false in the key: the 16-bit plans' merge policy is fixed, plan_conv16)
  const Out16Key key{plan_key(table_for(isa), isa, pass, p, wv, nthreads, 0, false), out16, in16, w16,
                     f32_out, to_dst};
  return memo.get(key, [&] {
    return build_f32_out16(isa, pass, p, wv, nthreads, out16, in16, w16, f32_out, to_dst);
  });
}

PairsConvInfo conv_bf16_pairs_info(Isa isa, Pass pass, const ConvProblem& p, int nthreads) {
  PairsConvInfo info;
  if (pass == Pass::BackwardWeights) return info;
  const ConvPlan c = plan_bf16_pairs(isa, pass, p, dense_iox_strides(p), nthreads);
  info.out16 = c.out_bytes == 2;
  if (isa == Isa::Avx512Bf16) {
    // Register tiles: the GEMM route, except few columns with a long
    // reduction (the f32 dot tiles' problems) and groups of at most 8
    // columns (where the f32 grouped tiles may run): those would fill a
    // fraction of the pair tiles' lanes (3 columns of 16: 0.38 of the f32
    // tiles' rate at twice the products per lane), so they stay on the f32
    // kernels.
    const bool f32_special = dot_shape(c.ncol, c.cred) || (p.G > 1 && c.ncol <= 8);
    info.applies = c.route == Route::Gemm && !f32_special;
    return info;
  }
  // A reduction of at least 16 channels per (fused) tap, half a 32-channel
  // step: with 3 or 4 per tap unfused (RGB layers' backward-data, small
  // groups) the tiles ran 2-2.5x slower than the f32 kernels (SPR VM, bf16:
  // AlexNet 96 <- 3 k11 s4 before fused taps, benchdnn's 3D groups of 4).
  // Fused taps of 12-15 rows only where every row is fused (no padding along
  // the innermost axis: a tile with one border row runs unfused, 3 rows a
  // tap): 36 <- 4 k3 s3 1.9x faster, DCGAN's 64 <- 3 k4 s2 p1 1.9x slower.
  bool all_fused = c.fuse;
  for (const Phase& ph : c.phases)
    all_fused = all_fused && !ph.ax[2].lazy &&
                std::all_of(ph.ax[2].interior.begin(), ph.ax[2].interior.end(),
                            [](char v) { return v != 0; });
  const int64_t run = c.cred * c.K2;
  // Few columns (where the f32 kernels take dot tiles): a 16-column tile
  // holds 1-4 of them, so only with 128+ reduction rows per row and phase
  // (SPR VM, bf16 forward: DCGAN 64 -> 3 k4 s2 1.33 -> 0.60 ms, AlexNet k11
  // s4 96 -> 3 6.2 -> 3.9 ms; 36 -> 4 k3 s3, 36 rows a phase, 8.0 -> 11.3 ms).
  const double rows_per_phase =
      static_cast<double>(c.cred) * c.T / std::max<double>(1.0, static_cast<double>(c.phases.size()));
  const bool few_ok = c.ncol > kMaxDotColumns || rows_per_phase >= 128;
  info.applies = c.route == Route::Gemm && few_ok && (run >= 16 || (run >= 12 && all_fused));
  return info;
}

bool forward_bf16_pairs(Isa isa, const ConvProblem& p, const uint16_t* src, WeightsView w,
                        const float* bias, void* dst, bool out16, int nthreads, bool to_dst) {
  const ConvPlan plan = plan_bf16_pairs(isa, Pass::Forward, p, w, nthreads, to_dst);
  if (plan.route != Route::Gemm || out16 != (plan.out_bytes == 2)) return false;
  return run_conv(plan, src, w.data, bias, dst);
}

bool backward_data_bf16_pairs(Isa isa, const ConvProblem& p, const uint16_t* diff_dst,
                              WeightsView w, void* diff_src, bool out16, int nthreads,
                              bool to_dst) {
  const ConvPlan plan = plan_bf16_pairs(isa, Pass::BackwardData, p, w, nthreads, to_dst);
  if (plan.route != Route::Gemm || out16 != (plan.out_bytes == 2)) return false;
  return run_conv(plan, diff_dst, w.data, nullptr, diff_src);
}

std::string describe_conv_bf16_pairs(Isa isa, Pass pass, const ConvProblem& p, int nthreads,
                                     bool to_dst) {
  return describe(plan_bf16_pairs(isa, pass, p, dense_iox_strides(p), nthreads, to_dst));
}

bool conv_f32_out16_applies(Isa isa, Pass pass, const ConvProblem& p, int nthreads,
                            int in16) {
  if (pass == Pass::BackwardWeights) return false;
  const auto c = plan_f32_out16(isa, pass, p, dense_iox_strides(p), nthreads, in16 ? in16 : 1,
                                in16 != 0);
  return c->out_bytes == 2 && (in16 == 0 || c->in_bytes == 2);
}

// (The description's stand-in for the call's widening.)
static void no_widen(const uint16_t*, float*, int64_t) {}

bool conv_f32_wide16_applies(Isa isa, Pass pass, const ConvProblem& p, int nthreads) {
  if (pass == Pass::BackwardWeights) return false;
  const auto c =
      plan_f32_out16(isa, pass, p, dense_iox_strides(p), nthreads, 1, false, no_widen, true);
  return c->out_bytes == 4 && c->route == Route::Gemm && c->nchunks > 1 && c->w16;
}

bool conv_f32_wide16(Isa isa, Pass pass, const ConvProblem& p, const float* in, WeightsView w,
                     const float* bias, float* out, int kind, int nthreads, Widen16Fn w16,
                     const std::function<const void*()>& f32_weights) {
  const auto planp = plan_f32_out16(isa, pass, p, w, nthreads, kind, false, w16, true);
  const ConvPlan& plan = *planp;
  if (plan.out_bytes != 4 || plan.route != Route::Gemm) return false;
  const void* W = plan.w16 ? w.data : f32_weights();
  return run_conv(plan, in, W, pass == Pass::Forward ? bias : nullptr, out);
}

bool conv_f32_out16(Isa isa, Pass pass, const ConvProblem& p, const void* in, bool in16,
                    WeightsView w, const float* bias, uint16_t* out, int out16, int nthreads,
                    bool to_dst, Widen16Fn w16, const std::function<const void*()>& f32_weights) {
  const auto planp = plan_f32_out16(isa, pass, p, w, nthreads, out16, in16, w16, false, to_dst);
  const ConvPlan& plan = *planp;
  if (plan.out_bytes != 2 || (plan.in_bytes == 2) != in16) return false;
  if (w16 && !plan.w16 && !f32_weights) return false;  // 16-bit weights, no f32 copy to run on
  const void* W = w16 && !plan.w16 ? f32_weights() : w.data;
  return run_conv(plan, in, W, pass == Pass::Forward ? bias : nullptr, out);
}

struct PreparedConv {
  std::shared_ptr<const ConvPlan> plan;
};

std::shared_ptr<const PreparedConv> prepare_conv_f32(Isa isa, Pass pass, const ConvProblem& p,
                                                     const WeightsView& w, int out16,
                                                     int nthreads) {
  auto prepared = std::make_shared<PreparedConv>();
  prepared->plan = out16 ? plan_f32_out16(isa, pass, p, w, nthreads, out16)
                         : plan_conv16(table_for(isa), isa, pass, p, w, nthreads);
  return prepared;
}

bool prepared_out16(const PreparedConv& c) { return c.plan->out_bytes == 2; }

bool run_prepared_conv(const PreparedConv& c, const float* in, WeightsView w, const float* bias,
                       void* out) {
  return run_conv(*c.plan, in, w.data, c.plan->fwd ? bias : nullptr, out);
}

std::string describe_conv_f32_out16(Isa isa, Pass pass, const ConvProblem& p, int nthreads,
                                    int in16, bool f32_out, bool to_dst) {
  return describe(*plan_f32_out16(isa, pass, p, dense_iox_strides(p), nthreads,
                                  in16 ? in16 : 1, in16 != 0, no_widen, f32_out, to_dst));
}

}  // namespace x86
}  // namespace tct
