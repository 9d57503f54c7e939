// Driver of the planar (NCX) f32 passes: forward and backward-data by
// direct-convolution tiles over dense NCX tensors read and written in place,
// the one-pixel and non-overlapping shapes as GEMMs or dot products,
// depthwise backward-data by rows, backward-weights by im2col GEMMs or dot
// tiles. docs/design.md ("The planar (NCX) driver") describes the
// algorithms, the packed layouts and the extra memory.
//
// Each call builds a plan first (plan_planar, plan_planar_bwd_weights: pure,
// every decision, the micro-kernels from the ISA's PlanarF32Table); the
// run_* functions only read it. describe() prints a plan in one line.
#include <emmintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "buffers.h"
#include "planar_f32.h"
#include "../types.h"
#include "tiling.h"
#include "x86.h"

namespace tct {
namespace x86 {
namespace {

// Bytes per element of the buffers (the budgets below are in bytes).
constexpr int64_t kFloatBytes = sizeof(float);

// The micro-kernel table of an ISA; null where it has none (the entry points
// then return false and the caller runs the reference).
const PlanarF32Table* table_for(Isa isa) {
  switch (vector_isa(isa)) {
    case Isa::Avx512: return planar_f32_table_avx512();
    case Isa::Avx2: return planar_f32_table_avx2();
    default: return nullptr;
  }
  return nullptr;
}

// Per-thread buffers that grow and are kept (OpenMP threads persist), so a
// call does not fault fresh pages in: the packed weights (slot 0, of the
// calling thread), the rows of a work item (slot 1), a 16-bit input row
// widened (slot 2) and a 16-bit result's f32 sums (slot 3).
float* thread_buffer(int slot, int64_t n) {
  thread_local AlignedBuf<float> buf[4];
  thread_local int64_t cap[4] = {0, 0, 0, 0};
  if (cap[slot] < n) {
    buf[slot].reset();
    buf[slot] = aligned_buffer<float>(n);
    cap[slot] = n;
  }
  return buf[slot].get();
}

// The activations' storage types. The drivers compute in f32: f32 tensors
// are read and written in place; bf16 and f16 ones (16-bit storage) are
// widened where their rows are copied into the buffers the tiles read, and
// the tiles' f32 results are rounded once as they are stored (the routes
// that copy every input row: tiles, depthwise rows, backward-data's im2col
// GEMMs).
template <class T>
constexpr int kIndex16 = -1;  // PlanarF32Table::widen16 / narrow16 entry
template <>
constexpr int kIndex16<bf16> = 0;
template <>
constexpr int kIndex16<f16> = 1;
template <class T>
constexpr bool kIs16 = kIndex16<T> >= 0;

// The pass in planar terms.
struct Geometry {
  bool forward = true;
  int64_t N = 0, G = 1, Cin = 0, Cout = 0;  // channels per group
  std::array<int64_t, kAxes> in{1, 1, 1}, out{1, 1, 1}, K{1, 1, 1}, s{1, 1, 1}, d{1, 1, 1},
      pb{0, 0, 0};
  std::array<int64_t, kAxes> src{1, 1, 1}, dst{1, 1, 1};

