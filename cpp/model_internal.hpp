// model_internal.hpp — private to cpp/model*.cpp: the weight-row readers model.cpp defines and
// the forward (model_forward.cpp) uses. Pure functions, thread-safe.
#pragma once

#include <cstddef>

#include "lamina/model.hpp"

namespace lamina::model::detail {

/// Element j of row r of a packed block matrix (lamina/model_isa.hpp), j < cols, to
/// out[j * stride].
void dequant_packed_row(const Matrix& m, std::size_t r, float* out, std::size_t stride);
/// Row r of a matrix (packed or stored) to out[j * stride], j < cols.
void dequant(const Matrix& m, std::size_t r, float* out, std::size_t stride);

}  // namespace lamina::model::detail
