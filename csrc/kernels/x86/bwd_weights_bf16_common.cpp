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
// The f32 sums are kept in a scratch gradient [pieces][G][T][ICp][OCp] (the
// caller's buffer; tiles loaded and stored per chunk of steps; the first
// chunk's start from zero, so the scratch is never cleared), each element
// summed by one task in pixel order: the same bits for any thread count
// (SPEC 5). Pieces (VDPBF16PS, few (group, tap) GEMMs, e.g. 1x1 layers) cut
// the pixels in parts of the problem, added in piece order at the end. The
// last pass rounds each sum once into the bf16 gradient.
//
// Whole reductions (VDPBF16PS; every pixel in one chunk, or a few chunks
// whose panels take no more memory than the sums would): B of every (group,
// tap, chunk) packed once into the caller's buffer, shared, and a task per
// (group, input-channel block) sums all its taps in its own buffer, chunk by
// chunk, and rounds them itself: no scratch gradient, no last pass.
//
// Fused taps (VDPBF16PS, fewer than 32 output channels, e.g. an RGB output
// layer): one GEMM per run of tap rows instead of per tap, its columns the
// (tap, output channel) pairs of those taps (AlexNet's 96 -> 3 k11: 363
// columns, not 121 blocks of 3 in 32). A's steps are then every src pixel
// in place; B's pair is zero where a pixel's tap falls outside diff_dst.
// So that NaN / Inf in src stay where the reference puts them (it never
// multiplies src by a missing diff_dst), the few non-finite src elements of
// border pixels (those with such a tap) are zeroed in A and summed exactly
// afterwards, tap by tap.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "../dispatch.h"
#include "../types.h"
#include "buffers.h"
#include "conv_f32_kernels.h"
#include "convert.h"
#include "transpose.h"
#include "x86.h"

