// Exact top-k on the GPU: fused scoring + warp-list selection, then merge passes.
// See topk.hpp for the contract and the structure.
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <cfloat>
#include <mutex>
#include <utility>
#include <vector>

#include "check.cuh"
#include "topk.hpp"
#include "topk_enqueue.cuh"
#include "topk_parts.cuh"
#include "topk_select.cuh"

namespace lamina::cuda {

using detail::better;
using detail::kFullMask;
using detail::kNoId;
using detail::WarpList;
using detail::warp_sum;

namespace {

using detail::Filter;
using detail::kThreads;
using detail::kWarps;
using detail::merges;
using detail::pick_j;

// Word indices of the call's HostFlags (check.cuh).
enum : int {
  kFlagNonFinite = detail::kTopkNonFinite,
  kFlagZeroQuery = detail::kTopkZeroQuery,
  kFlagBadQuery = detail::kTopkBadQuery
};

// Internal scores are "higher is better" (l2 distances negated), as in cpp/topk.cpp.
__device__ __forceinline__ float finish_score(float dot, int metric, float qsq, float qinv,
                                              float rsq) {
  if (metric == 1) {
    const float rinv = rsq > 0.f ? 1.0f / sqrtf(rsq) : 0.f;
    return dot * qinv * rinv;
  }
  if (metric == 2) return -fmaxf(__fsub_rn(__fadd_rn(qsq, rsq), __fmul_rn(2.0f, dot)), 0.0f);
  return dot;
}

// ---- per-query preparation ------------------------------------------------------------------

// One warp per query: |q|^2, 1/|q| and finiteness; optionally the scaled hi/lo float16 split for
// the tensor-core path (Qh/Ql: nq_pad x dpad, pre-zeroed).
__global__ void query_prep_kernel(const float* __restrict__ Q, int nq, int d, int metric,
                                  float* __restrict__ qsq, float* __restrict__ qinv,
                                  __half* __restrict__ Qh, __half* __restrict__ Ql,
                                  float* __restrict__ qscale, int dpad, unsigned* flags) {
  const int lane = threadIdx.x & 31;
  const int q = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (q >= nq) return;
  const float* qp = Q + static_cast<std::size_t>(q) * d;
  float ss = 0.f, mx = 0.f;
  bool finite = true;
  for (int j = lane; j < d; j += 32) {
    const float v = qp[j];
    finite = finite && (fabsf(v) <= FLT_MAX);
    ss = fmaf(v, v, ss);
    mx = fmaxf(mx, fabsf(v));
  }
  ss = warp_sum(ss);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, o));
  finite = __all_sync(kFullMask, finite);
  if (lane == 0) {
    if (!finite) detail::raise_flag(flags, kFlagBadQuery);
    if (qsq) qsq[q] = ss;
    if (qinv) {
      if (metric == 1 && !(ss > 0.f)) detail::raise_flag(flags, kFlagZeroQuery);
      qinv[q] = ss > 0.f ? 1.0f / sqrtf(ss) : 0.f;
    }
  }
  if (Qh) {
    int e = 0;
    if (mx > 0.f && finite) frexpf(mx, &e);  // mx = m * 2^e, m in [0.5, 1)
    if (lane == 0) qscale[q] = ldexpf(1.0f, e);
    __half* hp = Qh + static_cast<std::size_t>(q) * dpad;
    __half* lp = Ql + static_cast<std::size_t>(q) * dpad;
    for (int j = lane; j < d; j += 32) {
      const float v = ldexpf(qp[j], -e);  // exact (power of two)
      const __half h = __float2half_rn(v);
      hp[j] = h;
      lp[j] = __float2half_rn(v - __half2float(h));
    }
  }
}

template <typename T>
__global__ void row_sqnorm_kernel(const T* __restrict__ X, std::size_t n, std::size_t stride,
                                  int d, float* __restrict__ out) {
  const int lane = threadIdx.x & 31;
  const std::size_t r = static_cast<std::size_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (r >= n) return;
  const T* p = X + r * stride;
  float ss = 0.f;
  for (int j = lane; j < d; j += 32) {
    const float v = static_cast<float>(p[j]);
    ss = fmaf(v, v, ss);
  }
  ss = warp_sum(ss);
  if (lane == 0) out[r] = ss;
}

