// f32 forward / backward-data kernels: in-cache micro-kernel GFLOP/s and
// layer GFLOP/s, per ISA, against the FMA peak measured in the same run.
// Usage: bench_conv_f32 [nthreads] [layer-name-substring] [avx512|avx2|avx512_bf16|avx512_amx]
// (micro-kernels run only without a layer filter; avx512_bf16: the bf16
// VDPBF16PS tiles in cache, against the f32 FMA peak, no layers; avx512_amx:
// the AMX tiles, against 16x that peak (TDPBF16PS's rate on two FMA units),
// no layers)
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "kernels/dispatch.h"
#include "kernels/x86/conv_f32_kernels.h"
#include "kernels/x86/peak.h"
#include "kernels/x86/x86.h"
#include "problem.h"

using namespace tct;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// The best wall time of fn over repetitions lasting about `budget` seconds in
// total; *cpu gets the best process CPU time of a repetition. On a shared
// machine the CPU time of a 1-thread run excludes the time the thread was
// descheduled, so it is the steadier figure there.
template <class F>
double best_time(F&& fn, double budget, double* cpu = nullptr) {
  fn();  // warm-up (page faults, packing paths)
  double best = 1e30, best_cpu = 1e30, spent = 0;
  int reps = 0;
  while ((spent < budget || reps < 3) && reps < 10000) {
    const double c0 = cpu_seconds();
    const auto t0 = Clock::now();
    fn();
    const double t = seconds_since(t0);
    best_cpu = std::min(best_cpu, cpu_seconds() - c0);
    best = std::min(best, t);
    spent += t;
    ++reps;
  }
  if (cpu) *cpu = best_cpu;
  return best;
}

// Register-only FMA loops with 24 independent chains (enough for 2 FMA ports
// x 4-cycle latency), compiled for the ISA through target attributes: one
// thread's f32 peak, measured here so that it is comparable with the tiles.
__attribute__((target("avx512f,fma"), noinline)) float fma_loop_avx512(long iters, float mul) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512 m = _mm512_set1_ps(mul), a = _mm512_set1_ps(0.001f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, a);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 24; ++i) s = _mm512_add_ps(s, acc[i]);
  float out[16];  // (GCC 12 warns about _mm512_reduce_add_ps)
  _mm512_storeu_ps(out, s);
  return out[0] + out[15];
}
__attribute__((target("avx2,fma"), noinline)) float fma_loop_avx2(long iters, float mul) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(0.001f * i);
  const __m256 m = _mm256_set1_ps(mul), a = _mm256_set1_ps(0.001f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, a);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}
volatile float g_sink, g_mul = 0.999f;

double own_peak(Isa isa) {
  const long iters = 1 << 20;
  const bool z = vector_isa(isa) == Isa::Avx512;
  const double flops = z ? 2.0 * 24 * 16 * iters : 2.0 * 12 * 8 * iters;
  const double t = best_time(
      [&] { g_sink = z ? fma_loop_avx512(iters, g_mul) : fma_loop_avx2(iters, g_mul); }, 0.3);
  return flops / t * 1e-9;
}

struct Tile {
  const char* name;
  Isa isa;
  x86::ConvTileFn fn;
  int mr, nr;
  void (*begin)() = nullptr;  // per-thread set-up (AMX: the tile configuration)
  void (*end)() = nullptr;
};