  TapAxis axis(int a) const { return {src[a], dst[a], K[a], s[a], d[a], pb[a]}; }
};

Geometry geometry(const ConvProblem& p, bool forward) {
  Geometry g;
  g.forward = forward;
  g.N = p.N;
  g.G = p.G;
  g.Cin = forward ? p.ICg : p.OCg;
  g.Cout = forward ? p.OCg : p.ICg;
  g.src = p.I;
  g.dst = p.O;
  g.K = p.K;
  g.s = p.s;
  g.d = p.d;
  g.pb = p.pb;
  // A pointwise problem is one long line per image.
  bool pointwise = true;
  for (int a = 0; a < kAxes; ++a)
    pointwise = pointwise && p.K[a] == 1 && p.s[a] == 1 && p.pb[a] == 0 && p.O[a] == p.I[a];
  if (pointwise) {
    g.src = {1, 1, p.src_spatial()};
    g.dst = {1, 1, p.dst_spatial()};
  }
  g.in = forward ? g.src : g.dst;
  g.out = forward ? g.dst : g.src;
  return g;
}

// Valid taps of output coordinate o on outer axis a: kernel index and input coordinate.
int outer_taps(const Geometry& g, int a, int64_t o, int64_t* ks, int64_t* is) {
  const TapAxis ax = g.axis(a);
  int n = 0;
  for (int64_t k = 0; k < ax.K; ++k) {
    const int64_t i = g.forward ? ax.src_at(o, k) : ax.dst_at(o, k);
    if (i < 0) continue;
    ks[n] = k;
    is[n] = i;
    ++n;
  }
  return n;
}

// The valid taps of every output coordinate of outer axis a.
struct OuterTaps {
  int n = 0;
  std::vector<int64_t> k, i;
};

std::vector<OuterTaps> outer_tap_table(const Geometry& g, int a) {
  std::vector<OuterTaps> t(static_cast<size_t>(g.out[a]));
  for (int64_t o = 0; o < g.out[a]; ++o) {
    t[o].k.resize(g.K[a]);
    t[o].i.resize(g.K[a]);
    t[o].n = outer_taps(g, a, o, t[o].k.data(), t[o].i.data());
  }
  return t;
}

// Innermost axis: output phases, their taps, the input phases they read.
struct Line {
  int64_t out_phases = 1;  // forward: s2; backward-data: 1
  int64_t in_step = 1;     // input coordinate = j * in_step + q
  std::vector<int64_t> len;                // [out phase] outputs in the phase
  std::vector<std::vector<int64_t>> k;     // [out phase] kernel indices
  std::vector<std::vector<int64_t>> off;   // [out phase] j offset per tap
  std::vector<std::vector<int64_t>> slot;  // [out phase] input-phase slot per tap
  std::vector<int64_t> slot_q;             // [slot] input phase q
  int64_t min_off = 0, max_off = 0, max_len = 0;
};

Line make_line(const Geometry& g) {
  const int a = 2;
  const TapAxis ax = g.axis(a);
  const int64_t s = g.s[a];
  Line L;
  // Forward: one phase per output position mod s, but no more than there are
  // outputs (a stride of 2**31 on a short line must not build 2**31 phases).
  L.out_phases = g.forward ? std::min(s, std::max<int64_t>(g.out[a], 1)) : 1;
  L.in_step = g.forward ? 1 : s;
  L.len.resize(L.out_phases);
  L.k.resize(L.out_phases);
  L.off.resize(L.out_phases);
  L.slot.resize(L.out_phases);
  bool first = true;
  for (int64_t r = 0; r < L.out_phases; ++r) {
    L.len[r] = g.forward ? (g.out[a] > r ? (g.out[a] - r + s - 1) / s : 0) : g.out[a];
    L.max_len = std::max(L.max_len, L.len[r]);
    for (int64_t k = 0; k < g.K[a]; ++k) {
      // Forward: output phase r's taps, each reading the one input phase at
      // its offset; backward-data: every tap, reading input phase q.
      if (g.forward && !ax.reaches(r, k)) continue;
      const int64_t off = g.forward ? ax.src_floor(r, k) : ax.tap_off(k);
      const int64_t q = g.forward ? 0 : ax.tap_phase(k);
      size_t slot = 0;
      while (slot < L.slot_q.size() && L.slot_q[slot] != q) ++slot;
      if (slot == L.slot_q.size()) L.slot_q.push_back(q);
      L.k[r].push_back(k);
      L.off[r].push_back(off);
      L.slot[r].push_back(static_cast<int64_t>(slot));
      L.min_off = first ? off : std::min(L.min_off, off);
      L.max_off = first ? off : std::max(L.max_off, off);
      first = false;
    }
  }
  if (L.slot_q.empty()) L.slot_q.push_back(0);
  return L;
}

struct TileShape {
  int M, NV, VL;
};

TileShape choose_tile(const PlanarF32Table& tab, const Geometry& g, const Line& L) {
  const int VL = tab.vl, accs = tab.tile_accs;
  const int maxm = tab.tile_max_m;
  const int maxnv = tab.tile_max_nv;
  const int need = static_cast<int>(std::min<int64_t>(maxnv, (L.max_len + VL - 1) / VL));
  const int cout = static_cast<int>(std::min<int64_t>(std::max<int64_t>(g.Cout, 1), maxm));
  int M, NV;
  if (cout <= 3) {  // few output channels: wide tiles
    M = cout;
    NV = std::max(1, std::min(need, accs / M));
  } else {
    NV = std::max(1, std::min(need, tab.tile_deep_nv));
    M = static_cast<int>(even_block(g.Cout, std::min(accs / NV, maxm)));  // tiling.h
  }
  return {M, NV, VL};
}

// The most valid (k0, k1) tap pairs (segments) of any output row; at least 1.
int64_t max_segments(const Geometry& g) {
  int64_t max_seg = 1;
  for (int a = 0; a < 2; ++a) {
    int64_t most = 0;
    std::vector<int64_t> ks(g.K[a]), is(g.K[a]);
    for (int64_t o = 0; o < g.out[a]; ++o)
      most = std::max<int64_t>(most, outer_taps(g, a, o, ks.data(), is.data()));
    max_seg *= most;
  }
  return std::max<int64_t>(max_seg, 1);
}

// A strided copy (dst[j] = src[j*step], j < n), and splits into the 2 or 3
// phases of a row (dq[j] = src[2j + q], resp. src[3j + q], j < n).
using StridedCopy = PlanarStridedCopyFn;
using Split2 = PlanarSplit2Fn;
using Split3 = PlanarSplit3Fn;

// The dot tile (rows x columns) that covers an M x N result best: AVX-512
// 4 x 4; AVX2 the shape with the least work over the whole result, a tile
// of m x n costing max(m*n FMAs, m + n loads) per vector (both two per cycle).
struct DotShape {
  int m, n;
};

DotShape dot_shape(const PlanarF32Table& tab, int64_t M, int64_t N) {
  if (!tab.dot_by_cost) return {kPlanarDotMaxM, kPlanarDotMaxN};
  std::vector<DotShape> shapes;
  for (int m = 1; m <= kPlanarDotMaxM; ++m)
    for (int n = 1; n <= kPlanarDotMaxN; ++n)
      if (tab.dot[m][n]) shapes.push_back({m, n});
  if (shapes.empty()) return {1, 1};
  auto tile = [](int64_t a, int64_t b) { return std::max(a * b, a + b); };
  // Equal work: the larger tile.
  return *cheapest(shapes.begin(), shapes.end(), [&](const DotShape& d) {
    return std::make_pair(cover_cost(M, N, d.m, d.n, tile), -d.m * d.n);
  });
}

// One input phase of a row, zero-padded: dst[j - jlo] = row[j*step + q] for
// j in [jlo, jlo + jn), zero where j*step + q falls outside [0, len). Steps
// above 2 use `strided` when given (and its int32 offsets can hold them).
void copy_phase_row(const float* row, int64_t len, int64_t step, int64_t q, int64_t jlo,
                    int64_t jn, float* dst, StridedCopy strided = nullptr) {
  // Short rows (3D, small planes) make this a call per few floats: the
  // divisions only where the run reaches past an end of the row.
  int64_t ja = jlo, jb = jlo + jn;
  if (jn <= 0 || jlo * step + q < 0 || (jlo + jn - 1) * step + q >= len) {
    ja = std::max<int64_t>(jlo, floor_div(-q + step - 1, step));
    jb = std::min<int64_t>(jlo + jn, floor_div(len - 1 - q, step) + 1);
  }
  if (jb <= ja) {
    std::memset(dst, 0, sizeof(float) * jn);
    return;
  }
  if (ja > jlo) std::memset(dst, 0, sizeof(float) * (ja - jlo));
  const float* sp = row + ja * step + q;
  float* dp = dst + (ja - jlo);
  const int64_t n = jb - ja;
  if (step == 1) {
    std::memcpy(dp, sp, sizeof(float) * n);
  } else if (step == 2) {  // every other float: SSE2 (x86-64 baseline) shuffles
    int64_t j = 0;
    for (; j + 5 <= n; j += 4) {  // reads sp[2j .. 2j+7], within sp[0 .. 2(n-1)]
      const __m128 lo = _mm_loadu_ps(sp + 2 * j), hi = _mm_loadu_ps(sp + 2 * j + 4);
      _mm_storeu_ps(dp + j, _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
    }
    for (; j < n; ++j) dp[j] = sp[2 * j];
  } else if (strided && step <= (int64_t{1} << 26)) {  // gather offsets 15 * step fit int32
    strided(sp, step, n, dp);
  } else {
    for (int64_t j = 0; j < n; ++j) dp[j] = sp[j * step];
  }
  if (jb < jlo + jn) std::memset(dst + (jb - jlo), 0, sizeof(float) * (jlo + jn - jb));
}

// Input phases qs[i] (i < nq) of a row into dst + i * dst_stride, as
// copy_phase_row each; steps 2 and 3 with every phase in one pass (split2,
// split3: permutes instead of a gather or a shuffle per phase).
void copy_phase_rows(const float* row, int64_t len, int64_t step, const int64_t* qs, int64_t nq,
                     int64_t jlo, int64_t jn, float* dst, int64_t dst_stride, StridedCopy strided,
                     Split2 split2, Split3 split3) {
  if ((step == 2 || step == 3) && nq == step && jn > 0) {
    float* d[3] = {nullptr, nullptr, nullptr};
    for (int64_t i = 0; i < nq; ++i)
      if (qs[i] >= 0 && qs[i] < step) d[qs[i]] = dst + i * dst_stride;
    // j with all of step*j .. step*j + step-1 inside the row: [ja, jb); below ja, j < 0.
    const int64_t ja = std::max<int64_t>(jlo, 0), jb = std::min(jlo + jn, len / step);
    if (d[0] && d[1] && (step == 2 || d[2]) && jb > ja) {
      for (int64_t q = 0; q < step; ++q) std::memset(d[q], 0, sizeof(float) * (ja - jlo));
      if (step == 2)
        split2(row + 2 * ja, jb - ja, d[0] + (ja - jlo), d[1] + (ja - jlo));
      else
        split3(row + 3 * ja, jb - ja, d[0] + (ja - jlo), d[1] + (ja - jlo), d[2] + (ja - jlo));
      for (int64_t j = jb; j < jlo + jn; ++j)
        for (int64_t q = 0; q < step; ++q)
          d[q][j - jlo] = step * j + q < len ? row[step * j + q] : 0.f;
      return;
    }
  }
  for (int64_t i = 0; i < nq; ++i)
    copy_phase_row(row, len, step, qs[i], jlo, jn, dst + i * dst_stride, strided);
}

// dst[i] = src[i] as f32, i < n, from storage type TA (16-bit: widened).
template <class TA>
void copy_run(const PlanarF32Table& tab, const TA* src, float* dst, int64_t n) {
  if constexpr (kIs16<TA>)
    tab.widen16[kIndex16<TA>](reinterpret_cast<const uint16_t*>(src), dst, n);
  else
    std::memcpy(dst, src, sizeof(float) * n);
}

// Input rows into phase rows as copy_phase_rows, from storage type TA: f32
// rows in place; 16-bit rows widened first, the span the copy reads, into
// `stage` (stage_floats), or straight into the phase row for step 1.
template <class TA>
struct RowCopy {
  const PlanarF32Table& tab;
  float* stage;  // 16-bit only

  void operator()(const TA* row, int64_t len, int64_t step, const int64_t* qs, int64_t nq,
                  int64_t jlo, int64_t jn, float* dst, int64_t dst_stride) const {
    if constexpr (!kIs16<TA>) {
      copy_phase_rows(row, len, step, qs, nq, jlo, jn, dst, dst_stride, tab.strided_copy,
                      tab.split2, tab.split3);
    } else {
      if (step == 1) {  // dst[j - jlo] = row[j + q], zero outside [0, len)
        for (int64_t i = 0; i < nq; ++i) {
          float* d = dst + i * dst_stride;
          const int64_t q = qs[i];
          const int64_t ja = std::clamp<int64_t>(-q, jlo, jlo + jn);
          const int64_t jb = std::clamp<int64_t>(len - q, ja, jlo + jn);
          std::memset(d, 0, sizeof(float) * (ja - jlo));
          if (jb > ja) copy_run(tab, row + ja + q, d + (ja - jlo), jb - ja);
          std::memset(d + (jb - jlo), 0, sizeof(float) * (jlo + jn - jb));
        }
        return;
      }
      const int64_t j0 = std::max<int64_t>(jlo, 0), b = j0 * step;
      const int64_t n = std::max<int64_t>(0, std::min(len, (jlo + jn) * step) - b);
      if (n > 0) copy_run(tab, row + b, stage, n);
      copy_phase_rows(stage, n, step, qs, nq, jlo - j0, jn, dst, dst_stride, tab.strided_copy,
                      tab.split2, tab.split3);
    }
  }
};

// Floats of RowCopy's stage for rows of len elements read as jn positions of step.
int64_t stage_floats(int64_t len, int64_t jn, int64_t step) {
  return std::min(len, std::max<int64_t>(jn, 1) * step) + 16;
}

// o[s*x] = t[x] for x < n: a phase's outputs into their row. Its own
// function: inlined into compute_row, GCC kept s on the stack and reloaded
// it every element (dw_up 64ch k4 s2 forward NCX ran 1.2x slower, SPR).
__attribute__((noinline)) void scatter_phase(const float* t, int64_t n, float* o, int64_t s) {
  for (int64_t x = 0; x < n; ++x) o[s * x] = t[x];
}

// n f32 results t to o[x * step] in storage type TO (16-bit: rounded once;
// tmp: n 16-bit elements, for step > 1).
template <class TO>
void store_row(const PlanarF32Table& tab, const float* t, int64_t n, TO* o, int64_t step,
               uint16_t* tmp) {
  if constexpr (!kIs16<TO>) {
    scatter_phase(t, n, o, step);
  } else {
    const PlanarNarrow16Fn narrow = tab.narrow16[kIndex16<TO>];
    uint16_t* bits = reinterpret_cast<uint16_t*>(o);
    if (step == 1) {
      narrow(t, bits, n);
      return;
    }
    narrow(t, tmp, n);
    for (int64_t x = 0; x < n; ++x) bits[step * x] = tmp[x];
  }
}

// Whether the weights' (oc, tap) elements of each ic are one dense run in the
// IOX order (j = oc * taps + tap), so that [ic][j] rows are the weights
// themselves, w.si apart.
bool iox_rows(const ConvProblem& p, const WeightsView& w) {
  bool dense = p.OCg == 1 || w.so == p.taps();
  if (p.K[2] > 1) dense = dense && w.sk[2] == 1;
  if (p.K[1] > 1) dense = dense && w.sk[1] == p.K[2];
  if (p.K[0] > 1) dense = dense && w.sk[0] == p.K[1] * p.K[2];
  return dense;
}

// The weights as one row per input channel ic, column j = oc * taps + t (the
// IOX order) or, taps_outer, j = t * OCg + oc: the weights themselves when
// their strides give those rows (stride: w.si), else a copy packed once.
struct WeightRows {
  AlignedBuf<float> packed;
  const float* data;
  int64_t stride;
};

WeightRows weight_rows(const ConvProblem& p, const WeightsView& w, bool taps_outer,
                       int nthreads) {
  const int64_t T = p.taps(), OCg = p.OCg, J = OCg * T, IC = p.IC();
  const float* wd = static_cast<const float*>(w.data);
  bool in_place = iox_rows(p, w);
  if (taps_outer && OCg > 1) {
    in_place = w.so == 1;
    if (p.K[2] > 1) in_place = in_place && w.sk[2] == OCg;
    if (p.K[1] > 1) in_place = in_place && w.sk[1] == p.K[2] * OCg;
    if (p.K[0] > 1) in_place = in_place && w.sk[0] == p.K[1] * p.K[2] * OCg;
  }
  if (in_place) return {AlignedBuf<float>(), wd, w.si};
  WeightRows r{aligned_buffer<float>(IC * J), nullptr, J};
  r.data = r.packed.get();
  std::vector<int64_t> koff(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    koff[t] = t / (p.K[1] * p.K[2]) * w.sk[0] + (t / p.K[2]) % p.K[1] * w.sk[1] +
              t % p.K[2] * w.sk[2];
  float* const out = r.packed.get();
#pragma omp parallel for schedule(static) num_threads(std::max(1, nthreads))
  for (int64_t ic = 0; ic < IC; ++ic) {
    const float* src = wd + ic * w.si;
    float* dst = out + ic * J;
    if (taps_outer) {
      for (int64_t t = 0; t < T; ++t)
        for (int64_t b = 0; b < OCg; ++b) dst[t * OCg + b] = src[b * w.so + koff[t]];
    } else {
      for (int64_t b = 0; b < OCg; ++b)
        for (int64_t t = 0; t < T; ++t) dst[b * T + t] = src[b * w.so + koff[t]];
    }
  }
  return r;
}

// src is one pixel and the kernel covers dst exactly (no pads, dilation 1
// where K > 1): each dst position is one tap.
bool one_pixel_forward(const ConvProblem& p) {
  bool fits = p.src_spatial() == 1;
  for (int a = 0; a < kAxes && fits; ++a)
    fits = p.O[a] == p.K[a] && p.pb[a] == 0 && (p.K[a] == 1 || p.d[a] == 1);
  return fits;
}

// Backward-data as one dot product per output: one_pixel_forward's shape,
// with the (oc, tap) run a multiple of 16 floats (the dot tiles' unit).
bool one_pixel_covering(const ConvProblem& p) {
  const int64_t J = p.OCg * p.taps();
  return J > 0 && J % 16 == 0 && one_pixel_forward(p);
}

// ---------------------------------------------------------------------------
// Rules (measured; each comment gives the evidence).

// Plane items (see plan_tiles): one image's input planes of a group, phase-
// split and padded, fit in 64 KiB, and there are enough of them for the threads.
bool use_planes(const Geometry& g, const Line& L, int64_t TW, int nthreads) {
  const int64_t chunk = round_up(std::max<int64_t>(L.max_len, 1), TW);
  const int64_t span = round_up(chunk + (L.max_off - L.min_off), 16);
  const int64_t floats = g.Cin * g.in[0] * g.in[1] * static_cast<int64_t>(L.slot_q.size()) * span;
  return floats <= (64 << 10) / kFloatBytes && g.N * g.G >= 4 * nthreads;
}

// Positions per im2col chunk of the GEMMs (run_bwd_weights_gemm, run_im_gemm).
constexpr int64_t kKc = 256;
// Columns per reduction part of the backward-data GEMMs (run_im_gemm).
constexpr int64_t kJp = 192;

// Where the GEMMs beat both the dot tiles and the channels-last path
// (interleaved A/B on the benchmark layers, 2 threads): enough src channels
// for the tiles' rows and columns for a vector, and
//  - AVX-512 (1.2-2x): chunks of positions per image and rows long enough
//    that the per-row gathers of the packing stay cheap (1x1 kernels pack
//    whole runs);
//  - AVX2 (Zen 3, 1.1-1.7x, where the channels-last tiles are narrower):
//    enough src channels x row length to amortize the per-row gathers over
//    the GEMM rows (the packing costs ~J * P / W row copies, the GEMM
//    ICg * J * P multiply-adds), and 16+ positions per image.
//    The GEMM multiplies every tap with every position (zeros where the tap
//    falls outside diff_dst), the channels-last tiles only the pairs inside:
//    under 3/4 inside, channels-last (AlexNet's k3 d3 on 9x9, 60 % inside:
//    channels-last 1.2x faster).
// The thresholds per ISA: PlanarF32Rules::gemm_* of the ISA's table.
bool gemm_preferred(const PlanarF32Table& tab, const ConvProblem& p) {
  const PlanarF32Rules& r = tab.rules;
  const int64_t P = p.src_spatial(), W = p.I[2];
  if (p.ICg < 8 || p.OCg * p.taps() < 16) return false;
  if (p.ICg * (p.taps() == 1 ? P : W) < r.gemm_min_channel_run || P < r.gemm_min_positions)
    return false;
  if (p.taps() != 1 && W < r.gemm_min_row) return false;
  return r.gemm_min_inside <= 0 || valid_tap_share(p) >= r.gemm_min_inside;
}

// Where the GEMMs beat the planar tiles and the channels-last path
// (interleaved A/B on the benchmark layers, AVX-512, 2 threads: 1.05-1.35x):
// kernels that do not overlap (K <= s on every axis: D is a permutation of
// diff_dst, gathered once, like 1x1 and k2 s2 layers) with a reduction of at
// most 512 columns (deeper ones run faster channels-last) and src channels
// for the tiles' rows. Overlapping kernels gather each diff_dst element
// several times, where the planar tiles' shifted reads win.
bool gemm_bwd_data_preferred(const ConvProblem& p) {
  bool disjoint = true;
  for (int a = 0; a < kAxes; ++a) disjoint = disjoint && p.K[a] <= p.s[a];
  const int64_t J = p.OCg * p.taps();
  return disjoint && p.ICg >= 32 && J >= 32 && J <= 512 && p.src_spatial() >= 64;
}

// Whether the im2col rows of a problem are diff_dst itself (pointwise: one
// run per chunk).
bool im2col_identity(const ConvProblem& p) {
  bool identity = p.taps() == 1;
  for (int a = 0; a < kAxes; ++a)
    identity = identity && p.s[a] == 1 && p.pb[a] == 0 && p.O[a] == p.I[a];
  return identity;
}

// A pointwise forward (im2col_identity: 1x1, stride 1, no pads) of one group,
//   dst[n, oc, q] = bias[oc] + sum_ic W(ic, oc) * src[n, ic, q],
// is the backward-data GEMM (run_im_gemm) of the problem with the channels
// swapped, reading src as its diff_dst, the weights transposed, plus the
// bias: GEMMs on the NCX tensors themselves, no layout changes (the planar
// tiles re-read each output row per block of 36 input channels: GoogLeNet
// 4a's 192 -> 480 1x1 on 14x14, N = 16, ran 1.2x slower than channels-last).
// The weights are read transposed: packed once per call unless the layout
// has the forward's output channels outermost (OIX, XOI). AVX2 only, where
// it was measured (Zen 3, 2 threads, against channels-last, calls
// interleaved: that layer 5.58 -> 4.70 ms, torch 7.70; eight 1x1 layers of
// 32-512 channels on 7x7 to 128x128 1.03-1.36x where taken, 512 -> 256 on
// 32x32 N = 1 a tie; bf16 / f16 (planar16) 1.15-1.58x); AVX-512 keeps its
// measured rules (P10: AMD's 1x1 forwards of 32-64 channels channels-last).
ConvProblem transposed_pointwise(const ConvProblem& p) {
  ConvProblem t = p;
  std::swap(t.ICg, t.OCg);
  return t;
}

bool pointwise_forward_gemm(Isa isa, const ConvProblem& p) {
  return vector_isa(isa) == Isa::Avx2 && p.G == 1 && im2col_identity(p) &&
         planar_backward_data_gemm(isa, transposed_pointwise(p));
}

// Whether the im2col taps go through phase rows (see PhaseRows): strided, the
// taps sharing phases (K2 > s) or a stride of 3 (the three phases of a row
// in one permute pass, several times cheaper than a gather per tap: the
// 36 -> 4 k3 s3 layer 1.2-1.3x; stride 2 copies each tap's phase directly
// with shuffles, 2-10 % faster than through the cache), and rows not much
// longer than what a chunk of kKc positions reads of them (a cached row is
// split whole: 1D signals would split their whole line per chunk and
// channel; up to 8x for the permute splits, 2x for gathers).
bool im2col_shares_phases(const ConvProblem& p) {
  const bool split = p.s[2] == 2 || p.s[2] == 3;
  return !im2col_identity(p) && p.s[2] > 1 && (p.K[2] > p.s[2] || p.s[2] == 3) &&
         p.O[2] <= (split ? 8 : 2) * kKc * p.s[2];
}

// ---------------------------------------------------------------------------
// Plans: every decision of a call, made once before any work (pure and
// cheap); the run_* functions below only read them.

// Forward of a one-pixel src (run_one_pixel_gemm): GEMM tiles over slices of
// kPlanarGemmN weights columns x blocks of kPlanarGemmMaxM images.
struct OnePixelGemmPlan {
  bool empty = false;  // no images or no columns: nothing to write
  int64_t slices = 0, image_blocks = 0;
};

// Backward-data of a one-pixel src (dense_backward_data_f32): dot tiles of
// ds.m src channels x ds.n images.
struct OnePixelDotsPlan {
  bool fits = false;  // the problem has that shape (else the general paths run)
  bool channels_last = false;
  DotShape ds{1, 1};
  int64_t mblocks = 0, nblocks = 0;
  int nthreads = 1;
};

// Backward-data GEMMs over im2col chunks (run_im_gemm).
struct ImGemmPlan {
  bool empty = false;  // nothing to write
  bool zero = false;   // no (channel, tap) columns: diff_src is zeros
  int64_t J = 0;       // columns per group
  int64_t kc_max = 0, per_image = 0;  // positions per chunk, chunks per image
  int64_t ablocks = 1, AB = 0;        // blocks of src channels (rows of a block)
  int64_t items = 0;
  int64_t JP = 0;  // columns per reduction part
  bool phase_rows = false;
  int64_t buf_floats = 0;  // per thread, for the largest chunk
};

// Depthwise backward-data rows (run_dw).
struct DwPlan {
  Geometry g;
  Line L;
  bool empty = false;
  int64_t VL = 0, nslots = 0, spread = 0;
  int64_t xc = 0, nx = 0;  // outputs per line chunk, chunks per row
  int64_t jn = 0, span = 0, row_floats = 0;
  int64_t in_rows = 0, out_rows = 0, max_seg = 0, planes = 0;
  bool whole = false;  // a plane's input rows all in the buffer
  int64_t splits = 1, rows_per = 0;
  int64_t buf_floats = 0;
};

// Direct-convolution tiles over output rows or whole planes (run_tiles).
struct TilesPlan {
  Geometry g;
  Line L;
  bool empty = false;
  TileShape ts{1, 1, 16};
  PlanarTileFn full_tile = nullptr;  // ts.M x ts.NV: most tiles
  int64_t TW = 0;                    // tile width (positions)
  int64_t NMB = 0;  // blocks of M output channels
  int64_t ktaps = 0, seg_floats = 0, block_floats = 0;  // packed weights
  bool planes = false, strided_out = false;
  int64_t nslots = 0, max_seg = 0, ext = 0, in_rows = 0;
  int64_t chunk = 0, nchunks = 0, rows = 0;
  int64_t mb_groups = 1, mb_per_group = 0, items = 0;
  int64_t span = 0, row_floats = 0, cis = 0, in_floats = 0;
  int64_t cb = 0;  // input channels per block (kept in L1)
  bool stream = false;
  // Results through the item buffer: strided outputs (scattered from it),
  // and 16-bit ones (rounded from it once every input channel is summed).
  bool out_buffer = false;
  int64_t buf_floats = 0;  // per thread: one item's input rows (and buffered outputs)
};

enum class PlanarRoute { Tiles, OnePixelGemm, OnePixelDots, ImGemm, Depthwise };

// planar_f32's plan: the route and the plan of that route.
struct PlanarPlan {
  const PlanarF32Table* tab = nullptr;  // null: no kernels for the ISA (the reference runs)
  ConvProblem p;  // (route ImGemm of a pointwise forward: its transposed problem)
  bool forward = true;
  // A pointwise forward on the backward-data GEMM (pointwise_forward_gemm):
  // p is the transposed problem, the weights are read transposed, and the
  // bias is added to each item's rows.
  bool transposed = false;
  int nthreads = 1;
  DType in_dt = DType::F32, out_dt = DType::F32;  // storage of in / out (16-bit: tiles, depthwise)
  PlanarRoute route = PlanarRoute::Tiles;
  OnePixelGemmPlan one_gemm;
  OnePixelDotsPlan dots;
  ImGemmPlan gemm;
  DwPlan dw;
  TilesPlan tiles;
};

// Backward-weights GEMMs over im2col chunks (run_bwd_weights_gemm).
struct BwdWeightsGemmPlan {
  bool empty = false;  // no images or positions: the result is zeros
  int64_t J = 0, per_image = 0, chunks = 0;
  int64_t parts = 1;                    // reduction pieces
  int64_t npanels = 1, NC = 0, ldp = 0;  // column panels, their width, pack row stride
  int64_t items = 0;
  bool phase_rows = false;
  int64_t buf_floats = 0, partial_floats = 0;
};

// Backward-weights dot tiles (run_bwd_weights_dots).
struct BwdWeightsDotsPlan {
  bool empty = false;  // the result is zeros
  DotShape ds{1, 1};
  Geometry g;
  Line L;
  int64_t nslots = 0, W = 0, rows = 0, ext = 0, max_seg = 0;
  int64_t cw = 0, nchunks = 0, nvec = 0, span = 0, row_floats = 0;  // line chunks
  int64_t R = 1, nblocks = 0, items = 0;                            // row blocks
  int64_t grad_floats = 0;
  int pieces = 1;
  int threads = 1;
};

struct PlanarBwdWeightsPlan {
  const PlanarF32Table* tab = nullptr;  // null: no kernels for the ISA (the reference runs)
  ConvProblem p;
  int nthreads = 1;
  DType in_dt = DType::F32;  // src and diff_dst (16-bit: either route; the gradient is f32)
  bool gemm = false;
  BwdWeightsGemmPlan gm;
  BwdWeightsDotsPlan dots;
};

OnePixelGemmPlan plan_one_pixel_gemm(const ConvProblem& p) {
  OnePixelGemmPlan q;
  const int64_t J = p.OCg * p.taps();
  q.empty = p.N == 0 || J == 0;
  q.slices = (J + kPlanarGemmN - 1) / kPlanarGemmN;
  q.image_blocks = (p.N + kPlanarGemmMaxM - 1) / kPlanarGemmMaxM;
  return q;
}

OnePixelDotsPlan plan_one_pixel_dots(const PlanarF32Table& tab, const ConvProblem& p,
                                     bool channels_last, int nthreads) {
  OnePixelDotsPlan q;
  q.fits = one_pixel_covering(p) && !(channels_last && p.G != 1);
  if (!q.fits) return q;
  q.channels_last = channels_last;
  q.nthreads = std::max(1, nthreads);
  q.ds = dot_shape(tab, p.ICg, p.N);
  q.mblocks = (p.ICg + q.ds.m - 1) / q.ds.m;
  q.nblocks = (p.N + q.ds.n - 1) / q.ds.n;
  return q;
}

ImGemmPlan plan_im_gemm(const ConvProblem& p, int nthreads) {
  constexpr int64_t SW = kPlanarGemmN, MR = kPlanarGemmMaxM;  // slice width, tile rows
  ImGemmPlan q;
  const int64_t ICg = p.ICg, G = p.G, J = p.OCg * p.taps(), P = p.src_spatial();
  q.J = J;
  q.empty = p.N == 0 || P == 0 || p.IC() == 0;
  if (q.empty) return q;
  q.zero = J == 0;
  if (q.zero) return q;
  // Chunks of positions whose D^T stays within 512 KiB (L2).
  q.kc_max = std::max<int64_t>(
      SW, std::min<int64_t>(kKc, (512 << 10) / (kFloatBytes * J) / SW * SW));
  q.per_image = (P + q.kc_max - 1) / q.kc_max;
  // Blocks of src channels (multiples of the tile's rows) when the chunks
  // alone give the threads too few items; each block gathers its own D^T.
  int64_t ablocks = 1;
  const int64_t base_items = p.N * G * q.per_image;
  while (base_items * ablocks < 4 * nthreads && ICg / (2 * ablocks) >= MR) ablocks *= 2;
  q.AB = round_up((ICg + ablocks - 1) / ablocks, MR);
  q.ablocks = (ICg + q.AB - 1) / q.AB;
  q.items = base_items * q.ablocks;
  const int64_t parts = (J + kJp - 1) / kJp;
  q.JP = (J + parts - 1) / parts;
  q.phase_rows = im2col_shares_phases(p);
  q.buf_floats = q.kc_max + (q.kc_max + SW - 1) / SW * J * SW;
  return q;
}

DwPlan plan_dw(const PlanarF32Table& tab, const ConvProblem& p, int nthreads) {
  DwPlan q;
  q.g = geometry(p, false);
  const Geometry& g = q.g;
  const int64_t out_plane = g.out[0] * g.out[1] * g.out[2];
  q.planes = g.N * g.G;
  q.empty = q.planes == 0 || out_plane == 0;
  if (q.empty) return q;
  q.L = make_line(g);
  const Line& L = q.L;
  q.VL = tab.vl;
  q.nslots = static_cast<int64_t>(L.slot_q.size());
  // Long lines (1D signals): each item takes a chunk of xc outputs of its
  // rows and copies only the inputs the chunk reads, so the buffers stay
  // small (the whole line per thread was a copy of a 1D diff_dst) and a
  // single plane still splits over the threads.
  q.spread = L.max_off - L.min_off;
  q.xc = g.out[2];
  if (q.nslots * round_up(round_up(L.max_len, q.VL) + q.spread, 16) > (64 << 10) / kFloatBytes)
    q.xc = std::min(g.out[2], std::max<int64_t>(
                                  64, ((16 << 10) / kFloatBytes / q.nslots - q.spread) / 64 * 64));
  q.nx = (g.out[2] + q.xc - 1) / q.xc;  // chunks per row
  q.jn = round_up(std::min(L.max_len, q.xc), q.VL) + q.spread;  // floats per phase row
  q.span = round_up(q.jn, 16);
  q.row_floats = q.nslots * q.span;
  q.in_rows = g.in[0] * g.in[1];
  q.out_rows = g.out[0] * g.out[1];
  q.max_seg = max_segments(g);
  q.whole = q.in_rows * q.row_floats <= (64 << 10) / kFloatBytes;
  q.splits = std::min(q.out_rows, std::max<int64_t>(1, (4 * nthreads + q.planes * q.nx - 1) /
                                                           (q.planes * q.nx)));
  q.rows_per = (q.out_rows + q.splits - 1) / q.splits;
  q.buf_floats = (q.whole ? q.in_rows : q.max_seg) * q.row_floats;
  return q;
}

// Floats of one tiles item's buffer for line chunks of `chunk` positions.
int64_t tile_item_floats(const TilesPlan& q, int64_t chunk) {
  const int64_t span = round_up(round_up(chunk, q.ts.VL) + q.ext, 16);
  const int64_t rows_in = q.planes ? q.in_rows : q.max_seg;
  return rows_in * q.g.Cin * q.nslots * span + (q.out_buffer ? q.NMB * q.ts.M * chunk : 0);
}

TilesPlan plan_tiles(const PlanarF32Table& tab, const ConvProblem& p, bool forward,
                     int nthreads, bool out16) {
  TilesPlan q;
  q.g = geometry(p, forward);
  const Geometry& g = q.g;
  const int64_t out_plane = g.out[0] * g.out[1] * g.out[2];
  q.empty = g.N == 0 || g.G * g.Cout == 0 || out_plane == 0;
  if (q.empty) return q;
  q.L = make_line(g);
  const Line& L = q.L;
  q.ts = choose_tile(tab, g, L);
  const int M = q.ts.M, VL = q.ts.VL;
  q.full_tile = tab.tile[M][q.ts.NV];
  q.TW = int64_t{q.ts.NV} * VL;
  const int64_t TW = q.TW;
  q.NMB = (g.Cout + M - 1) / M;
  q.nslots = static_cast<int64_t>(L.slot_q.size());
  q.ktaps = 0;  // K2 (forward: every k in one phase)
  for (int64_t r = 0; r < L.out_phases; ++r) q.ktaps += static_cast<int64_t>(L.k[r].size());
  q.seg_floats = g.Cin * q.ktaps * M;  // weights of one (k0, k1)
  q.block_floats = g.K[0] * g.K[1] * q.seg_floats;

  // Two ways to cut the work:
  //  - rows: an item is one output row (and chunk of the line, and group of
  //    output channel blocks); it copies the input rows of its taps;
  //  - planes: when an image's input channels of one group fit in 64 KiB
  //    (depthwise and few-channel layers on small planes, where row items
  //    would be tiny), an item is a whole (image, group): its input planes
  //    are copied once and every output row reads them.
  q.max_seg = max_segments(g);
  q.strided_out = L.out_phases > 1;
  q.out_buffer = q.strided_out || out16;
  q.ext = L.max_off - L.min_off;
  q.in_rows = g.in[0] * g.in[1];
  q.planes = use_planes(g, L, TW, nthreads);
  // Chunks of the line: the input rows of one item within 256 KiB (and, for
  // buffered outputs, its result buffer too), and enough items for the threads.
  int64_t chunk = round_up(std::max<int64_t>(L.max_len, 1), TW);
  q.rows = g.N * g.G * g.out[0] * g.out[1];
  const int64_t rows = q.rows;
  if (!q.planes) {
    while (chunk > TW && tile_item_floats(q, chunk) > (256 << 10) / kFloatBytes)
      chunk = round_up(chunk / 2, TW);
    while (chunk > TW && rows * ((L.max_len + chunk - 1) / chunk) < 4 * nthreads)
      chunk = round_up(chunk / 2, TW);
  }
  q.chunk = chunk;
  q.nchunks = (std::max<int64_t>(L.max_len, 1) + chunk - 1) / chunk;
  // Few items (one image, few rows): also split the output channel blocks.
  q.mb_groups = 1;
  if (!q.planes && rows * q.nchunks < 4 * nthreads)
    q.mb_groups = std::min(q.NMB, (4 * nthreads + rows * q.nchunks - 1) / (rows * q.nchunks));
  q.mb_per_group = (q.NMB + q.mb_groups - 1) / q.mb_groups;
  q.items = q.planes ? g.N * g.G : rows * q.nchunks * q.mb_groups;
  q.span = round_up(round_up(chunk, VL) + q.ext, 16);  // floats per input-phase row
  q.row_floats = q.nslots * q.span;  // one input row, all its phases
  // Input channel stride in the buffer: rows [seg][ci][phase] or planes [ci][row][phase].
  q.cis = q.planes ? q.in_rows * q.row_floats : q.row_floats;
  q.in_floats = (q.planes ? 1 : q.max_seg) * g.Cin * q.cis;
  // Channel blocks whose input rows stay in L1 (32 KiB) while all output
  // channel blocks use them; later blocks accumulate.
  q.cb = std::max<int64_t>(
      1, std::min<int64_t>(g.Cin, (32 << 10) / kFloatBytes / (q.max_seg * q.row_floats)));
  // Outputs beyond the caches, written once (one channel block pass, not
  // through the strided-output buffer): streaming stores. Each tile writes
  // its channels' rows one plane apart; on power-of-two planes they share
  // cache sets with each other and with the input rows, and the read for
  // ownership of every line evicts those (Zen 4, DCGAN 64 -> 3 channels on
  // 64x64, backward-data: 0.6 ms or 0.9 ms depending on where the buffers
  // fall; streamed: 0.6 ms). Only with vectors of a whole line (AVX-512):
  // an AVX2 tile's rows end mid-line (24 floats), and a half line streamed
  // alone flushes a partial write-combining buffer. Zen 3, bench.py against
  // torch, 6 rounds, ours / torch with and without: DCGAN 64 -> 3
  // backward-data 1.63 -> 1.14, masknet 1D 64 -> 3 1.11 -> 0.79, GoogLeNet
  // k7 d2 1.21 -> 1.23 (streaming whole lines only: 1.32, 0.92, 1.29).
  const double out_bytes =
      static_cast<double>(kFloatBytes) * static_cast<double>(g.N) * g.G * g.Cout * out_plane;
  q.stream = !q.out_buffer && q.cb >= g.Cin && out_bytes >= 2.0 * (1 << 20) &&
             tab.vl * kFloatBytes >= 64;
  q.buf_floats = tile_item_floats(q, chunk);
  return q;
}

// in_dt / out_dt: the storage of in and out (F32, BF16 or F16; see kIndex16).
PlanarPlan plan_planar(Isa isa, const ConvProblem& p, bool forward, int nthreads,
                       DType in_dt = DType::F32, DType out_dt = DType::F32) {
  PlanarPlan pl;
  pl.tab = table_for(isa);
  pl.p = p;
  pl.forward = forward;
  pl.nthreads = nthreads;
  pl.in_dt = in_dt;
  pl.out_dt = out_dt;
  if (!pl.tab) return pl;
  const PlanarF32Table& tab = *pl.tab;
  if (forward && one_pixel_forward(p)) {
    pl.route = PlanarRoute::OnePixelGemm;
    pl.one_gemm = plan_one_pixel_gemm(p);
  } else if (!forward && one_pixel_covering(p)) {
    pl.route = PlanarRoute::OnePixelDots;
    pl.dots = plan_one_pixel_dots(tab, p, false, nthreads);
  } else if (!forward && planar_backward_data_gemm(isa, p)) {
    pl.route = PlanarRoute::ImGemm;
    pl.gemm = plan_im_gemm(p, nthreads);
  } else if (forward && pointwise_forward_gemm(isa, p)) {
    pl.route = PlanarRoute::ImGemm;
    pl.transposed = true;
    pl.p = transposed_pointwise(p);
    pl.gemm = plan_im_gemm(pl.p, nthreads);
  } else if (!forward && planar_depthwise_backward_data(p)) {
    pl.route = PlanarRoute::Depthwise;
    pl.dw = plan_dw(tab, p, nthreads);
  } else {
    pl.route = PlanarRoute::Tiles;
    pl.tiles = plan_tiles(tab, p, forward, nthreads, out_dt != DType::F32);
  }
  return pl;
}

// Whether the plan's route takes 16-bit storage (it copies every input row).
bool takes16(const PlanarPlan& pl) {
  return pl.tab && (pl.route == PlanarRoute::Tiles || pl.route == PlanarRoute::Depthwise ||
                    pl.route == PlanarRoute::ImGemm);
}

BwdWeightsGemmPlan plan_bwd_weights_gemm(const ConvProblem& p, int nthreads) {
  BwdWeightsGemmPlan q;
  const int64_t IC = p.IC(), OC = p.OC(), G = p.G;
  const int64_t J = p.OCg * p.taps();  // columns per group
  const int64_t P = p.src_spatial(), Q = p.dst_spatial();
  q.J = J;
  q.empty = p.N == 0 || P == 0;
  if (q.empty) return q;
  q.per_image = (P + kKc - 1) / kKc;
  q.chunks = p.N * q.per_image;
  // Reduction parts (reduction_pieces: a function of the problem, not of the
  // threads, so that the bits are the same for any thread count; a part sums
  // its chunks in order, the parts are added in order) while the result is
  // small next to the activations and there are chunks for them (2 per
  // part); else panels of columns for the threads (they split the columns,
  // not the sums).
  const int64_t result = IC * J;
  q.parts = reduction_pieces(static_cast<double>(p.N) * (IC * P + OC * Q),
                             static_cast<double>(result), q.chunks / 2);
  // Panels split only the columns (the same bits for any split): enough for
  // the threads when the parts and groups are fewer.
  int64_t npanels = std::max<int64_t>(1, (nthreads + q.parts * G - 1) / (q.parts * G));
  npanels = std::max(npanels, (J + 255) / 256);
  q.NC = round_up((J + npanels - 1) / npanels, 16);
  q.npanels = (J + q.NC - 1) / q.NC;
  // Pack rows an odd number of 64-byte lines apart: the tiles read a column
  // slice of every row, and rows 2^k lines apart share a few L1 sets (NC =
  // 256: 4 of 64 sets, so the slice streams from L2).
  q.ldp = (q.NC / 16) % 2 == 1 ? q.NC : q.NC + 16;
  q.items = q.parts * G * q.npanels;
  q.phase_rows = im2col_shares_phases(p);
  q.buf_floats = 16 * kKc + kKc * q.ldp;
  q.partial_floats = (q.parts - 1) * result;
  return q;
}

BwdWeightsDotsPlan plan_bwd_weights_dots(const PlanarF32Table& tab, const ConvProblem& p) {
  BwdWeightsDotsPlan q;
  q.ds = dot_shape(tab, p.ICg, p.OCg);
  const int64_t IC = p.IC(), OC = p.OC();
  const int64_t taps = p.taps();
  q.empty = p.N == 0 || p.src_spatial() == 0 || taps == 0 || IC == 0 || p.OCg == 0;
  if (q.empty) return q;
  // Backward-data geometry: "in" = diff_dst rows, read at i*s - pb + k*d.
  q.g = geometry(p, false);
  const Geometry& g = q.g;
  q.L = make_line(g);  // one output phase: every tap, its slot and offset
  const Line& L = q.L;
  q.nslots = static_cast<int64_t>(L.slot_q.size());
  const int64_t W = g.src[2];
  q.W = W;
  const int64_t src_plane = g.src[0] * g.src[1] * g.src[2];
  const int64_t dst_plane = g.dst[0] * g.dst[1] * g.dst[2];
  const int64_t rows = p.N * g.src[0] * g.src[1];
  q.rows = rows;
  q.ext = L.max_off - L.min_off;
  // Line chunks (whole vectors) and row blocks: ~32 vectors per tile call,
  // one block's buffers within ~1 MiB, enough blocks for the threads.
  // Items for the pieces: up to 2 per piece, whatever the threads.
  // A chunk's row (src channels + phase-split diff_dst rows of its segments)
  // stays within 1 MiB too: on long lines the chunks were W/8 (a 2 x 2**30
  // line: 4.3 GiB of per-thread buffers, issue #24); no benchmark layer
  // reaches the cap.
  constexpr int64_t kItems = 2 * kMaxReductionPieces;
  constexpr int64_t kRowFloats = (1 << 20) / kFloatBytes;
  q.max_seg = max_segments(g);  // over src rows: g.out is src here
  const int64_t per_pos = IC + q.max_seg * OC * q.nslots;  // buffer floats per chunk position
  const int64_t cw_cap = std::max<int64_t>(64, (kRowFloats / per_pos - q.ext - 15) / 16 * 16);
  int64_t cw = std::min(round_up(W, 16), cw_cap);
  while (cw > 64 && rows * ((W + cw - 1) / cw) < kItems) cw = round_up(cw / 2, 16);
  q.cw = cw;
  q.nchunks = (W + cw - 1) / cw;
  q.nvec = cw / 16;
  q.span = round_up(cw + q.ext, 16);
  q.row_floats = IC * cw + q.max_seg * OC * q.nslots * q.span;
  int64_t R = std::max<int64_t>(1, (32 + q.nvec - 1) / q.nvec);
  R = std::min<int64_t>(R, std::max<int64_t>(1, kRowFloats / q.row_floats));
  R = std::min(R, rows);
  while (R > 1 && ((rows + R - 1) / R) * q.nchunks < kItems) R = (R + 1) / 2;
  q.R = R;
  q.nblocks = (rows + R - 1) / R;
  q.items = q.nblocks * q.nchunks;
  q.grad_floats = taps * IC * p.OCg;  // scratch layout [k][ic][oc]
  const double act_floats = static_cast<double>(p.N) * (IC * src_plane + OC * dst_plane);
  q.pieces = reduction_pieces(act_floats, static_cast<double>(q.grad_floats), q.items);
  return q;
}

PlanarBwdWeightsPlan plan_planar_bwd_weights(Isa isa, const ConvProblem& p, int nthreads,
                                             DType in_dt = DType::F32) {
  PlanarBwdWeightsPlan pl;
  pl.tab = table_for(isa);
  pl.p = p;
  pl.nthreads = nthreads;
  pl.in_dt = in_dt;
  if (!pl.tab) return pl;
  pl.gemm = gemm_preferred(*pl.tab, p);
  if (pl.gemm) {
    pl.gm = plan_bwd_weights_gemm(p, nthreads);
  } else {
    pl.dots = plan_bwd_weights_dots(*pl.tab, p);
    pl.dots.threads = std::max(1, std::min(nthreads, pl.dots.pieces));
  }
  return pl;
}

// describe(): one line of `key=value` fields, stable order.
class Fields {
 public:
  template <class V>
  Fields& add(const char* key, const V& value) {
    o_ << (o_.tellp() > 0 ? " " : "") << key << '=' << value;
    return *this;
  }
  std::string str() const { return o_.str(); }

 private:
  std::ostringstream o_;
};

// The name of a micro-kernel: planar_f32_<isa>_<op>[_<a>x<b>].
std::string kernel_name(const PlanarF32Table& tab, const char* op, int64_t a = 0, int64_t b = 0) {
  std::string s = std::string("planar_f32_") + tab.isa + "_" + op;
  if (a > 0) s += "_" + std::to_string(a) + "x" + std::to_string(b);
  return s;
}

std::string describe(const PlanarPlan& pl) {
  Fields f;
  f.add("planar", pl.forward ? "forward" : "backward_data");
  f.add("threads", pl.nthreads);
  if (!pl.tab) return f.add("route", "reference").str();
  if (pl.in_dt != DType::F32 || pl.out_dt != DType::F32)  // (f32 lines as before)
    f.add("storage", pl.in_dt == DType::BF16 ? "bf16" : "f16");
  const PlanarF32Table& tab = *pl.tab;
  constexpr int64_t B = sizeof(float);
  switch (pl.route) {
    case PlanarRoute::OnePixelGemm: {
      const OnePixelGemmPlan& q = pl.one_gemm;
      f.add("route", "one_pixel_gemm");
      if (q.empty) {
        f.add("empty", 1);
        break;
      }
      f.add("gemm", kernel_name(tab, "gemm", kPlanarGemmMaxM, kPlanarGemmN));
      f.add("column_slices", q.slices).add("image_blocks", q.image_blocks);
      break;
    }
    case PlanarRoute::OnePixelDots: {
      const OnePixelDotsPlan& q = pl.dots;
      f.add("route", "one_pixel_dots").add("dot", kernel_name(tab, "dot", q.ds.m, q.ds.n));
      f.add("channel_blocks", q.mblocks).add("image_blocks", q.nblocks);
      break;
    }
    case PlanarRoute::ImGemm: {
      const ImGemmPlan& q = pl.gemm;
      f.add("route", pl.transposed ? "pointwise_gemm" : "im2col_gemm");
      if (q.empty || q.zero) {
        f.add(q.empty ? "empty" : "zero", 1);
        break;
      }
      f.add("gemm", kernel_name(tab, "gemm", kPlanarGemmMaxM, kPlanarGemmN));
      f.add("chunk", q.kc_max).add("chunks_per_image", q.per_image);
      f.add("channel_blocks", q.ablocks).add("block_rows", q.AB).add("items", q.items);
      f.add("part_columns", q.JP).add("phase_rows", q.phase_rows);
      f.add("scratch_bytes", q.buf_floats * B);
      break;
    }
    case PlanarRoute::Depthwise: {
      const DwPlan& q = pl.dw;
      f.add("route", "depthwise_rows");
      if (q.empty) {
        f.add("empty", 1);
        break;
      }
      f.add("dw", kernel_name(tab, "dw_rows"));
      f.add("line_chunk", q.xc).add("line_chunks", q.nx).add("span", q.span);
      f.add("whole_planes", q.whole).add("row_splits", q.splits).add("rows_per_split", q.rows_per);
      f.add("scratch_bytes", q.buf_floats * B);
      break;
    }
    case PlanarRoute::Tiles: {
      const TilesPlan& q = pl.tiles;
      f.add("route", "tiles");
      if (q.empty) {
        f.add("empty", 1);
        break;
      }
      f.add("tile", kernel_name(tab, "tile", q.ts.M, q.TW));
      f.add("work", q.planes ? "planes" : "rows").add("strided_out", q.strided_out);
      f.add("chunk", q.chunk).add("line_chunks", q.nchunks);
      f.add("cout_blocks", q.NMB).add("cout_block_groups", q.mb_groups).add("items", q.items);
      f.add("cin_block", q.cb).add("span", q.span).add("stream", q.stream);
      f.add("packed_weights_bytes", q.g.G * q.NMB * q.block_floats * B);
      f.add("scratch_bytes", q.buf_floats * B);
      break;
    }
  }
  return f.str();
}

std::string describe(const PlanarBwdWeightsPlan& pl) {
  Fields f;
  f.add("planar", "backward_weights");
  f.add("threads", pl.nthreads);
  if (!pl.tab) return f.add("route", "reference").str();
  if (pl.in_dt != DType::F32) f.add("storage", pl.in_dt == DType::BF16 ? "bf16" : "f16");
  const PlanarF32Table& tab = *pl.tab;
  constexpr int64_t B = sizeof(float);
  if (pl.gemm) {
    const BwdWeightsGemmPlan& q = pl.gm;
    f.add("route", "im2col_gemm");
    if (q.empty) return f.add("empty", 1).str();
    f.add("gemm", kernel_name(tab, "gemm", kPlanarGemmMaxM, kPlanarGemmN));
    f.add("chunk", kKc).add("chunks", q.chunks).add("pieces", q.parts);
    f.add("panels", q.npanels).add("panel_columns", q.NC).add("pack_stride", q.ldp);
    f.add("items", q.items).add("phase_rows", q.phase_rows);
    f.add("scratch_bytes", q.buf_floats * B).add("partial_bytes", q.partial_floats * B);
    return f.str();
  }
  const BwdWeightsDotsPlan& q = pl.dots;
  f.add("route", "dots");
  if (q.empty) return f.add("empty", 1).str();
  f.add("dot", kernel_name(tab, "dot", q.ds.m, q.ds.n));
  f.add("line_chunk", q.cw).add("line_chunks", q.nchunks).add("span", q.span);
  f.add("row_block", q.R).add("row_blocks", q.nblocks).add("items", q.items);
  f.add("pieces", q.pieces).add("piece_threads", q.threads);
  f.add("scratch_bytes", q.R * q.row_floats * B);
  f.add("partial_bytes", std::max<int64_t>(1, (q.pieces - 1) * q.grad_floats) * B);
  return f.str();
}

// ---------------------------------------------------------------------------
// Execution: each run_* function reads its plan (and the table it names).

// Backward-data of a layer whose src is one pixel and whose kernel covers
// diff_dst exactly (the "z -> 4x4" first layer of a generator): each output
// is a dot product of a weights row and one image of diff_dst, contiguous in
// (oc, tap) order (NCX) or, for one group, (tap, oc) order (NXC). Dot
// tiles over the weights rows in that order: read in place when the weights'
// strides give it, else packed once.
void run_one_pixel_dots(const PlanarF32Table& tab, const OnePixelDotsPlan& q,
                        const ConvProblem& p, const float* dy, WeightsView w, float* dx) {
  const int64_t T = p.taps(), J = p.OCg * T;
  const int nthreads = q.nthreads;
  const DotShape ds = q.ds;
  const int64_t IC = p.IC(), OC = p.OC();
  // Column j of a weights row: NCX j = oc * T + t, NXC j = t * OCg + oc.
  const WeightRows rows = weight_rows(p, w, q.channels_last, nthreads);
  const float* const A = rows.data;
  const int64_t a_stride = rows.stride;
  const int64_t mblocks = q.mblocks;
  const int64_t nblocks = q.nblocks;
#pragma omp parallel for collapse(3) schedule(static) num_threads(nthreads)
  for (int64_t gi = 0; gi < p.G; ++gi)
    for (int64_t mb = 0; mb < mblocks; ++mb)
      for (int64_t nb = 0; nb < nblocks; ++nb) {
        const int64_t a0 = mb * ds.m, n0 = nb * ds.n;
        const int m = static_cast<int>(std::min<int64_t>(ds.m, p.ICg - a0));
        const int nn = static_cast<int>(std::min<int64_t>(ds.n, p.N - n0));
        const int64_t ic = gi * p.ICg + a0;
        const float* arow = A + ic * a_stride;
        const float* brow = dy + n0 * OC * T + gi * J;
        float* o = dx + n0 * IC + ic;  // one pixel: NCX and NXC agree
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < nn; ++j) o[i + j * IC] = 0.f;
        PlanarDotArgs args{&arow, &brow, o, 1, J / 16, a_stride, OC * T, 1, IC};
        tab.dot[m][nn](&args);
      }
}

// Forward of a one-pixel src whose kernel covers dst exactly
// (one_pixel_forward): per image
// dst[n, g*OCg + oc, tap] = bias + sum_a src[n, g*ICg + a] * W[g*ICg + a, oc, tap],
// a GEMM whose columns (oc, tap) are the weights' IOX rows and dst's NCX
// order. GEMM tiles (planar_f32.h: up to 12 images x 32 columns),
// the weights read in place when IOX-dense, else packed once.
bool run_one_pixel_gemm(const PlanarPlan& pl, const float* src, WeightsView w,
                        const float* bias, float* dst) {
  const ConvProblem& p = pl.p;
  const OnePixelGemmPlan& q = pl.one_gemm;
  const int nthreads = pl.nthreads;
  const int64_t T = p.taps(), J = p.OCg * T, IC = p.IC(), OC = p.OC(), ICg = p.ICg;
  if (q.empty) return true;
  const WeightRows rows = weight_rows(p, w, false, nthreads);
  const float* const A = rows.data;
  const int64_t w_stride = rows.stride;
  const PlanarF32Table& tab = *pl.tab;
  constexpr int64_t SW = kPlanarGemmN, MR = kPlanarGemmMaxM;
  const int64_t slices = q.slices, nblocks = q.image_blocks;
#pragma omp parallel for collapse(2) schedule(static) num_threads(nthreads)
  for (int64_t gi = 0; gi < p.G; ++gi)
    for (int64_t sl = 0; sl < slices; ++sl) {
      const int64_t j0 = sl * SW;
      PlanarGemmArgs args;
      args.b = A + gi * ICg * w_stride + j0;
      args.kc = ICg;
      args.a_stride = IC;
      args.b_stride = w_stride;
      args.c_stride = OC * T;
      args.n = std::min(SW, J - j0);
      args.accumulate = bias != nullptr;
      for (int64_t nb = 0; nb < nblocks; ++nb) {  // the slice's weights stay in L1
        const int64_t n0 = nb * MR;
        const int m = static_cast<int>(std::min(MR, p.N - n0));
        float* c = dst + n0 * OC * T + gi * J + j0;
        if (bias) {
          for (int i = 0; i < m; ++i)
            for (int64_t j = 0; j < args.n; ++j) c[i * OC * T + j] = bias[gi * p.OCg + (j0 + j) / T];
        }
        args.a = src + n0 * IC + gi * ICg;
        args.c = c;
        tab.gemm[m](&args);
      }
    }
  return true;
}

// Depthwise backward-data (one channel per group on both sides), a strided
// convolution of each diff_dst plane. An item (a plane, split into ranges of
// output rows when there are fewer than 4 per thread) copies the input rows
// its outputs read into the per-thread buffer (copy_phase_row: zero-padded,
// split into the input phases of axis 2), then the table's dw_rows sums every
// valid tap's weight times its phase row. When the whole plane's rows fit in
// 64 KiB each is copied once per item, and runs of output rows whose taps are
// all inside (on axes 0 and 1) go in one call: their taps sit at the same
// offsets from a base row that steps by s1 rows. Larger planes copy each
// output row's rows (one per valid (k0, k1) pair) for that row alone. Extra
// memory: per thread one buffer and the tap tables.

// The tables of one depthwise call (shared by the threads).
struct DwCall {
  DwCall(const DwPlan& q_, const PlanarF32Table& tab_, const void* dy_, WeightsView w_, void* dx_)
      : q(q_), tab(tab_), dy(dy_), w(w_), dx(dx_) {}
  const DwPlan& q;
  const PlanarF32Table& tab;
  const void* dy;  // in the plan's storage types
  WeightsView w;
  void* dx;
  int64_t in_plane = 0, out_plane = 0, K0 = 1, K1 = 1, T2 = 0;
  int64_t lo1 = 0, hi1 = 0;  // interior output coordinates of axis 1 (every tap inside)
  std::vector<OuterTaps> taps0, taps1;
  std::vector<int64_t> t2_in;    // axis-2 tap -> offset in a buffer row
  std::vector<int64_t> run_off;  // taps of an interior row, from its (0, 0) input row
};

DwCall dw_call(const PlanarPlan& pl, const void* dy, WeightsView w, void* dx) {
  const DwPlan& q = pl.dw;
  const Geometry& g = q.g;
  const Line& L = q.L;
  DwCall c(q, *pl.tab, dy, w, dx);
  c.in_plane = g.in[0] * g.in[1] * g.in[2];
  c.out_plane = g.out[0] * g.out[1] * g.out[2];
  c.taps0 = outer_tap_table(g, 0);
  c.taps1 = outer_tap_table(g, 1);
  c.K0 = g.K[0];
  c.K1 = g.K[1];
  c.T2 = static_cast<int64_t>(L.k[0].size());
  c.t2_in.resize(static_cast<size_t>(c.T2));
  for (int64_t t = 0; t < c.T2; ++t) c.t2_in[t] = L.slot[0][t] * q.span + L.off[0][t] - L.min_off;
  c.lo1 = g.out[1];
  c.hi1 = g.out[1];
  for (int64_t o = 0; o < g.out[1]; ++o)
    if (c.taps1[o].n == c.K1) {
      if (c.lo1 == g.out[1]) c.lo1 = o;
      c.hi1 = o + 1;
    }
  // In (k0, k1, axis-2 tap) order.
  for (int64_t k0 = 0; k0 < c.K0; ++k0)
    for (int64_t k1 = 0; k1 < c.K1; ++k1)
      for (int64_t t = 0; t < c.T2; ++t)
        c.run_off.push_back((k0 * g.d[0] * g.in[1] + k1 * g.d[1]) * q.row_floats + c.t2_in[t]);
  return c;
}

// A thread's buffer and tap lists; 16-bit storage: the widened row span
// (RowCopy) and the f32 rows of results before they are rounded.
struct DwThread {
  float* buf;
  std::vector<int64_t> off;
  std::vector<float> wt, wrun;
  float* stage = nullptr;
  std::vector<float> obuf;
};

// 16-bit results: rows of at most kDwOutFloats f32 results each run writes
// before they are rounded into the output.
constexpr int64_t kDwOutFloats = 4096;

// Whole planes: every input row the outputs [r0, r1) can read (a box of axes
// 0 and 1), columns [x0, ...) of a chunk, each into its own buffer row.
template <class TA>
void dw_copy_box(const DwCall& c, const RowCopy<TA>& copy, const TA* in_img, int64_t x0,
                 int64_t r0, int64_t r1, float* buf) {
  const DwPlan& q = c.q;
  const Geometry& g = q.g;
  const Line& L = q.L;
  auto box = [&](int a, int64_t o_first, int64_t o_last, int64_t& lo, int64_t& hi) {
    const TapAxis ax = g.axis(a);  // (backward-data: dst = the input read)
    lo = std::max<int64_t>(0, ax.dst_of(o_first, 0));
    hi = std::min(g.in[a] - 1, ax.dst_of(o_last, ax.K - 1));
  };
  const int64_t o0a = r0 / g.out[1], o0b = (r1 - 1) / g.out[1];
  int64_t lo0, hi0, lo1_in = 0, hi1_in = g.in[1] - 1;
  box(0, o0a, o0b, lo0, hi0);
  if (o0a == o0b) box(1, r0 % g.out[1], (r1 - 1) % g.out[1], lo1_in, hi1_in);
  for (int64_t i0 = lo0; i0 <= hi0; ++i0)
    for (int64_t i1 = lo1_in; i1 <= hi1_in; ++i1) {
      const int64_t row = i0 * g.in[1] + i1;
      copy(in_img + row * g.in[2], g.in[2], L.in_step, L.slot_q.data(), q.nslots, L.min_off + x0,
           q.jn, buf + row * q.row_floats, q.span);
    }
}

// One item: a chunk of the line of a range of output rows of one plane.
template <class TA, class TO>
void dw_item(const DwCall& c, DwThread& th, int64_t item) {
  const DwPlan& q = c.q;
  const Geometry& g = q.g;
  const Line& L = q.L;
  const WeightsView& w = c.w;
  const int64_t nx = q.nx, xc = q.xc, row_floats = q.row_floats, K0 = c.K0, K1 = c.K1, T2 = c.T2;
  const bool whole = q.whole;
  float* const buf = th.buf;
  const int64_t xi = item % nx, pp = item / nx;
  const int64_t plane = pp / q.splits, part = pp % q.splits;  // plane = n * G + group
  const int64_t x0 = xi * xc, xn = std::min(xc, g.out[2] - x0);  // outputs of the chunk
  const TA* const in_img = static_cast<const TA*>(c.dy) + plane * c.in_plane;
  TO* const out_img = static_cast<TO*>(c.dx) + plane * c.out_plane;
  const RowCopy<TA> copy{c.tab, th.stage};
  // f32 results straight into the output, or (16-bit) into th.obuf rows of
  // ostep floats, rounded into the output after each run.
  const int64_t ostep = kIs16<TO> ? round_up(xn, 16) : g.out[2];
  const int64_t max_rows = kIs16<TO> ? std::max<int64_t>(1, kDwOutFloats / ostep) : INT64_MAX;
  auto out_rows = [&](int64_t r) -> float* {
    if constexpr (kIs16<TO>) return th.obuf.data();
    else return out_img + r * g.out[2] + x0;
  };
  auto finish_rows = [&](int64_t r, int64_t nrows) {
    if constexpr (kIs16<TO>)
      for (int64_t k = 0; k < nrows; ++k)
        store_row(c.tab, th.obuf.data() + k * ostep, xn, out_img + (r + k) * g.out[2] + x0, 1,
                  nullptr);
  };
  const float* const wc =
      static_cast<const float*>(w.data) + (plane % g.G) * w.si;  // W(ic = group, oc = 0, k)
  auto weight = [&](int64_t k0, int64_t k1, int64_t t) {
    return wc[k0 * w.sk[0] + k1 * w.sk[1] + L.k[0][t] * w.sk[2]];
  };
  for (int64_t k0 = 0, i = 0; k0 < K0; ++k0)
    for (int64_t k1 = 0; k1 < K1; ++k1)
      for (int64_t t = 0; t < T2; ++t, ++i) th.wrun[i] = weight(k0, k1, t);
  const int64_t r0 = part * q.rows_per, r1 = std::min(q.out_rows, r0 + q.rows_per);
  if (whole) dw_copy_box(c, copy, in_img, x0, r0, r1, buf);
  // Buffer row of input row `row` (whole: its own, copied above; else slot
  // `seg`, copied now).
  auto row_in = [&](int64_t row, int64_t seg) {
    if (whole) return buf + row * row_floats;
    float* rb = buf + seg * row_floats;
    copy(in_img + row * g.in[2], g.in[2], L.in_step, L.slot_q.data(), q.nslots, L.min_off + x0,
         q.jn, rb, q.span);
    return rb;
  };
  PlanarDwArgs args;
  args.in = buf;
  args.out_step = ostep;
  args.n = xn;
  for (int64_t r = r0; r < r1;) {
    const int64_t o0 = r / g.out[1], o1 = r % g.out[1];
    const OuterTaps &a = c.taps0[o0], &b = c.taps1[o1];
    args.out = out_rows(r);
    if (whole && a.n == K0 && o1 >= c.lo1 && o1 < c.hi1) {  // a run of interior rows
      const int64_t nrows = std::min(std::min(c.hi1, o1 + (r1 - r)) - o1, max_rows);
      args.in = buf + (a.i[0] * g.in[1] + b.i[0]) * row_floats;
      args.in_step = g.s[1] * row_floats;
      args.off = c.run_off.data();
      args.w = th.wrun.data();
      args.ntap = K0 * K1 * T2;
      args.rows = nrows;
      c.tab.dw_rows(&args);
      finish_rows(r, nrows);
      r += nrows;
      continue;
    }
    int64_t n = 0, seg = 0;  // one row: its valid (k0, k1) pairs
    for (int i = 0; i < a.n; ++i)
      for (int j = 0; j < b.n; ++j, ++seg) {
        const float* rb = row_in(a.i[i] * g.in[1] + b.i[j], seg);
        for (int64_t t = 0; t < T2; ++t, ++n) {
          th.off[n] = (rb - buf) + c.t2_in[t];
          th.wt[n] = weight(a.k[i], b.k[j], t);
        }
      }
    args.in = buf;
    args.in_step = 0;
    args.off = th.off.data();
    args.w = th.wt.data();
    args.ntap = n;
    args.rows = 1;
    c.tab.dw_rows(&args);
    finish_rows(r, 1);
    ++r;
  }
}

template <class TA, class TO>
bool run_dw(const PlanarPlan& pl, const void* dy, WeightsView w, void* dx) {
  const DwPlan& q = pl.dw;
  if (q.empty) return true;
  const DwCall c = dw_call(pl, dy, w, dx);
  const Geometry& g = q.g;
#pragma omp parallel num_threads(pl.nthreads)
  {
    const size_t ntaps = static_cast<size_t>(std::max<int64_t>(1, c.K0 * c.K1 * c.T2));
    DwThread th{thread_buffer(1, q.buf_floats), std::vector<int64_t>(ntaps),
                std::vector<float>(ntaps), std::vector<float>(ntaps),
                kIs16<TA> ? thread_buffer(2, stage_floats(g.in[2], q.jn, q.L.in_step)) : nullptr,
                std::vector<float>(kIs16<TO> ? std::max(kDwOutFloats, round_up(q.xc, 16)) : 0)};
#pragma omp for schedule(static)
    for (int64_t item = 0; item < q.planes * q.splits * q.nx; ++item)
      dw_item<TA, TO>(c, th, item);
  }
  return true;
}

// Forward and backward-data by direct-convolution tiles (planar_f32.h).
// Both passes relate the coordinates of the large tensor (dst) and the small
// one (src) by dst = src * s - pb + k * d (per axis) and compute
// out[co, x] = bias + sum_{ci, k} W(co, ci, k) * in[ci, y(x, k)]; a work item
// copies the input rows of its taps (phase-split, zero-padded) into a
// per-thread buffer and the tiles read them with no bounds checks
// (docs/design.md). Weights are packed once per call to
// [g][block of M output channels][k0][k1][phase][ci][tap of the phase][M].

// First packed tap of each output phase (and the total after the last).
std::vector<int64_t> phase_bases(const Line& L) {
  std::vector<int64_t> phase_base(L.out_phases + 1, 0);
  for (int64_t r = 0; r < L.out_phases; ++r)
    phase_base[r + 1] = phase_base[r] + static_cast<int64_t>(L.k[r].size());
  return phase_base;
}

// Packs the weights into wp: [g][mb][k0][k1][phase r][ci][tap of r][M], zero
// past Cout: a phase's taps of one channel are consecutive.
void pack_tile_weights(const PlanarPlan& pl, const std::vector<int64_t>& phase_base,
                       WeightsView w, float* wp) {
  const ConvProblem& p = pl.p;
  const bool forward = pl.forward;
  const TilesPlan& q = pl.tiles;
  const Geometry& g = q.g;
  const Line& L = q.L;
  const int64_t M = q.ts.M, NMB = q.NMB, K0 = g.K[0], K1 = g.K[1];
  const int64_t seg_floats = q.seg_floats, block_floats = q.block_floats;
  const float* wsrc = static_cast<const float*>(w.data);
  const int64_t taps = K0 * K1 * g.K[2];
  // tap index k2 -> (phase, position in the phase); -1: no output reads the tap
  std::vector<int64_t> k2_phase(g.K[2], -1), k2_pos(g.K[2], 0);
  for (int64_t r = 0; r < L.out_phases; ++r)
    for (size_t t = 0; t < L.k[r].size(); ++t) {
      k2_phase[L.k[r][t]] = r;
      k2_pos[L.k[r][t]] = static_cast<int64_t>(t);
    }
#pragma omp parallel num_threads(pl.nthreads)
  {
    std::vector<float> tmp(static_cast<size_t>(taps * M));  // [tap][m] of one input channel
#pragma omp for collapse(2) schedule(static)
    for (int64_t gi = 0; gi < g.G; ++gi)
      for (int64_t mb = 0; mb < NMB; ++mb) {
        float* block = wp + (gi * NMB + mb) * block_floats;
        for (int64_t ci = 0; ci < g.Cin; ++ci) {
          for (int64_t m = 0; m < M; ++m) {
            const int64_t co = mb * M + m;
            if (co >= g.Cout) {
              for (int64_t k = 0; k < taps; ++k) tmp[k * M + m] = 0.f;
              continue;
            }
            const int64_t ic = gi * p.ICg + (forward ? ci : co), oc = forward ? co : ci;
            const float* src = wsrc + ic * w.si + oc * w.so;
            for (int64_t k0 = 0, k = 0; k0 < K0; ++k0)
              for (int64_t k1 = 0; k1 < K1; ++k1)
                for (int64_t k2 = 0; k2 < g.K[2]; ++k2, ++k)
                  tmp[k * M + m] = src[k0 * w.sk[0] + k1 * w.sk[1] + k2 * w.sk[2]];
          }
          for (int64_t k0 = 0, k = 0; k0 < K0; ++k0)
            for (int64_t k1 = 0; k1 < K1; ++k1)
              for (int64_t k2 = 0; k2 < g.K[2]; ++k2, ++k) {
                const int64_t r = k2_phase[k2];
                if (r < 0) continue;
                const int64_t ntap = phase_base[r + 1] - phase_base[r];
                float* dst = block + (k0 * K1 + k1) * seg_floats + phase_base[r] * g.Cin * M +
                             (ci * ntap + k2_pos[k2]) * M;
                std::memcpy(dst, &tmp[k * M], sizeof(float) * M);
              }
        }
      }
  }
}

// The tables of one tiles call (shared by the threads).
struct TilesCall {
  TilesCall(const TilesPlan& q_, const PlanarF32Table& tab_, const void* in_, const float* bias_,
            void* out_, const float* wp_)
      : q(q_), tab(tab_), in(in_), bias(bias_), out(out_), wp(wp_) {}
  const TilesPlan& q;
  const PlanarF32Table& tab;
  const void* in;  // in the plan's storage types
  const float* bias;
  void* out;
  const float* wp;  // packed weights
  int64_t in_plane = 0, out_plane = 0;  // channel strides (and per image)
  std::vector<int64_t> phase_base;
  // Per output phase: input offset (slot * span + off) and weights offset of each tap.
  std::vector<std::vector<int64_t>> tap_in, tap_w;
  std::vector<OuterTaps> taps0, taps1;
};

// A thread's item buffer and segment lists.
struct TilesThread {
  float* buf;
  float* obuf;   // buffered outputs: [channel][chunk] of one phase
  float* stage;  // 16-bit inputs: a widened row span (RowCopy)
  std::vector<int64_t> seg_in, seg_w;
  std::vector<uint16_t> o16;  // 16-bit strided outputs: one rounded phase row
  std::vector<int64_t> flat_in, flat_w;  // kFlatTaps (segment, channel, tap) offsets
};

// Tiles whose (segment, channel, tap) triples number at most kFlatTaps run
// them as one flat list of offsets, one loop instead of three short ones,
// when at least kFlatMinTiles tiles share the list (built per row and phase,
// again only for a last block of fewer channels; heuristics L13). Zen 3, one
// thread: the 3-channel k4 s2 backward-data (4 segments x 3 channels x 4
// taps) 1.07-1.09x, GoogLeNet's k7 d2 (7 x 3 x 7) 1.02-1.05x; a 1D forward
// of 4 tiles a list lost 6 % to the building.
constexpr int64_t kFlatTaps = 256, kFlatMinTiles = 8;
constexpr int64_t kNoSegment[1] = {0};

// Output row (o0, o1), positions [t0, t1) of each phase, channel blocks
// [mb0, mb1), of image n and group gi; in_row(i0, i1, seg) is the buffer
// offset of an input row (copying it first in row mode).
template <class TO, class InRow>
void compute_row(const TilesCall& c, TilesThread& th, int64_t n, int64_t gi, int64_t o0,
                 int64_t o1, int64_t t0, int64_t t1, int64_t mb0, int64_t mb1, InRow&& in_row) {
  const TilesPlan& q = c.q;
  const Geometry& g = q.g;
  const Line& L = q.L;
  const int M = q.ts.M, VL = q.ts.VL;
  const int64_t TW = q.TW, NMB = q.NMB, K1 = g.K[1], seg_floats = q.seg_floats;
  const int64_t block_floats = q.block_floats, cis = q.cis, cb = q.cb, chunk = q.chunk;
  const int64_t out_plane = c.out_plane, s2 = g.s[2];
  const bool out_buffer = q.out_buffer, stream = q.stream;
  const PlanarTileFn full_tile = q.full_tile;
  const float* const bias = c.bias;
  float* const obuf = th.obuf;
  const OuterTaps& t0s = c.taps0[o0];
  const OuterTaps& t1s = c.taps1[o1];
  int64_t nseg = 0;
  for (int a = 0; a < t0s.n; ++a)
    for (int b = 0; b < t1s.n; ++b, ++nseg) {
      th.seg_in[nseg] = in_row(t0s.i[a], t1s.i[b], nseg);
      th.seg_w[nseg] = (t0s.k[a] * K1 + t1s.k[b]) * seg_floats;
    }
  PlanarTileArgs args;
  args.in = th.buf;
  args.c_in_stride = cis;
  const int64_t out_row = (o0 * g.out[1] + o1) * g.out[2];
  TO* out_img = static_cast<TO*>(c.out) + ((n * g.G + gi) * g.Cout) * out_plane + out_row;
  for (int64_t r = 0; r < L.out_phases; ++r) {
    const int64_t tend = std::min(t1, L.len[r]);
    if (tend <= t0) continue;
    const int64_t* const tap_in = c.tap_in[r].data();
    const int64_t* const tap_w = c.tap_w[r].data();
    const int64_t ntap = static_cast<int64_t>(c.tap_in[r].size());
    const int64_t c_w_stride = ntap * M;
    args.c_w_stride = c_w_stride;  // (unused by a flat list: one channel)
    // Tiles per block of channels: enough to pay for a flat list. Its offsets
    // are relative to the block (in_off, w), so a list serves every block of
    // as many channels.
    const bool flat_tiles = (mb1 - mb0) * ((tend - t0 + TW - 1) / TW) >= kFlatMinTiles;
    int64_t flat_cin = 0;  // the channels of the list built (0: none)
    for (int64_t c0 = 0; c0 < std::max<int64_t>(g.Cin, 1); c0 += cb) {
      const int64_t cin = std::min(cb, g.Cin - c0);
      args.accumulate = c0 > 0;
      if (flat_tiles && nseg * cin * ntap <= kFlatTaps) {
        if (cin != flat_cin) {
          int64_t j = 0;
          for (int64_t sg = 0; sg < nseg; ++sg)
            for (int64_t ci = 0; ci < cin; ++ci)
              for (int64_t t = 0; t < ntap; ++t, ++j) {
                th.flat_in[j] = th.seg_in[sg] + ci * cis + tap_in[t];
                th.flat_w[j] = th.seg_w[sg] + ci * c_w_stride + tap_w[t];
              }
          flat_cin = cin;
        }
        args.seg_in = args.seg_w = kNoSegment;
        args.nseg = 1;
        args.cin = 1;
        args.tap_in = th.flat_in.data();
        args.tap_w = th.flat_w.data();
        args.ntap = nseg * cin * ntap;
      } else {
        args.seg_in = th.seg_in.data();
        args.seg_w = th.seg_w.data();
        args.nseg = nseg;
        args.cin = cin;
        args.tap_in = tap_in;
        args.tap_w = tap_w;
        args.ntap = ntap;
      }
      for (int64_t mb = mb0; mb < mb1; ++mb) {
        const int m = static_cast<int>(std::min<int64_t>(M, g.Cout - mb * M));
        args.w = c.wp + (gi * NMB + mb) * block_floats + c.phase_base[r] * g.Cin * M +
                 c0 * c_w_stride;
        args.bias = bias && c0 == 0 ? bias + gi * g.Cout + mb * M : nullptr;
        args.stream = stream;
        for (int64_t u0 = t0; u0 < tend; u0 += TW) {
          const int64_t nx = std::min(TW, tend - u0);
          args.in_off = u0 - t0 + c0 * cis;
          args.nx = nx;
          if (out_buffer) {  // (always for 16-bit results)
            args.out = obuf + (mb - mb0) * M * chunk + (u0 - t0);
            args.out_stride = chunk;
          } else if constexpr (!kIs16<TO>) {
            args.out = out_img + mb * M * out_plane + u0;
            args.out_stride = out_plane;
          }
          (m == M && nx == TW ? full_tile
                              : c.tab.tile[m][static_cast<int>((nx + VL - 1) / VL)])(&args);
        }
      }
    }
    if (out_buffer) {  // strided outputs: phase r's are s2 apart
      const int64_t co0 = mb0 * M, co1 = std::min(g.Cout, mb1 * M);
      const int64_t step = q.strided_out ? s2 : 1;
      for (int64_t co = co0; co < co1; ++co) {
        store_row(c.tab, obuf + (co - co0) * chunk, tend - t0,
                  out_img + co * out_plane + r + step * t0, step, th.o16.data());
      }
    }
  }
}

// A plane item: one (image, group); its input planes are copied once
// ([ci][row][phase]) and every output row reads them.
template <class TA, class TO>
void plane_item(const TilesCall& c, TilesThread& th, int64_t item) {
  const TilesPlan& q = c.q;
  const Geometry& g = q.g;
  const Line& L = q.L;
  const int64_t row_floats = q.row_floats;
  const int64_t gi = item % g.G, n = item / g.G;
  const TA* in_img = static_cast<const TA*>(c.in) + (n * g.G + gi) * g.Cin * c.in_plane;
  const int64_t jn = round_up(L.max_len, q.ts.VL) + q.ext;
  const RowCopy<TA> copy{c.tab, th.stage};
  for (int64_t ci = 0; ci < g.Cin; ++ci)
    for (int64_t row = 0; row < q.in_rows; ++row)
      copy(in_img + ci * c.in_plane + row * g.in[2], g.in[2], L.in_step, L.slot_q.data(),
           q.nslots, L.min_off, jn, th.buf + ci * q.cis + row * row_floats, q.span);
  auto plane_row = [&](int64_t i0, int64_t i1, int64_t) {
    return (i0 * g.in[1] + i1) * row_floats;
  };
  for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
    for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
      compute_row<TO>(c, th, n, gi, o0, o1, 0, L.max_len, 0, q.NMB, plane_row);
}

// A row item: one output row, chunk of the line and group of output channel
// blocks; it copies the input rows of the row's segments: [seg][ci][phase][span].
template <class TA, class TO>
void row_item(const TilesCall& c, TilesThread& th, int64_t item) {
  const TilesPlan& q = c.q;
  const Geometry& g = q.g;
  const Line& L = q.L;
  const int64_t cis = q.cis;
  int64_t rest = item;
  const int64_t mg = rest % q.mb_groups;
  rest /= q.mb_groups;
  const int64_t ch = rest % q.nchunks;
  rest /= q.nchunks;
  const int64_t o1 = rest % g.out[1];
  rest /= g.out[1];
  const int64_t o0 = rest % g.out[0];
  rest /= g.out[0];
  const int64_t gi = rest % g.G;
  const int64_t n = rest / g.G;
  const int64_t t0 = ch * q.chunk, t1 = std::min(L.max_len, t0 + q.chunk);
  const int64_t mb0 = mg * q.mb_per_group, mb1 = std::min(q.NMB, mb0 + q.mb_per_group);
  if (mb0 >= mb1) return;
  const int64_t jlo = t0 + L.min_off, jn = round_up(t1 - t0, q.ts.VL) + q.ext;
  const TA* in_img = static_cast<const TA*>(c.in) + (n * g.G + gi) * g.Cin * c.in_plane;
  const RowCopy<TA> copy{c.tab, th.stage};
  auto copy_row = [&](int64_t i0, int64_t i1, int64_t sidx) {
    const int64_t off = sidx * g.Cin * cis;
    const TA* src_row = in_img + (i0 * g.in[1] + i1) * g.in[2];
    for (int64_t ci = 0; ci < g.Cin; ++ci)
      copy(src_row + ci * c.in_plane, g.in[2], L.in_step, L.slot_q.data(), q.nslots, jlo, jn,
           th.buf + off + ci * cis, q.span);
    return off;
  };
  compute_row<TO>(c, th, n, gi, o0, o1, t0, t1, mb0, mb1, copy_row);
}

template <class TA, class TO>
bool run_tiles(const PlanarPlan& pl, const void* in, WeightsView w, const float* bias,
               void* out) {
  const TilesPlan& q = pl.tiles;
  if (q.empty) return true;
  const Geometry& g = q.g;
  const Line& L = q.L;
  float* const wp = thread_buffer(0, g.G * q.NMB * q.block_floats);
  TilesCall c(q, *pl.tab, in, bias, out, wp);
  c.in_plane = g.in[0] * g.in[1] * g.in[2];
  c.out_plane = g.out[0] * g.out[1] * g.out[2];
  c.phase_base = phase_bases(L);
  pack_tile_weights(pl, c.phase_base, w, wp);
  c.tap_in.resize(L.out_phases);
  c.tap_w.resize(L.out_phases);
  for (int64_t r = 0; r < L.out_phases; ++r)
    for (size_t t = 0; t < L.k[r].size(); ++t) {
      c.tap_in[r].push_back(L.slot[r][t] * q.span + L.off[r][t] - L.min_off);
      c.tap_w[r].push_back(static_cast<int64_t>(t) * q.ts.M);
    }
  c.taps0 = outer_tap_table(g, 0);
  c.taps1 = outer_tap_table(g, 1);
#pragma omp parallel num_threads(pl.nthreads)
  {
    float* buf = thread_buffer(1, q.buf_floats);
    float* stage = kIs16<TA> ? thread_buffer(2, stage_floats(g.in[2],
                                                             round_up(L.max_len, q.ts.VL) + q.ext,
                                                             L.in_step))
                             : nullptr;
    TilesThread th{buf,
                   buf + q.in_floats,
                   stage,
                   std::vector<int64_t>(q.max_seg),
                   std::vector<int64_t>(q.max_seg),
                   std::vector<uint16_t>(kIs16<TO> ? q.chunk : 0),
                   std::vector<int64_t>(kFlatTaps),
                   std::vector<int64_t>(kFlatTaps)};
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < q.items; ++item) {
      if (q.planes)
        plane_item<TA, TO>(c, th, item);
      else
        row_item<TA, TO>(c, th, item);
    }
    if (q.stream) _mm_sfence();  // the streamed outputs, before the region's barrier
  }
  return true;
}

// Rows of the im2col matrix of diff_dst used by the backward GEMMs: for src
// position q of an image and column j = (b, t), D[q][j] = diff_dst plane b at
// q*s - pb + k(t)*d per axis (0 outside).
// diff_dst rows split into their stride phases along the innermost axis,
// kept for the im2col columns that share them: the taps k2 whose k2*d - pb
// fall in the same phase read the same phase row at different offsets, so a
// row is gathered once instead of once per tap (K2/s times fewer gathers).
// A small direct-mapped cache of one work item (rows keyed by address).
template <class TA>
class PhaseRows {
 public:
  PhaseRows(int64_t len, int64_t step, const PlanarF32Table& tab)
      : len_(len), step_(step), nq_((len + step - 1) / step), tab_(tab),
        buf_(static_cast<size_t>(kEntries * step * ((len + step - 1) / step))),
        keys_(kEntries, nullptr), qs_(static_cast<size_t>(step)),
        stage_(kIs16<TA> ? static_cast<size_t>(stage_floats(len, nq_, step)) : 0) {
    for (int64_t r = 0; r < step; ++r) qs_[r] = r;
  }

