// Picks the memory-kernel loops for the ISA the dot kernels use (simd::kernels(): best the CPU
// supports, capped by LAMINA_SIMD).
#include <cstring>

#if defined(LAMINA_HAVE_X86_SIMD)
#include <immintrin.h>
#endif

#include "lamina/kernel_isa.hpp"
#include "lamina/simd.hpp"

namespace lamina::kisa {
namespace scalar_isa { const Table& get_table(); }
#if defined(LAMINA_HAVE_X86_SIMD)
namespace avx2_isa { const Table& get_table(); }
namespace avx512_isa { const Table& get_table(); }
#endif

const Table& table() {
  static const Table& t = []() -> const Table& {
#if defined(LAMINA_HAVE_X86_SIMD)
    const char* isa = simd::kernels().isa;
    if (std::strcmp(isa, "avx512") == 0) return avx512_isa::get_table();
    if (std::strcmp(isa, "avx2") == 0) return avx2_isa::get_table();
#endif
    return scalar_isa::get_table();
  }();
  return t;
}

void stream_fence() {
#if defined(LAMINA_HAVE_X86_SIMD)
  _mm_sfence();
#endif
}

}  // namespace lamina::kisa
