// The model runtime's kernel family (see lamina/isa.hpp): one table per ISA, from
// model_kernels_<isa>.cpp.
#include <algorithm>
#include <cmath>

#include "lamina/isa.hpp"
#include "lamina/model_isa.hpp"

namespace lamina::model::misa {
LAMINA_ISA_FAMILY(Kernels, get_kernels, kModel)

const Kernels& kernels() { return kModel.get(); }

void quantise_q8(const float* x, std::size_t K, int8_t* xq, float* xd, float* xsum,
                 int32_t* xqs) {
  for (std::size_t b = 0; b < K / 32; ++b) {
    const float* v = x + 32 * b;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    int32_t qs = 0;
    for (int j = 0; j < 32; ++j) {
      xq[32 * b + j] = static_cast<int8_t>(std::lrintf(v[j] * id));
      qs += xq[32 * b + j];
    }
    xd[b] = d;
    xqs[b] = qs;
    xsum[b] = d * static_cast<float>(qs);
  }
}

}  // namespace lamina::model::misa
