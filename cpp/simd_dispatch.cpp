// The dot-product kernels' family (see lamina/isa.hpp): one table per ISA, from
// simd_<isa>.cpp.
#include "lamina/isa.hpp"
#include "lamina/simd.hpp"

namespace lamina::simd {
LAMINA_ISA_FAMILY(DotKernels, get_kernels, kDot)

const DotKernels& kernels() { return kDot.get(); }

}  // namespace lamina::simd