// One tile over cred input channels x ntaps. `sets` distinct groups of input
// rows are cycled through: 1 keeps everything in L1, more puts the rows in L2
// as in a real layer (the weights stay hot either way).
void bench_micro(const Tile& k, double peak1, int64_t cred, int64_t ntaps, int sets) {
  const int64_t per_set = k.mr * cred * ntaps;
  std::vector<float> rows(static_cast<size_t>(per_set * sets), 1.0f);
  float* w = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * k.nr * cred * ntaps));
  for (int64_t i = 0; i < k.nr * cred * ntaps; ++i) w[i] = 1e-3f;
  std::vector<float> bias(k.nr, 0.f), out(static_cast<size_t>(k.mr * k.nr * sets));
  std::vector<const float*> a(static_cast<size_t>(k.mr * ntaps * sets));
  std::vector<float*> outp(static_cast<size_t>(k.mr * sets));
  std::vector<x86::ConvTileArgs> args(sets);
  // (16-bit tiles: rows of cred bf16 elements, dense as in a channels-last tensor)
  const bool amx = k.isa == Isa::Avx512Amx;
  const auto* rows16 = reinterpret_cast<const uint16_t*>(rows.data());
  for (int s = 0; s < sets; ++s) {
    for (int t = 0; t < ntaps; ++t)
      for (int m = 0; m < k.mr; ++m) {
        const int64_t off = s * per_set + (t * k.mr + m) * cred;
        a[(s * ntaps + t) * k.mr + m] =
            amx ? reinterpret_cast<const float*>(rows16 + off) : rows.data() + off;
      }
    for (int m = 0; m < k.mr; ++m) outp[s * k.mr + m] = out.data() + (s * k.mr + m) * k.nr;
    x86::ConvTileArgs& g = args[s];
    g.a = a.data() + s * ntaps * k.mr;
    g.w = w;
    g.wtap = nullptr;
    g.bias = bias.data();
    g.out = outp.data() + s * k.mr;
    g.ntaps = ntaps;
    g.cred = cred;
    g.a_off = 0;
    g.col_off = 0;
    g.ncols = k.nr;
    g.accumulate = 0;
  }
  const int calls = std::max(sets, static_cast<int>(2000 * 256 / (cred * ntaps)));
  if (k.begin) k.begin();
  const double t = best_time(
      [&] {
        for (int i = 0; i < calls; ++i) k.fn(&args[i % sets]);
      },
      0.3);
  if (k.end) k.end();
  const double gf = 2.0 * k.mr * k.nr * cred * ntaps * calls / t * 1e-9;
  // (The bf16 tiles read the same bytes as 16-bit rows and pairs: twice the
  // products per byte, so in L1 / L2 alike they see half an f32 tile's data.)
  std::printf("  micro %-13s cred=%3lld taps=%lld %-6s %7.1f GFLOP/s  %5.1f%% of 1-thread peak%s\n",
              k.name, static_cast<long long>(cred), static_cast<long long>(ntaps),
              sets == 1 ? "L1" : "L2", gf, 100 * gf / peak1,
              k.isa == Isa::Avx512Amx ? " (AMX: 16x the f32 FMA peak, TDPBF16PS at 1/16 cycles)" : "");
  std::free(w);
}

struct Layer {
  const char* name;
  int64_t N, IC, OC, G;
  std::vector<int64_t> I, K, s, pb, pe, op;
  std::vector<int64_t> d = {};  // dilations (empty: 1)
};

