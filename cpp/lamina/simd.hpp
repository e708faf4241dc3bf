// lamina/simd.hpp — dot-product block kernels with runtime ISA dispatch.
//
// The same kernel source (dot_kernels.inc) is compiled once per instruction set
// (scalar, AVX2+FMA+F16C, AVX-512F) with per-file flags (simd_<isa>.cpp); the table of the
// ISA in use is picked by lamina/isa.hpp's rule (the best the CPU supports, capped by
// LAMINA_SIMD=scalar|avx2|avx512).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lamina::simd {

/// out[q*ldo + r] = sum_j Q[q*ldq + j] * rows[r][j] for q < nq, r < nr, j < d.
/// Rows are given by pointer (contiguous or gathered); f16 rows are IEEE binary16 bits.
/// Accumulation is fp32. Pure function, thread-safe.
using DotF32 = void (*)(const float* Q, std::size_t nq, std::size_t ldq, const float* const* rows,
                        std::size_t nr, std::size_t d, float* out, std::size_t ldo);
using DotF16 = void (*)(const float* Q, std::size_t nq, std::size_t ldq,
                        const uint16_t* const* rows, std::size_t nr, std::size_t d, float* out,
                        std::size_t ldo);
/// out[r] = ||rows[r]||^2 (fp32 accumulation).
using NormF32 = void (*)(const float* const* rows, std::size_t nr, std::size_t d, float* out);
using NormF16 = void (*)(const uint16_t* const* rows, std::size_t nr, std::size_t d, float* out);

struct DotKernels {
  const char* isa;
  DotF32 dot_f32;
  DotF16 dot_f16;
  NormF32 sqnorm_f32;
  NormF16 sqnorm_f16;
};

/// The kernels of the ISA in use (isa::active()).
const DotKernels& kernels();

}  // namespace lamina::simd
