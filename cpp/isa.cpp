// The runtime ISA choice of the CPU kernels (see lamina/isa.hpp).
#include "lamina/isa.hpp"

#include <cstdlib>
#include <string>

#include "lamina/common.hpp"

namespace lamina::isa {

namespace {
bool parse(const std::string& s, Isa& out) {
  for (int i = 0; i < kNumIsas; ++i)
    if (s == name(static_cast<Isa>(i))) {
      out = static_cast<Isa>(i);
      return true;
    }
  return false;
}
}  // namespace

const char* name(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    case Isa::Scalar: break;
  }
  return "scalar";
}

bool usable(Isa isa) {
  if (isa == Isa::Scalar) return true;
#if defined(LAMINA_HAVE_X86_SIMD)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  if (isa == Isa::Avx2) return avx2;
  if (isa == Isa::Avx512) return __builtin_cpu_supports("avx512f") && avx2;
#endif
  return false;
}

bool cpu_has_avx512dq() {
#if defined(LAMINA_HAVE_X86_SIMD)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

std::vector<std::string> available() {
  std::vector<std::string> out;
  for (int i = 0; i < kNumIsas; ++i)
    if (usable(static_cast<Isa>(i))) out.emplace_back(name(static_cast<Isa>(i)));
  return out;
}

Isa active() {
  static const Isa a = [] {
    Isa best = Isa::Scalar;
    for (int i = 0; i < kNumIsas; ++i)
      if (usable(static_cast<Isa>(i))) best = static_cast<Isa>(i);
    Isa cap;
    if (const char* env = std::getenv("LAMINA_SIMD"))
      if (parse(env, cap) && cap < best && usable(cap)) best = cap;
    return best;
  }();
  return a;
}

Isa require(const std::string& s) {
  Isa isa = Isa::Scalar;
  LAMINA_CHECK(parse(s, isa), "unknown SIMD path '", s,
               "'; expected 'scalar', 'avx2' or 'avx512'");
  LAMINA_CHECK(usable(isa), "SIMD path '", s, "' is not available on this CPU/build");
  return isa;
}

Isa Selector::get() const {
  const int f = forced_.load(std::memory_order_relaxed);
  return f < 0 ? active() : static_cast<Isa>(f);
}

void Selector::force(const std::string& s) {
  if (s.empty()) {
    forced_.store(-1);
    return;
  }
  forced_.store(static_cast<int>(require(s)));
}

}  // namespace lamina::isa