namespace tct {
namespace x86 {
namespace {

constexpr int64_t kStep = 32;      // pixels per step (a TDPBF16PS's, 16 VDPBF16PS pair steps)
constexpr int64_t kSteps = 8;      // steps per chunk (a B panel, a C residency): AMX
constexpr int64_t kMaxSteps = 16;  // VDPBF16PS: up to 16 where the panel stays small
constexpr int64_t kBlock = 32;     // channels per row / column block
// Fused taps: columns of a row group at most, pixels of a piece about, pieces at most.
constexpr int64_t kFusedCols = 512, kPiecePixels = 1024, kMaxPieces = 8;
// Whole reductions: a task's f32 sums (all taps of 32 input channels) at most
// (Zen 5's L2; 3D U-Net's dilated 512 -> 256 k3, 864 KiB: 7.7 -> 3.4 ms).
constexpr int64_t kWholeSums = 1024 << 10;

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

// Fused taps (the comment at the top): VDPBF16PS, few output channels,
// input channels that fill their 32-row blocks (at most a quarter padding)
// and 64 columns or more. Zen 5, against the f32 kernels on widened copies
// (2 threads): AlexNet 96 -> 3 k11 s4 1.6x, GoogLeNet 64 -> 3 k7 d2 1.75x,
// while DCGAN's 64 -> 3 k4 (48 columns) ran 0.86-1.1x, 1D 64 -> 3 k7 (21)
// 0.6-1.0x, 36 -> 4 k3 (36 rows in 64) 0.7x: a pixel pair's packing is
// then paid for by too few products.
bool fused_applies(Isa isa, const ConvProblem& p) {
  return isa == Isa::Avx512Bf16 && p.ICg >= 32 && p.OCg < 32 &&
         4 * round_up(p.ICg, 32) <= 5 * p.ICg && p.taps() * p.OCg >= 64;
}

struct BwwPairsPlan {
  BlockKernel k;
  ConvProblem p;
  // OCp: per-tap plans, the padded output channels (the scratch's row and the
  // panel's width); fused, the widest row group's padded columns (the panel's).
  int64_t T = 0, ICB = 0, OCB = 0, ICp = 0, OCp = 0, ipix = 0, opix = 0;
  // Fused taps: tap rows (taps over the innermost kernel axis K2), R rows per
  // task in RG row groups; group rg's columns start at colbase[rg] of a
  // scratch row of ldc floats (each group's padded to 16).
  // pieces of piece pixels each (the last shorter), each its own sums.
  bool fused = false;
  int64_t K2 = 1, rows = 1, R = 1, RG = 1, ldc = 0, pieces = 1, piece = 0;
  // Whole reductions (per-tap, VDPBF16PS): every pixel in one chunk, every
  // (group, tap)'s B panel packed once and shared, a task per (group,
  // input-channel block) summing all taps in its own buffer and rounding
  // them itself: no scratch gradient.
  bool whole = false;
  int64_t nchunks = 1;  // whole reductions: chunks of steps, each panel packed once
  std::vector<int64_t> colbase;
  std::vector<int64_t> ka, kb;  // per innermost src index: its taps inside, [ka, kb)
  BwwFusedGeom geom{};          // the B panels' packing
  int64_t steps = kSteps, chunk = kSteps * kStep;  // per chunk of a task's pixels
  int64_t parts = 1, tasks = 0;
  std::vector<int64_t> koff_k[kAxes];  // per tap: its kernel index along each axis
  // Per axis a, kernel index k and src index i: the diff_dst index, or -1.
  std::vector<int64_t> omap[kAxes];
};

// Pieces of about kPiecePixels pixels (of all images), at most most (at least
// one), each a whole number of steps; the last shorter.
void set_pieces(BwwPairsPlan& pl, int64_t most) {
  const int64_t pixels = pl.p.N * pl.ipix;
  pl.pieces = std::clamp<int64_t>(std::min(ceil_div(pixels, kPiecePixels), most), 1, kMaxPieces);
  pl.piece = round_up(ceil_div(pixels, pl.pieces), kStep);
  pl.pieces = ceil_div(pixels, pl.piece);
}

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
  pl.piece = round_up(p.N * pl.ipix, kStep);
  pl.fused = fused_applies(isa, p);
  if (pl.fused) {
    // Tasks: pieces of the pixels (each its own sums, added in piece order at
    // the end: the pieces are the problem's, not the threads'), then the
    // input-channel blocks split. A task packs B for all columns of its row
    // group and reads its pixels' src once: splitting the columns instead
    // (row groups per task) read src once per group, and ran 2 threads
    // slower than 1 on DCGAN's 64 -> 3. Row groups only bound the panel
    // (at most kFusedCols columns).
    pl.K2 = p.K[2];
    pl.rows = pl.T / pl.K2;
    pl.R = std::clamp<int64_t>(kFusedCols / (pl.K2 * p.OCg), 1, pl.rows);
    pl.RG = ceil_div(pl.rows, pl.R);
    pl.R = ceil_div(pl.rows, pl.RG);  // groups of nearly equal rows
    set_pieces(pl, kMaxPieces);
    pl.colbase.assign(static_cast<size_t>(pl.RG + 1), 0);
    pl.OCp = 0;
    for (int64_t rg = 0; rg < pl.RG; ++rg) {
      const int64_t n = std::min(pl.rows, (rg + 1) * pl.R) - rg * pl.R;
      const int64_t w = round_up(n * pl.K2 * p.OCg, 16);
      pl.colbase[rg + 1] = pl.colbase[rg] + w;
      pl.OCp = std::max(pl.OCp, w);
    }
    pl.ldc = pl.colbase[pl.RG];
    pl.parts = std::clamp<int64_t>(ceil_div(2 * nthreads, pl.pieces * p.G * pl.RG), 1, pl.ICB);
    pl.geom = bww_fused_geom(pl.K2, p.OCg, p.d[2] * p.OC());
    pl.ka.resize(static_cast<size_t>(p.I[2]));
    pl.kb.resize(static_cast<size_t>(p.I[2]));
    const TapAxis ax = p.axis(2);
    for (int64_t i = 0; i < p.I[2]; ++i) {
      int64_t a = 0, b = ax.K;
      while (a < b && ax.dst_at(i, a) < 0) ++a;
      while (b > a && ax.dst_at(i, b - 1) < 0) --b;
      pl.ka[i] = a;
      pl.kb[i] = b;
    }
  }
  if (isa == Isa::Avx512Bf16) {
    // VDPBF16PS (Zen 4 / 5, 1 MiB L2): a chunk's panel within 256 KiB, up
    // to 16 steps (one chunk for most reductions of a few hundred pixels:
    // each chunk loads and stores every sum); parts of at most 256 KiB of
    // sums, so that a task's sums stay in L2 from chunk to chunk, and at
    // least 4 tasks a thread.
    constexpr int64_t kBudget = 256 << 10;
    const int64_t needed = ceil_div(pl.fused ? pl.piece : p.N * pl.ipix, kStep);
    const int64_t fit = kBudget / (kStep * pl.OCp * 2);  // steps whose panel fits
    pl.steps = std::min(needed, std::max(kSteps, std::min(kMaxSteps, fit)));
    const int64_t icbs = std::max<int64_t>(1, kBudget / (kBlock * pl.OCp * 4));  // sums' blocks
    if (!pl.fused) {
      // Few (group, tap) GEMMs (1x1 layers): pieces of the pixels too, of
      // the problem (not the threads), so that the tasks need not split the
      // input channels finer than the sums' budget, each part packing B
      // again (GoogLeNet's 192 -> 480 1x1: 6 parts packed B 6 times, 27 % of
      // a one-core call); their copies of the sums within 4 MiB.
      const int64_t copy = p.G * pl.T * pl.ICp * pl.OCp * 4;
      set_pieces(pl, std::min(kMaxPieces / gt, (4 << 20) / copy));
      pl.parts = std::clamp<int64_t>(
          std::max(ceil_div(pl.ICB, icbs), ceil_div(4 * nthreads, gt * pl.pieces)), 1, pl.ICB);
      pl.steps = std::min(ceil_div(pl.piece, kStep), pl.steps);
      // Whole: a task's sums of all taps within kWholeSums, and one chunk,
      // or several whose panels (of all taps) take at most half the memory
      // of the per-tap plan's sums (a reduction short against the input
      // channels). U-Net's 1024 -> 512 k2 s2 on 23x30 (3 MiB of panels, 8
      // MiB of sums): each of 8 parts packed every panel again, 12 % of the
      // call, and the rounding pass read the sums back; one Zen 5 core
      // 9.2-9.9 -> 8.4-9.0 ms. With panels as large as the sums (512 -> 256
      // k4 s2 on 32x32, 3D U-Net's k3), each task streaming them all ran no
      // faster. The panels are packed once and shared, a task's sums stay
      // in L2 from chunk to chunk, and each element is still summed chunk by
      // chunk in pixel order (the same bits as the per-tap plan).
      const int64_t nchunks = ceil_div(p.N * pl.ipix, pl.steps * kStep);
      const int64_t panels = nchunks * pl.steps * kStep / 2 * pl.OCp;  // per (group, tap)
      if (pl.T * kBlock * pl.OCp * 4 <= kWholeSums &&
          (nchunks == 1 || 2 * panels <= pl.pieces * pl.ICp * pl.OCp)) {
        pl.whole = true;
        pl.nchunks = nchunks;
        pl.pieces = 1;
        pl.piece = round_up(p.N * pl.ipix, kStep);
        pl.parts = pl.ICB;
      }
    }
  }
  pl.chunk = pl.steps * kStep;
  pl.tasks = pl.whole ? p.G * pl.ICB
             : (pl.fused ? pl.pieces * p.G * pl.RG : pl.pieces * gt) * pl.parts;
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

// A src pixel of all images: its image's first diff_dst pixel and its indices.
struct PixAt {
  int64_t img = 0, i0 = 0, i1 = 0, i2 = 0;
};

PixAt pix_at(const BwwPairsPlan& pl, int64_t j) {
  const ConvProblem& p = pl.p;
  const int64_t r = j % pl.ipix;
  return {j / pl.ipix * pl.opix, r / (p.I[1] * p.I[2]), r / p.I[2] % p.I[1], r % p.I[2]};
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
  // Fused taps: per step its border pixels (a tap of the row group outside);
  // the non-finite src elements of border pixels zeroed in A, as
  // (channel in the group, pixel of all images), summed exactly afterwards.
  uint32_t border[kMaxSteps];
  std::vector<std::pair<int64_t, int64_t>> fixups;
  std::vector<PixAt> xs;           // the chunk's pixels
  std::vector<BwwFusedRow> frows;  // a pair's tap rows
  std::vector<const uint16_t*> rowp;  // a segment's tap rows
  AlignedBuf<float> tile;             // the rounding pass's transposed block
  AlignedBuf<float> local;            // whole reductions: a task's sums
  explicit TaskBufs(const BwwPairsPlan& pl)
      : panel(aligned_buffer<uint32_t>(pl.chunk / 2 * pl.OCp + 16)),  // + a run's spill
        opix(static_cast<size_t>(pl.chunk)),
        agather(aligned_buffer<uint16_t>(2 * pl.steps * 16 * kStep)),
        row16(static_cast<size_t>(pl.OCp)),
        xs(pl.fused ? static_cast<size_t>(pl.chunk) : 0),
        frows(pl.fused ? static_cast<size_t>(pl.R) : 0),
        rowp(pl.fused ? static_cast<size_t>(pl.R) : 0),
        tile(aligned_buffer<float>(16 * 16)),
        local(aligned_buffer<float>(pl.whole ? pl.T * kBlock * pl.OCp : 0)) {}
};

// Chunk [j0, j0 + len) of the pixels of all images (image-major) under tap
// t of group g: the B panel and the diff_dst rows (of all images).
void pack_b(const BwwPairsPlan& pl, const uint16_t* dy, int64_t g, int64_t t, int64_t j0,
            int64_t len, TaskBufs& tb, uint32_t* panel, uint32_t* valid) {
  const ConvProblem& p = pl.p;
  const int64_t OC = p.OC();
  const uint16_t* const img = dy + g * p.OCg;
  // The chunk's pixels stepped through (image, i0, i1, i2) with carries.
  const int64_t* const m0 = pl.omap[0].data() + pl.koff_k[0][t] * p.I[0];
  const int64_t* const m1 = pl.omap[1].data() + pl.koff_k[1][t] * p.I[1];
  const int64_t* const m2 = pl.omap[2].data() + pl.koff_k[2][t] * p.I[2];
  const int64_t r = j0 % pl.ipix;
  int64_t n = j0 / pl.ipix, i0 = r / (p.I[1] * p.I[2]), i1 = r / p.I[2] % p.I[1], i2 = r % p.I[2];
  for (int64_t k = 0; k < pl.steps; ++k) valid[k] = 0;
  for (int64_t j = 0; j < pl.chunk; ++j) {
    int64_t row = -1;
    if (j < len) {
      const int64_t o0 = m0[i0], o1 = m1[i1], o2 = m2[i2];
      if ((o0 | o1 | o2) >= 0) {
        row = n * pl.opix + (o0 * p.O[1] + o1) * p.O[2] + o2;
        valid[j / kStep] |= 1u << (j % kStep);
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
                       p.OCg, pl.OCp, panel + q * pl.OCp);
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
  const int64_t part = task % pl.parts, pgt = task / pl.parts, ngt = p.G * pl.T;
  const int64_t gt = pgt % ngt, piece = pgt / ngt;
  const int64_t g = gt / pl.T, t = gt % pl.T;
  const int64_t icb0 = pl.ICB * part / pl.parts, icb1 = pl.ICB * (part + 1) / pl.parts;
  float* const grad = scratch + (piece * ngt + gt) * pl.ICp * pl.OCp;
  BwwPairsBlockArgs args;
  args.a = tb.a;
  args.lda = tb.lda;
  args.ldb = pl.OCp;
  args.ldc = pl.OCp;
  const int64_t first = piece * pl.piece, last = std::min(p.N * pl.ipix, first + pl.piece);
  for (int64_t j0 = first; j0 < last; j0 += pl.chunk) {
    const int64_t len = std::min(pl.chunk, last - j0);
    pack_b(pl, dy, g, t, j0, len, tb, tb.panel.get(), tb.valid);
    args.nks = (len + kStep - 1) / kStep;
    args.zero = j0 == first;
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

// ---- fused taps

// Tap row r's diff_dst pixel (k2's position 0 of the row: the row's first
// element lies at that pixel's channels plus o2(k2) pixels), or -1 where the
// row misses diff_dst.
int64_t row_pixel(const BwwPairsPlan& pl, const PixAt& x, int64_t r) {
  const ConvProblem& p = pl.p;
  const int64_t k0 = r / p.K[1], k1 = r % p.K[1];
  const int64_t o0 = pl.omap[0][k0 * p.I[0] + x.i0], o1 = pl.omap[1][k1 * p.I[1] + x.i1];
  if ((o0 | o1) < 0) return -1;
  return x.img + (o0 * p.O[1] + o1) * p.O[2];
}

// Chunk [j0, j0 + len) of the pixels under row group rg of group g: the B
// panel (row q: the pairs of pixels 2q, 2q + 1, column (tap - first tap of
// the group) * OCg + oc; zero columns to the panel's width) and each step's
// valid and border pixels.
void pack_b_fused(const BwwPairsPlan& pl, const uint16_t* dy, int64_t g, int64_t rg, int64_t j0,
                  int64_t len, TaskBufs& tb) {
  const ConvProblem& p = pl.p;
  const int64_t OC = p.OC(), OCg = p.OCg, K1 = p.K[1], K2 = pl.K2;
  const int64_t I0 = p.I[0], I1 = p.I[1], I2 = p.I[2], O1 = p.O[1], O2 = p.O[2];
  const int64_t r0 = rg * pl.R, r1 = std::min(pl.rows, r0 + pl.R);
  const int64_t width = pl.colbase[rg + 1] - pl.colbase[rg];
  const int64_t *const m0 = pl.omap[0].data(), *const m1 = pl.omap[1].data();
  const int64_t* const m2 = pl.omap[2].data();
  const uint16_t* const base = dy + g * OCg;
  for (int64_t k = 0; k < pl.steps; ++k) tb.valid[k] = tb.border[k] = 0;
  const int64_t pairs = (len + kStep - 1) / kStep * (kStep / 2);  // whole steps
  // The chunk's pixels, stepped through with carries.
  PixAt x = pix_at(pl, j0);
  PixAt* const xs = tb.xs.data();
  for (int64_t j = 0; j < len; ++j) {
    xs[j] = x;
    if (++x.i2 == I2) {
      x.i2 = 0;
      if (++x.i1 == I1) {
        x.i1 = 0;
        if (++x.i0 == I0) x.i0 = 0, x.img += pl.opix;
      }
    }
  }
  const BwwFusedGeom& geom = pl.geom;
  BwwFusedRow* const fr = tb.frows.data();
  const uint16_t** const rp = tb.rowp.data();
  const int64_t nr = r1 - r0, step_px = p.s[2] * OC;
  auto interior = [&](int64_t i2) { return pl.ka[i2] == 0 && pl.kb[i2] == K2; };
  const bool segments = geom.tap_stride == OCg || geom.window;
  auto mark = [&](int64_t j, bool border) {
    tb.valid[j / kStep] |= 1u << (j % kStep);
    if (border) tb.border[j / kStep] |= 1u << (j % kStep);
  };
  for (int64_t q = 0; q < pairs;) {
    uint32_t* const row = tb.panel.get() + q * width;
    // A segment: pairs of consecutive pixels of one src row, every tap of
    // theirs inside on the innermost axis (consecutive taps only).
    int64_t q1 = q;
    if (segments) {
      const PixAt& x = xs[2 * q];
      while (q1 < pairs && 2 * q1 + 1 < len && xs[2 * q1].i2 == x.i2 + 2 * (q1 - q) &&
             xs[2 * q1 + 1].i2 == x.i2 + 2 * (q1 - q) + 1 && interior(xs[2 * q1].i2) &&
             interior(xs[2 * q1 + 1].i2))
        ++q1;
    }
    if (q1 > q) {
      const PixAt& x = xs[2 * q];
      bool missing = false;
      int64_t k0 = r0 / K1, k1 = r0 % K1;
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t o0 = m0[k0 * I0 + x.i0], o1 = m1[k1 * I1 + x.i1];
        rp[r] = nullptr;
        if ((o0 | o1) >= 0)
          rp[r] = base + (x.img + (o0 * O1 + o1) * O2 + m2[x.i2]) * OC;
        else
          missing = true;
        if (++k1 == K1) k1 = 0, ++k0;
      }
      bww_bf16_fused_segment_avx512(rp, nr, geom, step_px, q1 - q, width, row);
      for (int64_t j = 2 * q; j < 2 * q1; ++j) mark(j, missing);
      q = q1;
      continue;
    }
    const int nh = static_cast<int>(std::clamp<int64_t>(len - 2 * q, 0, 2));  // pixels present
    // Per pixel h: its taps inside on the innermost axis [a, b), that axis's
    // dst position at tap a, its row maps.
    int64_t a[2] = {0, 0}, b[2] = {0, 0}, e[2] = {0, 0};
    const int64_t* r0m[2] = {nullptr, nullptr};
    const int64_t* r1m[2] = {nullptr, nullptr};
    bool border[2] = {false, false};
    for (int h = 0; h < nh; ++h) {
      const PixAt& y = xs[2 * q + h];
      a[h] = pl.ka[y.i2];
      b[h] = pl.kb[y.i2];
      border[h] = !interior(y.i2);
      e[h] = a[h] < b[h] ? m2[a[h] * I2 + y.i2] : 0;
      r0m[h] = m0 + y.i0;
      r1m[h] = m1 + y.i1;
    }
    int64_t k0 = r0 / K1, k1 = r0 % K1;
    for (int64_t r = 0; r < nr; ++r) {
      BwwFusedRow& w = fr[r];
      for (int h = 0; h < 2; ++h) {
        w.p[h] = nullptr;
        w.a[h] = a[h];
        w.b[h] = b[h];
        if (h >= nh) continue;
        const int64_t o0 = r0m[h][k0 * I0], o1 = r1m[h][k1 * I1];
        if ((o0 | o1) >= 0 && a[h] < b[h])
          w.p[h] = base + (xs[2 * q + h].img + (o0 * O1 + o1) * O2 + e[h]) * OC;
        else
          border[h] = true;
      }
      if (++k1 == K1) k1 = 0, ++k0;
    }
    bww_bf16_fused_pairs_avx512(fr, nr, geom, row);  // and the padding (< 16 columns)
    for (int h = 0; h < nh; ++h) mark(2 * q + h, border[h]);
    ++q;
  }
}

// The A operands of steps [0, nks) for input-channel block icb: every src
// pixel, in place where the step's 32 pixels exist, 16 channels exist and no
// border pixel holds a non-finite value; else gathered, with those values
// zeroed and listed in tb.fixups.
void pack_a_fused(const BwwPairsPlan& pl, const uint16_t* src, int64_t g, int64_t icb,
                  int64_t j0, int64_t nks, TaskBufs& tb) {
  const ConvProblem& p = pl.p;
  const int64_t ipix = p.N * pl.ipix;
  uint32_t bad[16];
  for (int64_t k = 0; k < nks; ++k) {
    const uint32_t valid = tb.valid[k], border = tb.border[k];
    for (int h = 0; h < 2; ++h) {
      const int64_t ic0 = icb * kBlock + 16 * h;
      const int rows = static_cast<int>(std::clamp<int64_t>(p.ICg - ic0, 0, 16));
      const uint16_t* base = src + (g * p.ICg + ic0) * ipix + j0 + k * kStep;
      const int64_t s = 2 * k + h;
      const bool nonfinite =
          rows > 0 && border != 0 && bww_bf16_nonfinite_avx512(base, ipix, border, valid, rows, bad);
      if (valid == ~0u && rows == 16 && !nonfinite) {
        tb.a[s] = base;
        tb.lda[s] = ipix * 2;
        continue;
      }
      uint16_t* d = tb.agather.get() + s * 16 * kStep;
      bww_bf16_gather_avx512(rows > 0 ? base : nullptr, ipix, rows > 0 ? valid : 0, rows, d);
      if (nonfinite)
        for (int m = 0; m < rows; ++m)
          for (uint32_t bits = bad[m]; bits != 0; bits &= bits - 1) {
            const int l = __builtin_ctz(bits);
            d[m * kStep + l] = 0;
            tb.fixups.emplace_back(ic0 + m, j0 + k * kStep + l);
          }
      tb.a[s] = d;
      tb.lda[s] = kStep * 2;
    }
  }
}

// The listed non-finite src elements' products, tap by tap, into group g's
// sums of row group rg (c: its first column).
void apply_fixups(const BwwPairsPlan& pl, const uint16_t* src, const uint16_t* dy, int64_t g,
                  int64_t rg, float* c, TaskBufs& tb) {
  const ConvProblem& p = pl.p;
  const int64_t OC = p.OC(), OCg = p.OCg, K2 = pl.K2, I2 = p.I[2];
  const int64_t r0 = rg * pl.R, r1 = std::min(pl.rows, r0 + pl.R);
  for (const auto& [ic, j] : tb.fixups) {
    const float v = to_float(bf16{src[(g * p.ICg + ic) * p.N * pl.ipix + j]});
    const PixAt x = pix_at(pl, j);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t pix = row_pixel(pl, x, r);
      if (pix < 0) continue;
      for (int64_t k2 = pl.ka[x.i2]; k2 < pl.kb[x.i2]; ++k2) {
        const uint16_t* y = dy + (pix + pl.omap[2][k2 * I2 + x.i2]) * OC + g * OCg;
        float* const out = c + ic * pl.ldc + ((r - r0) * K2 + k2) * OCg;
        for (int64_t oc = 0; oc < OCg; ++oc) out[oc] += v * to_float(bf16{y[oc]});
      }
    }
  }
  tb.fixups.clear();
}

// Task (g, row group, part): every image and chunk, its input-channel blocks.
void run_task_fused(const BwwPairsPlan& pl, const uint16_t* src, const uint16_t* dy,
                    float* scratch, int64_t task, TaskBufs& tb) {
  const ConvProblem& p = pl.p;
  const int64_t part = task % pl.parts, rest = task / pl.parts;
  const int64_t rg = rest % pl.RG, g = rest / pl.RG % p.G, piece = rest / (pl.RG * p.G);
  const int64_t icb0 = pl.ICB * part / pl.parts, icb1 = pl.ICB * (part + 1) / pl.parts;
  const int64_t width = pl.colbase[rg + 1] - pl.colbase[rg];
  float* const c = scratch + (piece * p.G + g) * pl.ICp * pl.ldc + pl.colbase[rg];
  BwwPairsBlockArgs args;
  args.a = tb.a;
  args.lda = tb.lda;
  args.ldb = width;
  args.ldc = pl.ldc;
  const int64_t first = piece * pl.piece, last = std::min(p.N * pl.ipix, first + pl.piece);
  for (int64_t j0 = first; j0 < last; j0 += pl.chunk) {
    const int64_t len = std::min(pl.chunk, last - j0);
    pack_b_fused(pl, dy, g, rg, j0, len, tb);
    args.nks = (len + kStep - 1) / kStep;
    args.zero = j0 == first;
    for (int64_t icb = icb0; icb < icb1; ++icb) {
      pack_a_fused(pl, src, g, icb, j0, args.nks, tb);
      for (int64_t cb = 0; cb < width; cb += kBlock) {
        args.b = tb.panel.get() + cb;
        args.c = c + icb * kBlock * pl.ldc + cb;
        args.ncols = std::min(kBlock, width - cb);
        pl.k.block(&args);
      }
      if (!tb.fixups.empty()) apply_fixups(pl, src, dy, g, rg, c, tb);
    }
  }
}

// One input channel's sums of every tap (tap t's OCg at s + t * ld_tap)
// rounded into its gradient row d (tap t at koff[t], channel stride so):
// rows of channels where they are contiguous, else 16 taps (consecutive
// outputs) x 16 channels transposed and each channel's taps written as one
// row (element by element, HiFi-GAN's 512 -> 256 k16 took 3.3 ms to write
// on one Zen 5 core, more than its products).
void round_channel_taps(const float* s, int64_t ld_tap, int64_t T, const int64_t* koff,
                        int64_t OCg, int64_t so, uint16_t* d, float* tile) {
  if (so == 1) {
    for (int64_t t = 0; t < T; ++t) f32_to_bf16_avx512(s + t * ld_tap, d + koff[t], OCg);
    return;
  }
  uint16_t t16[16 * 16];
  float* rows[16];
  for (int64_t t0 = 0; t0 < T;) {
    int64_t nt = 1;  // taps t0 .. t0 + nt written consecutively
    while (nt < 16 && t0 + nt < T && koff[t0 + nt] == koff[t0] + nt) ++nt;
    const float* const st = s + t0 * ld_tap;
    for (int64_t oc0 = 0; oc0 < OCg; oc0 += 16) {
      const int nc = static_cast<int>(std::min<int64_t>(16, OCg - oc0));
      if (nt == 16 && nc == 16) {
        transpose_block16_avx512(st + oc0, ld_tap, tile, 16);
      } else {
        for (int j = 0; j < nc; ++j) rows[j] = tile + 16 * j;
        transpose_rows_avx512(st + oc0, ld_tap, static_cast<int>(nt), nc, rows);
      }
      f32_to_bf16_avx512(tile, t16, 16 * nc);
      for (int j = 0; j < nc; ++j) std::memcpy(d + (oc0 + j) * so + koff[t0], t16 + 16 * j, 2 * nt);
    }
    t0 += nt;
  }
}

// Per tap, its offset in a gradient row (the kernel indices in diff_w's strides).
std::vector<int64_t> tap_offsets(const BwwPairsPlan& pl, const WeightsView& diff_w) {
  std::vector<int64_t> koff(static_cast<size_t>(pl.T));
  for (int64_t t = 0; t < pl.T; ++t)
    koff[t] = pl.koff_k[0][t] * diff_w.sk[0] + pl.koff_k[1][t] * diff_w.sk[1] +
              pl.koff_k[2][t] * diff_w.sk[2];
  return koff;
}

// A whole-reduction task (group g, input-channel block icb): every tap's sums
// of its 32 channels into the thread's buffer, chunk by chunk (the first from
// zero), then rounded into the gradient. B: the shared panels (and their
// valid pixels) of every (group, tap, chunk).
void run_task_whole(const BwwPairsPlan& pl, const uint16_t* src, const uint32_t* panels,
                    const uint32_t* valid, const int64_t* koff, WeightsView diff_w, int64_t task,
                    TaskBufs& tb) {
  const ConvProblem& p = pl.p;
  const int64_t g = task / pl.ICB, icb = task % pl.ICB;
  const int64_t panel = pl.chunk / 2 * pl.OCp, ld_tap = kBlock * pl.OCp;
  const int64_t pixels = p.N * pl.ipix;
  float* const sums = tb.local.get();
  BwwPairsBlockArgs args;
  args.a = tb.a;
  args.lda = tb.lda;
  args.ldb = pl.OCp;
  args.ldc = pl.OCp;
  for (int64_t ch = 0; ch < pl.nchunks; ++ch) {
    const int64_t j0 = ch * pl.chunk;
    args.nks = ceil_div(std::min(pl.chunk, pixels - j0), kStep);
    args.zero = ch == 0;
    for (int64_t t = 0; t < pl.T; ++t) {
      const int64_t gtc = (g * pl.T + t) * pl.nchunks + ch;
      std::memcpy(tb.valid, valid + gtc * pl.steps, sizeof(uint32_t) * pl.steps);
      pack_a(pl, src, g, icb, j0, args.nks, tb);
      for (int64_t ocb = 0; ocb < pl.OCB; ++ocb) {
        args.b = panels + gtc * panel + ocb * kBlock;
        args.c = sums + t * ld_tap + ocb * kBlock;
        args.ncols = std::min(kBlock, p.OCg - ocb * kBlock);
        pl.k.block(&args);
      }
    }
  }
  uint16_t* const dw = static_cast<uint16_t*>(diff_w.data);
  for (int64_t m = 0; m < std::min(kBlock, p.ICg - icb * kBlock); ++m) {
    const int64_t gi = g * p.ICg + icb * kBlock + m;
    round_channel_taps(sums + m * pl.OCp, ld_tap, pl.T, koff, p.OCg, diff_w.so,
                       dw + gi * diff_w.si, tb.tile.get());
  }
}

// The rounding pass of a gradient whose output channels are contiguous
// (XOI, XIO), or of fused taps (few channels, any layout): per (group,
// input channel) and tap, a row of OCg sums.
void round_channels_inner(const BwwPairsPlan& pl, const float* sc, WeightsView diff_w,
                          TaskBufs& tb) {
  const ConvProblem& p = pl.p;
  uint16_t* const dw = static_cast<uint16_t*>(diff_w.data);
  uint16_t* const r16 = tb.row16.data();
  const std::vector<int64_t> koff = tap_offsets(pl, diff_w);
#pragma omp for schedule(static)
  for (int64_t gi = 0; gi < p.G * p.ICg; ++gi) {
    const int64_t g = gi / p.ICg, ic = gi % p.ICg;
    for (int64_t t = 0; t < pl.T; ++t) {
      const float* s = sc + ((g * pl.T + t) * pl.ICp + ic) * pl.OCp;
      if (pl.fused) {
        const int64_t r = t / pl.K2, rg = r / pl.R;
        s = sc + (g * pl.ICp + ic) * pl.ldc + pl.colbase[rg] +
            ((r - rg * pl.R) * pl.K2 + t % pl.K2) * p.OCg;
      }
      uint16_t* d = dw + gi * diff_w.si + koff[t];
      if (diff_w.so == 1) {
        f32_to_bf16_avx512(s, d, p.OCg);
      } else {
        f32_to_bf16_avx512(s, r16, p.OCg);
        for (int64_t oc = 0; oc < p.OCg; ++oc) d[oc * diff_w.so] = r16[oc];
      }
    }
  }
}

// The rounding pass of a per-tap plan's gradient with the taps nearer than
// the output channels (IOX, OIX: the layout of torch's weights), per (group,
// input channel): round_channel_taps.
void round_taps_inner(const BwwPairsPlan& pl, const float* sc, WeightsView diff_w, TaskBufs& tb) {
  const ConvProblem& p = pl.p;
  uint16_t* const dw = static_cast<uint16_t*>(diff_w.data);
  const std::vector<int64_t> koff = tap_offsets(pl, diff_w);
#pragma omp for schedule(static)
  for (int64_t gi = 0; gi < p.G * p.ICg; ++gi) {
    const int64_t g = gi / p.ICg, ic = gi % p.ICg;
    round_channel_taps(sc + (g * pl.T * pl.ICp + ic) * pl.OCp, pl.ICp * pl.OCp, pl.T,
                       koff.data(), p.OCg, diff_w.so, dw + gi * diff_w.si, tb.tile.get());
  }
}

// Floats of the driver's scratch: the whole reductions' shared panels (32-bit
// pairs), else the f32 sums of every piece.
int64_t scratch_floats(const BwwPairsPlan& pl) {
  const ConvProblem& p = pl.p;
  if (pl.whole) return p.G * pl.T * pl.nchunks * (pl.chunk / 2) * pl.OCp;
  return pl.pieces * p.G * pl.ICp * (pl.fused ? pl.ldc : pl.T * pl.OCp);
}

}  // namespace

bool bww_bf16_pairs_applies(Isa isa, const ConvProblem& p) {
  // 32 x 32 blocks: with fewer channels on a side the f32 kernels were faster
  // (SPR VM, bf16: benchdnn's 16 -> 17 and 17 -> 16 layers 4-6x, 3D 1x1 s2
  // 16 -> 16 2.4x slower on the tiles).
  return block_kernel(isa).block && ((p.ICg >= 32 && p.OCg >= 32) || fused_applies(isa, p)) &&
         p.N > 0 && p.src_spatial() > 0;
}

int64_t bww_bf16_pairs_scratch_floats(Isa isa, const ConvProblem& p, int nthreads) {
  // + 16: room to align the caller's buffer to 64 bytes.
  return bww_bf16_pairs_applies(isa, p) ? scratch_floats(plan_bww_pairs(isa, p, nthreads)) + 16
                                        : 0;
}

bool backward_weights_bf16_pairs(Isa isa, const ConvProblem& p, const uint16_t* src_cnx,
                                 const uint16_t* dy_nxc, WeightsView diff_w, float* scratch,
                                 int nthreads) {
  if (!bww_bf16_pairs_applies(isa, p)) return false;
  const BwwPairsPlan pl = plan_bww_pairs(isa, p, nthreads);
  scratch = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t{63});
  if (pl.whole) {
    const int64_t gtcs = p.G * pl.T * pl.nchunks, panel = pl.chunk / 2 * pl.OCp;
    const int64_t pixels = p.N * pl.ipix;
    uint32_t* const panels = reinterpret_cast<uint32_t*>(scratch);
    std::vector<uint32_t> valid(static_cast<size_t>(gtcs * pl.steps));
    const std::vector<int64_t> koff = tap_offsets(pl, diff_w);
#pragma omp parallel num_threads(nthreads)
    {
      TaskBufs tb(pl);
#pragma omp for schedule(dynamic, 1)
      for (int64_t gtc = 0; gtc < gtcs; ++gtc) {
        const int64_t gt = gtc / pl.nchunks, j0 = gtc % pl.nchunks * pl.chunk;
        pack_b(pl, dy_nxc, gt / pl.T, gt % pl.T, j0, std::min(pl.chunk, pixels - j0), tb,
               panels + gtc * panel, valid.data() + gtc * pl.steps);
      }
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < pl.tasks; ++task)
        run_task_whole(pl, src_cnx, panels, valid.data(), koff.data(), diff_w, task, tb);
    }
    return true;
  }
  const int64_t grad = scratch_floats(pl);
  float* const sc = scratch;
#pragma omp parallel num_threads(nthreads)
  {
    TaskBufs tb(pl);
    if (pl.k.begin) pl.k.begin();
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < pl.tasks; ++task) {
      if (pl.fused) run_task_fused(pl, src_cnx, dy_nxc, sc, task, tb);
      else run_task(pl, src_cnx, dy_nxc, sc, task, tb);
    }
    if (pl.k.end) pl.k.end();
    // The pieces' sums added into the first's, in piece order.
    if (pl.pieces > 1) {
      const int64_t copy = grad / pl.pieces;
#pragma omp for schedule(static)
      for (int64_t i0 = 0; i0 < copy; i0 += 256)
        for (int64_t pc = 1; pc < pl.pieces; ++pc) {
          const float* const add = sc + pc * copy;
          for (int64_t i = i0; i < std::min(copy, i0 + 256); ++i) sc[i] += add[i];
        }
    }
    // The sums rounded once, in diff_w's layout.
    if (!pl.fused && diff_w.so != 1) {
      round_taps_inner(pl, sc, diff_w, tb);
    } else {
      round_channels_inner(pl, sc, diff_w, tb);
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
         " pieces=" + std::to_string(pl.pieces) + (pl.whole ? " whole=" + std::to_string(pl.nchunks) : "") +
         (pl.fused ? " fused_rows=" + std::to_string(pl.R) + "/" + std::to_string(pl.rows) +
                         " cols=" + std::to_string(pl.ldc) +
                         (pl.geom.tap_stride == p.OCg ? " runs=1" : " runs=0")
                   : std::string()) +
         " scratch_bytes=" + std::to_string(4 * scratch_floats(pl));
}

}  // namespace x86
}  // namespace tct
