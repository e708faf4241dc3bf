#include "lamina/coverage.hpp"

#include <limits>

#include "lamina/common.hpp"

namespace lamina {

void coverage_nearest(const int64_t* I, const float* S, int64_t n_rows, int64_t k, const int64_t* rows,
                      int64_t m, const uint8_t* on, const int64_t* group, int64_t n_cols, float* best,
                      int64_t* where) {
  constexpr float kNeg = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < m; ++i) {
    const int64_t r = rows[i];
    LAMINA_CHECK_INDEX(r >= 0 && r < n_rows, "row ", r, " is outside the ", n_rows, " listed rows");
    LAMINA_CHECK_INDEX(r < n_cols, "row ", r, " has no group (", n_cols, " columns)");
    const int64_t* Ir = I + r * k;
    const float* Sr = S + r * k;
    const int64_t g = group[r];
    float b = kNeg;
    int64_t w = -1;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t c = Ir[j];
      if (c < 0) continue;
      LAMINA_CHECK_INDEX(c < n_cols, "row ", r, " lists column ", c, " of ", n_cols);
      if (!on[c] || group[c] == g) continue;
      if (Sr[j] > b) {  // (strictly: ties keep the first)
        b = Sr[j];
        w = c;
      }
    }
    best[i] = b;
    where[i] = w;
  }
}

void coverage_remap(int64_t* I, float* S, float* kth, int64_t m, int64_t k, const int64_t* remap,
                    int64_t n_cols) {
  constexpr float kNeg = -std::numeric_limits<float>::infinity();
  const int64_t total = m * k;
  for (int64_t e = 0; e < total; ++e) {  // (checked first: a bad entry writes nothing)
    const int64_t c = I[e];
    LAMINA_CHECK_INDEX(c >= -1 && c < n_cols, "entry ", e, " lists column ", c, " of ", n_cols);
    if (c >= 0)
      LAMINA_CHECK_INDEX(remap[c] >= -1, "remap[", c, "] = ", remap[c], " is below -1");
  }
  for (int64_t r = 0; r < m; ++r) {
    int64_t* Ir = I + r * k;
    float* Sr = S + r * k;
    bool freed = false;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t c = Ir[j];
      if (c < 0) continue;
      const int64_t to = remap[c];
      Ir[j] = to;
      if (to < 0) {
        Sr[j] = kNeg;
        freed = true;
      }
    }
    if (freed) kth[r] = kNeg;
  }
}

}  // namespace lamina
