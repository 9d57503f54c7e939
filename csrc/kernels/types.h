// Storage types for the 16-bit floats and their conversions; no torch headers.
#pragma once

#include <cstdint>
#include <cstring>

namespace tct {

struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

inline float to_float(float v) { return v; }
inline double to_float(double v) { return v; }

inline float to_float(bf16 v) {
  const uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float to_float(f16 v) {
  _Float16 h;
  std::memcpy(&h, &v.bits, sizeof h);
  return static_cast<float>(h);
}

// Round to nearest even, as torch does.
inline bf16 to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}

inline f16 to_f16(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  f16 r;
  std::memcpy(&r.bits, &h, sizeof r.bits);
  return r;
}

// Accumulator type of each storage type: f32 for the 16-bit types, f64 for f64.
template <class T>
struct AccType {
  using type = float;
};
template <>
struct AccType<double> {
  using type = double;
};

template <class T>
inline T from_acc(typename AccType<T>::type v);
template <>
inline float from_acc<float>(float v) { return v; }
template <>
inline double from_acc<double>(double v) { return v; }
template <>
inline bf16 from_acc<bf16>(float v) { return to_bf16(v); }
template <>
inline f16 from_acc<f16>(float v) { return to_f16(v); }

}  // namespace tct
