// CUDA row kernels: heat, EMA blend, damped update (see kernels_cuda.hpp).
// Compiled with -fmad=false (CMakeLists.txt) so kernel_math.hpp rounds as on the CPU.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "check.cuh"
#include "kernels_cuda.hpp"
#include "lamina/kernel_math.hpp"
#include "topk_select.cuh"

namespace lamina::cuda {

using detail::as_stream;
using detail::Scratch;
using detail::warp_sum;

namespace {

enum : unsigned { kBad = 1u, kIndexRange = 2u, kIndexDup = 4u, kParam = 8u };

template <class V, class L>
__global__ void heat_kernel(const V* __restrict__ visits, const L* __restrict__ ilen,
                            const double* __restrict__ last, std::size_t n, double now, float a,
                            float b, float c, double inv_mu, float* __restrict__ out,
                            unsigned* flags) {
  bool bad = false;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(blockDim.x) * gridDim.x) {
    const float x = kmath::heat_recency_arg(now, last[i], inv_mu);
    const float h = kmath::heat_value(kmath::count_to_float(visits[i]),
                                      kmath::count_to_float(ilen[i]), kmath::fast_expf(x), a, b, c);
    bad = bad || !kmath::is_finite(x) || !kmath::is_finite(h);
    out[i] = h;
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(flags, kBad);
}

template <class V, class L>
void launch_heat(const void* v, const void* l, const double* last, std::size_t n, double now,
                 float a, float b, float c, double inv_mu, float* out, unsigned* flags,
                 cudaStream_t st) {
  const unsigned blocks =
      static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 8u * detail::sm_count() * 8u));
  heat_kernel<V, L><<<std::max(1u, blocks), 256, 0, st>>>(static_cast<const V*>(v),
                                                          static_cast<const L*>(l), last, n, now,
                                                          a, b, c, inv_mu, out, flags);
  LAMINA_CUDA_LAUNCHED();
}

template <class V>
void heat_by_len(const void* v, const void* l, ColKind lk, const double* last, std::size_t n,
                 double now, float a, float b, float c, double inv_mu, float* out,
                 unsigned* flags, cudaStream_t st) {
  switch (lk) {
    case ColKind::F32: return launch_heat<V, float>(v, l, last, n, now, a, b, c, inv_mu, out, flags, st);
    case ColKind::I32: return launch_heat<V, int32_t>(v, l, last, n, now, a, b, c, inv_mu, out, flags, st);
    case ColKind::I64: return launch_heat<V, int64_t>(v, l, last, n, now, a, b, c, inv_mu, out, flags, st);
  }
}

unsigned read_flags(unsigned* d_flags, cudaStream_t st) {
  unsigned h = 0;
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(&h, d_flags, sizeof h, cudaMemcpyDeviceToHost, st));
  LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
  return h;
}

// ---- blend / damped ---------------------------------------------------------------------------

__device__ __forceinline__ double param_at(const DeviceParam& p, std::size_t k) {
  return p.f32 ? static_cast<double>(p.f32[k]) : p.f64 ? p.f64[k] : p.scalar;
}

// Index range, duplicates (bitmap over n rows) and parameter range, before any write.
__global__ void validate_kernel(const int64_t* __restrict__ index, std::size_t m, std::size_t n,
                                unsigned* bitmap, DeviceParam p, double lo, double hi,
                                unsigned* flags) {
  for (std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; k < m;
       k += static_cast<std::size_t>(blockDim.x) * gridDim.x) {
    const double v = param_at(p, k);
    if (!(v >= lo && v <= hi) || isinf(v)) atomicOr(flags, kParam);  // also catches NaN
    if (!index) continue;
    const int64_t r = index[k];
    if (r < 0 || static_cast<uint64_t>(r) >= n) {
      atomicOr(flags, kIndexRange);
      continue;
    }
    const unsigned bit = 1u << (r & 31);
    if (atomicOr(bitmap + (r >> 5), bit) & bit) atomicOr(flags, kIndexDup);
  }
}

