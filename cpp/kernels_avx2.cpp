// Memory-kernel hot loops, AVX2 path (per-file flags -mavx2 -mfma; used only when the CPU
// has them; -ffp-contract=off keeps results identical to the other paths).
#include "lamina/isa.hpp"
#include "lamina/kernel_isa.hpp"
#include "lamina/kernel_math.hpp"

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <type_traits>

#include <immintrin.h>

namespace lamina::kisa::avx2_isa {
#define LAMINA_KISA_NAME "avx2"
#include "kernel_loops.inc"
#undef LAMINA_KISA_NAME
}  // namespace lamina::kisa::avx2_isa
