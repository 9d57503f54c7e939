// bf16 backward-weights on the pair tiles: the driver (no ISA flags; the
// packing kernels and the AMX block are in conv_bf16_amx.cpp, the VDPBF16PS
// block in conv_bf16_avx512bf16.cpp, called only where the plan's ISA,
// Avx512Amx or Avx512Bf16, is supported; the packing uses AVX-512 BW only).
//
// diff_w[g][ic][oc][t] = sum over images n and src pixels i of
//     src[n][g*ICg + ic][i] * diff_dst[n][o(i, t)][g*OCg + oc]
// over the taps t whose o(i, t) = i*s + k*d - pb lies inside diff_dst. One
// GEMM per (group, tap): rows = input channels, columns = output channels,
// reduction = src pixels, in steps of 32 (TDPBF16PS reduces pixel pairs):
//   A (16 channels x 32 pixels) straight from src in CNX order (a row is a
//     channel's pixels of every image, so that steps run across images: a
//     one-pixel src fills whole steps), or gathered with zeros where a pixel's tap
//     falls outside diff_dst (never multiplying src by a missing diff_dst,
//     so NaN / Inf stay where the reference puts them) or past the channels;
//   B (16 pixel pairs x 32 columns) from diff_dst in NXC order, each pair of
//     rows interleaved into a panel per (chunk of 256 pixels, tap), shared
//     by all input-channel blocks.
// The f32 sums are kept in a scratch gradient [G][T][ICp][OCp] (tiles
// loaded and stored per chunk of steps; the first chunk's start from zero,
// so the scratch is never cleared), each element summed by one task in pixel
// order: the same bits for any thread count (SPEC 5). The last pass rounds
// each sum once into the bf16 gradient.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "../dispatch.h"
#include "buffers.h"
#include "conv_f32_kernels.h"
#include "convert.h"
#include "x86.h"