// One warp per updated row: pass 1 finiteness (+ norm of the result), pass 2 write + drift.
template <bool kDamped, bool kRenorm>
__global__ void rows_kernel(float* __restrict__ rows, std::size_t d,
                            const float* __restrict__ targets, std::size_t m,
                            const int64_t* __restrict__ index, DeviceParam p,
                            float* __restrict__ drift, unsigned* flags) {
  const int lane = threadIdx.x & 31;
  const std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x / 32) + (threadIdx.x >> 5);
  if (k >= m) return;
  float* x = rows + (index ? static_cast<std::size_t>(index[k]) : k) * d;
  const float* t = targets + k * d;
  float w1, w2;
  const double v = param_at(p, k);
  if constexpr (kDamped) {
    kmath::damped_weights(v, &w1, &w2);
  } else {
    w1 = static_cast<float>(v);
    w2 = static_cast<float>(1.0 - v);
  }
  auto step = [&](float a, float b) {
    if constexpr (kDamped) return kmath::damped_step(a, b, w1, w2);
    else return kmath::ema_step(a, b, w1, w2);
  };
  bool finite = true;
  float nrm = 0.f;
  for (std::size_t j = lane; j < d; j += 32) {
    const float a = x[j], b = t[j];
    finite = finite && kmath::is_finite(a) && kmath::is_finite(b);
    if constexpr (kRenorm) {
      const float s = step(a, b);
      nrm += s * s;
    }
  }
  finite = __all_sync(detail::kFullMask, finite);
  if (!finite) {
    if (lane == 0) {
      drift[k] = __int_as_float(0x7fc00000);
      atomicOr(flags, kBad);
    }
    return;
  }
  float scale = 1.0f;
  if constexpr (kRenorm) {
    nrm = warp_sum(nrm);
    scale = nrm > 0.0f ? 1.0f / sqrtf(nrm) : 1.0f;
  }
  float acc = 0.f;
  for (std::size_t j = lane; j < d; j += 32) {
    const float a = x[j];
    float s = step(a, t[j]);
    if constexpr (kRenorm) s = s * scale;
    acc += kmath::sq_delta(s, a);
    x[j] = s;
  }
  acc = warp_sum(acc);
  if (lane == 0) drift[k] = acc;
}

bool overlaps(const void* a, std::size_t ab, const void* b, std::size_t bb) {
  if (!ab || !bb) return false;
  const auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return pa < pb + bb && pb < pa + ab;
}

template <bool kDamped>
void run_rows(float* rows, std::size_t n, std::size_t d, const float* targets, std::size_t m,
              const int64_t* index, const DeviceParam& p, bool renorm, float* drift,
              void* stream, double lo, double hi, const char* pname, const char* range) {
  if (!index)
    LAMINA_CHECK(m == n, "targets must have one row per row of rows when no index is given: got ",
                 m, " target rows for ", n, " rows");
  const std::size_t rb = n * d * 4, tb = m * d * 4, db = m * 4;
  LAMINA_CHECK(!overlaps(rows, rb, targets, tb), "targets shares memory with rows; pass a copy (targets.copy())");
  LAMINA_CHECK(!overlaps(rows, rb, drift, db), "out (drift) shares memory with rows");
  LAMINA_CHECK(!overlaps(targets, tb, drift, db), "out (drift) shares memory with targets");
  if (!p.f32 && !p.f64)
    LAMINA_CHECK(std::isfinite(p.scalar) && p.scalar >= lo && p.scalar <= hi, pname, " = ",
                 p.scalar, " is out of range; expected ", range);
  if (m == 0) return;
  const cudaStream_t st = as_stream(stream);
  Scratch scr(st);
  unsigned* flags = scr.alloc<unsigned>(1);
  LAMINA_CUDA_CHECK(cudaMemsetAsync(flags, 0, sizeof(unsigned), st));
  if (index || p.f32 || p.f64) {
    unsigned* bitmap = nullptr;
    if (index) {
      bitmap = scr.alloc<unsigned>((n + 31) / 32);
      LAMINA_CUDA_CHECK(cudaMemsetAsync(bitmap, 0, (n + 31) / 32 * sizeof(unsigned), st));
    }
    const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((m + 255) / 256, 4096));
    validate_kernel<<<blocks, 256, 0, st>>>(index, m, n, bitmap, p, lo, hi, flags);
    LAMINA_CUDA_LAUNCHED();
    const unsigned f = read_flags(flags, st);
    LAMINA_CHECK_INDEX(!(f & kIndexRange), "index has entries out of range for ", n,
                       " rows (valid: 0 <= index < n; negative indices are not accepted)");
    LAMINA_CHECK(!(f & kIndexDup), "index contains a row more than once; each row may be "
                 "updated at most once per call (combine the targets first, e.g. average them)");
    LAMINA_CHECK(!(f & kParam), pname, " has values out of range; expected ", range);
  }
  const unsigned blocks = static_cast<unsigned>((m + 7) / 8);
  if (renorm)
    rows_kernel<kDamped, true><<<blocks, 256, 0, st>>>(rows, d, targets, m, index, p, drift, flags);
  else
    rows_kernel<kDamped, false><<<blocks, 256, 0, st>>>(rows, d, targets, m, index, p, drift, flags);
  LAMINA_CUDA_LAUNCHED();
  const unsigned f = read_flags(flags, st);
  LAMINA_CHECK(!(f & kBad), "some updated row(s) contain NaN or Inf (their drift is NaN); those "
               "rows were left unchanged, all other rows were updated. Pass finite values");
}