  // dst[j - jlo] = row[j*step + q] for j in [jlo, jlo + jn), 0 outside the row.
  void copy(const TA* row, int64_t q, int64_t jlo, int64_t jn, float* dst) {
    // The slot of the row's index in diff_dst (all planes: rows of several
    // channels are live at once).
    const int64_t slot =
        static_cast<int64_t>(reinterpret_cast<uintptr_t>(row) / (sizeof(TA) * len_)) &
        (kEntries - 1);
    float* entry = buf_.data() + slot * step_ * nq_;
    if (keys_[slot] != row) {
      const RowCopy<TA> copy_rows{tab_, stage_.data()};
      copy_rows(row, len_, step_, qs_.data(), step_, 0, nq_, entry, nq_);
      keys_[slot] = row;
    }
    const float* ph = entry + q * nq_;  // zero past the phase's last element
    const int64_t ja = std::max<int64_t>(jlo, 0), jb = std::min(jlo + jn, nq_);
    if (jb <= ja) {
      std::memset(dst, 0, sizeof(float) * jn);
      return;
    }
    std::memset(dst, 0, sizeof(float) * (ja - jlo));
    std::memcpy(dst + (ja - jlo), ph + ja, sizeof(float) * (jb - ja));
    std::memset(dst + (jb - jlo), 0, sizeof(float) * (jlo + jn - jb));
  }

