// Backward-weights f32: in-cache micro-kernel GFLOP/s per tile shape and
// layer GFLOP/s of x86::backward_weights_f32, per ISA, with % of the FMA peak
// measured in the same run. FLOPs = 2 * p.macs().
//   bench_bwd_weights_f32 [nthreads] [isa: avx512|avx2|all] [layer-name substring]
// With a layer filter the micro-kernel and peak lines are skipped.
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "args.h"
#include "kernels/dispatch.h"
#include "kernels/x86/bwd_weights_f32.h"
#include "kernels/x86/peak.h"
#include "kernels/x86/x86.h"
#include "problem.h"

using namespace tct;
using Clock = std::chrono::steady_clock;

namespace {

// This machine is shared: single-thread figures use the thread's CPU time
// (immune to being descheduled), multi-thread ones the best wall time.
double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

template <class F>
double best_seconds(F&& f, bool cpu_time, double min_total = 0.3, int min_reps = 5) {
  f();  // warm-up
  double best = 1e30, total = 0;
  for (int r = 0; (r < min_reps || total < min_total) && r < 10000; ++r) {
    const auto t0 = Clock::now();
    const double c0 = thread_cpu_seconds();
    f();
    const double dt = cpu_time ? thread_cpu_seconds() - c0
                               : std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, dt);
    total += dt;
  }
  return best;
}

// 1-thread FMA peak in CPU time: independent chains (more than latency x
// ports); the empty asm keeps every chain alive and in a register.
#define PEAK_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
__attribute__((target("avx512f,fma"), noinline)) float peak_loop_avx512(long iters) {
#define PEAK_DECL(i) __m512 c##i = _mm512_set1_ps(0.01f * i), d##i = _mm512_set1_ps(0.02f * i);
  PEAK_CHAINS(PEAK_DECL)
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-6f);
  for (long it = 0; it < iters; ++it) {
#define PEAK_FMA(i) c##i = _mm512_fmadd_ps(c##i, a, b); d##i = _mm512_fmadd_ps(d##i, a, b);
    PEAK_CHAINS(PEAK_FMA)
    __asm__ volatile("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6),
                     "+v"(c7), "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11));
    __asm__ volatile("" : "+v"(d0), "+v"(d1), "+v"(d2), "+v"(d3), "+v"(d4), "+v"(d5), "+v"(d6),
                     "+v"(d7), "+v"(d8), "+v"(d9), "+v"(d10), "+v"(d11));
  }
  float s = 0;
#define PEAK_SUM(i) s += _mm512_cvtss_f32(c##i) + _mm512_cvtss_f32(d##i);
  PEAK_CHAINS(PEAK_SUM)
  return s;
}
__attribute__((target("avx2,fma"), noinline)) float peak_loop_avx2(long iters) {
#define PEAK_DECL2(i) __m256 c##i = _mm256_set1_ps(0.01f * i);
  PEAK_CHAINS(PEAK_DECL2)
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-6f);
  for (long it = 0; it < iters; ++it) {
#define PEAK_FMA2(i) c##i = _mm256_fmadd_ps(c##i, a, b);
    PEAK_CHAINS(PEAK_FMA2)
    __asm__ volatile("" : "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3), "+x"(c4), "+x"(c5), "+x"(c6),
                     "+x"(c7), "+x"(c8), "+x"(c9), "+x"(c10), "+x"(c11));
  }
  float s = 0;
#define PEAK_SUM2(i) s += _mm256_cvtss_f32(c##i);
  PEAK_CHAINS(PEAK_SUM2)
  return s;
}
volatile float g_sink;
double peak1_gflops(Isa isa) {
  const long iters = 1 << 20;
  if (isa == Isa::Avx512) {
    const double sec = best_seconds([&] { g_sink = peak_loop_avx512(iters); }, true, 0.3);
    return 2.0 * 16 * 24 * iters / sec * 1e-9;
  }
  const double sec = best_seconds([&] { g_sink = peak_loop_avx2(iters); }, true, 0.3);
  return 2.0 * 8 * 12 * iters / sec * 1e-9;
}