// ---- bandwidth path: warps stream whole rows --------------------------------------------------

template <typename T, bool VEC>
struct Chunk;
template <>
struct Chunk<float, true> {
  static constexpr int E = 4;
  __device__ __forceinline__ static void load(const float* p, int c, float* v) {
    const float4 x = __ldg(reinterpret_cast<const float4*>(p) + c);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  }
};
template <>
struct Chunk<__half, true> {
  static constexpr int E = 8;
  __device__ __forceinline__ static void load(const __half* p, int c, float* v) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p) + c);
    const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  }
};
template <typename T>
struct Chunk<T, false> {
  static constexpr int E = 1;
  __device__ __forceinline__ static void load(const T* p, int c, float* v) {
    v[0] = static_cast<float>(p[c]);
  }
};

template <bool VEC, int E>
__device__ __forceinline__ void load_query(const float* q, int c, float* v) {
  if constexpr (VEC) {
#pragma unroll
    for (int i = 0; i < E / 4; ++i) {
      const float4 x = __ldg(reinterpret_cast<const float4*>(q) + c * (E / 4) + i);
      v[4 * i] = x.x, v[4 * i + 1] = x.y, v[4 * i + 2] = x.z, v[4 * i + 3] = x.w;
    }
  } else {
    v[0] = __ldg(q + c);
  }
}

struct ScanArgs {
  const float* Q;
  int nq;
  int d;
  const float* qsq;
  const float* qinv;
  const void* X;
  std::size_t xstride;
  const float* xsq;
  int metric;
  Filter f;
  std::size_t n_units;
  const int64_t* seg;
  std::size_t units_per_block;
  int k;
  int n_lists;
  float* cand_s;
  uint32_t* cand_i;
  unsigned* flags;
};

// Block (x, y): query group x (QB queries; with segments QB == 1 and the group is one query),
// units [y * upb, (y + 1) * upb) of that group's range. Each warp keeps one list per query and
// writes it out as list (y * kWarps + warp).
// Batch 1 with short lists is bandwidth-bound: the register cap of 4 resident blocks per SM
// (<= 64 registers) doubles the warps, and so the row bytes, in flight per SM.
constexpr int scan_min_blocks(int QB, int J) { return QB == 1 && J <= 2 ? 3 : 1; }

template <typename T, int QB, int J, bool VEC>
__global__ void __launch_bounds__(kThreads, scan_min_blocks(QB, J)) scan_kernel(const ScanArgs a) {
  using C = Chunk<T, VEC>;
  constexpr int E = C::E;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int q0 = blockIdx.x * QB;
  const int nqb = min(QB, a.nq - q0);
  std::size_t lo = 0, hi = a.n_units;
  if (a.seg) {
    lo = static_cast<std::size_t>(a.seg[2 * q0]);
    hi = static_cast<std::size_t>(a.seg[2 * q0 + 1]);
  }
  const std::size_t b0 = lo + static_cast<std::size_t>(blockIdx.y) * a.units_per_block;
  const std::size_t b1 = min(hi, b0 + a.units_per_block);
  const int kpos = a.k - 1;
  const bool need_xsq = a.metric != 0 && a.xsq == nullptr;
  const int nch = a.d / E;
  const T* X = static_cast<const T*>(a.X);

  WarpList<J> L[QB];
#pragma unroll
  for (int q = 0; q < QB; ++q) L[q].init();

  for (std::size_t base = b0 + static_cast<std::size_t>(warp) * 32; base < b1;
       base += kWarps * 32) {
    float mys[QB];
#pragma unroll
    for (int q = 0; q < QB; ++q) mys[q] = 0.f;
    float myx = 0.f;
#pragma unroll 1
    for (int i0 = 0; i0 < 32; i0 += 4) {
      if (base + i0 >= b1) break;
      const T* rp[4];
      bool ok[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const std::size_t u = base + i0 + r;
        ok[r] = u < b1;
        rp[r] = X + static_cast<std::size_t>(ok[r] ? a.f.row_of(u) : 0) * a.xstride;
      }
      float acc[4][QB];
      float xs[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        xs[r] = 0.f;
#pragma unroll
        for (int q = 0; q < QB; ++q) acc[r][q] = 0.f;
      }
      for (int c = lane; c < nch; c += 32) {
        float xv[4][E];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          if (ok[r]) {
            C::load(rp[r], c, xv[r]);
          } else {
#pragma unroll
            for (int e = 0; e < E; ++e) xv[r][e] = 0.f;
          }
        }
#pragma unroll
        for (int q = 0; q < QB; ++q) {
          if (q < nqb) {
            float qv[E];
            load_query<VEC, E>(a.Q + static_cast<std::size_t>(q0 + q) * a.d, c, qv);
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
              for (int e = 0; e < E; ++e) acc[r][q] = fmaf(xv[r][e], qv[e], acc[r][q]);
          }
        }
        if (need_xsq) {
#pragma unroll
          for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int e = 0; e < E; ++e) xs[r] = fmaf(xv[r][e], xv[r][e], xs[r]);
        }
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
#pragma unroll
        for (int q = 0; q < QB; ++q) {
          const float t = warp_sum(acc[r][q]);
          if (lane == i0 + r) mys[q] = t;
        }
        if (need_xsq) {
          const float t = warp_sum(xs[r]);
          if (lane == i0 + r) myx = t;
        }
      }
    }
    const std::size_t u = base + lane;
    bool valid = u < b1;
    uint32_t row = 0;
    if (valid) {
      row = a.f.row_of(u);
      valid = a.f.passes(row);
    }
    float rsq = 0.f;
    if (valid && a.metric != 0) rsq = a.xsq ? a.xsq[row] : myx;
