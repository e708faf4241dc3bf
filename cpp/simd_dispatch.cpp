#include <cstdlib>
#include <string>

#include "lamina/common.hpp"
#include "lamina/simd.hpp"

namespace lamina::simd {
namespace scalar_isa { const DotKernels& get_kernels(); }
#if defined(LAMINA_HAVE_X86_SIMD)
namespace avx2_isa { const DotKernels& get_kernels(); }
namespace avx512_isa { const DotKernels& get_kernels(); }
#endif

namespace {
bool cpu_has(const std::string& isa) {
  if (isa == "scalar") return true;
#if defined(LAMINA_HAVE_X86_SIMD)
  __builtin_cpu_init();
  if (isa == "avx2")
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  if (isa == "avx512") return __builtin_cpu_supports("avx512f") && cpu_has("avx2");
#endif
  return false;
}

const DotKernels& by_name(const std::string& isa) {
#if defined(LAMINA_HAVE_X86_SIMD)
  if (isa == "avx512") return avx512_isa::get_kernels();
  if (isa == "avx2") return avx2_isa::get_kernels();
#endif
  return scalar_isa::get_kernels();
}

int rank(const std::string& isa) { return isa == "avx512" ? 2 : isa == "avx2" ? 1 : 0; }
}  // namespace

std::vector<std::string> available_isas() {
  std::vector<std::string> out;
  for (const char* n : {"scalar", "avx2", "avx512"})
    if (cpu_has(n)) out.emplace_back(n);
  return out;
}

const DotKernels& kernels_for(const std::string& isa) {
  LAMINA_CHECK(isa == "scalar" || isa == "avx2" || isa == "avx512",
               "unknown SIMD path '", isa, "'; expected 'scalar', 'avx2' or 'avx512'");
  LAMINA_CHECK(cpu_has(isa), "SIMD path '", isa, "' is not available on this CPU/build");
  return by_name(isa);
}

const DotKernels& kernels() {
  static const DotKernels& k = [] () -> const DotKernels& {
    std::string best = available_isas().back();
    if (const char* cap = std::getenv("LAMINA_SIMD")) {
      std::string c(cap);
      if ((c == "scalar" || c == "avx2" || c == "avx512") && rank(c) < rank(best) && cpu_has(c))
        best = c;
    }
    return by_name(best);
  }();
  return k;
}

}  // namespace lamina::simd