// One tile over `pix` pixels, as the driver runs it: a pixel pointer list
// (small layers), or packed panels (wide layers: no pointers to load). A rows
// a_step floats apart, B rows b_step floats apart. a_step = rows and b_step =
// cols: the panels' layout; 128/256: channels-last pixels of that many
// channels.
void bench_tile(Isa isa, int rows, int cols, int pix, int64_t a_step, int64_t b_step,
                double peak1, bool packed = false, bool loads = false) {
  // 64-byte aligned, as the driver's packed panels and torch's tensors (with a
  // std::vector's 16-byte alignment every B vector load spans two cache
  // lines: the 6x64 tile on channels-last rows measured 88 % instead of 95 %
  // on Zen 5).
  const size_t na = static_cast<size_t>(pix) * a_step + 64, nb = static_cast<size_t>(pix) * b_step + 64;
  float* a = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * na));
  float* b = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * nb));
  std::fill(a, a + na, 1.0f);
  std::fill(b, b + nb, 0.5f);
  std::vector<float> c(static_cast<size_t>(rows) * 64, 0.f);
  std::vector<x86::bww::Pix> px(pix);
  for (int i = 0; i < pix; ++i) px[i] = {a + i * a_step, b + i * b_step};
  x86::bww::TileArgs t{px.data(), pix, 0, 0, c.data(), 64, rows, cols, 1, nullptr, nullptr, 0, 0, 0};
  if (packed) {  // the panels' mode: no pointer list, rows lda / ldb apart
    t.pix = nullptr;
    t.pa = a;
    t.pb = b;
    t.lda = a_step;
    t.ldb = b_step;
  }
  auto fn = isa != Isa::Avx512 ? x86::bww::gemm_tile_avx2
            : loads            ? x86::bww::gemm_tile_avx512_loads
                               : x86::bww::gemm_tile_avx512;
  const int calls = 200;
  const double sec = best_seconds([&] {
    for (int i = 0; i < calls; ++i) fn(t);
  }, true);
  const double gf = 2.0 * rows * cols * pix * calls / sec * 1e-9;
  std::printf("  tile %2dx%-2d%s %4d px  a_step %4lld  b_step %4lld %-8s: %7.1f GFLOP/s  %5.1f%% of 1-thread peak\n",
              rows, cols, loads ? "l" : " ", pix, static_cast<long long>(a_step),
              static_cast<long long>(b_step), packed ? "packed" : "px list", gf, 100.0 * gf / peak1);
  std::free(a);
  std::free(b);
}

struct Layer {
  const char* name;
  int S;
  int64_t N, IC, OC, G;
  std::vector<int64_t> I, K, s, pad, op;
};