#pragma unroll
    for (int q = 0; q < QB; ++q) {
      if (q < nqb) {
        const float s = finish_score(mys[q], a.metric, a.qsq ? a.qsq[q0 + q] : 0.f,
                                     a.qinv ? a.qinv[q0 + q] : 0.f, rsq);
        bool ok = valid;
        if (ok && !(fabsf(s) <= FLT_MAX)) {
          detail::raise_flag(a.flags, kFlagNonFinite);
          ok = false;
        }
        L[q].offer(s, row, ok, kpos, lane);
      }
    }
  }
  const int list = blockIdx.y * kWarps + warp;
#pragma unroll
  for (int q = 0; q < QB; ++q) {
    if (q < nqb) {
      const std::size_t o = (static_cast<std::size_t>(q0 + q) * a.n_lists + list) * a.k;
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int p = j * 32 + lane;
        if (p < a.k) {
          a.cand_s[o + p] = L[q].s[j];
          a.cand_i[o + p] = L[q].id[j];
        }
      }
    }
  }
}

// ---- compute path: tensor-core tiles (float16 rows, batch >= 16) -----------------------------

namespace wm = nvcuda::wmma;
constexpr int kTQ = 64;   // queries per block
constexpr int kTN = 128;  // rows per tile (8 warps x 16)
constexpr int kTK = 32;   // dims per stage
constexpr int kXLd = kTK + 8;
constexpr int kQLd = kTK + 8;
constexpr int kSLd = kTN + 4;

struct WmmaArgs {
  const __half* Qh;
  const __half* Ql;
  const float* qscale;
  int nq;
  int dpad;
  const float* qsq;
  const float* qinv;
  const __half* X;
  std::size_t xstride;
  int d;
  const float* xsq;
  int metric;
  Filter f;
  std::size_t n_units;
  std::size_t tiles_per_block;
  int k;
  int n_lists;
  float* cand_s;
  uint32_t* cand_i;
  unsigned* flags;
};

constexpr std::size_t wmma_smem_bytes(int J) {
  return sizeof(__half) * (kTN * kXLd + 2 * kTQ * kQLd) + sizeof(float) * kTQ * kSLd +
         (sizeof(float) + sizeof(uint32_t)) * kTQ * 32 * J;
}