// ---- softmax gate (eq. 7 + entropy bound) -------------------------------------------------

constexpr unsigned long long kNoRow = ~0ull;

// Per-row β: finite, |β| <= FLT_MAX, and > 0 with the entropy bound; first bad row to *bad.
__global__ void gate_beta_check(DeviceParam p, std::size_t b, bool positive,
                                unsigned long long* bad) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < b;
       i += static_cast<std::size_t>(blockDim.x) * gridDim.x) {
    const double v = param_at(p, i);
    const bool ok = isfinite(v) && fabs(v) <= static_cast<double>(FLT_MAX) && (!positive || v > 0.0);
    if (!ok) atomicMin(bad, static_cast<unsigned long long>(i));
  }
}

// One thread per row: the CPU's tile steps are kmath::softmax_row's, in the same order, and
// the doubling loop is the CPU's, so results are bit-identical (-fmad=false).
__global__ void gate_kernel(const float* __restrict__ relevance, std::size_t b, int L,
                            DeviceParam p, bool entropy, float eps, int max_doublings,
                            float* __restrict__ gamma, double* __restrict__ beta_used,
                            unsigned long long* bad) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < b;
       i += static_cast<std::size_t>(blockDim.x) * gridDim.x) {
    const float* r = relevance + i * L;
    float* g = gamma + i * L;
    const double bd = param_at(p, i);
    beta_used[i] = bd;
    bool finite = true;
    for (int j = 0; j < L; ++j) finite = finite && kmath::is_finite(r[j]);
    if (!finite) {
      atomicMin(bad, static_cast<unsigned long long>(i));
      continue;
    }
    float h = kmath::softmax_row(r, L, static_cast<float>(bd), g);
    if (!entropy || !(h > eps)) continue;
    float bcur = static_cast<float>(bd);
    int k = 0;
    for (; h > eps && k < max_doublings && bcur <= FLT_MAX / 2; ++k) {
      bcur *= 2.0f;
      h = kmath::softmax_row(r, L, bcur, g);
    }
    beta_used[i] = ldexp(bd, k);  // the caller's β·2^k, exactly
  }
}

unsigned long long read_u64(const unsigned long long* d, cudaStream_t st) {
  unsigned long long h = 0;
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, st));
  LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
  return h;
}

unsigned grid_for(std::size_t n, unsigned threads) {
  return static_cast<unsigned>(
      std::max<std::size_t>(1, std::min<std::size_t>((n + threads - 1) / threads,
                                                     8u * static_cast<unsigned>(detail::sm_count()) * 8u)));
}

}  // namespace

