// The model runtime's kernel family (see lamina/isa.hpp): one table per ISA, from
// model_kernels_<isa>.cpp.
#include "lamina/isa.hpp"
#include "lamina/model_isa.hpp"

namespace lamina::model::misa {
namespace scalar_isa { const Kernels& get_kernels(); }
#if defined(LAMINA_HAVE_X86_SIMD)
namespace avx2_isa { const Kernels& get_kernels(); }
namespace avx512_isa { const Kernels& get_kernels(); }
#endif

namespace {
constexpr isa::Family<Kernels> kModel{&scalar_isa::get_kernels,
                                      LAMINA_ISA_X86(&avx2_isa::get_kernels),
                                      LAMINA_ISA_X86(&avx512_isa::get_kernels)};
}  // namespace

const Kernels& kernels() { return kModel.get(); }
const Kernels& kernels(const char* name) { return kModel.get(isa::require(name)); }

}  // namespace lamina::model::misa