 private:
  static constexpr int64_t kEntries = 32;  // a power of 2
  int64_t len_, step_, nq_;
  const PlanarF32Table& tab_;
  std::vector<float> buf_;
  std::vector<const TA*> keys_;
  std::vector<int64_t> qs_;  // 0 .. step-1
  std::vector<float> stage_;  // 16-bit: a widened row (RowCopy)
};

// row[i] += v, i < n.
void add_to_row(float* row, int64_t n, float v) {
  for (int64_t i = 0; i < n; ++i) row[i] += v;
}

// Software prefetch of the cache lines of elements [0, n) of run.
template <class T>
void prefetch_run(const T* run, int64_t n) {
  const char* const c = reinterpret_cast<const char*>(run);
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(c + b, _MM_HINT_T0);
}

// Im2col's software prefetch: the columns of a chunk are gathered one after
// the other, each from a few short runs of its diff_dst plane (16 positions a
// row on a 16^3 3D src, 1 KiB for a 1x1 layer), a new stream per column that
// the hardware prefetchers do not follow: the copies of the 3D U-Net k2 s2
// backward-weights waited on DRAM at the first load of each run (perf, Zen 3:
// 86 % of copy_phase_row's samples on that load, 36 % of the pass). Each row
// prefetches the runs of the column this many columns on (the same tap of a
// later plane). Not through PhaseRows: it copies whole diff_dst rows, runs
// the hardware follows. Zen 3, 2 threads, the 30 NCX layer-passes on these
// GEMMs, with and without, calls alternating in one process: 1.04x geomean;
// k2 s2 backward-weights 1.10-1.20x (3D U-Net 128 -> 64 6.2 -> 5.2 ms), 1x1
// 1.07-1.10x, none slower beyond the noise (+-5 %).
constexpr int64_t kPrefetchColumns = 8;

class Im2col {
 public:
  Im2col(const ConvProblem& p, const PlanarF32Table& tab) : p_(p), tab_(tab) {
    for (int a = 0; a < 2; ++a) {
      const TapAxis ax = p.axis(a);
      for (int64_t k = 0; k < ax.K; ++k)
        for (int64_t i = 0; i < ax.I; ++i) pos_[a].push_back(ax.dst_at(i, k));
    }
    identity_ = im2col_identity(p);
    const TapAxis ax2 = p.axis(2);
    for (int64_t t = 0; t < p.taps(); ++t) {
      const int64_t k0 = t / (p.K[1] * p.K[2]), k1 = (t / p.K[2]) % p.K[1], k2 = t % p.K[2];
      taps_.push_back({k0 * p.I[0], k1 * p.I[1], ax2.tap_phase(k2), ax2.tap_off(k2)});
    }
  }

