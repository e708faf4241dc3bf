// CUDA row kernels: heat, EMA blend, damped update (see kernels.hpp).
// Compiled with -fmad=false (CMakeLists.txt) so kernel_math.hpp rounds as on the CPU.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "check.cuh"
#include "gate_row.cuh"
#include "kernels.hpp"
#include "lamina/gating.hpp"
#include "lamina/kernel_math.hpp"
#include "topk_select.cuh"

namespace lamina::cuda {

using detail::warp_sum;

namespace {

// Word indices of HostFlags (check.cuh) written by the kernels of this file.
enum : int { kBad = 0, kIndexRange = 1, kIndexDup = 2, kParam = 3 };

// Resident blocks of `kernel` (threads per block, no dynamic shared memory) on the current
// device: one full wave of a grid-stride kernel. Computed once per kernel (the process's
// devices are assumed alike; the SM count is read per call). `threads` must be the same for
// every call of one kernel.
template <auto Kernel>
unsigned wave_blocks(int threads) {
  static const int per_sm = [threads] {
    int b = 0;
    LAMINA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, Kernel, threads, 0));
    return std::max(1, b);
  }();
  return static_cast<unsigned>(per_sm * detail::sm_count());
}

constexpr int kHeatThreads = 256;
constexpr int kHeatUnroll = 4;  // rows per thread and step: 4 independent loads per column

__device__ __forceinline__ float heat_one(float v, float l, double t, double now, float a,
                                          float b, float c, double inv_mu, bool& bad) {
  const float x = kmath::heat_recency_arg(now, t, inv_mu);
  const float h = kmath::heat_value(v, l, kmath::fast_expf(x), a, b, c);
  bad = bad || !kmath::is_finite(x) || !kmath::is_finite(h);
  return h;
}

// Grid-stride, kHeatUnroll rows per thread and step (all loads issued before the math, so each
// thread keeps 4 x (sizeof V + sizeof L + 8) bytes in flight), one grid wave.
template <class V, class L>
__global__ void __launch_bounds__(kHeatThreads)
    heat_kernel(const V* __restrict__ visits, const L* __restrict__ ilen,
                const double* __restrict__ last, std::size_t n, double now, float a, float b,
                float c, double inv_mu, float* __restrict__ out, unsigned* flags) {
  bool bad = false;
  const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  for (; i + (kHeatUnroll - 1) * stride < n; i += kHeatUnroll * stride) {
    V v[kHeatUnroll];
    L l[kHeatUnroll];
    double t[kHeatUnroll];
#pragma unroll
    for (int u = 0; u < kHeatUnroll; ++u) {
      v[u] = __ldg(visits + i + u * stride);
      l[u] = __ldg(ilen + i + u * stride);
      t[u] = __ldg(last + i + u * stride);
    }
#pragma unroll
    for (int u = 0; u < kHeatUnroll; ++u)
      out[i + u * stride] = heat_one(kmath::count_to_float(v[u]), kmath::count_to_float(l[u]),
                                     t[u], now, a, b, c, inv_mu, bad);
  }
  for (; i < n; i += stride)
    out[i] = heat_one(kmath::count_to_float(visits[i]), kmath::count_to_float(ilen[i]), last[i],
                      now, a, b, c, inv_mu, bad);
  if (__syncthreads_or(bad) && threadIdx.x == 0) detail::raise_flag(flags, kBad);
}

template <class V, class L>
void launch_heat(const void* v, const void* l, const double* last, std::size_t n, double now,
                 float a, float b, float c, double inv_mu, float* out, unsigned* flags,
                 cudaStream_t st) {
  const unsigned blocks = blocks_for(n, kHeatThreads, wave_blocks<heat_kernel<V, L>>(kHeatThreads));
  launch(heat_kernel<V, L>, blocks, kHeatThreads, 0, st, static_cast<const V*>(v),
         static_cast<const L*>(l), last, n, now, a, b, c, inv_mu, out, flags);
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
    if (!(v >= lo && v <= hi) || isinf(v)) detail::raise_flag(flags, kParam);  // also NaN
    if (!index) continue;
    const int64_t r = index[k];
    if (r < 0 || static_cast<uint64_t>(r) >= n) {
      detail::raise_flag(flags, kIndexRange);
      continue;
    }
    const unsigned bit = 1u << (r & 31);
    if (atomicOr(bitmap + (r >> 5), bit) & bit) detail::raise_flag(flags, kIndexDup);
  }
}