template <int J, bool VEC>
__global__ void __launch_bounds__(kThreads) wmma_kernel(const WmmaArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  __half* Xs = reinterpret_cast<__half*>(smem);
  __half* Qhs = Xs + kTN * kXLd;
  __half* Qls = Qhs + kTQ * kQLd;
  float* St = reinterpret_cast<float*>(Qls + kTQ * kQLd);
  float* Ls = St + kTQ * kSLd;
  uint32_t* Li = reinterpret_cast<uint32_t*>(Ls + kTQ * 32 * J);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int qb = blockIdx.y * kTQ;
  for (int e = tid; e < kTQ * 32 * J; e += kThreads) {
    Ls[e] = -INFINITY;
    Li[e] = kNoId;
  }
  const std::size_t n_tiles = (a.n_units + kTN - 1) / kTN;
  const std::size_t t0 = static_cast<std::size_t>(blockIdx.x) * a.tiles_per_block;
  const std::size_t t1 = min(n_tiles, t0 + a.tiles_per_block);
  const int kpos = a.k - 1;

  for (std::size_t t = t0; t < t1; ++t) {
    const std::size_t u0 = t * kTN;
    wm::fragment<wm::accumulator, 16, 16, 16, float> acc[kTQ / 16];
#pragma unroll
    for (int f = 0; f < kTQ / 16; ++f) wm::fill_fragment(acc[f], 0.0f);
    for (int k0 = 0; k0 < a.dpad; k0 += kTK) {
      __syncthreads();
      for (int c = tid; c < kTN * kTK / 8; c += kThreads) {
        const int r = c / (kTK / 8), cc = c % (kTK / 8);
        const std::size_t u = u0 + r;
        const int col = k0 + cc * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (u < a.n_units) {
          const __half* p = a.X + static_cast<std::size_t>(a.f.row_of(u)) * a.xstride + col;
          if constexpr (VEC) {
            if (col < a.d) v = __ldg(reinterpret_cast<const uint4*>(p));
          } else {
            __half tmp[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) tmp[e] = col + e < a.d ? p[e] : __float2half_rn(0.f);
            v = *reinterpret_cast<const uint4*>(tmp);
          }
        }
        *reinterpret_cast<uint4*>(Xs + r * kXLd + cc * 8) = v;
      }
      for (int c = tid; c < kTQ * kTK / 8; c += kThreads) {
        const int q = c / (kTK / 8), cc = c % (kTK / 8);
        const std::size_t off = static_cast<std::size_t>(qb + q) * a.dpad + k0 + cc * 8;
        *reinterpret_cast<uint4*>(Qhs + q * kQLd + cc * 8) =
            __ldg(reinterpret_cast<const uint4*>(a.Qh + off));
        *reinterpret_cast<uint4*>(Qls + q * kQLd + cc * 8) =
            __ldg(reinterpret_cast<const uint4*>(a.Ql + off));
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kTK; kk += 16) {
        wm::fragment<wm::matrix_a, 16, 16, 16, __half, wm::row_major> fa;
        wm::load_matrix_sync(fa, Xs + warp * 16 * kXLd + kk, kXLd);
#pragma unroll
        for (int f = 0; f < kTQ / 16; ++f) {
          wm::fragment<wm::matrix_b, 16, 16, 16, __half, wm::col_major> fb;
          wm::load_matrix_sync(fb, Qhs + f * 16 * kQLd + kk, kQLd);
          wm::mma_sync(acc[f], fa, fb, acc[f]);
          wm::load_matrix_sync(fb, Qls + f * 16 * kQLd + kk, kQLd);
          wm::mma_sync(acc[f], fa, fb, acc[f]);
        }
      }
    }
    // St[q][r] = score of query qb + q against unit u0 + r.
#pragma unroll
    for (int f = 0; f < kTQ / 16; ++f)
      wm::store_matrix_sync(St + f * 16 * kSLd + warp * 16, acc[f], kSLd, wm::mem_col_major);
    __syncthreads();

    uint32_t rows[kTN / 32];
    bool live[kTN / 32];
    float rsq[kTN / 32];
#pragma unroll
    for (int i = 0; i < kTN / 32; ++i) {
      const std::size_t u = u0 + lane + 32 * i;
      live[i] = u < a.n_units;
      rows[i] = live[i] ? a.f.row_of(u) : 0;
      live[i] = live[i] && a.f.passes(rows[i]);
      rsq[i] = live[i] && a.metric != 0 ? a.xsq[rows[i]] : 0.f;
    }
    for (int ql = warp; ql < kTQ; ql += kWarps) {
      const int q = qb + ql;
      if (q >= a.nq) break;
      float* ls = Ls + ql * 32 * J;
      uint32_t* li = Li + ql * 32 * J;
      const float ts = ls[kpos];
      const uint32_t ti = li[kpos];
      const float scale = a.qscale[q];
      const float qs = a.qsq ? a.qsq[q] : 0.f, qi = a.qinv ? a.qinv[q] : 0.f;
      float cs[kTN / 32];
      bool cv[kTN / 32];
      bool any = false;
#pragma unroll
      for (int i = 0; i < kTN / 32; ++i) {
        cs[i] = finish_score(St[ql * kSLd + lane + 32 * i] * scale, a.metric, qs, qi, rsq[i]);
        cv[i] = live[i];
        if (cv[i] && !(fabsf(cs[i]) <= FLT_MAX)) {
          detail::raise_flag(a.flags, kFlagNonFinite);
          cv[i] = false;
        }
        any = any || (cv[i] && better(cs[i], rows[i], ts, ti));
      }
      if (__any_sync(kFullMask, any)) {
        WarpList<J> L;
        L.load(ls, li, lane);
#pragma unroll
        for (int i = 0; i < kTN / 32; ++i) L.offer(cs[i], rows[i], cv[i], kpos, lane);
        L.store(ls, li, lane);
      }
    }
  }
  __syncthreads();
  for (int e = tid; e < kTQ * a.k; e += kThreads) {
    const int ql = e / a.k, p = e % a.k;
    const int q = qb + ql;
    if (q >= a.nq) continue;
    const std::size_t o = (static_cast<std::size_t>(q) * a.n_lists + blockIdx.x) * a.k + p;
    a.cand_s[o] = Ls[ql * 32 * J + p];
    a.cand_i[o] = Li[ql * 32 * J + p];
  }
}