  // The plane whose reads to prefetch while column j of plane b is copied
  // (plane b + ahead, so that the prefetched column is at least kPrefetchColumns
  // columns on; the same tap there reads the same offsets), or null past the
  // group's last plane (nb planes).
  template <class TA>
  static const TA* prefetch_plane(const TA* plane, int64_t b, int64_t nb, int64_t Q, int64_t T) {
    const int64_t ahead = (kPrefetchColumns + T - 1) / T;
    return b + ahead < nb ? plane + ahead * Q : nullptr;
  }

  // Position p0 of an image as src coordinates (computed once per chunk).
  struct Start {
    int64_t p0, x, i1, i0;
  };
  Start start(int64_t p0) const {
    const int64_t W = p_.I[2];
    return {p0, p0 % W, (p0 / W) % p_.I[1], p0 / W / p_.I[1]};
  }

  // out[q - p0] = D[q][(b, t)] for q in [p0, p0 + kc), plane = diff_dst plane b;
  // through `phases` when given. 16-bit planes: stage holds a widened row
  // span (stage_floats of one diff_dst row). ahead: when not null, the plane
  // whose same elements a later column reads (see prefetch_plane): each run
  // read here is prefetched there.
  template <class TA>
  void row(const TA* plane, int64_t t, const Start& st, int64_t kc, float* out,
           PhaseRows<TA>* phases = nullptr, float* stage = nullptr,
           const TA* ahead = nullptr) const {
    const int64_t p0 = st.p0;
    if (identity_) {  // pointwise: one run
      if (ahead) prefetch_run(ahead + p0, kc);
      copy_run(tab_, plane + p0, out, kc);
      return;
    }
    const ConvProblem& p = p_;
    const int64_t W = p.I[2], I1 = p.I[1], O1 = p.O[1], O2 = p.O[2];
    const Tap& tp = taps_[t];
    const int64_t* const pos0 = pos_[0].data() + tp.off0;
    const int64_t* const pos1 = pos_[1].data() + tp.off1;
    // By src rows, stepped from the start.
    int64_t x = st.x, i1 = st.i1, i0 = st.i0;
    for (int64_t q = p0; q < p0 + kc;) {
      const int64_t len = std::min(W - x, p0 + kc - q);
      const int64_t y0 = pos0[i0], y1 = pos1[i1];
      if (y0 < 0 || y1 < 0) {
        std::memset(out + (q - p0), 0, sizeof(float) * len);
      } else {
        const int64_t at = (y0 * O1 + y1) * O2;  // the diff_dst row
        if (ahead && !phases) {  // the run's span of the row, clamped to the row
          const int64_t lo = std::max<int64_t>(0, (x + tp.j2) * p.s[2] + tp.q2);
          const int64_t hi = std::min(O2, (x + tp.j2 + len - 1) * p.s[2] + tp.q2 + 1);
          if (hi > lo) prefetch_run(ahead + at + lo, hi - lo);
        }
        if (phases) {
          phases->copy(plane + at, tp.q2, x + tp.j2, len, out + (q - p0));
        } else if constexpr (kIs16<TA>) {
          const RowCopy<TA> copy{tab_, stage};
          copy(plane + at, O2, p.s[2], &tp.q2, 1, x + tp.j2, len, out + (q - p0), 0);
        } else {
          copy_phase_row(plane + at, O2, p.s[2], tp.q2, x + tp.j2, len, out + (q - p0),
                         tab_.strided_copy);
        }
      }
      q += len;
      x = 0;
      if (++i1 == I1) {
        i1 = 0;
        ++i0;
      }
    }
  }

