// The memory kernels' family (see lamina/isa.hpp): one table per ISA, from kernels_<isa>.cpp.
#if defined(LAMINA_HAVE_X86_SIMD)
#include <immintrin.h>
#endif

#include "lamina/isa.hpp"
#include "lamina/kernel_isa.hpp"

namespace lamina::kisa {
namespace scalar_isa { const Table& get_table(); }
#if defined(LAMINA_HAVE_X86_SIMD)
namespace avx2_isa { const Table& get_table(); }
namespace avx512_isa { const Table& get_table(); }
#endif

namespace {
constexpr isa::Family<Table> kLoops{&scalar_isa::get_table, LAMINA_ISA_X86(&avx2_isa::get_table),
                                    LAMINA_ISA_X86(&avx512_isa::get_table)};
}  // namespace

const Table& table() { return kLoops.get(); }

void stream_fence() {
#if defined(LAMINA_HAVE_X86_SIMD)
  _mm_sfence();
#endif
}

}  // namespace lamina::kisa
