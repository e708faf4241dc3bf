// Memory-kernel hot loops, portable path (baseline ISA: SSE2 on x86-64; the fallback on
// other CPUs).
#include "lamina/isa.hpp"
#include "lamina/kernel_isa.hpp"
#include "lamina/kernel_math.hpp"

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <type_traits>

namespace lamina::kisa::scalar_isa {
#define LAMINA_KISA_NAME "scalar"
#include "kernel_loops.inc"
#undef LAMINA_KISA_NAME
}  // namespace lamina::kisa::scalar_isa