 private:
  struct Tap {
    int64_t off0, off1;  // into pos_[0], pos_[1]
    int64_t q2, j2;      // innermost: input phase and offset (copy_phase_row)
  };
  const ConvProblem& p_;
  const PlanarF32Table& tab_;
  std::array<std::vector<int64_t>, 2> pos_;  // outer axes: [k * I + i] -> dst coordinate, -1 outside
  std::vector<Tap> taps_;
  bool identity_ = false;
};

// Backward-data on dense NCX tensors as GEMMs over the same im2col chunks of
// diff_dst (for the layers of gemm_bwd_data_preferred):
//   diff_src[n, g*ICg+a, q] = sum_j W(g*ICg+a, j) * D[n, q, j],  j = (b, k)
// Per item (image, group, chunk of src positions, block of src channels) the
// chunk's rows of D^T are gathered once into slices of 32 positions
// ([slice][j][32], so that a slice's rows are contiguous and stay in L1), and
// the GEMM tiles (planar_f32.h) run over the slices, the reduction cut into
// parts of at most kJp columns, against the weights rows (read in place when
// they are IOX-dense, else packed once to [ic][j]), writing diff_src in place.
// Extra memory: one chunk of D^T per thread, and the packed weights. A
// pointwise forward (PlanarPlan::transposed, transposed_pointwise) runs here
// too: src as diff_dst, dst as diff_src, the weights transposed, and its bias
// added to each item's rows once their sums are complete.

// GEMM tiles of one item: src channels [a_lo, a_hi) of group gi, kc
// positions, over the slices of pack ([slice][j][32]), into c: the row of
// channel a_lo + i at c + i * ldc (dx itself, or a 16-bit result's f32 sums).
void im_gemm_slices(const PlanarPlan& pl, const float* A, int64_t a_stride, const float* pack,
                    int64_t gi, int64_t kc, int64_t a_lo, int64_t a_hi, float* c, int64_t ldc) {
  const ConvProblem& p = pl.p;
  const ImGemmPlan& q = pl.gemm;
  const PlanarF32Table& tab = *pl.tab;
  constexpr int64_t SW = kPlanarGemmN, MR = kPlanarGemmMaxM;  // slice width, tile rows
  const int64_t ICg = p.ICg, J = q.J, JP = q.JP;
  const int64_t nslices = (kc + SW - 1) / SW;
  PlanarGemmArgs args;
  args.a_stride = a_stride;
  args.b_stride = SW;
  args.c_stride = ldc;
  for (int64_t sl = 0; sl < nslices; ++sl) {
    args.n = std::min<int64_t>(SW, kc - sl * SW);
    for (int64_t j0 = 0; j0 < J; j0 += JP) {
      args.kc = std::min(JP, J - j0);
      args.b = pack + (sl * J + j0) * SW;
      args.accumulate = j0 > 0;
      for (int64_t a0 = a_lo; a0 < a_hi; a0 += MR) {
        const int m = static_cast<int>(std::min<int64_t>(MR, a_hi - a0));
        const int64_t ic = gi * ICg + a0;
        args.a = A + ic * a_stride + j0;
        args.c = c + (a0 - a_lo) * ldc + sl * SW;
        tab.gemm[m](&args);
      }
    }
  }
}

// TA / TO: diff_dst's and diff_src's storage (16-bit: diff_dst rows widened
// by the im2col copies, each item's sums kept in f32 and rounded once).
template <class TA, class TO>
bool run_im_gemm(const PlanarPlan& pl, const TA* dy, WeightsView w, TO* dx,
                 const float* bias = nullptr) {
  const ConvProblem& p = pl.p;
  const ImGemmPlan& q = pl.gemm;
  const int64_t IC = p.IC(), OC = p.OC(), ICg = p.ICg, OCg = p.OCg, G = p.G, T = p.taps();
  const int64_t J = q.J;
  constexpr int64_t SW = kPlanarGemmN;  // slice width
  const int64_t P = p.src_spatial(), Q = p.dst_spatial();
  if (q.empty) return true;
  if (!pl.transposed) bias = nullptr;  // (backward-data has none)
  if (q.zero) {  // (0.0 is all-zero bits in every storage type; a pointwise
                 // forward has 32+ columns: pointwise_forward_gemm)
    std::memset(dx, 0, sizeof(TO) * p.N * IC * P);
    return true;
  }
  // The weights as [ic][j] rows (in place when IOX-dense per ic); a
  // pointwise forward's problem is transposed (one group): its weight
  // (ic', j) is the forward's (j, ic').
  if (pl.transposed) std::swap(w.si, w.so);
  const WeightRows rows = weight_rows(p, w, false, pl.nthreads);
  const float* const A = rows.data;
  const int64_t a_stride = rows.stride;
  const int64_t kc_max = q.kc_max, per_image = q.per_image, ablocks = q.ablocks, AB = q.AB;
  const Im2col im2col(p, *pl.tab);

#pragma omp parallel num_threads(pl.nthreads)
  {
    std::unique_ptr<PhaseRows<TA>> phases;  // per thread
    if (q.phase_rows) phases = std::make_unique<PhaseRows<TA>>(p.O[2], p.s[2], *pl.tab);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < q.items; ++item) {
      const int64_t ab = item % ablocks, chunk = item / ablocks;
      const int64_t n = chunk / (G * per_image), gi = (chunk / per_image) % G;
      const int64_t p0 = (chunk % per_image) * kc_max, kc = std::min(kc_max, P - p0);
      const int64_t nslices = (kc + SW - 1) / SW;
      // [kc_max], [slice][j][32]; 16-bit: a widened diff_dst row span.
      const int64_t stage16 = kIs16<TA> ? stage_floats(p.O[2], kc_max, p.s[2]) : 0;
      float* const tmp = thread_buffer(1, kc_max + nslices * J * SW + stage16);
      float* const pack = tmp + kc_max;
      float* const stage = kIs16<TA> ? pack + nslices * J * SW : nullptr;
      const Im2col::Start st = im2col.start(p0);
      for (int64_t j = 0; j < J; ++j) {
        const TA* const plane = dy + (n * OC + gi * OCg + j / T) * Q;
        im2col.row(plane, j % T, st, kc, tmp, phases.get(), stage,
                   Im2col::prefetch_plane(plane, j / T, OCg, Q, T));
        for (int64_t sl = 0; sl < nslices; ++sl)
          std::memcpy(pack + (sl * J + j) * SW, tmp + sl * SW,
                      sizeof(float) * std::min<int64_t>(SW, kc - sl * SW));
      }
      const int64_t a_lo = ab * AB, a_hi = std::min(ICg, a_lo + AB);
      TO* const out = dx + (n * IC + gi * ICg + a_lo) * P + p0;  // row i at + i * P
      // The sums: in place (f32), else per item in f32, rounded once below.
      float* c = nullptr;
      int64_t ldc = 0;
      if constexpr (!kIs16<TO>) {
        c = out, ldc = P;
      } else {
        c = thread_buffer(3, AB * kc_max), ldc = kc_max;
      }
      im_gemm_slices(pl, A, a_stride, pack, gi, kc, a_lo, a_hi, c, ldc);
      if (bias)  // (the item's rows, still in the caches)
        for (int64_t i = 0; i < a_hi - a_lo; ++i)
          add_to_row(c + i * ldc, kc, bias[gi * ICg + a_lo + i]);
      if constexpr (kIs16<TO>)
        for (int64_t i = 0; i < a_hi - a_lo; ++i)
          store_row(*pl.tab, c + i * ldc, kc, out + i * P, 1, nullptr);
    }
  }
  return true;
}

// Backward-weights on dense NCX tensors as GEMMs over im2col chunks of
// diff_dst:
//   diff_W(g*ICg+a, b, k) = sum_{n, p} src[n, g*ICg+a, p] * D[n, p, (b, k)]
//   D[n, p, (b, k)] = diff_dst[n, g*OCg+b, p*s - pb + k*d]  (per axis; 0 outside)
// over the src positions p of each image (contiguous in NCX). The columns
// j = b*taps + k are the weights' own IOX order. Per chunk of kKc positions
// an item packs its columns of D transposed ([position][column], gathered
// rows then 16x16 block transposes) and runs the GEMM tiles (planar_f32.h)
// over 32-column slices of the pack, which stay in L1, against the src rows
// read in place. Work is split over the reduction (each part sums its chunks
// into its own copy of the result: extra memory parts-1 copies, used when the
// result is small) and over panels of columns (each panel's owner writes it
// alone). Extra memory: one pack per thread, the partial sums, and the
// result in [ic][column] order when the weights' layout has another.

// The gradient element of src channel ic and column j = (oc, tap).
float* grad_at(const ConvProblem& p, const WeightsView& dw, int64_t ic, int64_t j) {
  const int64_t T = p.taps(), b = j / T, t = j % T;
  const int64_t k0 = t / (p.K[1] * p.K[2]), k1 = (t / p.K[2]) % p.K[1], k2 = t % p.K[2];
  return static_cast<float*>(dw.data) + ic * dw.si + b * dw.so + k0 * dw.sk[0] + k1 * dw.sk[1] +
         k2 * dw.sk[2];
}

// Packs columns j0p .. j0p+nc of D for positions st.p0 .. st.p0+kc of image n
// and group gi, transposed: pack[position][column] (rows ldp apart), through
// tmp ([16 columns][kKc]).
template <class TA>
void pack_im2col_columns(const PlanarBwdWeightsPlan& pl, const Im2col& im2col,
                         PhaseRows<TA>* phases, const TA* dy, int64_t n, int64_t gi,
                         const Im2col::Start& st, int64_t kc, int64_t j0p, int64_t nc,
                         float* tmp, float* pack, float* stage) {
  const ConvProblem& p = pl.p;
  const int64_t OC = p.OC(), OCg = p.OCg, T = p.taps(), Q = p.dst_spatial(), ldp = pl.gm.ldp;
  for (int64_t c0 = 0; c0 < nc; c0 += 16) {
    for (int64_t c = 0; c < 16; ++c) {
      float* row = tmp + c * kKc;
      const int64_t j = j0p + c0 + c;
      if (c0 + c >= nc) {
        std::memset(row, 0, sizeof(float) * kKc);
        continue;
      }
      const TA* const plane = dy + (n * OC + gi * OCg + j / T) * Q;
      im2col.row(plane, j % T, st, kc, row, phases, stage,
                 Im2col::prefetch_plane(plane, j / T, OCg, Q, T));
    }
    for (int64_t r0 = 0; r0 < kc; r0 += 16)  // past kc: never read
      pl.tab->transpose16(tmp + r0, kKc, pack + r0 * ldp + c0, ldp);
  }
}

// GEMM tiles of one chunk: 32-column slices of the pack x all src channels
// of group gi, into target's [ic][j] rows (t_stride apart).
// A: the chunk's src rows of the group's channels (channel a at A + a * a_stride).
void chunk_gemm(const PlanarBwdWeightsPlan& pl, const float* A, int64_t a_stride,
                const float* pack, int64_t gi, int64_t kc, int64_t j0p, int64_t nc,
                bool accumulate, float* target, int64_t t_stride) {
  const ConvProblem& p = pl.p;
  const PlanarF32Table& tab = *pl.tab;
  const int64_t ICg = p.ICg;
  PlanarGemmArgs args;
  args.kc = kc;
  args.a_stride = a_stride;
  args.b_stride = pl.gm.ldp;
  args.c_stride = t_stride;
  args.accumulate = accumulate;
  for (int64_t js = 0; js < nc; js += kPlanarGemmN) {
    args.b = pack + js;
    args.n = std::min<int64_t>(kPlanarGemmN, nc - js);
    for (int64_t a0 = 0; a0 < ICg; a0 += kPlanarGemmMaxM) {
      const int m = static_cast<int>(std::min<int64_t>(kPlanarGemmMaxM, ICg - a0));
      const int64_t ic = gi * ICg + a0;
      args.a = A + a0 * a_stride;
      args.c = target + ic * t_stride + j0p + js;
      tab.gemm[m](&args);
    }
  }
}

// TA: the storage of src and diff_dst (16-bit: each chunk's src rows widened
// into the item's buffer, the im2col rows as they are gathered).
template <class TA>
bool run_bwd_weights_gemm(const PlanarBwdWeightsPlan& pl, const void* src_v, const void* dy_v,
                          WeightsView dw) {
  const TA* const src = static_cast<const TA*>(src_v);
  const TA* const dy = static_cast<const TA*>(dy_v);
  const ConvProblem& p = pl.p;
  const BwdWeightsGemmPlan& q = pl.gm;
  const int nthreads = pl.nthreads;
  const int64_t IC = p.IC(), ICg = p.ICg, G = p.G;
  const int64_t J = q.J;  // columns per group
  const int64_t P = p.src_spatial();
  float* const out = static_cast<float*>(dw.data);
  // The result in [ic][j] rows: the weights themselves when they are IOX-dense per ic.
  const bool direct = iox_rows(p, dw);
  const int64_t c_stride = direct ? dw.si : J;
  if (q.empty) {
    for (int64_t ic = 0; ic < IC; ++ic)
      for (int64_t j = 0; j < J; ++j) *grad_at(p, dw, ic, j) = 0.f;
    return true;
  }
  const int64_t per_image = q.per_image, chunks = q.chunks, parts = q.parts;
  const int64_t npanels = q.npanels, NC = q.NC, ldp = q.ldp;
  const int64_t result = IC * J;
  AlignedBuf<float> scratch = direct ? AlignedBuf<float>() : aligned_buffer<float>(result);
  float* const C = direct ? out : scratch.get();
  AlignedBuf<float> partial = aligned_buffer<float>(q.partial_floats);
  const Im2col im2col(p, *pl.tab);

#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
  for (int64_t item = 0; item < q.items; ++item) {
    const int64_t part = item / (G * npanels), rest = item % (G * npanels);
    const int64_t gi = rest / npanels, j0p = (rest % npanels) * NC;
    const int64_t nc = std::min(NC, J - j0p);
    const int64_t c_lo = part * chunks / parts, c_hi = (part + 1) * chunks / parts;
    float* const target = part == 0 ? C : partial.get() + (part - 1) * result;
    const int64_t t_stride = part == 0 ? c_stride : J;  // partial sums: [ic][j]
    // [16 columns][kKc], [kKc][ldp]; 16-bit: the chunk's src rows [ICg][kKc]
    // and a widened diff_dst row span.
    const int64_t a16 = kIs16<TA> ? ICg * kKc : 0;
    const int64_t stage16 = kIs16<TA> ? stage_floats(p.O[2], kKc, p.s[2]) : 0;
    float* const tmp = thread_buffer(1, 16 * kKc + kKc * ldp + a16 + stage16);
    float* const pack = tmp + 16 * kKc;
    float* const abuf = pack + kKc * ldp;
    float* const stage = abuf + a16;
    if (c_lo >= c_hi) {  // nothing to sum: this part's columns are zero
      for (int64_t a = 0; a < ICg; ++a)
        std::memset(target + (gi * ICg + a) * t_stride + j0p, 0, sizeof(float) * nc);
      continue;
    }
    std::unique_ptr<PhaseRows<TA>> phases;
    if (q.phase_rows) phases = std::make_unique<PhaseRows<TA>>(p.O[2], p.s[2], *pl.tab);
    for (int64_t ch = c_lo; ch < c_hi; ++ch) {
      const int64_t n = ch / per_image, p0 = (ch % per_image) * kKc;
      const int64_t kc = std::min(kKc, P - p0);
      const Im2col::Start st = im2col.start(p0);
      pack_im2col_columns(pl, im2col, phases.get(), dy, n, gi, st, kc, j0p, nc, tmp, pack,
                          stage);
      const TA* const a_rows = src + (n * IC + gi * ICg) * P + p0;
      if constexpr (kIs16<TA>) {
        for (int64_t a = 0; a < ICg; ++a) copy_run(*pl.tab, a_rows + a * P, abuf + a * kKc, kc);
        chunk_gemm(pl, abuf, kKc, pack, gi, kc, j0p, nc, ch > c_lo, target, t_stride);
      } else {
        chunk_gemm(pl, a_rows, P, pack, gi, kc, j0p, nc, ch > c_lo, target, t_stride);
      }
    }
  }
  // Sum the parts into the result (parallel over channels), then write the
  // weights' layout when the result went through [ic][j] scratch.
#pragma omp parallel for schedule(static) num_threads(nthreads)
  for (int64_t ic = 0; ic < IC; ++ic) {
    float* c = C + ic * c_stride;
    for (int64_t r = 1; r < parts; ++r) {
      const float* s2 = partial.get() + (r - 1) * result + ic * J;
      for (int64_t j = 0; j < J; ++j) c[j] += s2[j];
    }
    if (!direct)
      for (int64_t j = 0; j < J; ++j) *grad_at(p, dw, ic, j) = c[j];
  }
  return true;
}

// Backward-weights on dense NCX tensors (dot tiles):
//   diff_W(g*ICg+a, b, k) = sum_{n, i} src[n, g*ICg+a, i] * diff_dst[n, g*OCg+b, i*s - pb + k*d]
// Dot-product tiles (planar_f32.h) reduce along the innermost axis: per block
// of src rows (and chunk of the line), the src rows are copied zero-padded and
// the diff_dst rows each tap reads are split into phases as in the forward
// passes, so that every tap is one contiguous run per row. The items (row
// block, line chunk) are cut into reduction_pieces() contiguous runs, a
// function of the problem alone: a piece sums its items in order into its own
// copy of the gradient (piece 0: the result itself, the others: scratch),
// whichever thread runs it, and the copies are added in piece order at the
// end, so the bits depend on neither the threads' timing nor their count
// (SPEC 5). The line chunks and row blocks are sized for a fixed number of
// items, not for the thread count. Extra memory: pieces-1 copies of the
// weight gradient (at most 7, within a quarter of the activations or 512 KiB)
// plus one row block per thread.
// The inputs of one dot-tiles call (shared by the threads).
struct DotsCall {
  const BwdWeightsDotsPlan& q;
  const PlanarF32Table& tab;
  const ConvProblem& p;
  const void* src;  // in the plan's storage type
  const void* dy;
  WeightsView dw;
  float* scratch;  // pieces 1 .. P-1: [piece][k][ic][oc]
};

// A thread's buffers: src rows [r][ic][cw], phase-split diff_dst rows
// [r][seg][oc][slot][span], each block row's segment of every (k0, k1)
// (-1: none), and the row pointers of one tile.
struct DotsThread {
  float* abuf;
  float* bbuf;
  float* stage;  // 16-bit: a widened row span (RowCopy)
  std::vector<int64_t> k0s, i0s, k1s, i1s, seg_of;
  std::vector<const float*> pa, pb;
};

// Copies the rows of block rows [r0, r0 + nr), line chunk [x0, x0 + xn): the
// src rows zero past the line, the diff_dst rows of their valid outer taps
// phase-split and padded.
template <class TA>
void dots_fill_block(const DotsCall& c, DotsThread& th, int64_t r0, int64_t nr, int64_t x0,
                     int64_t xn) {
  const BwdWeightsDotsPlan& q = c.q;
  const Geometry& g = q.g;
  const Line& L = q.L;
  const int64_t IC = c.p.IC(), OC = c.p.OC(), K0 = c.p.K[0], K1 = c.p.K[1];
  const int64_t W = q.W, cw = q.cw, nslots = q.nslots, span = q.span, max_seg = q.max_seg;
  const int64_t src_plane = g.src[0] * g.src[1] * g.src[2];
  const int64_t dst_plane = g.dst[0] * g.dst[1] * g.dst[2];
  const int64_t jlo = x0 + L.min_off, jn = cw + q.ext;
  std::fill(th.seg_of.begin(), th.seg_of.end(), -1);
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t row = r0 + r;
    const int64_t i1 = row % g.src[1], i0 = (row / g.src[1]) % g.src[0],
                  n = row / (g.src[1] * g.src[0]);
    const TA* srow =
        static_cast<const TA*>(c.src) + n * IC * src_plane + (i0 * g.src[1] + i1) * W + x0;
    for (int64_t ch = 0; ch < IC; ++ch) {
      float* d = th.abuf + (r * IC + ch) * cw;
      copy_run(c.tab, srow + ch * src_plane, d, xn);
      std::memset(d + xn, 0, sizeof(float) * (cw - xn));
    }
    const RowCopy<TA> copy{c.tab, th.stage};
    const int n0 = outer_taps(g, 0, i0, th.k0s.data(), th.i0s.data());
    const int n1 = outer_taps(g, 1, i1, th.k1s.data(), th.i1s.data());
    int64_t seg = 0;
    for (int a = 0; a < n0; ++a)
      for (int b = 0; b < n1; ++b, ++seg) {
        th.seg_of[(r * K0 + th.k0s[a]) * K1 + th.k1s[b]] = seg;
        const TA* drow = static_cast<const TA*>(c.dy) + n * OC * dst_plane +
                         (th.i0s[a] * g.dst[1] + th.i1s[b]) * g.dst[2];
        for (int64_t ch = 0; ch < OC; ++ch)
          copy(drow + ch * dst_plane, g.dst[2], L.in_step, L.slot_q.data(), nslots, jlo, jn,
               th.bbuf + ((r * max_seg + seg) * OC + ch) * nslots * span, span);
      }
  }
}

// The dot tiles of one block (nr rows, xn positions) into piece t's sums:
// per tap, group, ds.m src channels x ds.n diff_dst channels.
void dots_block_tiles(const DotsCall& c, DotsThread& th, int t, int64_t nr, int64_t xn) {
  const BwdWeightsDotsPlan& q = c.q;
  const ConvProblem& p = c.p;
  const Line& L = q.L;
  const DotShape ds = q.ds;
  const WeightsView& dw = c.dw;
  const int64_t IC = p.IC(), OC = p.OC(), K0 = p.K[0], K1 = p.K[1], K2 = p.K[2];
  const int64_t cw = q.cw, nslots = q.nslots, span = q.span, max_seg = q.max_seg;
  PlanarDotArgs args;
  args.a = th.pa.data();
  args.b = th.pb.data();
  args.nvec = (xn + 15) / 16;
  args.a_stride = cw;
  args.b_stride = nslots * span;
  for (int64_t k0 = 0; k0 < K0; ++k0)
    for (int64_t k1 = 0; k1 < K1; ++k1)
      for (size_t tk = 0; tk < L.k[0].size(); ++tk) {
        const int64_t k2 = L.k[0][tk];
        const int64_t boff = L.slot[0][tk] * span + L.off[0][tk] - L.min_off;
        for (int64_t gi = 0; gi < p.G; ++gi)
          for (int64_t a0 = 0; a0 < p.ICg; a0 += ds.m)
            for (int64_t b0 = 0; b0 < p.OCg; b0 += ds.n) {
              const int m = static_cast<int>(std::min<int64_t>(ds.m, p.ICg - a0));
              const int nn = static_cast<int>(std::min<int64_t>(ds.n, p.OCg - b0));
              int64_t cnt = 0;
              for (int64_t r = 0; r < nr; ++r) {
                const int64_t seg = th.seg_of[(r * K0 + k0) * K1 + k1];
                if (seg < 0) continue;
                th.pa[cnt] = th.abuf + (r * IC + gi * p.ICg + a0) * cw;
                th.pb[cnt] =
                    th.bbuf + ((r * max_seg + seg) * OC + gi * p.OCg + b0) * nslots * span + boff;
                ++cnt;
              }
              if (cnt == 0) continue;
              args.nrows = cnt;
              const int64_t ic = gi * p.ICg + a0;
              if (t == 0) {
                args.out = static_cast<float*>(dw.data) + ic * dw.si + b0 * dw.so +
                           k0 * dw.sk[0] + k1 * dw.sk[1] + k2 * dw.sk[2];
                args.out_m = dw.si;
                args.out_n = dw.so;
              } else {
                args.out = c.scratch + (t - 1) * q.grad_floats +
                           (((k0 * K1 + k1) * K2 + k2) * IC + ic) * p.OCg + b0;
                args.out_m = p.OCg;
                args.out_n = 1;
              }
              c.tab.dot[m][nn](&args);
            }
      }
}

template <class TA>
bool run_bwd_weights_dots(const PlanarBwdWeightsPlan& pl, const void* src, const void* dy,
                          WeightsView dw) {
  const ConvProblem& p = pl.p;
  const BwdWeightsDotsPlan& q = pl.dots;
  const int64_t IC = p.IC(), K0 = p.K[0], K1 = p.K[1], K2 = p.K[2];
  auto out_at = [&](int64_t ic, int64_t oc, int64_t k0, int64_t k1, int64_t k2) {
    return static_cast<float*>(dw.data) + ic * dw.si + oc * dw.so + k0 * dw.sk[0] +
           k1 * dw.sk[1] + k2 * dw.sk[2];
  };
  for (int64_t ic = 0; ic < IC; ++ic)
    for (int64_t oc = 0; oc < p.OCg; ++oc)
      for (int64_t k0 = 0; k0 < K0; ++k0)
        for (int64_t k1 = 0; k1 < K1; ++k1)
          for (int64_t k2 = 0; k2 < K2; ++k2) *out_at(ic, oc, k0, k1, k2) = 0.f;
  if (q.empty) return true;
  const int64_t R = q.R, nchunks = q.nchunks, items = q.items, grad_floats = q.grad_floats;
  const int P = q.pieces;
  AlignedBuf<float> scratch = aligned_buffer<float>(std::max<int64_t>(1, (P - 1) * grad_floats));
  std::memset(scratch.get(), 0, sizeof(float) * std::max<int64_t>(1, (P - 1) * grad_floats));
  const DotsCall c{q, *pl.tab, p, src, dy, dw, scratch.get()};

#pragma omp parallel num_threads(q.threads)
  {
    float* buf = thread_buffer(1, R * q.row_floats);
    DotsThread th{buf,
                  buf + R * IC * q.cw,
                  kIs16<TA> ? thread_buffer(2, stage_floats(q.g.dst[2], q.cw + q.ext,
                                                            q.L.in_step))
                            : nullptr,
                  std::vector<int64_t>(K0),
                  std::vector<int64_t>(K0),
                  std::vector<int64_t>(K1),
                  std::vector<int64_t>(K1),
                  std::vector<int64_t>(R * K0 * K1),
                  std::vector<const float*>(R),
                  std::vector<const float*>(R)};
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < P; ++t)  // piece t: items [t*items/P, (t+1)*items/P), in order
      for (int64_t item = t * items / P; item < (t + 1) * items / P; ++item) {
        const int64_t blk = item / nchunks, ch = item % nchunks;
        const int64_t r0 = blk * R, nr = std::min(R, q.rows - r0);
        const int64_t x0 = ch * q.cw, xn = std::min(q.cw, q.W - x0);
        dots_fill_block<TA>(c, th, r0, nr, x0, xn);
        dots_block_tiles(c, th, t, nr, xn);
      }
  }
  // Add the other pieces' sums into the result, in piece order.
  if (P > 1) {
#pragma omp parallel for num_threads(pl.nthreads) schedule(static)
    for (int64_t ic = 0; ic < IC; ++ic)
      for (int64_t k0 = 0; k0 < K0; ++k0)
        for (int64_t k1 = 0; k1 < K1; ++k1)
          for (int64_t k2 = 0; k2 < K2; ++k2) {
            const int64_t e = (((k0 * K1 + k1) * K2 + k2) * IC + ic) * p.OCg;
            sum_pieces(scratch.get() + e, grad_floats, P - 1, p.OCg, out_at(ic, 0, k0, k1, k2), dw.so,
                       true);
          }
  }
  return true;
}