// Row k's per-element update with its weights built once: eq. 5's EMA blend (param α) or
// eq. 9-10's damped update (kDamped, param λ), as the CPU's EmaStep / DampedStep.
template <bool kDamped>
struct RowStep {
  float w1, w2;
  __device__ explicit RowStep(double param) {
    if constexpr (kDamped) {
      kmath::damped_weights(param, &w1, &w2);
    } else {
      w1 = static_cast<float>(param);
      w2 = static_cast<float>(1.0 - param);
    }
  }
  __device__ float operator()(float a, float b) const {
    if constexpr (kDamped) return kmath::damped_step(a, b, w1, w2);
    else return kmath::ema_step(a, b, w1, w2);
  }
};

// After a row's first pass, by every lane of its warp: true when every lane saw finite values;
// otherwise lane 0 marks the row's drift NaN and raises kBad, and the caller skips the row.
__device__ __forceinline__ bool row_finite(bool finite, int lane, float* drift_k, unsigned* flags) {
  if (__all_sync(detail::kFullMask, finite)) return true;
  if (lane == 0) {
    *drift_k = __int_as_float(0x7fc00000);
    detail::raise_flag(flags, kBad);
  }
  return false;
}

// The renormalisation factor of a row from each lane's partial squared norm of the result, by
// every lane of its warp (1 without kRenorm).
template <bool kRenorm>
__device__ __forceinline__ float row_scale(float nrm) {
  if constexpr (kRenorm) {
    nrm = warp_sum(nrm);
    return nrm > 0.0f ? 1.0f / sqrtf(nrm) : 1.0f;
  } else {
    return 1.0f;
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
  const RowStep<kDamped> step(param_at(p, k));
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
  if (!row_finite(finite, lane, drift + k, flags)) return;
  const float scale = row_scale<kRenorm>(nrm);
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

// Vector path (d % 4 == 0, rows and targets 16-byte aligned, d <= 128 * NV): one warp per
// updated row, each lane holding NV float4 of the row and of its target in registers, so every
// element is read once and written once (no second pass for the norm or the write), with R
// rows per warp and step loaded before any math (2 x 16 x NV x R bytes in flight per lane).
// Grid-stride over rows, one grid wave. Per-element math is rows_kernel's; the sums (norm,
// drift) add per lane then across the warp, as there.
template <bool kDamped, bool kRenorm, int NV, int R>
__global__ void __launch_bounds__(256)
    rows_vec_kernel(float* __restrict__ rows, std::size_t d, const float* __restrict__ targets,
                    std::size_t m, const int64_t* __restrict__ index, DeviceParam p,
                    float* __restrict__ drift, unsigned* flags) {
  const int lane = threadIdx.x & 31;
  const std::size_t nv = d / 4;
  const std::size_t warps = static_cast<std::size_t>(gridDim.x) * (blockDim.x / 32);
  for (std::size_t k0 = (blockIdx.x * static_cast<std::size_t>(blockDim.x / 32) + (threadIdx.x >> 5)) * R;
       k0 < m; k0 += warps * R) {
    float4 xv[R][NV], tv[R][NV];
    float4* xp[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const std::size_t k = k0 + r;
      const bool ok = k < m;
      xp[r] = reinterpret_cast<float4*>(rows + (ok ? (index ? static_cast<std::size_t>(index[k]) : k) : 0) * d);
      const float4* tp = reinterpret_cast<const float4*>(targets + (ok ? k : 0) * d);
#pragma unroll
      for (int v = 0; v < NV; ++v) {
        const std::size_t c = lane + 32 * v;
        if (ok && c < nv) {
          xv[r][v] = xp[r][c];
          tv[r][v] = __ldg(tp + c);
        } else {
          xv[r][v] = make_float4(0.f, 0.f, 0.f, 0.f);
          tv[r][v] = xv[r][v];
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const std::size_t k = k0 + r;
      if (k >= m) break;  // warp-uniform
      const RowStep<kDamped> step(param_at(p, k));
      bool finite = true;
      float sv[NV][4];
      float nrm = 0.f;
#pragma unroll
      for (int v = 0; v < NV; ++v) {
        const float xa[4] = {xv[r][v].x, xv[r][v].y, xv[r][v].z, xv[r][v].w};
        const float ta[4] = {tv[r][v].x, tv[r][v].y, tv[r][v].z, tv[r][v].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          finite = finite && kmath::is_finite(xa[e]) && kmath::is_finite(ta[e]);
          sv[v][e] = step(xa[e], ta[e]);
          if constexpr (kRenorm) nrm += sv[v][e] * sv[v][e];
        }
      }
      if (!row_finite(finite, lane, drift + k, flags)) continue;
      const float scale = row_scale<kRenorm>(nrm);
      float acc = 0.f;
#pragma unroll
      for (int v = 0; v < NV; ++v) {
        const float xa[4] = {xv[r][v].x, xv[r][v].y, xv[r][v].z, xv[r][v].w};
        float o[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float sx = sv[v][e];
          if constexpr (kRenorm) sx = sx * scale;
          acc += kmath::sq_delta(sx, xa[e]);
          o[e] = sx;
        }
        const std::size_t c = lane + 32 * v;
        if (c < nv) xp[r][c] = make_float4(o[0], o[1], o[2], o[3]);
      }
      acc = warp_sum(acc);
      if (lane == 0) drift[k] = acc;
    }
  }
}

template <bool kDamped, bool kRenorm, int NV>
void launch_rows_vec(float* rows, std::size_t d, const float* targets, std::size_t m,
                     const int64_t* index, const DeviceParam& p, float* drift, unsigned* flags,
                     cudaStream_t st) {
  constexpr int R = NV <= 2 ? 2 : 1;
  constexpr auto kernel = rows_vec_kernel<kDamped, kRenorm, NV, R>;
  const unsigned blocks = blocks_for(m, 8 * R, wave_blocks<kernel>(256));
  launch(kernel, blocks, 256, 0, st, rows, d, targets, m, index, p, drift, flags);
}

template <bool kDamped, bool kRenorm>
void launch_rows(float* rows, std::size_t d, const float* targets, std::size_t m,
                 const int64_t* index, const DeviceParam& p, float* drift, unsigned* flags,
                 cudaStream_t st) {
  const bool vec = d % 4 == 0 && d <= 512 && reinterpret_cast<std::uintptr_t>(rows) % 16 == 0 &&
                   reinterpret_cast<std::uintptr_t>(targets) % 16 == 0;
  if (vec) {
    switch ((d + 127) / 128) {
      case 1: return launch_rows_vec<kDamped, kRenorm, 1>(rows, d, targets, m, index, p, drift, flags, st);
      case 2: return launch_rows_vec<kDamped, kRenorm, 2>(rows, d, targets, m, index, p, drift, flags, st);
      case 3: return launch_rows_vec<kDamped, kRenorm, 3>(rows, d, targets, m, index, p, drift, flags, st);
      default: return launch_rows_vec<kDamped, kRenorm, 4>(rows, d, targets, m, index, p, drift, flags, st);
    }
  }
  launch(rows_kernel<kDamped, kRenorm>, blocks_for(m, 8), 256, 0, st, rows, d, targets, m, index, p,
         drift, flags);
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
  detail::HostFlags hf(st);
  unsigned* flags = hf.device();
  if (index || p.f32 || p.f64) {
    Scratch scr(st);
    unsigned* bitmap = nullptr;
    if (index) {
      bitmap = scr.alloc<unsigned>((n + 31) / 32);
      LAMINA_CUDA_CHECK(cudaMemsetAsync(bitmap, 0, (n + 31) / 32 * sizeof(unsigned), st));
    }
    const unsigned blocks = blocks_for(m, 256, 4096);
    launch(validate_kernel, blocks, 256, 0, st, index, m, n, bitmap, p, lo, hi, flags);
    LAMINA_CHECK_INDEX(!hf.read(kIndexRange), "index has entries out of range for ", n,
                       " rows (valid: 0 <= index < n; negative indices are not accepted)");
    LAMINA_CHECK(!hf.read(kIndexDup), "index contains a row more than once; each row may be "
                 "updated at most once per call (combine the targets first, e.g. average them)");
    LAMINA_CHECK(!hf.read(kParam), pname, " has values out of range; expected ", range);
    hf.reset();
  }
  if (renorm)
    launch_rows<kDamped, true>(rows, d, targets, m, index, p, drift, flags, st);
  else
    launch_rows<kDamped, false>(rows, d, targets, m, index, p, drift, flags, st);
  LAMINA_CHECK(!hf.read(kBad), "some updated row(s) contain NaN or Inf (their drift is NaN); those "
               "rows were left unchanged, all other rows were updated. Pass finite values");
}

// ---- softmax gate (eq. 7 + entropy bound) -------------------------------------------------

// Per-row β: finite, |β| <= FLT_MAX, and > 0 with the entropy bound (error word kParam; the
// host finds the first bad row only when the word is set).
__host__ __device__ inline bool beta_ok(double v, bool positive) {
  return isfinite(v) && fabs(v) <= static_cast<double>(FLT_MAX) && (!positive || v > 0.0);
}

__global__ void gate_beta_check(DeviceParam p, std::size_t b, bool positive, unsigned* flags) {
  bool bad = false;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < b;
       i += static_cast<std::size_t>(blockDim.x) * gridDim.x)
    bad = bad || !beta_ok(param_at(p, i), positive);
  if (bad) detail::raise_flag(flags, kParam);
}

// One thread per row: the CPU's tile steps are kmath::softmax_row's, in the same order, and
// the doubling loop is the CPU's, so results are bit-identical (-fmad=false).
__global__ void gate_kernel(const float* __restrict__ relevance, std::size_t b, int L,
                            DeviceParam p, bool entropy, float eps, int max_doublings,
                            float* __restrict__ gamma, double* __restrict__ beta_used,
                            unsigned* flags) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < b;
       i += static_cast<std::size_t>(blockDim.x) * gridDim.x) {
    const double used =
        detail::gate_row(relevance + i * L, L, param_at(p, i), entropy, eps, max_doublings,
                         gamma + i * L);
    if (isnan(used)) {
      beta_used[i] = param_at(p, i);
      detail::raise_flag(flags, kBad);
      continue;
    }
    beta_used[i] = used;
  }
}

// Error paths only: the first offending row, from a host copy of the device array.
template <class T>
std::vector<T> to_host(const T* d, std::size_t n) {
  std::vector<T> h(n);
  LAMINA_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

std::size_t first_bad_beta(const DeviceParam& p, std::size_t b, bool positive) {
  if (p.f32) {
    const std::vector<float> h = to_host(p.f32, b);
    for (std::size_t i = 0; i < b; ++i)
      if (!beta_ok(h[i], positive)) return i;
  } else {
    const std::vector<double> h = to_host(p.f64, b);
    for (std::size_t i = 0; i < b; ++i)
      if (!beta_ok(h[i], positive)) return i;
  }
  return b;
}

std::size_t first_bad_row(const float* relevance, std::size_t b, std::size_t L) {
  const std::vector<float> h = to_host(relevance, b * L);
  for (std::size_t i = 0; i < b * L; ++i)
    if (!std::isfinite(h[i])) return i / L;
  return b;
}

// Blocks of the gate kernels: at most 64 a multiprocessor (they stride over their grid).
unsigned gate_blocks(std::size_t n, unsigned threads) {
  return blocks_for(n, threads, 8u * static_cast<unsigned>(detail::sm_count()) * 8u);
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
  detail::HostFlags hf(st);
  unsigned* flags = hf.device();
  const float fa = static_cast<float>(a), fb = static_cast<float>(b), fc = static_cast<float>(c);
  const double inv_mu = 1.0 / mu;
  switch (vk) {
    case ColKind::F32: heat_by_len<float>(visits, interaction_len, lk, last_access, n, now, fa, fb, fc, inv_mu, heat, flags, st); break;
    case ColKind::I32: heat_by_len<int32_t>(visits, interaction_len, lk, last_access, n, now, fa, fb, fc, inv_mu, heat, flags, st); break;
    case ColKind::I64: heat_by_len<int64_t>(visits, interaction_len, lk, last_access, n, now, fa, fb, fc, inv_mu, heat, flags, st); break;
  }
  LAMINA_CHECK(!hf.read(kBad),
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
  if (!per_row) lamina::check_gate_beta(beta.scalar, false, 0, has_max_entropy);
  if (has_max_entropy) lamina::check_gate_entropy(max_entropy, max_doublings);
  if (b == 0) return;
  // No allocation, memset or copy per call: pinned error words, one launch (two with per-row
  // β) and one synchronisation each; the offending row is looked up only on an error.
  const cudaStream_t st = as_stream(stream);
  detail::HostFlags hf(st);
  if (per_row) {
    launch(gate_beta_check, gate_blocks(b, 256), 256, 0, st, beta, b, has_max_entropy, hf.device());
    if (hf.read(kParam)) {
      const std::size_t i = first_bad_beta(beta, b, has_max_entropy);
      LAMINA_CHECK(false, "beta[", i, "] is not a finite float32 value",
                   has_max_entropy ? " > 0 (max_entropy needs beta > 0: doubling beta sharpens the "
                                     "gate only for beta > 0)" : "");
    }
    hf.reset();
  }
  launch(gate_kernel, gate_blocks(b, 128), 128, 0, st, relevance, b, static_cast<int>(L), beta,
         has_max_entropy, static_cast<float>(max_entropy), max_doublings, gamma, beta_used,
         hf.device());
  if (hf.read(kBad))
    LAMINA_CHECK(false, "relevance[", first_bad_row(relevance, b, L),
                 "] contains NaN or Inf; pass finite relevances (check isfinite)");
}

}  // namespace lamina::cuda
