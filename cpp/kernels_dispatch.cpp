// The memory kernels' family (see lamina/isa.hpp): one table per ISA, from kernels_<isa>.cpp.
#if defined(LAMINA_HAVE_X86_SIMD)
#include <immintrin.h>
#endif

#include "lamina/isa.hpp"
#include "lamina/kernel_isa.hpp"

namespace lamina::kisa {
LAMINA_ISA_FAMILY(Table, get_table, kLoops)

const Table& table() { return kLoops.get(); }

void stream_fence() {
#if defined(LAMINA_HAVE_X86_SIMD)
  _mm_sfence();
#endif
}

}  // namespace lamina::kisa
