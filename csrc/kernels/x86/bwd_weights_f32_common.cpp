// Driver of the f32 backward-weights pass on dense channels-last activations:
//   diff_W[g*ICg+a, b, k] = sum_n sum_i src[n, i, g*ICg+a] * diff_dst[n, i*s-pb+k*d, g*OCg+b].
// Per kernel tap this is a GEMM C[m][n] += sum_p A[p][m] * B[p][n] whose
// reduction runs over the src pixels p whose tapped dst position is inside
// diff_dst. One side is broadcast (m), the other is the vector side (n): src
// channels x diff_dst channels or the transpose, whichever the output layout
// and the channel counts favour. Per tap the valid pixels form a box, walked
// as runs along the innermost axis; there is no im2col buffer.
//
// Threads: work items (tap, group, n-block, m-block) are split between the
// threads of a pixel partition; pixels are split into P partitions only when
// the items alone cannot keep the threads balanced. Partition 0 accumulates
// into the output itself when its layout has the vector side contiguous (else
// into one scratch copy); partitions 1..P-1 into scratch copies, summed at the
// end. Extra memory: at most P (<= nthreads) copies of the weight gradient.
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "bwd_weights_f32.h"
#include "x86.h"

namespace tct {
namespace x86 {
namespace {

using bww::Run;
using bww::TileArgs;

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// One accumulator tile of the weight gradient.
struct Item {
  int64_t tap, g, m0, n0;
  int rows, cols;
  double cost;
};

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

}  // namespace

bool backward_weights_f32(Isa isa, const ConvProblem& p, const float* src, const float* diff_dst,
                          WeightsView diff_w, int nthreads) {
  if (isa != Isa::Avx512 && isa != Isa::Avx2) return false;
  const int nt = std::max(1, nthreads);
  const int64_t G = p.G, ICg = p.ICg, OCg = p.OCg, IC = p.IC(), OC = p.OC();
  const int64_t taps = p.taps();
  if (G <= 0 || ICg <= 0 || OCg <= 0 || taps <= 0) return true;  // no element to write
  float* out = static_cast<float*>(diff_w.data);
  const int64_t si = diff_w.si, so = diff_w.so;

  // Output offset of each tap, and per axis the box of src positions whose
  // tapped dst position lies inside diff_dst: lo <= i < hi.
  std::vector<int64_t> koff(taps);
  std::vector<int64_t> lo[kAxes], hi[kAxes];
  for (int ax = 0; ax < kAxes; ++ax) {
    lo[ax].resize(p.K[ax]);
    hi[ax].resize(p.K[ax]);
    for (int64_t k = 0; k < p.K[ax]; ++k) {
      const int64_t shift = k * p.d[ax] - p.pb[ax];  // o = i*s + shift
      lo[ax][k] = std::clamp<int64_t>(floor_div(-shift + p.s[ax] - 1, p.s[ax]), 0, p.I[ax]);
      hi[ax][k] = std::clamp<int64_t>(floor_div(p.O[ax] - 1 - shift, p.s[ax]) + 1, lo[ax][k],
                                      p.I[ax]);
    }
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
  if (all_pixels == 0) {  // N == 0, or no tap ever inside diff_dst: all zeros
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t ic = 0; ic < IC; ++ic)
      for (int64_t b = 0; b < OCg; ++b)
        for (int64_t t = 0; t < taps; ++t) out[ic * si + b * so + koff[t]] = 0.f;
    return true;
  }

  const bool avx512 = isa == Isa::Avx512;
  const int lanes = avx512 ? bww::kAvx512Lanes : bww::kAvx2Lanes;
  const int max_vecs = avx512 ? bww::kAvx512MaxVecs : bww::kAvx2MaxVecs;
  const int* rows_of = avx512 ? bww::kAvx512Rows : bww::kAvx2Rows;
  void (*gemm_tile)(const TileArgs&) = avx512 ? bww::gemm_tile_avx512 : bww::gemm_tile_avx2;
  void (*dw_tile)(const TileArgs&) = avx512 ? bww::dw_tile_avx512 : bww::dw_tile_avx2;

  // Shape of the GEMMs. vec_b: n = diff_dst channel b, m = src channel a
  // (A = src); else n = a, m = b (A = diff_dst). Depthwise (ICg == OCg == 1):
  // n runs over the groups, with vec_b's addressing.
  const bool depthwise = ICg == 1 && OCg == 1;
  auto vecs = [&](int64_t c) { return (c + lanes - 1) / lanes; };
  // Vector FMAs per pixel plus a share for the broadcasts of the m side.
  auto gemm_cost = [&](int64_t Mg, int64_t Ng) {
    return static_cast<double>(vecs(Ng) * Mg) + 0.25 * Mg;
  };
  bool vec_b = true, direct = false;
  if (depthwise) {
    direct = si == 1 || G == 1;
  } else {
    const double cost_b = gemm_cost(ICg, OCg), cost_a = gemm_cost(OCg, ICg);
    const bool direct_b = so == 1 || OCg == 1, direct_a = si == 1 || ICg == 1;
    const double best = std::min(cost_b, cost_a);
    if (direct_b && cost_b <= 1.05 * best) {
      vec_b = true, direct = true;
    } else if (direct_a && cost_a <= 1.05 * best) {
      vec_b = false, direct = true;
    } else {
      vec_b = cost_b <= cost_a;
    }
  }
  const int64_t Mg = vec_b ? ICg : OCg, Ng = vec_b ? OCg : ICg;

  // Work items, tap-major; within a tap the m-blocks of one n-block are
  // adjacent, so the B panel of that n-block stays in L1 across them.
  std::vector<Item> items;
  int max_cols = 0;
  for (int64_t t = 0; t < taps; ++t) {
    if (depthwise) {
      const int64_t width = static_cast<int64_t>(lanes) * bww::kDwMaxVecs;
      for (int64_t c0 = 0; c0 < G; c0 += width) {
        const int cols = static_cast<int>(std::min(width, G - c0));
        items.push_back({t, c0, 0, 0, 1, cols, tap_pixels[t] * (2.0 * vecs(cols) + 1.0)});
        max_cols = std::max(max_cols, cols);
      }
      continue;
    }
    for (int64_t g = 0; g < G; ++g)
      for (int64_t n0 = 0; n0 < Ng;) {
        const int64_t left = Ng - n0;
        const int nv = static_cast<int>(std::min<int64_t>(max_vecs, vecs(left)));
        const int cols = static_cast<int>(std::min<int64_t>(left, int64_t{nv} * lanes));
        // m-blocks of nearly equal size, at most rows_of[nv] each.
        const int64_t mblocks = (Mg + rows_of[nv] - 1) / rows_of[nv];
        for (int64_t j = 0; j < mblocks; ++j) {
          const int64_t m0 = part_start(Mg, mblocks, j);
          const int rows = static_cast<int>(part_start(Mg, mblocks, j + 1) - m0);
          items.push_back({t, g, m0, n0, rows, cols, tap_pixels[t] * (rows * nv + 2.0)});
        }
        max_cols = std::max(max_cols, cols);
        n0 += cols;
      }
  }

  // Pixel partitions: P = 1 unless splitting pixels beats the item split.
  const int64_t F = p.N * p.src_spatial();  // flat src pixels (n, i0, i1, i2)
  const int64_t wsize = taps * G * Mg * Ng;
  std::vector<int64_t> bounds;
  int P = 1;
  {
    const double est1 = split_items(items, nt, bounds) + (direct ? 0.0 : wsize / 8.0 / nt);
    double best = est1;
    for (int q = 2; q <= nt; ++q) {
      if (nt % q != 0 || q > F) continue;
      std::vector<int64_t> b;
      const double est = split_items(items, nt / q, b) / q + wsize * 2.0 * q / 16.0 / nt;
      if (est < 0.85 * est1 && est < best) best = est, P = q;
    }
    if (P > 1) split_items(items, nt / P, bounds);
  }
  const int per_part = nt / P;

  // Targets: partition 0 writes the output (direct) or scratch 0.
  std::vector<int64_t> scratch_off(taps);
  for (int64_t t = 0; t < taps; ++t) scratch_off[t] = t * G * Mg * Ng;
  const int nbuf = direct ? P - 1 : P;
  std::unique_ptr<float, FreeDeleter> scratch;
  if (nbuf > 0) {
    const size_t bytes = ((static_cast<size_t>(nbuf * wsize) * sizeof(float)) + 63) / 64 * 64;
    scratch.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    if (!scratch) return false;  // caller falls back to the reference
  }
  std::vector<Target> targets(P);
  for (int q = 0; q < P; ++q) {
    if (q == 0 && direct) {
      // vec_b: m = a (stride si), n = b (stride so == 1); vec_a: m = b, n = a.
      targets[q] = {out, koff.data(), ICg * si, vec_b ? si : so};
    } else {
      const int buf = direct ? q - 1 : q;
      targets[q] = {scratch.get() + buf * wsize, scratch_off.data(), Mg * Ng, Ng};
    }
  }

  // Pixel block size: the B panel of a tile (block pixels x max_cols) stays
  // within about 32 KiB of L1.
  const int64_t block =
      std::clamp<int64_t>(32768 / (4 * std::max(max_cols, 1)), 64, 1024);
  std::vector<Run> runs_all(static_cast<size_t>(nt) * block);
  struct Seg {
    int64_t n, i0, i1, x0, x1;
  };
  std::vector<Seg> segs_all(static_cast<size_t>(nt) * block);

  const bool a_is_src = vec_b || depthwise;
  const int64_t src_step = IC, dst_step = p.s[2] * OC;
  const int64_t a_step = a_is_src ? src_step : dst_step, b_step = a_is_src ? dst_step : src_step;
  const int64_t a_gstride = a_is_src ? ICg : OCg, b_gstride = a_is_src ? OCg : ICg;
  const int64_t I0 = p.I[0], I1 = p.I[1], I2 = p.I[2];
  const int64_t O0 = p.O[0], O1 = p.O[1], O2 = p.O[2];

  // One virtual thread: its items over its pixel partition.
  auto work = [&](int vt) {
    const int part = vt / per_part, local = vt % per_part;
    const int64_t ib = bounds[local], ie = bounds[local + 1];
    if (ib >= ie) return;
    const Target& tg = targets[part];
    for (int64_t i = ib; i < ie; ++i) {  // tiles start at zero
      float* c = tg.tile(items[i]);
      for (int r = 0; r < items[i].rows; ++r)
        std::memset(c + r * tg.m_stride, 0, sizeof(float) * items[i].cols);
    }
    const int64_t f_end = part_start(F, P, part + 1);
    Run* runs = runs_all.data() + static_cast<size_t>(vt) * block;
    Seg* segs = segs_all.data() + static_cast<size_t>(vt) * block;
    for (int64_t f = part_start(F, P, part); f < f_end;) {
      // Next block of pixels: row pieces totalling at most `block` pixels.
      int64_t nseg = 0, total = 0;
      while (f < f_end && total < block) {
        const int64_t row = f / I2, x = f % I2;
        const int64_t len = std::min({I2 - x, f_end - f, block - total});
        segs[nseg++] = {row / (I0 * I1), (row / I1) % I0, row % I1, x, x + len};
        total += len;
        f += len;
      }
      for (int64_t i = ib; i < ie;) {
        const int64_t tap = items[i].tap;
        int64_t j = i;
        while (j < ie && items[j].tap == tap) ++j;
        const int64_t k0 = tap / (p.K[1] * p.K[2]), k1 = (tap / p.K[2]) % p.K[1],
                      k2 = tap % p.K[2];
        int64_t nruns = 0;
        for (int64_t s = 0; s < nseg; ++s) {
          const Seg& sg = segs[s];
          if (sg.i0 < lo[0][k0] || sg.i0 >= hi[0][k0] || sg.i1 < lo[1][k1] ||
              sg.i1 >= hi[1][k1])
            continue;
          const int64_t x0 = std::max(sg.x0, lo[2][k2]), x1 = std::min(sg.x1, hi[2][k2]);
          if (x0 >= x1) continue;
          const int64_t o0 = sg.i0 * p.s[0] - p.pb[0] + k0 * p.d[0];
          const int64_t o1 = sg.i1 * p.s[1] - p.pb[1] + k1 * p.d[1];
          const int64_t o2 = x0 * p.s[2] - p.pb[2] + k2 * p.d[2];
          const float* sp = src + (((sg.n * I0 + sg.i0) * I1 + sg.i1) * I2 + x0) * IC;
          const float* dp = diff_dst + (((sg.n * O0 + o0) * O1 + o1) * O2 + o2) * OC;
          runs[nruns++] = a_is_src ? Run{sp, dp, x1 - x0} : Run{dp, sp, x1 - x0};
        }
        if (nruns > 0) {
          for (int64_t it = i; it < j; ++it) {
            const Item& item = items[it];
            TileArgs ta;
            ta.runs = runs;
            ta.nruns = nruns;
            ta.a_step = a_step;
            ta.b_step = b_step;
            ta.c = tg.tile(item);
            ta.ldc = tg.m_stride;
            ta.rows = item.rows;
            ta.cols = item.cols;
            if (depthwise) {
              ta.a_off = ta.b_off = item.g;
              dw_tile(ta);
            } else {
              ta.a_off = item.g * a_gstride + item.m0;
              ta.b_off = item.g * b_gstride + item.n0;
              gemm_tile(ta);
            }
          }
        }
        i = j;
      }
    }
  };

  const int64_t out_rows = taps * G * Mg;  // rows (tap, g, m) of Ng elements
  const float* scr = scratch.get();
#pragma omp parallel num_threads(nt)
  {
    // A runtime that grants fewer threads runs several virtual threads each.
    const int tid = omp_get_thread_num(), got = omp_get_num_threads();
    for (int vt = tid; vt < nt; vt += got) work(vt);
    if (P > 1 || !direct) {
#pragma omp barrier
      // Sum the partitions into the output.
#pragma omp for schedule(static)
      for (int64_t r = 0; r < out_rows; ++r) {
        const int64_t tap = r / (G * Mg), g = (r / Mg) % G, m = r % Mg;
        const float* part0 = scr + r * Ng;
        if (direct) {
          float* o = out + koff[tap] + g * targets[0].g_stride + m * targets[0].m_stride;
          for (int64_t n = 0; n < Ng; ++n) {
            float acc = o[n];
            for (int q = 0; q < nbuf; ++q) acc += part0[q * wsize + n];
            o[n] = acc;
          }
        } else {
          for (int64_t n = 0; n < Ng; ++n) {
            float acc = part0[n];
            for (int q = 1; q < nbuf; ++q) acc += part0[q * wsize + n];
            const int64_t ic = g * ICg + (vec_b ? m : n), b = vec_b ? n : m;
            out[ic * si + b * so + koff[tap]] = acc;
          }
        }
      }
    }
  }
  return true;
}

}  // namespace x86
}  // namespace tct