void bench_layer(Isa isa, const Layer& L, int nt, double peak1, WeightsFormat wf) {
  Attributes a;
  a.strides = L.s;
  a.pads_begin = L.pad;
  a.pads_end = L.pad;
  a.dilations.assign(L.S, 1);
  a.groups = L.G;
  a.weights_format = wf;
  Shape src{L.N}, dst{L.N};
  for (int i = 0; i < L.S; ++i) {
    src.push_back(L.I[i]);
    dst.push_back(L.s[i] * (L.I[i] - 1) + L.K[i] + L.op[i] - 2 * L.pad[i]);
  }
  src.push_back(L.IC);
  dst.push_back(L.OC);
  ConvProblem q;
  q.spatial_rank = L.S;
  q.G = L.G;
  q.ICg = L.IC / L.G;
  q.OCg = L.OC / L.G;
  for (int i = 0; i < L.S; ++i) q.K[kAxes - L.S + i] = L.K[i];
  const ConvProblem p = resolve_backward_weights(src, dst, weights_shape(q, wf), a);

  std::mt19937 rng(0);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(static_cast<size_t>(p.N * p.src_spatial() * p.IC()));
  std::vector<float> dy(static_cast<size_t>(p.N * p.dst_spatial() * p.OC()));
  for (float& v : x) v = u(rng);
  for (float& v : dy) v = u(rng);
  // Dense weights in layout wf as logical IOX strides.
  const Shape ws = weights_shape(p, wf);
  std::vector<int64_t> st(ws.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(ws.size()) - 1; i >= 0; --i) st[i] = acc, acc *= ws[i];
  const auto dims = weights_dims(wf, p.spatial_rank);
  std::vector<float> w(static_cast<size_t>(acc));
  WeightsView wv{w.data(), st[dims[0]], st[dims[1]], {0, 0, 0}};
  for (int i = 0; i < p.spatial_rank; ++i) wv.sk[kAxes - p.spatial_rank + i] = st[dims[2 + i]];

  bool ok = true;
  auto run = [&](int threads) {
    ok = ok && x86::backward_weights_f32(isa, p, x.data(), dy.data(), wv, threads);
  };
  const double sec1 = best_seconds([&] { run(1); }, true);
  const double secn = best_seconds([&] { run(nt); }, false);
  const double gf1 = 2.0 * p.macs() / sec1 * 1e-9, gfn = 2.0 * p.macs() / secn * 1e-9;
  std::printf("  %-44s %-3s 1t: %6.1f GFLOP/s %5.1f%% | %dt: %8.3f ms %6.1f GFLOP/s %5.1f%%%s\n",
              L.name, to_string(wf), gf1, 100.0 * gf1 / peak1, nt, secn * 1e3, gfn,
              100.0 * gfn / (nt * peak1), ok ? "" : "  (NOT COVERED)");
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage = "bench_bwd_weights_f32 [nthreads] [avx512|avx2|all] [layer-name substring]";
  tct_bench::help_exit(argc, argv, usage);
  const int nt = static_cast<int>(tct_bench::int_arg(argc, argv, 1, "nthreads", 2, 1, 4096, usage));
  const std::string isa_filter =
      tct_bench::choice_arg(argc, argv, 2, "isa", "all", {"avx512", "avx2", "all"}, usage);
  const char* layer_filter = argc > 3 ? argv[3] : nullptr;
  const std::vector<Layer> layers = {
      {"2D N=2 64->32 32x32->64x64 k4 s2 p1", 2, 2, 64, 32, 1, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {0, 0}},
      {"2D N=8 64->32 32x32->64x64 k4 s2 p1", 2, 8, 64, 32, 1, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {0, 0}},
      {"2D N=8 256->128 16x16 k3 s1 p1", 2, 8, 256, 128, 1, {16, 16}, {3, 3}, {1, 1}, {1, 1}, {0, 0}},
      {"2D N=8 256->128 16x16->32x32 k3 s2 p1 op1", 2, 8, 256, 128, 1, {16, 16}, {3, 3}, {2, 2}, {1, 1}, {1, 1}},
      {"2D N=4 128->128 32x32 k1 s1", 2, 4, 128, 128, 1, {32, 32}, {1, 1}, {1, 1}, {0, 0}, {0, 0}},
      {"1D N=8 256->128 L512->1024 k4 s2 p1", 1, 8, 256, 128, 1, {512}, {4}, {2}, {1}, {0}},
      {"3D N=2 64->32 8^3->16^3 k4 s2 p1", 3, 2, 64, 32, 1, {8, 8, 8}, {4, 4, 4}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}},
      {"2D N=8 dw 256ch 32x32 k3 s1 p1", 2, 8, 256, 256, 256, {32, 32}, {3, 3}, {1, 1}, {1, 1}, {0, 0}},
      {"2D N=8 g=32 256->256 16x16 k3 s1 p1", 2, 8, 256, 256, 32, {16, 16}, {3, 3}, {1, 1}, {1, 1}, {0, 0}},
      {"2D N=8 g=128 256->256 16x16 k3 s1 p1", 2, 8, 256, 256, 128, {16, 16}, {3, 3}, {1, 1}, {1, 1}, {0, 0}},
      {"1D vocoder N=1 512->256 L283->2264 k16 s8 p4", 1, 1, 512, 256, 1, {283}, {16}, {8}, {4}, {0}},
      {"1D hifigan N=1 512->256 L256->2048 k16 s8 p4", 1, 1, 512, 256, 1, {256}, {16}, {8}, {4}, {0}},
      {"3D unet N=1 512->256 8x9x9 k3 s1", 3, 1, 512, 256, 1, {8, 9, 9}, {3, 3, 3}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}},
      {"2D dcgan N=4 512->256 8x8 k4 s2 p1", 2, 4, 512, 256, 1, {8, 8}, {4, 4}, {2, 2}, {1, 1}, {0, 0}},
      {"1D alexnet N=32 384->256 L13 k3 s1 p1", 1, 32, 384, 256, 1, {13}, {3}, {1}, {1}, {0}},
      {"2D alexnet N=4 96->3 55x55 k11 s4", 2, 4, 96, 3, 1, {55, 55}, {11, 11}, {4, 4}, {0, 0}, {0, 0}},
      {"2D googlenet N=8 288->144 14x14 k3 s1 p1", 2, 8, 288, 144, 1, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {0, 0}},
      {"2D N=1 512->256 32x32 k4 s2 p1", 2, 1, 512, 256, 1, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {0, 0}},
      {"3D unet N=1 320->320 7x7x5 k2 s2", 3, 1, 320, 320, 1, {7, 7, 5}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {0, 0, 0}},
      {"2D N=4 512->512 4x4 k3 s2", 2, 4, 512, 512, 1, {4, 4}, {3, 3}, {2, 2}, {0, 0}, {0, 0}},
  };
  for (Isa isa : {Isa::Avx512, Isa::Avx2}) {
    if (!isa_supported(isa) || (isa_filter != "all" && isa_filter != isa_name(isa))) continue;
    const double peak1 = peak1_gflops(isa);
    if (layer_filter) {
      std::printf("%s: peak %.1f GFLOP/s per thread\n", isa_name(isa), peak1);
      for (const Layer& L : layers)
        if (std::strstr(L.name, layer_filter)) {
          bench_layer(isa, L, nt, peak1, WeightsFormat::XOI);
          bench_layer(isa, L, nt, peak1, WeightsFormat::IOX);
        }
      continue;
    }
    std::printf("%s: FMA peak %.1f GFLOP/s per thread (CPU time; x86::fma_peak_gflops says %.1f "
                "for %d threads, wall time)\n",
                isa_name(isa), peak1, x86::fma_peak_gflops(isa, nt, 0.3), nt);
    std::printf("  %% of peak: 1t against the 1-thread peak, %dt against %d x that\n", nt, nt);
    std::printf(" micro-kernel, 1 thread, data in cache:\n");
    if (isa == Isa::Avx512) {
      bench_tile(isa, 14, 32, 256, 14, 32, peak1);
      bench_tile(isa, 8, 48, 256, 8, 48, peak1);
      bench_tile(isa, 6, 64, 128, 6, 64, peak1);
      bench_tile(isa, 14, 16, 256, 14, 16, peak1);
      bench_tile(isa, 14, 32, 256, 14, 32, peak1, true);
      bench_tile(isa, 14, 16, 256, 14, 16, peak1, true);
      if (isa == Isa::Avx512) {  // the permute-free one-vector tile (Intel's cores)
        bench_tile(isa, 14, 16, 256, 14, 16, peak1, false, true);
        bench_tile(isa, 14, 16, 256, 14, 16, peak1, true, true);
      }
      bench_tile(isa, 14, 32, 128, 256, 128, peak1);  // channels-last rows
      bench_tile(isa, 6, 64, 128, 256, 128, peak1);
    } else {
      bench_tile(isa, 6, 16, 256, 6, 16, peak1);
      bench_tile(isa, 12, 8, 256, 12, 8, peak1);
      bench_tile(isa, 6, 16, 256, 6, 16, peak1, true);
      bench_tile(isa, 12, 8, 256, 12, 8, peak1, true);
      bench_tile(isa, 6, 16, 192, 256, 128, peak1);
    }
    std::printf(" layers, %d threads:\n", nt);
    for (const Layer& L : layers) bench_layer(isa, L, nt, peak1, WeightsFormat::XOI);
    bench_layer(isa, layers[1], nt, peak1, WeightsFormat::IOX);
    bench_layer(isa, layers[2], nt, peak1, WeightsFormat::IOX);
  }
  return 0;
}