using ScanKernel = void (*)(const ScanArgs);

template <typename T, bool VEC>
ScanKernel scan_kernel_for(int QB, int J) {
  if (QB == 1) {
    switch (J) {
      case 1: return scan_kernel<T, 1, 1, VEC>;
      case 2: return scan_kernel<T, 1, 2, VEC>;
      case 4: return scan_kernel<T, 1, 4, VEC>;
      case 8: return scan_kernel<T, 1, 8, VEC>;
      case 16: return scan_kernel<T, 1, 16, VEC>;
      default: return scan_kernel<T, 1, 32, VEC>;
    }
  }
  switch (J) {  // QB == max_group(J)
    case 1: return scan_kernel<T, 8, 1, VEC>;
    case 2: return scan_kernel<T, 8, 2, VEC>;
    case 4: return scan_kernel<T, 4, 4, VEC>;
    default: return scan_kernel<T, 2, 8, VEC>;
  }
}

ScanKernel pick_scan_kernel(bool f16, bool vec, int QB, int J) {
  if (f16) return vec ? scan_kernel_for<__half, true>(QB, J) : scan_kernel_for<__half, false>(QB, J);
  return vec ? scan_kernel_for<float, true>(QB, J) : scan_kernel_for<float, false>(QB, J);
}

// Resident blocks per SM of a scan kernel (cached per kernel; devices assumed alike).
int scan_blocks_per_sm(ScanKernel kern) {
  static std::mutex mu;
  static std::vector<std::pair<ScanKernel, int>> cache;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& e : cache)
    if (e.first == kern) return e.second;
  int b = 0;
  LAMINA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kern, kThreads, 0));
  b = std::max(1, b);
  cache.emplace_back(kern, b);
  return b;
}

// Queries served per row read for a list size J (keeps lists in registers: QB * J <= 16).
int max_group(int J) { return J <= 2 ? 8 : J == 4 ? 4 : J == 8 ? 2 : 1; }

template <int J, bool VEC>
void launch_wmma(dim3 grid, cudaStream_t st, const WmmaArgs& a) {
  const std::size_t bytes = wmma_smem_bytes(J);
  LAMINA_CUDA_CHECK(cudaFuncSetAttribute(wmma_kernel<J, VEC>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes)));
  launch(wmma_kernel<J, VEC>, grid, kThreads, bytes, st, a);
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

