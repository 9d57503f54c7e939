// The portable reference kernels: the formulas of SPEC §3 as plain loops.
// Each pass is written as a gather, so every output element is computed by
// exactly one iteration and the outer loops parallelize without races.
#include "kernels.h"
#include "types.h"

namespace tct {
namespace {

template <class T>
using Acc = typename AccType<T>::type;

// For a dst position o on canonical axis ax, the src position i of tap k,
// or -1 when the tap hits an inserted zero or falls outside src.
inline int64_t src_of(const ConvProblem& p, int ax, int64_t o, int64_t k) {
  const int64_t t = o + p.pb[ax] - k * p.d[ax];
  if (t < 0 || t % p.s[ax] != 0) return -1;
  const int64_t i = t / p.s[ax];
  return i < p.I[ax] ? i : -1;
}

// For a src position i, the dst position of tap k, or -1 when outside dst.
inline int64_t dst_of(const ConvProblem& p, int ax, int64_t i, int64_t k) {
  const int64_t o = i * p.s[ax] - p.pb[ax] + k * p.d[ax];
  return (o >= 0 && o < p.O[ax]) ? o : -1;
}

template <class T>
void forward(const ConvProblem& p, ActView src, WeightsView w, const T* bias, ActView dst,
             int nthreads) {
  const T* x = static_cast<const T*>(src.data);
  const T* wt = static_cast<const T*>(w.data);
  T* y = static_cast<T*>(dst.data);
  const int64_t OC = p.OC();
#pragma omp parallel for collapse(3) schedule(static) num_threads(nthreads)
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t oc = 0; oc < OC; ++oc)
      for (int64_t o0 = 0; o0 < p.O[0]; ++o0) {
        const int64_t g = oc / p.OCg, b = oc % p.OCg;
        for (int64_t o1 = 0; o1 < p.O[1]; ++o1)
          for (int64_t o2 = 0; o2 < p.O[2]; ++o2) {
            Acc<T> acc = bias ? to_float(bias[oc]) : Acc<T>(0);
            for (int64_t k0 = 0; k0 < p.K[0]; ++k0) {
              const int64_t i0 = src_of(p, 0, o0, k0);
              if (i0 < 0) continue;
              for (int64_t k1 = 0; k1 < p.K[1]; ++k1) {
                const int64_t i1 = src_of(p, 1, o1, k1);
                if (i1 < 0) continue;
                for (int64_t k2 = 0; k2 < p.K[2]; ++k2) {
                  const int64_t i2 = src_of(p, 2, o2, k2);
                  if (i2 < 0) continue;
                  for (int64_t a = 0; a < p.ICg; ++a) {
                    const int64_t ic = g * p.ICg + a;
                    const T xv = x[n * src.sn + ic * src.sc + i0 * src.sx[0] + i1 * src.sx[1] +
                                   i2 * src.sx[2]];
                    const T wv = wt[ic * w.si + b * w.so + k0 * w.sk[0] + k1 * w.sk[1] +
                                    k2 * w.sk[2]];
                    acc += static_cast<Acc<T>>(to_float(xv)) * to_float(wv);
                  }
                }
              }
            }
            y[n * dst.sn + oc * dst.sc + o0 * dst.sx[0] + o1 * dst.sx[1] + o2 * dst.sx[2]] =
                from_acc<T>(acc);
          }
      }
}

template <class T>
void backward_data(const ConvProblem& p, ActView diff_dst, WeightsView w, ActView diff_src,
                   int nthreads) {
  const T* dy = static_cast<const T*>(diff_dst.data);
  const T* wt = static_cast<const T*>(w.data);
  T* dx = static_cast<T*>(diff_src.data);
  const int64_t IC = p.IC();
#pragma omp parallel for collapse(3) schedule(static) num_threads(nthreads)
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t ic = 0; ic < IC; ++ic)
      for (int64_t i0 = 0; i0 < p.I[0]; ++i0) {
        const int64_t g = ic / p.ICg;
        for (int64_t i1 = 0; i1 < p.I[1]; ++i1)
          for (int64_t i2 = 0; i2 < p.I[2]; ++i2) {
            Acc<T> acc = 0;
            for (int64_t k0 = 0; k0 < p.K[0]; ++k0) {
              const int64_t o0 = dst_of(p, 0, i0, k0);
              if (o0 < 0) continue;
              for (int64_t k1 = 0; k1 < p.K[1]; ++k1) {
                const int64_t o1 = dst_of(p, 1, i1, k1);
                if (o1 < 0) continue;
                for (int64_t k2 = 0; k2 < p.K[2]; ++k2) {
                  const int64_t o2 = dst_of(p, 2, i2, k2);
                  if (o2 < 0) continue;
                  for (int64_t b = 0; b < p.OCg; ++b) {
                    const int64_t oc = g * p.OCg + b;
                    const T dv = dy[n * diff_dst.sn + oc * diff_dst.sc + o0 * diff_dst.sx[0] +
                                    o1 * diff_dst.sx[1] + o2 * diff_dst.sx[2]];
                    const T wv = wt[ic * w.si + b * w.so + k0 * w.sk[0] + k1 * w.sk[1] +
                                    k2 * w.sk[2]];
                    acc += static_cast<Acc<T>>(to_float(dv)) * to_float(wv);
                  }
                }
              }
            }
            dx[n * diff_src.sn + ic * diff_src.sc + i0 * diff_src.sx[0] + i1 * diff_src.sx[1] +
               i2 * diff_src.sx[2]] = from_acc<T>(acc);
          }
      }
}