namespace tct {
namespace x86 {
namespace {

constexpr int64_t kStep = 32;      // pixels per step (a TDPBF16PS's, 16 VDPBF16PS pair steps)
constexpr int64_t kSteps = 8;      // steps per chunk (a B panel, a C residency): AMX
constexpr int64_t kMaxSteps = 16;  // VDPBF16PS: up to 16 where the panel stays small
constexpr int64_t kBlock = 32;     // channels per row / column block

// The block kernel of the plan's ISA and the tile state around a thread's blocks.
struct BlockKernel {
  void (*block)(const BwwPairsBlockArgs*) = nullptr;
  void (*begin)() = nullptr;
  void (*end)() = nullptr;
  const char* name = "";
};

BlockKernel block_kernel(Isa isa) {
  if (isa == Isa::Avx512Amx)
    return {bww_bf16_amx_block, tiles_begin_amx, tiles_end_amx, "amx_bf16_32x32"};
  if (isa == Isa::Avx512Bf16)
    return {bww_bf16_avx512bf16_block, nullptr, nullptr, "avx512bf16_bf16_12x32"};
  return {};
}

struct BwwPairsPlan {
  BlockKernel k;
  ConvProblem p;
  int64_t T = 0, ICB = 0, OCB = 0, ICp = 0, OCp = 0, ipix = 0, opix = 0;
  int64_t steps = kSteps, chunk = kSteps * kStep;  // per chunk of a task's pixels
  int64_t parts = 1, tasks = 0;
  std::vector<int64_t> koff_k[kAxes];  // per tap: its kernel index along each axis
  // Per axis a, kernel index k and src index i: the diff_dst index, or -1.
  std::vector<int64_t> omap[kAxes];
};

BwwPairsPlan plan_bww_pairs(Isa isa, const ConvProblem& p, int nthreads) {
  BwwPairsPlan pl;
  pl.k = block_kernel(isa);
  pl.p = p;
  pl.T = p.taps();
  pl.ICB = (p.ICg + kBlock - 1) / kBlock;
  pl.OCB = (p.OCg + kBlock - 1) / kBlock;
  pl.ICp = pl.ICB * kBlock;
  pl.OCp = pl.OCB * kBlock;
  pl.ipix = p.src_spatial();
  pl.opix = p.dst_spatial();
  // (group, tap) tasks, their input-channel blocks split in parts so that
  // each thread gets about two tasks (AMX).
  const int64_t gt = p.G * pl.T;
  pl.parts = std::clamp<int64_t>((2 * nthreads + gt - 1) / gt, 1, pl.ICB);
  if (isa == Isa::Avx512Bf16) {
    // VDPBF16PS (Zen 4 / 5, 1 MiB L2): a chunk's panel within 256 KiB, up
    // to 16 steps (one chunk for most reductions of a few hundred pixels:
    // each chunk loads and stores every sum); parts of at most 256 KiB of
    // sums, so that a task's sums stay in L2 from chunk to chunk, and at
    // least 4 tasks a thread.
    constexpr int64_t kBudget = 256 << 10;
    const int64_t needed = ceil_div(p.N * pl.ipix, kStep);
    const int64_t fit = kBudget / (kStep * pl.OCp * 2);  // steps whose panel fits
    pl.steps = std::min(needed, std::max(kSteps, std::min(kMaxSteps, fit)));
    const int64_t icbs = std::max<int64_t>(1, kBudget / (kBlock * pl.OCp * 4));  // sums' blocks
    pl.parts = std::clamp<int64_t>(std::max(ceil_div(pl.ICB, icbs), ceil_div(4 * nthreads, gt)),
                                   1, pl.ICB);
  }
  pl.chunk = pl.steps * kStep;
  pl.tasks = gt * pl.parts;
  for (int a = 0; a < kAxes; ++a) pl.koff_k[a].resize(static_cast<size_t>(pl.T));
  for (int64_t k0 = 0, t = 0; k0 < p.K[0]; ++k0)
    for (int64_t k1 = 0; k1 < p.K[1]; ++k1)
      for (int64_t k2 = 0; k2 < p.K[2]; ++k2, ++t) {
        pl.koff_k[0][t] = k0;
        pl.koff_k[1][t] = k1;
        pl.koff_k[2][t] = k2;
      }
  for (int a = 0; a < kAxes; ++a) {
    const TapAxis ax = p.axis(a);
    pl.omap[a].resize(static_cast<size_t>(ax.K * ax.I));
    for (int64_t k = 0; k < ax.K; ++k)
      for (int64_t i = 0; i < ax.I; ++i) pl.omap[a][k * ax.I + i] = ax.dst_at(i, k);
  }
  return pl;
}

// Per-thread buffers: the B panel of a chunk and tap, the diff_dst pixel of
// each of its pixels, the gathered A steps and their pointers.
struct TaskBufs {
  AlignedBuf<uint32_t> panel;
  std::vector<int64_t> opix;
  AlignedBuf<uint16_t> agather;
  std::vector<uint16_t> row16;  // a rounded row of the gradient
  const void* a[2 * kMaxSteps];
  int64_t lda[2 * kMaxSteps];
  uint32_t valid[kMaxSteps];  // per step of the chunk: its pixels whose tap is inside
  explicit TaskBufs(const BwwPairsPlan& pl)
      : panel(aligned_buffer<uint32_t>(pl.chunk / 2 * pl.OCp)),
        opix(static_cast<size_t>(pl.chunk)),
        agather(aligned_buffer<uint16_t>(2 * pl.steps * 16 * kStep)),
        row16(static_cast<size_t>(pl.OCp)) {}
};

// Chunk [j0, j0 + len) of the pixels of all images (image-major) under tap
// t of group g: the B panel and the diff_dst rows (of all images).
void pack_b(const BwwPairsPlan& pl, const uint16_t* dy, int64_t g, int64_t t, int64_t j0,
            int64_t len, TaskBufs& tb) {
  const ConvProblem& p = pl.p;
  const int64_t OC = p.OC();
  const uint16_t* const img = dy + g * p.OCg;
  // The chunk's pixels stepped through (image, i0, i1, i2) with carries.
  const int64_t* const m0 = pl.omap[0].data() + pl.koff_k[0][t] * p.I[0];
  const int64_t* const m1 = pl.omap[1].data() + pl.koff_k[1][t] * p.I[1];
  const int64_t* const m2 = pl.omap[2].data() + pl.koff_k[2][t] * p.I[2];
  const int64_t r = j0 % pl.ipix;
  int64_t n = j0 / pl.ipix, i0 = r / (p.I[1] * p.I[2]), i1 = r / p.I[2] % p.I[1], i2 = r % p.I[2];
  for (int64_t k = 0; k < pl.steps; ++k) tb.valid[k] = 0;
  for (int64_t j = 0; j < pl.chunk; ++j) {
    int64_t row = -1;
    if (j < len) {
      const int64_t o0 = m0[i0], o1 = m1[i1], o2 = m2[i2];
      if ((o0 | o1 | o2) >= 0) {
        row = n * pl.opix + (o0 * p.O[1] + o1) * p.O[2] + o2;
        tb.valid[j / kStep] |= 1u << (j % kStep);
      }
      if (++i2 == p.I[2]) {
        i2 = 0;
        if (++i1 == p.I[1]) {
          i1 = 0;
          if (++i0 == p.I[0]) i0 = 0, ++n;
        }
      }
    }
    tb.opix[j] = row;
  }
  const int64_t pairs = (len + kStep - 1) / kStep * (kStep / 2);  // whole steps
  for (int64_t q = 0; q < pairs; ++q) {
    const int64_t o0 = tb.opix[2 * q], o1 = tb.opix[2 * q + 1];
    bww_bf16_pairs_avx512(o0 >= 0 ? img + o0 * OC : nullptr, o1 >= 0 ? img + o1 * OC : nullptr,
                       p.OCg, pl.OCp, tb.panel.get() + q * pl.OCp);
  }
}

// The A operands of steps [0, nks) of the chunk for input-channel block icb:
// in place where all 32 pixels have their tap inside and 16 channels exist,
// else gathered.
void pack_a(const BwwPairsPlan& pl, const uint16_t* src, int64_t g, int64_t icb, int64_t j0,
            int64_t nks, TaskBufs& tb) {
  const ConvProblem& p = pl.p;
  const int64_t ipix = p.N * pl.ipix;  // a channel's row in CNX
  for (int64_t k = 0; k < nks; ++k) {
    const uint32_t valid = tb.valid[k];
    for (int h = 0; h < 2; ++h) {
      const int64_t ic0 = icb * kBlock + 16 * h;
      const int rows = static_cast<int>(std::clamp<int64_t>(p.ICg - ic0, 0, 16));
      const uint16_t* base = src + (g * p.ICg + ic0) * ipix + j0 + k * kStep;
      const int64_t s = 2 * k + h;
      if (valid == ~0u && rows == 16) {
        tb.a[s] = base;
        tb.lda[s] = ipix * 2;
      } else {
        uint16_t* d = tb.agather.get() + s * 16 * kStep;
        bww_bf16_gather_avx512(rows > 0 ? base : nullptr, ipix, rows > 0 ? valid : 0, rows, d);
        tb.a[s] = d;
        tb.lda[s] = kStep * 2;
      }
    }
  }
}

// Task (g, t, part): every image and chunk, its input-channel blocks.
void run_task(const BwwPairsPlan& pl, const uint16_t* src, const uint16_t* dy, float* scratch,
              int64_t task, TaskBufs& tb) {
  const ConvProblem& p = pl.p;
  const int64_t part = task % pl.parts, gt = task / pl.parts;
  const int64_t g = gt / pl.T, t = gt % pl.T;
  const int64_t icb0 = pl.ICB * part / pl.parts, icb1 = pl.ICB * (part + 1) / pl.parts;
  float* const grad = scratch + gt * pl.ICp * pl.OCp;
  BwwPairsBlockArgs args;
  args.a = tb.a;
  args.lda = tb.lda;
  args.ldb = pl.OCp;
  args.ldc = pl.OCp;
  const int64_t pixels = p.N * pl.ipix;
  for (int64_t j0 = 0; j0 < pixels; j0 += pl.chunk) {
    const int64_t len = std::min(pl.chunk, pixels - j0);
    pack_b(pl, dy, g, t, j0, len, tb);
    args.nks = (len + kStep - 1) / kStep;
    args.zero = j0 == 0;
    for (int64_t icb = icb0; icb < icb1; ++icb) {
      pack_a(pl, src, g, icb, j0, args.nks, tb);
      for (int64_t ocb = 0; ocb < pl.OCB; ++ocb) {
        args.b = tb.panel.get() + ocb * kBlock;
        args.c = grad + icb * kBlock * pl.OCp + ocb * kBlock;
        args.ncols = std::min(kBlock, p.OCg - ocb * kBlock);
        pl.k.block(&args);
      }
    }
  }
}

}  // namespace

bool bww_bf16_pairs_applies(Isa isa, const ConvProblem& p) {
  // 32 x 32 blocks: with fewer channels on a side the f32 kernels were faster
  // (SPR VM, bf16: benchdnn's 16 -> 17 and 17 -> 16 layers 4-6x, 3D 1x1 s2
  // 16 -> 16 2.4x slower on the tiles).
  return block_kernel(isa).block && p.ICg >= 32 && p.OCg >= 32 && p.N > 0 &&
         p.src_spatial() > 0;
}

bool backward_weights_bf16_pairs(Isa isa, const ConvProblem& p, const uint16_t* src_cnx,
                                 const uint16_t* dy_nxc, WeightsView diff_w, int nthreads) {
  if (!bww_bf16_pairs_applies(isa, p)) return false;
  const BwwPairsPlan pl = plan_bww_pairs(isa, p, nthreads);
  const int64_t grad = p.G * pl.T * pl.ICp * pl.OCp;
  AlignedBuf<float> scratch = aligned_buffer<float>(grad, 16);
  float* const sc = scratch.get();
#pragma omp parallel num_threads(nthreads)
  {
    TaskBufs tb(pl);
    if (pl.k.begin) pl.k.begin();
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < pl.tasks; ++task) run_task(pl, src_cnx, dy_nxc, sc, task, tb);
    if (pl.k.end) pl.k.end();
    // The sums rounded once, in diff_w's layout.
    uint16_t* const dw = static_cast<uint16_t*>(diff_w.data);
    uint16_t* const r16 = tb.row16.data();
#pragma omp for schedule(static)
    for (int64_t gi = 0; gi < p.G * p.ICg; ++gi) {
      const int64_t g = gi / p.ICg, ic = gi % p.ICg;
      for (int64_t t = 0; t < pl.T; ++t) {
        const int64_t koff = pl.koff_k[0][t] * diff_w.sk[0] + pl.koff_k[1][t] * diff_w.sk[1] +
                             pl.koff_k[2][t] * diff_w.sk[2];
        const float* s = sc + ((g * pl.T + t) * pl.ICp + ic) * pl.OCp;
        uint16_t* d = dw + gi * diff_w.si + koff;
        if (diff_w.so == 1) {
          f32_to_bf16_avx512(s, d, p.OCg);
        } else {
          f32_to_bf16_avx512(s, r16, p.OCg);
          for (int64_t oc = 0; oc < p.OCg; ++oc) d[oc * diff_w.so] = r16[oc];
        }
      }
    }
  }
  return true;
}

std::string describe_bwd_weights_bf16_pairs(Isa isa, const ConvProblem& p, int nthreads) {
  const BwwPairsPlan pl = plan_bww_pairs(isa, p, nthreads);
  return std::string(isa == Isa::Avx512Amx ? "bww_amx" : "bww_pairs") + " tile=" + pl.k.name +
         " step=32 chunk=" + std::to_string(pl.chunk) +
         " icb=" + std::to_string(pl.ICB) + " ocb=" + std::to_string(pl.OCB) +
         " parts=" + std::to_string(pl.parts) + " tasks=" + std::to_string(pl.tasks) +
         " scratch_bytes=" + std::to_string(4 * p.G * pl.T * pl.ICp * pl.OCp);
}

}  // namespace x86
}  // namespace tct
