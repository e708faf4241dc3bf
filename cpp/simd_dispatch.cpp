// The dot-product kernels' family (see lamina/isa.hpp): one table per ISA, from
// simd_<isa>.cpp.
#include "lamina/isa.hpp"
#include "lamina/simd.hpp"

namespace lamina::simd {
namespace scalar_isa { const DotKernels& get_kernels(); }
#if defined(LAMINA_HAVE_X86_SIMD)
namespace avx2_isa { const DotKernels& get_kernels(); }
namespace avx512_isa { const DotKernels& get_kernels(); }
#endif

namespace {
constexpr isa::Family<DotKernels> kDot{&scalar_isa::get_kernels,
                                       LAMINA_ISA_X86(&avx2_isa::get_kernels),
                                       LAMINA_ISA_X86(&avx512_isa::get_kernels)};
}  // namespace

const DotKernels& kernels() { return kDot.get(); }

}  // namespace lamina::simd
