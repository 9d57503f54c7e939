// AVX2 tiles of the planar (NCX) f32 passes; see planar_f32.h.
// Loops over a tile's rows and vectors are unrolled in full (pragmas) so that
// GCC keeps the accumulators in registers.
#include <immintrin.h>

#include <algorithm>
#include <array>

#include "planar_f32.h"

namespace tct {
namespace x86 {
namespace {

// A mask of the first n lanes (n < 8; none when n <= 0).
__m256i lanes(int64_t n) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::max<int64_t>(n, 0))), lane);
}

template <int M, int NV>
void tile(const PlanarTileArgs* a) {
  __m256 acc[M][NV];
  const int64_t nx = a->nx;
  #pragma GCC unroll 32
  for (int r = 0; r < M; ++r) {
    if (a->accumulate) {
      const float* o = a->out + r * a->out_stride;
      #pragma GCC unroll 32
      for (int v = 0; v < NV; ++v) {
        const int64_t left = nx - 8 * v;
        acc[r][v] = left >= 8 ? _mm256_loadu_ps(o + 8 * v) : _mm256_maskload_ps(o + 8 * v, lanes(left));
      }
      continue;
    }
    const __m256 b = a->bias ? _mm256_set1_ps(a->bias[r]) : _mm256_setzero_ps();
    #pragma GCC unroll 32
    for (int v = 0; v < NV; ++v) acc[r][v] = b;
  }
  const int64_t cin = a->cin, ntap = a->ntap, cis = a->c_in_stride, cws = a->c_w_stride;
  for (int64_t s = 0; s < a->nseg; ++s) {
    const float* ib = a->in + a->in_off + a->seg_in[s];
    const float* wb = a->w + a->seg_w[s];
    for (int64_t c = 0; c < cin; ++c, ib += cis, wb += cws) {
      for (int64_t t = 0; t < ntap; ++t) {
        const float* ip = ib + a->tap_in[t];
        const float* wp = wb + a->tap_w[t];
        __m256 x[NV];
        #pragma GCC unroll 32
        for (int v = 0; v < NV; ++v) x[v] = _mm256_loadu_ps(ip + 8 * v);
        #pragma GCC unroll 32
        for (int r = 0; r < M; ++r) {
          const __m256 b = _mm256_set1_ps(wp[r]);
          #pragma GCC unroll 32
          for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(b, x[v], acc[r][v]);
        }
      }
    }
  }
  #pragma GCC unroll 32
  for (int r = 0; r < M; ++r) {
    float* o = a->out + r * a->out_stride;
    #pragma GCC unroll 32
    for (int v = 0; v < NV; ++v) {
      const int64_t left = nx - 8 * v;
      if (left >= 8) {
        _mm256_storeu_ps(o + 8 * v, acc[r][v]);
      } else if (left > 0) {
        _mm256_maskstore_ps(o + 8 * v, lanes(left), acc[r][v]);
      }
    }
  }
}

constexpr int kM = kPlanarAvx2MaxM, kNV = kPlanarAvx2MaxNV;
using Table = std::array<std::array<PlanarTileFn, kNV + 1>, kM + 1>;

template <int M, int NV>
void fill(Table& t) {
  if constexpr (M * NV <= kPlanarAvx2Accs) t[M][NV] = &tile<M, NV>;
  if constexpr (NV < kNV) {
    fill<M, NV + 1>(t);
  } else if constexpr (M < kM) {
    fill<M + 1, 1>(t);
  }
}

Table make_table() {
  Table t{};
  fill<1, 1>(t);
  return t;
}

}  // namespace

PlanarTileFn planar_f32_avx2_tile(int m, int nv) {
  static const Table table = make_table();
  if (m < 1 || m > kM || nv < 1 || nv > kNV) return nullptr;
  return table[m][nv];
}

}  // namespace x86
}  // namespace tct