bool run_planar(const PlanarPlan& pl, const float* in, WeightsView w, const float* bias,
                float* out) {
  if (!pl.tab) return false;
  switch (pl.route) {
    case PlanarRoute::OnePixelGemm: return run_one_pixel_gemm(pl, in, w, bias, out);
    case PlanarRoute::OnePixelDots:
      run_one_pixel_dots(*pl.tab, pl.dots, pl.p, in, w, out);
      return true;
    case PlanarRoute::ImGemm: return run_im_gemm<float, float>(pl, in, w, out, bias);
    case PlanarRoute::Depthwise: return run_dw<float, float>(pl, in, w, out);
    case PlanarRoute::Tiles: return run_tiles<float, float>(pl, in, w, bias, out);
  }
  return false;
}

// The routes that take 16-bit storage, in storage type T (in and out).
template <class T>
bool run_planar16(const PlanarPlan& pl, const void* in, WeightsView w, const float* bias,
                  void* out) {
  if (!takes16(pl)) return false;
  switch (pl.route) {
    case PlanarRoute::Tiles: return run_tiles<T, T>(pl, in, w, bias, out);
    case PlanarRoute::Depthwise: return run_dw<T, T>(pl, in, w, out);
    case PlanarRoute::ImGemm:
      return run_im_gemm<T, T>(pl, static_cast<const T*>(in), w, static_cast<T*>(out), bias);
    default: return false;
  }
}

