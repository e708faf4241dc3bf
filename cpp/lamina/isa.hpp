// lamina/isa.hpp — internal to cpp/: the one runtime instruction-set dispatch of the CPU
// kernels. No -march=native anywhere: one binary runs on any x86-64 (and the scalar path on
// any CPU); each kernel family is compiled once per ISA and the table of the ISA in use is
// looked up at run time.
//
// Which ISA is used: isa::active(), the best ISA compiled into this build (LAMINA_SIMD_PATHS)
// and supported by this CPU, capped by the environment variable LAMINA_SIMD=scalar|avx2|avx512
// (read once, at first use; other values, and paths the CPU lacks, are ignored). Every family
// follows it, so a process runs one path; a family may also take a Selector, whose testing
// override (Selector::force) picks another path for that family alone (the KV selection
// kernels: _core.kv_simd_isa).
//
// How a kernel family registers its per-ISA tables:
//  1. Its table type T is a struct of function pointers (and constants), with one instance per
//     ISA, each returned by a function `const T& f()`. The code is written once and compiled
//     per ISA in one of two ways:
//       * a shared body (*.inc) included by one translation unit per ISA, each built with
//         that ISA's flags (CMakeLists.txt, LAMINA_ISA_FLAGS_<isa>) inside namespace
//         <family>::<isa>_isa: the dot kernels (simd_<isa>.cpp + dot_kernels.inc) and the
//         memory kernels (kernels_<isa>.cpp + kernel_loops.inc, gate_loops.inc, ...);
//       * functions carrying GCC/Clang `target("avx2...")` / `target("avx512f...")`
//         attributes in an ordinary translation unit: the KV row primitives (kv_simd.cpp) and
//         the KV scoring loops (kv_score.cpp). (Each keeps its own feature list: adding
//         "fma" to a loop's target would let GCC contract its multiply-adds and change bits.)
//  2. It lists them in an isa::Family<T>, in a translation unit built without ISA flags:
//         const isa::Family<T> kFamily{&scalar_isa::table, LAMINA_ISA_X86(&avx2_isa::table),
//                                      LAMINA_ISA_X86(&avx512_isa::table)};
//     (nullptr for a path not compiled: the lookup falls back to the next lower one). A family
//     compiled per ISA from a shared body names its tables `<isa>_isa::getter` and declares
//     them and its Family with one LAMINA_ISA_FAMILY(T, getter, kFamily).
//  3. Callers take kFamily.get() (the active ISA) or kFamily.get(selector).
// Per-ISA translation units must not odr-use the inline functions of this header (an inline
// function instantiated with AVX-512 flags could be picked by the linker for every caller);
// Family<T>::get belongs in the family's dispatch code only.
#pragma once

#include <atomic>
#include <string>
#include <vector>

namespace lamina::isa {

enum class Isa : int { Scalar = 0, Avx2 = 1, Avx512 = 2 };
constexpr int kNumIsas = 3;

/// "scalar", "avx2" or "avx512".
const char* name(Isa isa);
/// Compiled into this build and supported by this CPU (AVX2 means AVX2 + FMA + F16C; AVX-512
/// means AVX-512F and AVX2).
bool usable(Isa isa);
/// Names of the usable ISAs, best last.
std::vector<std::string> available();
/// The ISA every family uses (see above).
Isa active();
/// The ISA of that name; ValueError when unknown or not usable here.
Isa require(const std::string& name);
/// The CPU has AVX-512DQ (a sub-feature some AVX-512 loops use when present).
bool cpu_has_avx512dq();

/// A family's ISA choice: active() unless a test forced another path.
class Selector {
 public:
  Isa get() const;
  /// "scalar"/"avx2"/"avx512" forces that path (ValueError as require()); "" restores
  /// active(). Not synchronised with running kernels (a testing aid).
  void force(const std::string& name);

 private:
  std::atomic<int> forced_{-1};
};

/// The per-ISA tables of one kernel family (see above).
template <class T>
class Family {
 public:
  using Get = const T& (*)();
  constexpr Family(Get scalar, Get avx2, Get avx512) : get_{scalar, avx2, avx512} {}

  /// The table of `isa`, or of the best compiled ISA below it.
  const T& get(Isa isa) const {
    for (int i = static_cast<int>(isa); i > 0; --i)
      if (get_[i]) return get_[i]();
    return get_[0]();
  }
  const T& get() const { return get(active()); }
  const T& get(const Selector& s) const { return get(s.get()); }

 private:
  Get get_[kNumIsas];
};

}  // namespace lamina::isa

// Families' x86 tables: the pointer on x86 builds, nullptr elsewhere (LAMINA_HAVE_X86_SIMD is
// set by CMakeLists.txt for the core library when it compiles the x86 paths).
#if defined(LAMINA_HAVE_X86_SIMD)
#define LAMINA_ISA_X86(x) x
#else
#define LAMINA_ISA_X86(x) nullptr
#endif

// Families written with `target` attributes (step 1, second way) compile their x86 functions
// where LAMINA_ISA_TARGETS is set (x86 paths built, GCC or Clang) and list them in their
// Family with LAMINA_ISA_TARGET_X86 (the pointer there, nullptr elsewhere).
#if defined(LAMINA_HAVE_X86_SIMD) && (defined(__GNUC__) || defined(__clang__))
#define LAMINA_ISA_TARGETS 1
#define LAMINA_ISA_TARGET_X86(x) x
#else
#define LAMINA_ISA_TARGET_X86(x) nullptr
#endif

// Step 2 for a family whose per-ISA tables are `const T& <isa>_isa::getter()` in the current
// namespace: declares the three getters and defines `constexpr isa::Family<T> family` (in an
// unnamed namespace) listing them. Declaring a getter that this build does not compile is
// harmless: LAMINA_ISA_X86 leaves it unreferenced.
#define LAMINA_ISA_FAMILY(T, getter, family)                                                 \
  namespace scalar_isa {                                                                     \
  const T& getter();                                                                         \
  }                                                                                          \
  namespace avx2_isa {                                                                       \
  const T& getter();                                                                         \
  }                                                                                          \
  namespace avx512_isa {                                                                     \
  const T& getter();                                                                         \
  }                                                                                          \
  namespace {                                                                                \
  constexpr ::lamina::isa::Family<T> family{&scalar_isa::getter,                             \
                                            LAMINA_ISA_X86(&avx2_isa::getter),               \
                                            LAMINA_ISA_X86(&avx512_isa::getter)};            \
  }
