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
// Per block of rows, an indirection buffer (one pointer per row and tap: the
// input pixel, or a zero vector for padding) feeds the ISA micro-kernels of
// conv_f32_kernels.h. Weights are packed once per call to
// [g][column block][phase-ordered taps][c][NR]. Extra memory: the packed
// weights plus, per thread, the indirection buffer of one row block.
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "conv_f32_kernels.h"
#include "x86.h"

namespace tct {
namespace x86 {
namespace {

enum class Pass { Forward, BackwardData };

// One axis of one phase: rows (output coordinates) x taps -> input coordinate.
struct AxisMap {
  int64_t rows = 0, taps = 0;
  std::vector<int64_t> out;  // [rows] output coordinate
  std::vector<int64_t> tap;  // [taps] kernel index
  std::vector<int64_t> in;   // [rows * taps] input coordinate, -1 where padding
};

struct Phase {
  AxisMap ax[kAxes];
  int64_t rows = 0, taps = 0;
  int64_t tap_off = 0;  // first packed tap of this phase
  int64_t blocks = 0;   // row blocks (work items per image and group)
};

// Forward, axis ax, phase q = (o + pb) mod s.
AxisMap forward_axis(const ConvProblem& p, int ax, int64_t q) {
  const int64_t s = p.s[ax], d = p.d[ax], pb = p.pb[ax];
  AxisMap m;
  const int64_t first = ((q - pb) % s + s) % s;
  m.rows = first < p.O[ax] ? (p.O[ax] - first + s - 1) / s : 0;
  for (int64_t k = 0; k < p.K[ax]; ++k)
    if ((k * d) % s == q) m.tap.push_back(k);
  m.taps = static_cast<int64_t>(m.tap.size());
  m.out.resize(m.rows);
  m.in.resize(m.rows * m.taps);
  for (int64_t j = 0; j < m.rows; ++j) {
    const int64_t o = first + j * s;
    m.out[j] = o;
    for (int64_t t = 0; t < m.taps; ++t) {
      const int64_t num = o + pb - m.tap[t] * d;  // divisible by s in this phase
      const int64_t i = num >= 0 ? num / s : -1;
      m.in[j * m.taps + t] = (i >= 0 && i < p.I[ax]) ? i : -1;
    }
  }
  return m;
}

// Backward-data, axis ax: row i, tap k reads diff_dst at i*s - pb + k*d.
AxisMap backward_axis(const ConvProblem& p, int ax) {
  AxisMap m;
  m.rows = p.I[ax];
  m.taps = p.K[ax];
  m.out.resize(m.rows);
  m.tap.resize(m.taps);
  m.in.resize(m.rows * m.taps);
  for (int64_t k = 0; k < m.taps; ++k) m.tap[k] = k;
  for (int64_t i = 0; i < m.rows; ++i) {
    m.out[i] = i;
    for (int64_t k = 0; k < m.taps; ++k) {
      const int64_t o = i * p.s[ax] - p.pb[ax] + k * p.d[ax];
      m.in[i * m.taps + k] = (o >= 0 && o < p.O[ax]) ? o : -1;
    }
  }
  return m;
}

struct Kernel {
  ConvTileFn fn;
  int mr, nr;
  double eff;  // relative speed of the tile, to trade it against column padding
};

// The register tile for ncol output columns: least padded work per unit speed.
Kernel choose_gemm_kernel(Isa isa, int64_t ncol) {
  static const Kernel k512[] = {{conv_f32_avx512_6x64, 6, 64, 1.0},
                                {conv_f32_avx512_8x48, 8, 48, 0.97},
                                {conv_f32_avx512_12x32, 12, 32, 0.95},
                                {conv_f32_avx512_14x16, 14, 16, 0.8}};
  static const Kernel k2[] = {{conv_f32_avx2_6x16, 6, 16, 1.0}, {conv_f32_avx2_8x8, 8, 8, 0.7}};
  const Kernel* ks = isa == Isa::Avx512 ? k512 : k2;
  const int nk = isa == Isa::Avx512 ? 4 : 2;
  const Kernel* best = &ks[0];
  double best_cost = 0;
  for (int i = 0; i < nk; ++i) {
    const int64_t blocks = (ncol + ks[i].nr - 1) / ks[i].nr;
    const double cost = static_cast<double>(blocks * ks[i].nr) / ks[i].eff;
    if (i == 0 || cost < best_cost) {
      best = &ks[i];
      best_cost = cost;
    }
  }
  return *best;
}

struct AlignedFree {
  void operator()(float* q) const { std::free(q); }
};
using AlignedBuf = std::unique_ptr<float[], AlignedFree>;

AlignedBuf aligned_floats(int64_t n) {
  size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 16)) * sizeof(float);
  bytes = (bytes + 63) / 64 * 64;
  return AlignedBuf(static_cast<float*>(std::aligned_alloc(64, bytes)));
}

// dst[c*NR + j] = src[c*rs + j*cs] for j < jn, 0 for jn <= j < NR, for
// c in [c0, c1). 16x16 blocks, the inner loop along the source's contiguous
// side, so that both the reads and the writes stay within a few cache lines.
void pack_slab(const float* src, int64_t rs, int64_t cs, int64_t c0, int64_t c1, int64_t jn,
               int64_t NR, float* dst) {
  constexpr int64_t B = 16;
  for (int64_t j0 = 0; j0 < NR; j0 += B) {
    const int64_t j1 = std::min(NR, j0 + B), jv = std::min(j1, jn);
    if (cs <= rs) {
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

bool run(Isa isa, Pass pass, const ConvProblem& p, const float* in, WeightsView wv,
         const float* bias, float* out, int nthreads) {
  if (isa != Isa::Avx512 && isa != Isa::Avx2) return false;
  if (nthreads < 1) nthreads = 1;
  const bool fwd = pass == Pass::Forward;
  const int64_t N = p.N;
  const int64_t cred = fwd ? p.ICg : p.OCg;
  const int64_t ncol = fwd ? p.OCg : p.ICg;
  const int64_t in_c = fwd ? p.IC() : p.OC();
  const int64_t out_c = fwd ? p.OC() : p.IC();
  const std::array<int64_t, kAxes> in_dims = fwd ? p.I : p.O;
  const std::array<int64_t, kAxes> out_dims = fwd ? p.O : p.I;
  const int64_t in_pix = in_dims[0] * in_dims[1] * in_dims[2];
  const int64_t out_pix = out_dims[0] * out_dims[1] * out_dims[2];
  if (N <= 0 || ncol <= 0 || out_pix <= 0 || p.G <= 0) return true;  // nothing to write

  // Depthwise: vectorize over the channels of all groups instead.
  const bool dw = p.ICg == 1 && p.OCg == 1 && p.G > 1;
  const int64_t G = dw ? 1 : p.G;        // group loop of the driver
  const int64_t cols = dw ? p.G : ncol;  // columns per group seen by the kernel
  Kernel kern;
  if (dw) {
    kern = {isa == Isa::Avx512 ? conv_f32_avx512_dw : conv_f32_avx2_dw, kDwRows, 0, 1.0};
  } else {
    kern = choose_gemm_kernel(isa, ncol);
  }
  const int MR = kern.mr;
  const int64_t NR = dw ? cols : kern.nr;
  const int64_t NB = dw ? 1 : (ncol + NR - 1) / NR;

  // Phases and their tap ranges in the packed weights.
  std::vector<Phase> phases;
  int64_t T = 0, Tmax = 0;
  {
    std::vector<AxisMap> axes[kAxes];
    for (int ax = 0; ax < kAxes; ++ax) {
      if (fwd) {
        for (int64_t q = 0; q < p.s[ax]; ++q) axes[ax].push_back(forward_axis(p, ax, q));
      } else {
        axes[ax].push_back(backward_axis(p, ax));
      }
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
          ph.tap_off = T;
          T += ph.taps;
          if (ph.rows == 0) continue;
          Tmax = std::max(Tmax, ph.taps);
          phases.push_back(std::move(ph));
        }
  }

  // Pack the weights: [g][nb][tap][c][NR] (GEMM) or [tap][channel] (depthwise).
  // Per packed tap: the offset of its kernel position in W (-1: its phase has
  // no rows, never read, not packed).
  std::vector<int64_t> koff(static_cast<size_t>(T), -1);
  for (const Phase& ph : phases) {
    const AxisMap &a0 = ph.ax[0], &a1 = ph.ax[1], &a2 = ph.ax[2];
    int64_t t = ph.tap_off;
    for (int64_t t0 = 0; t0 < a0.taps; ++t0)
      for (int64_t t1 = 0; t1 < a1.taps; ++t1)
        for (int64_t t2 = 0; t2 < a2.taps; ++t2, ++t)
          koff[t] = a0.tap[t0] * wv.sk[0] + a1.tap[t1] * wv.sk[1] + a2.tap[t2] * wv.sk[2];
  }
  const float* W = static_cast<const float*>(wv.data);
  // Column j / reduction c of group g: forward W[g*ICg + c, j], backward W[g*ICg + j, c].
  const int64_t col_stride = fwd ? wv.so : wv.si, red_stride = fwd ? wv.si : wv.so;
  const int64_t wsize = dw ? T * cols : G * NB * T * cred * NR;
  AlignedBuf wp = aligned_floats(wsize);
  if (dw) {
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int64_t t = 0; t < T; ++t) {
      if (koff[t] < 0) continue;
      for (int64_t ch = 0; ch < cols; ++ch) wp[t * cols + ch] = W[ch * wv.si + koff[t]];
    }
  } else {
    // Taps innermost: a block of 16 reduction channels x NR columns over all
    // taps is a small region of W in every layout (IOX has the taps contiguous).
    constexpr int64_t CB = 16;
    const int64_t ncb = (cred + CB - 1) / CB;
#pragma omp parallel for collapse(3) schedule(static) num_threads(nthreads)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t nb = 0; nb < NB; ++nb)
        for (int64_t cb = 0; cb < ncb; ++cb)
          for (int64_t t = 0; t < T; ++t) {
            if (koff[t] < 0) continue;
            pack_slab(W + g * p.ICg * wv.si + nb * NR * col_stride + koff[t], red_stride,
                      col_stride, cb * CB, std::min(cred, cb * CB + CB),
                      std::min<int64_t>(NR, ncol - nb * NR), NR,
                      wp.get() + ((g * NB + nb) * T + t) * cred * NR);
          }
  }

  // Bias padded to whole column blocks (zeros without bias / for backward).
  std::vector<float> biasp(static_cast<size_t>(G * NB * NR + 16), 0.f);
  if (fwd && bias) {
    for (int64_t g = 0; g < G; ++g)
      for (int64_t j = 0; j < cols; ++j) biasp[g * NB * NR + j] = bias[g * cols + j];
  }
  std::vector<float> zeros(static_cast<size_t>(std::max<int64_t>(std::max(cred, cols), 16)), 0.f);

  // Work items: (image, group, phase, block of TB row tiles, group of CG
  // column blocks). Each item streams its column blocks' weights once per row
  // block and its rows' inputs once per column group: pick (TB, CG) with the
  // least such traffic among those giving every thread a few items, with the
  // input rows of a block bounded so they stay in L2.
  const int64_t row_bytes = std::max<int64_t>(Tmax, 1) * std::max<int64_t>(cred, 1) * 4;
  const int64_t tb_cap = std::max<int64_t>(1, std::min<int64_t>(64, (512 << 10) / (MR * row_bytes)));
  // Row blocks per image and group for TB = tb (sets Phase::blocks), and the
  // bytes of weights they stream.
  auto count_blocks = [&](int64_t tb, double* wtraffic) {
    int64_t blocks = 0;
    double wt = 0;
    for (Phase& ph : phases) {
      ph.blocks = (ph.rows + tb * MR - 1) / (tb * MR);
      blocks += ph.blocks;
      wt += 4.0 * ph.blocks * ph.taps * cred * NB * NR;
    }
    if (wtraffic) *wtraffic = wt;
    return blocks;
  };
  double abytes = 0;  // input rows of all phases, once
  for (const Phase& ph : phases) abytes += 4.0 * ph.rows * ph.taps * std::max<int64_t>(cred, 1);
  const int64_t want = 4 * static_cast<int64_t>(nthreads);
  int64_t TB = 1, CG = 1;
  {
    double best_traffic = 0;
    int64_t best_items = -1;
    for (int64_t tb = 1; tb <= tb_cap; tb *= 2)
      for (int64_t cg = 1; cg <= NB; ++cg) {
        double wt = 0;
        const int64_t items = N * G * count_blocks(tb, &wt) * cg;
        const double traffic = wt + cg * abytes;
        const bool better =
            best_items < 0 ||
            (items >= want ? (best_items < want || traffic < best_traffic)
                           : (best_items < want && items > best_items));
        if (better) {
          best_traffic = traffic;
          best_items = items;
          TB = tb;
          CG = cg;
        }
      }
  }
  const int64_t items = N * G * count_blocks(TB, nullptr);
  std::vector<int64_t> phase_first_block(phases.size() + 1, 0);
  for (size_t i = 0; i < phases.size(); ++i)
    phase_first_block[i + 1] = phase_first_block[i] + phases[i].blocks;
  const int64_t blocks_per_img = phase_first_block.back();
  const int64_t total = items * CG;

#pragma omp parallel num_threads(nthreads)
  {
    std::vector<const float*> ind(static_cast<size_t>(TB * MR * std::max<int64_t>(Tmax, 1)));
    std::vector<float*> outp(static_cast<size_t>(TB * MR));
    std::vector<float> scratch(static_cast<size_t>(NB * NR + 16));
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < total; ++it) {
      const int64_t cg = it % CG;
      int64_t rest = it / CG;
      const int64_t blk_all = rest % blocks_per_img;
      rest /= blocks_per_img;
      const int64_t g = rest % G, n = rest / G;
      const size_t pi = static_cast<size_t>(
          std::upper_bound(phase_first_block.begin(), phase_first_block.end(), blk_all) -
          phase_first_block.begin() - 1);
      const Phase& ph = phases[pi];
      const int64_t blk = blk_all - phase_first_block[pi];
      const AxisMap &a0 = ph.ax[0], &a1 = ph.ax[1], &a2 = ph.ax[2];
      const int64_t Tp = ph.taps;

      // Indirection for the rows of this block: [tile][tap][MR].
      const int64_t r0 = blk * TB * MR;
      const int64_t ntiles = (std::min(ph.rows - r0, TB * MR) + MR - 1) / MR;
      const float* in_base = in + n * in_pix * in_c + g * cred;
      float* out_base = out + n * out_pix * out_c + g * cols;
      for (int64_t tile = 0; tile < ntiles; ++tile)
        for (int m = 0; m < MR; ++m) {
          const int64_t r = r0 + tile * MR + m;
          const float** a = ind.data() + tile * Tp * MR + m;
          if (r >= ph.rows) {  // dummy row: zeros in, scratch out
            outp[tile * MR + m] = scratch.data();
            for (int64_t t = 0; t < Tp; ++t) a[t * MR] = zeros.data();
            continue;
          }
          const int64_t j2 = r % a2.rows, j1 = (r / a2.rows) % a1.rows,
                        j0 = r / (a2.rows * a1.rows);
          const int64_t opix =
              (a0.out[j0] * out_dims[1] + a1.out[j1]) * out_dims[2] + a2.out[j2];
          outp[tile * MR + m] = out_base + opix * out_c;
          const int64_t* i0 = &a0.in[j0 * a0.taps];
          const int64_t* i1 = &a1.in[j1 * a1.taps];
          const int64_t* i2 = &a2.in[j2 * a2.taps];
          int64_t t = 0;
          for (int64_t t0 = 0; t0 < a0.taps; ++t0)
            for (int64_t t1 = 0; t1 < a1.taps; ++t1)
              for (int64_t t2 = 0; t2 < a2.taps; ++t2, ++t) {
                const bool ok = i0[t0] >= 0 && i1[t1] >= 0 && i2[t2] >= 0;
                a[t * MR] = ok ? in_base +
                                     ((i0[t0] * in_dims[1] + i1[t1]) * in_dims[2] + i2[t2]) * in_c
                               : zeros.data();
              }
        }

      const int64_t nb_lo = NB * cg / CG, nb_hi = NB * (cg + 1) / CG;
      for (int64_t nb = nb_lo; nb < nb_hi; ++nb) {
        ConvTileArgs args;
        args.w = wp.get() + ((g * NB + nb) * T + (Tp ? ph.tap_off : 0)) * cred * NR;
        if (dw) args.w = wp.get() + ph.tap_off * cols;
        args.bias = biasp.data() + (g * NB + nb) * NR;
        args.ntaps = Tp;
        args.cred = cred;
        args.col_off = nb * NR;
        args.ncols = std::min<int64_t>(NR, cols - nb * NR);
        for (int64_t tile = 0; tile < ntiles; ++tile) {
          args.a = ind.data() + tile * Tp * MR;
          args.out = outp.data() + tile * MR;
          kern.fn(&args);
        }
      }
    }
  }
  return true;
}

}  // namespace

bool forward_f32(Isa isa, const ConvProblem& p, const float* src, WeightsView w,
                 const float* bias, float* dst, int nthreads) {
  return run(isa, Pass::Forward, p, src, w, bias, dst, nthreads);
}

bool backward_data_f32(Isa isa, const ConvProblem& p, const float* diff_dst, WeightsView w,
                       float* diff_src, int nthreads) {
  return run(isa, Pass::BackwardData, p, diff_dst, w, nullptr, diff_src, nthreads);
}

}  // namespace x86
}  // namespace tct