void bench_layer(const Layer& L, Isa isa, int nthreads, double peak) {
  const int S = static_cast<int>(L.I.size());
  Attributes a;
  a.strides = L.s;
  a.pads_begin = L.pb;
  a.pads_end = L.pe;
  a.dilations = L.d.empty() ? std::vector<int64_t>(S, 1) : L.d;
  a.output_padding = L.op;
  a.groups = L.G;
  a.data_format = DataFormat::NXC;
  a.weights_format = WeightsFormat::IOX;
  Shape src{L.N};
  for (int64_t x : L.I) src.push_back(x);
  src.push_back(L.IC);
  Shape wsh{L.IC, L.OC / L.G};
  for (int64_t x : L.K) wsh.push_back(x);
  const ConvProblem p = resolve_forward(src, wsh, Shape{L.OC}, a);
  const ConvProblem pbd = resolve_backward_data(dst_shape(p, DataFormat::NXC), wsh, src, a);
  std::vector<float> x(static_cast<size_t>(p.N * p.src_spatial() * p.IC()), 0.5f);
  std::vector<float> y(static_cast<size_t>(p.N * p.dst_spatial() * p.OC()), 0.25f);
  std::vector<float> w(static_cast<size_t>(p.IC() * p.OCg * p.taps()), 0.01f);
  std::vector<float> bias(static_cast<size_t>(p.OC()), 0.1f);
  WeightsView wv{w.data(), p.OCg * p.taps(), p.taps(), {p.K[1] * p.K[2], p.K[2], 1}};
  const double flops = 2.0 * p.macs();
  bool ok = true;
  double cf = 0, cb = 0;
  const double tf = best_time(
      [&] { ok &= x86::forward_f32(isa, p, x.data(), wv, bias.data(), y.data(), nthreads); }, 0.5,
      &cf);
  const double tb = best_time(
      [&] { ok &= x86::backward_data_f32(isa, pbd, y.data(), wv, x.data(), nthreads); }, 0.5, &cb);
  std::printf("  %-44s fwd %7.3f ms %6.1f GFLOP/s (%5.1f%%)  bwd-data %7.3f ms %6.1f GFLOP/s (%5.1f%%)",
              L.name, tf * 1e3, flops / tf * 1e-9, 100 * flops / tf * 1e-9 / peak, tb * 1e3,
              flops / tb * 1e-9, 100 * flops / tb * 1e-9 / peak);
  if (nthreads == 1)
    std::printf("  | by cpu time: fwd %7.3f ms %5.1f%% bwd %7.3f ms %5.1f%%", cf * 1e3,
                100 * flops / cf * 1e-9 / peak, cb * 1e3, 100 * flops / cb * 1e-9 / peak);
  std::printf("%s\n", ok ? "" : "  [NOT COVERED]");
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage =
      "bench_conv_f32 [nthreads] [layer-name-substring] [avx512|avx2|avx512_bf16|avx512_amx]";
  tct_bench::help_exit(argc, argv, usage);
  const int nthreads = static_cast<int>(
      tct_bench::int_arg(argc, argv, 1, "nthreads", omp_get_max_threads(), 1, 4096, usage));
  const std::string filter = argc > 2 ? argv[2] : "";
  const std::string only_isa = tct_bench::choice_arg(
      argc, argv, 3, "isa", "", {"avx512", "avx2", "avx512_bf16", "avx512_amx"}, usage);
  const std::vector<Layer> layers = {
      {"2D N=4 64->32 32x32 k4 s2 p1 (->64x64)", 4, 64, 32, 1, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {0, 0}},
      {"2D N=2 64->32 32x32 k4 s2 p1 (->64x64)", 2, 64, 32, 1, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {0, 0}},
      {"2D N=4 256->128 16x16 k3 s1 p1", 4, 256, 128, 1, {16, 16}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}},
      {"2D N=4 256->128 16x16 k3 s2 p1 op1 (->32x32)", 4, 256, 128, 1, {16, 16}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}},
      {"2D N=1 512->256 8x8 k4 s2 p1 (->16x16)", 1, 512, 256, 1, {8, 8}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {0, 0}},
      {"1D N=8 128->64 L=256 k4 s2 p1", 8, 128, 64, 1, {256}, {4}, {2}, {1}, {1}, {0}},
      {"3D N=2 64->32 8^3 k4 s2 p1 (->16^3)", 2, 64, 32, 1, {8, 8, 8}, {4, 4, 4}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}},
      {"2D N=4 dw C=128 32x32 k3 s1 p1", 4, 128, 128, 128, {32, 32}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}},
      {"2D N=4 g=8 128->128 16x16 k4 s2 p1", 4, 128, 128, 8, {16, 16}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {0, 0}},
      {"2D N=4 g=32 128->128 32x32 k4 s2 p1", 4, 128, 128, 32, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {0, 0}},
      // The layers of benchmarks/bench.py where oneDNN led.
      {"2D N=1 36->4 360x640 k3 s3", 1, 36, 4, 1, {360, 640}, {3, 3}, {3, 3}, {0, 0}, {0, 0}, {0, 0}},
      {"2D N=4 64->3 109x109 k7 s2 d2 p3/2", 4, 64, 3, 1, {109, 109}, {7, 7}, {2, 2}, {3, 3}, {2, 2}, {0, 0}, {2, 2}},
      {"2D N=4 64->3 64x64 k4 s2 p1", 4, 64, 3, 1, {64, 64}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {0, 0}},
      {"2D N=1 512->256 32x32 k4 s2 p1", 1, 512, 256, 1, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {0, 0}},
      {"3D N=1 512->256 8x9x9 k3", 1, 512, 256, 1, {8, 9, 9}, {3, 3, 3}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
      {"3D N=1 512->256 6x7x7 k3 d2", 1, 512, 256, 1, {6, 7, 7}, {3, 3, 3}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {2, 2, 2}},
      {"2D N=8 dw C=64 32x32 k4 s2 p1", 8, 64, 64, 64, {32, 32}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {0, 0}},
      {"2D N=4 256->512 28x28 k1 s2 op1", 4, 256, 512, 1, {28, 28}, {1, 1}, {2, 2}, {0, 0}, {0, 0}, {1, 1}},
      {"2D N=2 128->64 64x64 k2 s2", 2, 128, 64, 1, {64, 64}, {2, 2}, {2, 2}, {0, 0}, {0, 0}, {0, 0}},
      {"2D N=4 512->512 4x4 k3 s2 (->9x9)", 4, 512, 512, 1, {4, 4}, {3, 3}, {2, 2}, {0, 0}, {0, 0}, {0, 0}},
      {"3D N=1 320->320 7x7x5 k2 s2", 1, 320, 320, 1, {7, 7, 5}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
      {"3D N=2 256->128 8^3 k2 s2", 2, 256, 128, 1, {8, 8, 8}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}},
      {"1D N=1 512->256 L=283 k16 s8 p4", 1, 512, 256, 1, {283}, {16}, {8}, {4}, {4}, {0}},
  };
  const Tile tiles[] = {
      {"avx512 6x64", Isa::Avx512, x86::conv_f32_avx512_6x64, 6, 64},
      {"avx512 8x48", Isa::Avx512, x86::conv_f32_avx512_8x48, 8, 48},
      {"avx512 12x32", Isa::Avx512, x86::conv_f32_avx512_12x32, 12, 32},
      {"avx512 12x16", Isa::Avx512, x86::conv_f32_avx512_12x16, 12, 16},
      {"avx512 12x16l", Isa::Avx512, x86::conv_f32_avx512_12x16_loads, 12, 16},  // (no permutes)
      {"avx2 6x16", Isa::Avx2, x86::conv_f32_avx2_6x16, 6, 16},
      {"avx2 12x8", Isa::Avx2, x86::conv_f32_avx2_12x8, 12, 8},
      {"avx2 4x24", Isa::Avx2, x86::conv_f32_avx2_4x24, 4, 24},
      // bf16 pairs (weights read as pair rows: the same bytes as f32's first half)
      {"bf16 6x64", Isa::Avx512Bf16, x86::conv_bf16_avx512bf16_6x64, 6, 64},
      {"bf16 8x48", Isa::Avx512Bf16, x86::conv_bf16_avx512bf16_8x48, 8, 48},
      {"bf16 12x32", Isa::Avx512Bf16, x86::conv_bf16_avx512bf16_12x32, 12, 32},
      {"bf16 12x16", Isa::Avx512Bf16, x86::conv_bf16_avx512bf16_12x16, 12, 16},
      // AMX (rows read in place: evenly spaced; TDPBF16PS: 1024 flops a cycle)
      {"amx 32x32", Isa::Avx512Amx, x86::conv_bf16_amx_32x32, 32, 32, x86::tiles_begin_amx,
       x86::tiles_end_amx},
      {"amx 32x16", Isa::Avx512Amx, x86::conv_bf16_amx_32x16, 32, 16, x86::tiles_begin_amx,
       x86::tiles_end_amx},
  };
  for (Isa isa : {Isa::Avx512, Isa::Avx2, Isa::Avx512Bf16, Isa::Avx512Amx}) {
    if (!only_isa.empty() && only_isa != isa_name(isa)) continue;
    if (!isa_supported(isa)) {
      std::printf("%s: not supported by this CPU\n", isa_name(isa));
      continue;
    }
    // Percentages use this file's own 1-thread loop (x nthreads for layers);
    // the shared peak routine is printed alongside.
    const double peak1 = own_peak(isa) * (isa == Isa::Avx512Amx ? 16 : 1);
    const double peak = peak1 * nthreads;
    std::printf("%s: FMA peak %.1f GFLOP/s per thread (x%d = %.1f); shared peak routine: %.1f (1 thread), %.1f (%d threads)\n",
                isa_name(isa), peak1, nthreads, peak, x86::fma_peak_gflops(vector_isa(isa), 1, 0.2),
                x86::fma_peak_gflops(vector_isa(isa), nthreads, 0.2), nthreads);
    for (const Tile& t : tiles)
      if (t.isa == isa && filter.empty()) {
        bench_micro(t, peak1, 128, 2, 1);
        bench_micro(t, peak1, 64, 4, 1);
        bench_micro(t, peak1, 64, 4, 64);
        bench_micro(t, peak1, 256, 9, 8);  // weights in L2 (about 600 KB at NR=64)
        if (isa == Isa::Avx512Amx) bench_micro(t, peak1, 256, 4, 8);  // a DCGAN k4 s2 phase
      }
    if (isa == Isa::Avx512Bf16 || isa == Isa::Avx512Amx) continue;  // (layers: bench.py --dtype bf16)
    for (const Layer& L : layers)
      if (filter.empty() || std::strstr(L.name, filter.c_str())) bench_layer(L, isa, nthreads, peak);
  }
  return 0;
}