void check_args(std::size_t nq, const DeviceRows& rows, std::size_t n_rows, std::size_t k) {
  LAMINA_CHECK(k >= 1 && k <= kMaxK, "k must be in [1, ", kMaxK, "] on the GPU, got ", k);
  LAMINA_CHECK(rows.dim >= 1, "dimension must be >= 1");
  LAMINA_CHECK(n_rows <= 0xfffffffeull, "at most 2^32 - 2 rows per search");
  LAMINA_CHECK(nq <= 0x7fffffffull, "too many queries in one call");
}

}  // namespace

void detail::topk_enqueue(const float* queries, std::size_t nq, const DeviceRows& rows,
                          std::size_t n_rows, const DeviceFilter& filter, std::size_t k,
                          Metric metric, const uint32_t* generations, float* out_scores,
                          int64_t* out_ids, detail::Scratch& scr, unsigned* flags,
                          cudaStream_t st) {
  check_args(nq, rows, n_rows, k);
  if (nq == 0) return;
  const int d = static_cast<int>(rows.dim);
  const int im = static_cast<int>(metric);
  const std::size_t n_units = filter.use_row_list ? filter.row_list_len : n_rows;
  const bool segmented = filter.segments != nullptr;
  const int J = pick_j(k);
  const int sms = detail::sm_count();
  float* qsq = nullptr;
  float* qinv = nullptr;
  if (metric != Metric::IP) {
    qsq = scr.alloc<float>(nq);
    qinv = scr.alloc<float>(nq);
  }

  Filter f{filter.live, filter.layers, {}, filter.use_row_list ? filter.row_list : nullptr};
  std::copy(filter.layer_mask, filter.layer_mask + 4, f.lmask);

  const bool use_wmma = rows.f16 && nq >= 16 && J <= 4 && !segmented;
  const int kq = static_cast<int>(k);
  float* cand_s = nullptr;
  uint32_t* cand_i = nullptr;
  int n_lists = 0;

  if (use_wmma) {
    const int dpad = (d + kTK - 1) / kTK * kTK;
    const std::size_t nq_pad = (nq + kTQ - 1) / kTQ * kTQ;
    __half* Qh = scr.alloc<__half>(nq_pad * dpad);
    __half* Ql = scr.alloc<__half>(nq_pad * dpad);
    float* qscale = scr.alloc<float>(nq);
    LAMINA_CUDA_CHECK(cudaMemsetAsync(Qh, 0, nq_pad * dpad * sizeof(__half), st));
    LAMINA_CUDA_CHECK(cudaMemsetAsync(Ql, 0, nq_pad * dpad * sizeof(__half), st));
    launch(query_prep_kernel, blocks_for(nq, 8), 256, 0, st, queries, static_cast<int>(nq), d, im,
           qsq, qinv, Qh, Ql, qscale, dpad, flags);
    const float* xsq = rows.sqnorms;
    if (metric != Metric::IP && !xsq && n_rows) {
      float* t = scr.alloc<float>(n_rows);
      launch(row_sqnorm_kernel<__half>, blocks_for(n_rows, 8), 256, 0, st,
             static_cast<const __half*>(rows.base), n_rows, rows.stride, d, t);
      xsq = t;
    }
    const std::size_t n_tiles = std::max<std::size_t>(1, (n_units + kTN - 1) / kTN);
    const std::size_t qtiles = nq_pad / kTQ;
    std::size_t bx = std::max<std::size_t>(1, (2 * static_cast<std::size_t>(sms) + qtiles - 1) / qtiles);
    bx = std::min(bx, n_tiles);
    const std::size_t tpb = (n_tiles + bx - 1) / bx;
    bx = (n_tiles + tpb - 1) / tpb;
    n_lists = static_cast<int>(bx);
    cand_s = scr.alloc<float>(nq * n_lists * k);
    cand_i = scr.alloc<uint32_t>(nq * n_lists * k);
    WmmaArgs a{Qh, Ql, qscale, static_cast<int>(nq), dpad, qsq, qinv,
               static_cast<const __half*>(rows.base), rows.stride, d, xsq, im, f, n_units,
               tpb, kq, n_lists, cand_s, cand_i, flags};
    const bool vec = aligned16(rows.base) && rows.stride % 8 == 0 && d % 8 == 0;
    const dim3 grid(static_cast<unsigned>(bx), static_cast<unsigned>(qtiles));
    if (vec) {
      if (J == 1) launch_wmma<1, true>(grid, st, a);
      else if (J == 2) launch_wmma<2, true>(grid, st, a);
      else launch_wmma<4, true>(grid, st, a);
    } else {
      if (J == 1) launch_wmma<1, false>(grid, st, a);
      else if (J == 2) launch_wmma<2, false>(grid, st, a);
      else launch_wmma<4, false>(grid, st, a);
    }
  } else {
    launch(query_prep_kernel, blocks_for(nq, 8), 256, 0, st, queries, static_cast<int>(nq), d, im,
           qsq, qinv, nullptr, nullptr, nullptr, 0, flags);
    const int QB = (segmented || nq == 1) ? 1 : max_group(J);
    const std::size_t elt = rows.f16 ? 2 : 4;
    const bool vec = aligned16(rows.base) && aligned16(queries) &&
                     (rows.stride * elt) % 16 == 0 && (d * elt) % 16 == 0 && d % 4 == 0;
    const ScanKernel kern = pick_scan_kernel(rows.f16, vec, QB, J);
    const std::size_t gy = segmented ? nq : (nq + QB - 1) / QB;
    std::size_t upb, gx;
    const std::size_t step = kWarps * 32;
    if (segmented) {
      static_assert(detail::kSegmentRowsPerBlock == 8 * kWarps * 32, "segment block size");
      upb = detail::kSegmentRowsPerBlock;
      gx = std::max<std::size_t>(1, (filter.max_segment + upb - 1) / upb);
    } else {
      // One full wave of resident blocks over all query groups (batch 1: every SM holds as
      // many scanning warps as registers allow, to keep the most bytes in flight).
      const std::size_t wave = static_cast<std::size_t>(sms) * scan_blocks_per_sm(kern);
      gx = std::max<std::size_t>(1, (wave + gy - 1) / gy);
      gx = std::min(gx, std::max<std::size_t>(1, (n_units + step - 1) / step));
      upb = ((n_units + gx - 1) / gx + step - 1) / step * step;
      upb = std::max(upb, step);
      gx = std::max<std::size_t>(1, (n_units + upb - 1) / upb);
    }
    n_lists = static_cast<int>(gx * kWarps);
    cand_s = scr.alloc<float>(nq * n_lists * k);
    cand_i = scr.alloc<uint32_t>(nq * n_lists * k);
    ScanArgs a{queries, static_cast<int>(nq), d, qsq, qinv, rows.base, rows.stride,
               rows.sqnorms, im, f, n_units, filter.segments, upb, kq, n_lists, cand_s, cand_i,
               flags};
    LAMINA_CHECK(gx <= 65535, "a namespace is too large for one GPU launch");
    const dim3 grid(static_cast<unsigned>(gy), static_cast<unsigned>(gx));
    launch(kern, grid, kThreads, 0, st, a);
  }
  merges(J, st, scr, cand_s, cand_i, n_lists, static_cast<int>(nq), kq, im, out_scores, out_ids,
         generations);
}

