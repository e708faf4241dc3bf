// Memory-kernel hot loops, AVX-512F path (per-file flags -mavx512f; used only when the CPU
// has AVX-512F; -ffp-contract=off keeps results identical to the other paths).
#include "lamina/isa.hpp"
#include "lamina/kernel_isa.hpp"
#include "lamina/kernel_math.hpp"

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <type_traits>

// GCC 12 reports its own _mm512_undefined_* placeholders inside the intrinsics as
// "maybe uninitialized" (simd_avx512.cpp silences the same with -Wno-maybe-uninitialized).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

namespace lamina::kisa::avx512_isa {
#define LAMINA_KISA_NAME "avx512"
#include "kernel_loops.inc"
#undef LAMINA_KISA_NAME
}  // namespace lamina::kisa::avx512_isa