void heat_scores(const void* visits, ColKind vk, const void* interaction_len, ColKind lk,
                 const double* last_access, std::size_t n, double now, double a, double b,
                 double c, double mu, float* heat, void* stream) {
  LAMINA_CHECK(std::isfinite(now), "now must be finite (seconds), got ", now);
  LAMINA_CHECK(std::isfinite(a) && std::isfinite(b) && std::isfinite(c),
               "the heat weights a, b, c must be finite, got ", a, ", ", b, ", ", c);
  LAMINA_CHECK(std::isfinite(mu) && mu > 0.0,
               "mu (the recency time scale, seconds) must be finite and > 0, got ", mu);
  if (n == 0) return;
  const cudaStream_t st = as_stream(stream);
  Scratch scr(st);
  unsigned* flags = scr.alloc<unsigned>(1);
  LAMINA_CUDA_CHECK(cudaMemsetAsync(flags, 0, sizeof(unsigned), st));
  const float fa = static_cast<float>(a), fb = static_cast<float>(b), fc = static_cast<float>(c);
  const double inv_mu = 1.0 / mu;
  switch (vk) {
    case ColKind::F32: heat_by_len<float>(visits, interaction_len, lk, last_access, n, now, fa, fb, fc, inv_mu, heat, flags, st); break;
    case ColKind::I32: heat_by_len<int32_t>(visits, interaction_len, lk, last_access, n, now, fa, fb, fc, inv_mu, heat, flags, st); break;
    case ColKind::I64: heat_by_len<int64_t>(visits, interaction_len, lk, last_access, n, now, fa, fb, fc, inv_mu, heat, flags, st); break;
  }
  LAMINA_CHECK(!(read_flags(flags, st) & kBad),
               "a heat input is NaN/Inf or a heat overflows float32; pass finite visits, "
               "interaction_len and last_access (seconds) and check the weights");
}

void ema_blend(float* rows, std::size_t n, std::size_t d, const float* targets, std::size_t m,
               const int64_t* index, const DeviceParam& alpha, bool renormalize, float* drift,
               void* stream) {
  run_rows<false>(rows, n, d, targets, m, index, alpha, renormalize, drift, stream, 0.0, 1.0,
                  "alpha", "a finite value in [0, 1]");
}

void damped_update(float* rows, std::size_t n, std::size_t d, const float* targets,
                   std::size_t m, const int64_t* index, const DeviceParam& lam, float* drift,
                   void* stream) {
  run_rows<true>(rows, n, d, targets, m, index, lam, false, drift, stream, 0.0, HUGE_VAL,
                 "lam", "a finite value >= 0");
}

void softmax_gate(const float* relevance, std::size_t b, std::size_t L, const DeviceParam& beta,
                  bool has_max_entropy, double max_entropy, int max_doublings, float* gamma,
                  double* beta_used, void* stream) {
  LAMINA_CHECK(L >= 1, "relevance must have at least one column (one per memory layer), got 0");
  LAMINA_CHECK(L <= static_cast<std::size_t>(INT32_MAX), "relevance has too many columns");
  const bool per_row = beta.f32 || beta.f64;
  if (!per_row) {
    const double v = beta.scalar;
    LAMINA_CHECK(std::isfinite(v) && std::fabs(v) <= FLT_MAX, "beta = ", v,
                 " is not a finite float32 value");
    LAMINA_CHECK(!has_max_entropy || v > 0.0, "beta = ", v,
                 " must be > 0 when max_entropy is given (doubling beta sharpens the gate only "
                 "for beta > 0)");
  }
  if (has_max_entropy) {
    LAMINA_CHECK(std::isfinite(max_entropy) && max_entropy >= 0.0,
                 "max_entropy (epsilon) must be finite and >= 0, got ", max_entropy);
    LAMINA_CHECK(max_doublings >= 0 && max_doublings <= 1024,
                 "max_doublings must be in [0, 1024], got ", max_doublings);
  }
  if (b == 0) return;
  const cudaStream_t st = as_stream(stream);
  Scratch scr(st);
  unsigned long long* bad = scr.alloc<unsigned long long>(1);
  LAMINA_CUDA_CHECK(cudaMemsetAsync(bad, 0xff, sizeof *bad, st));
  if (per_row) {
    gate_beta_check<<<grid_for(b, 256), 256, 0, st>>>(beta, b, has_max_entropy, bad);
    LAMINA_CUDA_LAUNCHED();
    const unsigned long long i = read_u64(bad, st);
    LAMINA_CHECK(i == kNoRow, "beta[", i, "] is not a finite float32 value",
                 has_max_entropy ? " > 0 (max_entropy needs beta > 0: doubling beta sharpens the "
                                   "gate only for beta > 0)" : "");
  }
  gate_kernel<<<grid_for(b, 128), 128, 0, st>>>(relevance, b, static_cast<int>(L), beta,
                                                has_max_entropy, static_cast<float>(max_entropy),
                                                max_doublings, gamma, beta_used, bad);
  LAMINA_CUDA_LAUNCHED();
  const unsigned long long i = read_u64(bad, st);
  LAMINA_CHECK(i == kNoRow, "relevance[", i,
               "] contains NaN or Inf; pass finite relevances (check isfinite)");
}

}  // namespace lamina::cuda