bool run_planar_bwd_weights(const PlanarBwdWeightsPlan& pl, const float* src, const float* dy,
                            WeightsView dw) {
  if (!pl.tab) return false;
  return pl.gemm ? run_bwd_weights_gemm<float>(pl, src, dy, dw)
                 : run_bwd_weights_dots<float>(pl, src, dy, dw);
}

}  // namespace

bool dense_backward_data_f32(Isa isa, const ConvProblem& p, const float* dy, WeightsView w,
                             float* dx, int nthreads, bool channels_last) {
  const PlanarF32Table* tab = table_for(isa);
  if (!tab) return false;
  const OnePixelDotsPlan q = plan_one_pixel_dots(*tab, p, channels_last, nthreads);
  if (!q.fits) return false;  // the general paths run
  run_one_pixel_dots(*tab, q, p, dy, w, dx);
  return true;
}

bool planar_f32(Isa isa, const ConvProblem& p, bool forward, const float* in, WeightsView w,
                const float* bias, float* out, int nthreads) {
  return run_planar(plan_planar(isa, p, forward, nthreads), in, w, bias, out);
}

bool planar_takes16(Isa isa, const ConvProblem& p, bool forward, int nthreads) {
  return takes16(plan_planar(isa, p, forward, nthreads));
}

bool planar16(Isa isa, DType dt, const ConvProblem& p, bool forward, const void* in,
              WeightsView w, const float* bias, void* out, int nthreads) {
  if (dt != DType::BF16 && dt != DType::F16) return false;
  const PlanarPlan pl = plan_planar(isa, p, forward, nthreads, dt, dt);
  return dt == DType::BF16 ? run_planar16<bf16>(pl, in, w, bias, out)
                           : run_planar16<f16>(pl, in, w, bias, out);
}

bool planar_bwd_weights_f32(Isa isa, const ConvProblem& p, const float* src, const float* dy,
                            WeightsView dw, int nthreads) {
  return run_planar_bwd_weights(plan_planar_bwd_weights(isa, p, nthreads), src, dy, dw);
}

bool planar_bwd_weights_takes16(Isa isa) {
  return table_for(isa) != nullptr;  // both routes copy what they read
}

bool planar_bwd_weights16(Isa isa, DType dt, const ConvProblem& p, const void* src,
                          const void* dy, WeightsView dw, int nthreads) {
  if (dt != DType::BF16 && dt != DType::F16) return false;
  const PlanarBwdWeightsPlan pl = plan_planar_bwd_weights(isa, p, nthreads, dt);
  if (!pl.tab) return false;
  if (pl.gemm)
    return dt == DType::BF16 ? run_bwd_weights_gemm<bf16>(pl, src, dy, dw)
                             : run_bwd_weights_gemm<f16>(pl, src, dy, dw);
  return dt == DType::BF16 ? run_bwd_weights_dots<bf16>(pl, src, dy, dw)
                           : run_bwd_weights_dots<f16>(pl, src, dy, dw);
}

std::string describe_planar_f32(Isa isa, Pass pass, const ConvProblem& p, int nthreads,
                                DType dt) {
  if (pass == Pass::BackwardWeights) return describe(plan_planar_bwd_weights(isa, p, nthreads, dt));
  return describe(plan_planar(isa, p, pass == Pass::Forward, nthreads, dt, dt));
}

bool planar_uses_planes(Isa isa, const ConvProblem& p, bool forward, int nthreads) {
  const PlanarF32Table* tab = table_for(isa);
  if (!tab) return false;
  const Geometry g = geometry(p, forward);
  const Line L = make_line(g);
  const TileShape ts = choose_tile(*tab, g, L);
  return use_planes(g, L, int64_t{ts.NV} * ts.VL, nthreads);
}

bool planar_bwd_weights_gemm(Isa isa, const ConvProblem& p) {
  const PlanarF32Table* tab = table_for(isa);
  return tab && gemm_preferred(*tab, p);
}

bool planar_backward_data_gemm(Isa /*isa*/, const ConvProblem& p) {
  return !one_pixel_covering(p) && gemm_bwd_data_preferred(p);
}

bool planar_depthwise_backward_data(const ConvProblem& p) {
  return p.ICg == 1 && p.OCg == 1 && !one_pixel_covering(p) && !gemm_bwd_data_preferred(p);
}

double valid_tap_share(const ConvProblem& p) {
  double share = 1.0;
  for (int a = 0; a < kAxes; ++a) {
    int64_t pairs = 0;
    for (int64_t k = 0; k < p.K[a]; ++k) {
      const auto [lo, hi] = p.tap_src_range(a, k);
      pairs += hi - lo;
    }
    const int64_t all = std::max<int64_t>(1, p.K[a] * p.I[a]);
    share *= static_cast<double>(pairs) / static_cast<double>(all);
  }
  return share;
}

namespace {

// Activation elements (src and dst, every image) and multiply-adds per element.
double activation_elements(const ConvProblem& p) {
  return p.N * (static_cast<double>(p.IC()) * p.src_spatial() +
                static_cast<double>(p.OC()) * p.dst_spatial());
}
double macs_per_element(const ConvProblem& p) {
  return p.macs() / std::max(1.0, activation_elements(p));
}

// Little work per activation element (the layout changes dominate) on lines
// of at least min_len.
bool planar_by_work(const ConvProblem& p, const Line& L, int64_t min_len, double max_macs) {
  return L.max_len >= min_len && macs_per_element(p) <= max_macs;
}

// planar_preferred for backward-weights.
bool planar_preferred_bwd_weights(const PlanarF32Table& tab, const ConvProblem& p) {
  const PlanarF32Rules& r = tab.rules;
  // GEMMs over im2col chunks (gemm_preferred: 1.2-2x). Else the dot tiles,
  // which pay a horizontal sum per tile and row block: they win (1.05-2x)
  // only on long lines with few channels on one side and few taps (RGB /
  // few-channel layers), where the channels-last tiles are weak.
  // AVX-512: few diff_dst channels, whose innermost taps the channels-last
  // kernel fuses into one tile, beat the im2col GEMMs where the layout
  // changes are cheap: much work per element or activations within the
  // caches (AlexNet's 96 -> 3 k11 s4 1.15x, 1D 64 -> 3 k7 s2 1.2-1.35x;
  // the 36 -> 4 k3 s3 on 360x640, 18 multiply-adds per element over 66 MB,
  // stays planar: 1.7x).
  if (r.fused_taps_channels_last && p.OCg <= 4 && p.ICg >= 16 && innermost_taps_fusable(p) &&
      (macs_per_element(p) >= 64 || kFloatBytes * activation_elements(p) <= 4.0 * (1 << 20)))
    return false;
  // Deep layers with many multiply-adds per activation element: the layout
  // changes are a small share, and the channels-last tiles beat the im2col
  // GEMMs. AVX-512 from 400 (512 -> 256 k16 s8 on 1D lines, 819: HiFi-GAN
  // and the vocoder 1.04-1.14x on Zen 5, ncx_paths.py, three runs). AVX2
  // from 1000 (Zen 3, heuristics P2: 512 -> 256 k4 s2, 1365, 1.22x; the 3D
  // U-Net k3, 2260-3575, 1.05-1.24x; between 560 and 864 a tie either way,
  // and the 512 -> 512 k3 s2 on 4x4, 760, 1.42x planar).
  if (r.deep_channels_last_macs > 0 && p.ICg >= 64 && p.OCg >= 64 &&
      macs_per_element(p) >= r.deep_channels_last_macs)
    return false;
  if (gemm_preferred(tab, p)) return true;
  const int64_t line = geometry(p, false).src[2];
  // AVX2: not depthwise (1 x 1 dot tiles are load-bound; the channels-last
  // depthwise tiles are 1.5x faster).
  if (!r.depthwise_dots && p.ICg == 1 && p.OCg == 1) return false;
  return std::min(p.ICg, p.OCg) <= 4 && p.taps() <= 16 && line >= 64;
}

// planar_preferred for forward and backward-data (amd: an AMD core, whose
// rule differs where the table says so).
bool planar_preferred_fwd_bwd_data(Isa isa, const PlanarF32Table& tab, const ConvProblem& p,
                                   bool forward, bool amd) {
  if (!forward && one_pixel_covering(p)) return true;  // dot products per output (z -> 4x4: 8x faster)
  if (forward && one_pixel_forward(p)) return true;    // one GEMM
  // AVX2, a pointwise forward: the backward-data GEMM of its transposed problem
  if (forward && pointwise_forward_gemm(isa, p)) return true;
  // The backward-data GEMM (kernels that do not overlap); on AMD's AVX-512
  // only below 256 (channel, tap) columns: the 3D U-Net k2 s2 128 -> 64
  // (512 columns) runs 1.15x faster channels-last on Zen 4 and Zen 5, the
  // 2D one's 64 x 4 columns tied on Zen 4 and run 1.05-1.15x faster
  // channels-last on Zen 5 (rotated A/B); so does a 1x1 s2 256 <- 512 on Zen 4 (1.15x
  // channels-last on Zen 5; dense NCX ones of 2 MiB and more arrive here
  // gathered, as stride 1: kernels/plan.cpp, gathers_1x1). A 1x1 kernel of stride 1, whose
  // im2col is diff_dst itself, keeps the GEMM up to 512 columns (GoogLeNet
  // 4a's 192 <- 480: a tie on Zen 4, 1.1-1.2x planar on Zen 5). AVX2 (any
  // vendor) takes the same cap: on Zen 3 the 3D U-Net one ran 1.11-1.43x
  // faster channels-last, the 2D one 0.96-1.02x (ncx_paths.py, three runs).
  bool plain_1x1 = p.taps() == 1;
  for (int a = 0; a < kAxes; ++a) plain_1x1 = plain_1x1 && p.s[a] == 1;
  const bool amd512 = tab.rules.amd_rules && amd;
  const bool cols_cap = amd512 || !tab.rules.amd_rules;  // (AVX2: no AMD rules of its own)
  if (!forward && planar_backward_data_gemm(isa, p) &&
      !(cols_cap && p.OCg * p.taps() >= 256 && !plain_1x1))
    return true;
  // AMD AVX-512, backward-data whose channels-last tiles would mostly
  // multiply zeros: lanes of padded columns times taps outside diff_dst
  // (cropping pads, small images). benchdnn's 3D ic-tail problem (17 columns
  // in tiles of 32, 24 % of the (pixel, tap) pairs inside: 13 % useful) ran
  // 1.3x faster planar; 16 columns at 24 % (a tie) or 17 at 77 % (0.6x) stay
  // channels-last. Since its 16 diff_dst channels' fused taps run line by
  // line (dropping a line's padded outer taps: see run_lines), it runs
  // 1.2x faster channels-last (Zen 5): fused problems stay channels-last.
  // AVX2 likewise, fused or not: the same problem (17 columns in tiles of
  // 24) ran 1.35-1.5x faster planar on Zen 3 (ncx_paths.py, three runs), its
  // line-by-line fused taps notwithstanding.
  const bool sparse_rule = amd512 ? !backward_data_fuses_taps(p) : isa == Isa::Avx2;
  if (!forward && sparse_rule && p.G == 1 && p.ICg > 4 &&
      valid_tap_share(p) * gemm_column_share(isa, p.ICg) < 0.2)
    return true;
  const Geometry g = geometry(p, forward);
  const Line L = make_line(g);
  if (L.max_len < 16) return false;
  const bool depthwise = p.ICg == 1 && p.OCg == 1;
  // AMD AVX-512, one group of few channels on lines of 16+, little
  // work per activation element (sweeps of 8-64 channels a side on 16x16 to
  // 64x64 planes and 16^3 volumes, k1-k4, s1-s2): forward with at most 24
  // channels a side planar, 1.05-2.6x (the channels-last tiles pad 8-24
  // columns to 16-32 lanes; 32+ channels, and 1x1 kernels of 32-64, run
  // 1.1-1.6x faster channels-last); backward-data with at most 64 a side
  // planar, 1.05-2.5x (1x1 and 2x2 s2 kernels too); 100+ multiply-adds per
  // element (32 channels under k4 s2) stay channels-last, 1.0-1.15x.
  if (amd512 && p.G == 1) {
    const int64_t cmax = std::max(g.Cin, g.Cout);
    if (forward ? cmax <= 24 && planar_by_work(p, L, 16, 110)
                : cmax <= 64 && planar_by_work(p, L, 16, 100))
      return true;
  }
  if (amd512 && forward) return std::min(g.Cin, g.Cout) <= 4 && !depthwise;
  if (!amd512 && tab.rules.little_work_max_macs > 0)
    return std::min(g.Cin, g.Cout) <= 4 ||
           planar_by_work(p, L, tab.rules.little_work_min_line, tab.rules.little_work_max_macs);
  // AVX2 (Zen 3): the channels-last tiles plus the layout changes win on
  // every deeper layer of the benchmark (1.1-2x), on the forward of
  // depthwise layers (1.2-1.4x; their backward-data rows, on lines of 16+,
  // are 2-5x faster than the layout changes), on the backward-data of
  // few-channel layers with lines shorter than 64 (AlexNet's 55: 1.3x; lines
  // of 64+ stay planar, 1.2-1.4x) and, on images of several rows, on the
  // forward into few channels whose outputs each reduce over many (channel,
  // tap) pairs (the channels-last dot tiles: RGB output layers 1.25-1.75x;
  // shallow reductions and one long row per image stay planar).
  if (depthwise) return !forward;
  if (std::min(g.Cin, g.Cout) > 4) return false;
  if (!forward) return L.max_len >= 64;
  int64_t depth = g.Cin;  // (channel, tap) pairs per output
  for (int a = 0; a < kAxes; ++a) depth *= (p.K[a] + p.s[a] - 1) / p.s[a];
  return depth <= 64 || g.out[0] * g.out[1] == 1;
}
}  // namespace

// Measured on the benchmark layers (interleaved A/B runs, AVX-512 on
// Sapphire Rapids, 2 threads): the planar kernels win where the channels-last
// ones are weak or the layout changes dominate: long lines with few channels
// on one side (RGB layers: 1.2-4x; depthwise layers on planes of 32x32 and
// more: 1.1-1.8x), or little work per activation element (1x1 strided, 2x2
// stride-2 upsampling: 1.05-1.4x). Deep layers on short lines (lanes idle,
// and the channels-last GEMM tiles are faster) and anything on lines shorter
// than one vector stay channels-last. On AMD's AVX-512 cores the planar
// tiles lose more to the channels-last ones. The rule below was measured on
// Zen 4 (512-bit ops as two halves: the planar tiles, which load one vector
// per FMA row, suffer most; the figures below are Zen 4's); Zen 5 takes it
// too (ncx_paths.py there: the Sapphire Rapids rule's picks lost 1.15-1.45x
// on 4 benchmark passes, this rule's on 1, HiFi-GAN 128 -> 64 k4 s2 bwd_d,
// 1.15x): the forward as on Sapphire Rapids but depthwise and
// deep work-per-element layers channels-last (1.1-1.5x), the backward-data as
// on AVX2 (AlexNet's 96 <- 3 channels, k11 s4 on lines of 55: 1.2x); one
// group of at most 24 (forward) or 64 (backward-data) channels with little
// work per element, and backward-data whose channels-last tiles would mostly
// multiply zeros, planar (the rules below). What differs per ISA (and on
// AMD's cores) is in the table: PlanarF32Rules.
bool planar_preferred(Isa isa, const ConvProblem& p, Pass pass, bool amd) {
  const PlanarF32Table* tab = table_for(isa);
  if (!tab) return false;
  if (pass == Pass::BackwardWeights) return planar_preferred_bwd_weights(*tab, p);
  return planar_preferred_fwd_bwd_data(isa, *tab, p, pass == Pass::Forward, amd);
}

}  // namespace x86
}  // namespace tct