template <class T>
void backward_weights(const ConvProblem& p, ActView src, ActView diff_dst, WeightsView dw,
                      int nthreads) {
  const T* x = static_cast<const T*>(src.data);
  const T* dy = static_cast<const T*>(diff_dst.data);
  T* out = static_cast<T*>(dw.data);
  const int64_t IC = p.IC();
#pragma omp parallel for collapse(3) schedule(static) num_threads(nthreads)
  for (int64_t ic = 0; ic < IC; ++ic)
    for (int64_t b = 0; b < p.OCg; ++b)
      for (int64_t k0 = 0; k0 < p.K[0]; ++k0) {
        const int64_t oc = (ic / p.ICg) * p.OCg + b;
        for (int64_t k1 = 0; k1 < p.K[1]; ++k1)
          for (int64_t k2 = 0; k2 < p.K[2]; ++k2) {
            Acc<T> acc = 0;
            for (int64_t n = 0; n < p.N; ++n)
              for (int64_t i0 = 0; i0 < p.I[0]; ++i0) {
                const int64_t o0 = dst_of(p, 0, i0, k0);
                if (o0 < 0) continue;
                for (int64_t i1 = 0; i1 < p.I[1]; ++i1) {
                  const int64_t o1 = dst_of(p, 1, i1, k1);
                  if (o1 < 0) continue;
                  for (int64_t i2 = 0; i2 < p.I[2]; ++i2) {
                    const int64_t o2 = dst_of(p, 2, i2, k2);
                    if (o2 < 0) continue;
                    const T xv = x[n * src.sn + ic * src.sc + i0 * src.sx[0] + i1 * src.sx[1] +
                                   i2 * src.sx[2]];
                    const T dv = dy[n * diff_dst.sn + oc * diff_dst.sc + o0 * diff_dst.sx[0] +
                                    o1 * diff_dst.sx[1] + o2 * diff_dst.sx[2]];
                    acc += static_cast<Acc<T>>(to_float(xv)) * to_float(dv);
                  }
                }
              }
            out[ic * dw.si + b * dw.so + k0 * dw.sk[0] + k1 * dw.sk[1] + k2 * dw.sk[2]] =
                from_acc<T>(acc);
          }
      }
}

template <template <class> class Fn, class... Args>
void by_dtype(DType dt, Args&&... args) {
  switch (dt) {
    case DType::F32: Fn<float>::run(args...); break;
    case DType::F64: Fn<double>::run(args...); break;
    case DType::BF16: Fn<bf16>::run(args...); break;
    case DType::F16: Fn<f16>::run(args...); break;
  }
}

template <class T>
struct Forward {
  static void run(const ConvProblem& p, ActView src, WeightsView w, const void* bias, ActView dst,
                  int nt) {
    forward<T>(p, src, w, static_cast<const T*>(bias), dst, nt);
  }
};
template <class T>
struct BackwardData {
  static void run(const ConvProblem& p, ActView dd, WeightsView w, ActView ds, int nt) {
    backward_data<T>(p, dd, w, ds, nt);
  }
};
template <class T>
struct BackwardWeights {
  static void run(const ConvProblem& p, ActView src, ActView dd, WeightsView dw, int nt) {
    backward_weights<T>(p, src, dd, dw, nt);
  }
};

}  // namespace

void reference_forward(const ConvProblem& p, DType dt, ActView src, WeightsView w,
                       const void* bias, ActView dst, int nthreads) {
  by_dtype<Forward>(dt, p, src, w, bias, dst, nthreads);
}

void reference_backward_data(const ConvProblem& p, DType dt, ActView diff_dst, WeightsView w,
                             ActView diff_src, int nthreads) {
  by_dtype<BackwardData>(dt, p, diff_dst, w, diff_src, nthreads);
}

void reference_backward_weights(const ConvProblem& p, DType dt, ActView src, ActView diff_dst,
                                WeightsView diff_w, int nthreads) {
  by_dtype<BackwardWeights>(dt, p, src, diff_dst, diff_w, nthreads);
}

}  // namespace tct