void detail::topk_raise(unsigned bad_query, unsigned zero_query, unsigned non_finite) {
  LAMINA_CHECK(!bad_query, "queries contain NaN or Inf; pass finite queries");
  LAMINA_CHECK(!zero_query, "a query has zero norm; cosine similarity is undefined");
  LAMINA_CHECK(!non_finite,
               "a similarity score is NaN or Inf: the vectors or queries contain NaN/Inf, or "
               "their values overflow float32; pass finite vectors of moderate magnitude");
}

void topk_search(const float* queries, std::size_t nq, const DeviceRows& rows,
                 std::size_t n_rows, const DeviceFilter& filter, std::size_t k, Metric metric,
                 const uint32_t* generations, float* out_scores, int64_t* out_ids,
                 void* stream) {
  check_args(nq, rows, n_rows, k);
  if (nq == 0) return;
  const cudaStream_t st = detail::as_stream(stream);
  detail::Scratch scr(st);
  detail::HostFlags hf(st);
  detail::topk_enqueue(queries, nq, rows, n_rows, filter, k, metric, generations, out_scores,
                       out_ids, scr, hf.device(), st);
  detail::topk_raise(hf.read(kFlagBadQuery), hf.read(kFlagZeroQuery), hf.read(kFlagNonFinite));
}

}  // namespace lamina::cuda
