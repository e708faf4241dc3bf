// lamina/row_param.hpp — a kernel parameter that is either one scalar for all rows or one
// value per row (float32 or float64 array), read without converting the caller's array.
#pragma once

#include <cstddef>

namespace lamina {

struct RowParam {
  double scalar = 0.0;
  const float* f32 = nullptr;   // per-row values (float32), or
  const double* f64 = nullptr;  // per-row values (float64); both null: `scalar` for every row

  static RowParam of(double v) { RowParam p; p.scalar = v; return p; }
  static RowParam of(const float* a) { RowParam p; p.f32 = a; return p; }
  static RowParam of(const double* a) { RowParam p; p.f64 = a; return p; }

  bool per_row() const { return f32 != nullptr || f64 != nullptr; }
  double operator[](std::size_t i) const {
    return f32 ? static_cast<double>(f32[i]) : f64 ? f64[i] : scalar;
  }
};

}  // namespace lamina
