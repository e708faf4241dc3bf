// cuda/topk_parts.cuh — internal: the pieces of the GPU top-k that the code scan (codec.cu)
// shares with the exact scan (topk.cu): the candidate filter, the block shape, and the merge
// passes that reduce per-warp sorted lists to one list per query.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "check.cuh"
#include "topk_select.cuh"

namespace lamina::cuda::detail {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMergeGroup = 32;  // lists merged per warp and pass

struct Filter {
  const uint8_t* live;
  const uint8_t* layers;
  uint64_t lmask[4];
  const uint32_t* row_list;

  __device__ __forceinline__ uint32_t row_of(std::size_t u) const {
    return row_list ? row_list[u] : static_cast<uint32_t>(u);
  }
  __device__ __forceinline__ bool passes(uint32_t r) const {
    if (live && !live[r]) return false;
    if (layers) {
      const uint8_t l = layers[r];
      if (!((lmask[l >> 6] >> (l & 63)) & 1ull)) return false;
    }
    return true;
  }
};

// ---- merge passes ------------------------------------------------------------------------------

// Block (q, o), one warp: merges lists [o * group, (o + 1) * group) of query q. FINAL writes the
// user-facing result (metric sign, padding, handles).
template <int J, bool FINAL>
__global__ void merge_kernel(const float* __restrict__ in_s, const uint32_t* __restrict__ in_i,
                             int n_in, int k, int group, float* __restrict__ out_s,
                             uint32_t* __restrict__ out_i, int n_out, int metric,
                             float* __restrict__ res_s, int64_t* __restrict__ res_i,
                             const uint32_t* __restrict__ gen) {
  const int lane = threadIdx.x;
  const int q = blockIdx.x, o = blockIdx.y;
  const int l0 = o * group, l1 = min(n_in, l0 + group);
  const std::size_t base = (static_cast<std::size_t>(q) * n_in + l0) * k;
  const std::size_t count = static_cast<std::size_t>(max(l1 - l0, 0)) * k;
  WarpList<J> L;
  L.init();
  for (std::size_t t = 0; t < count; t += 32) {
    const std::size_t e = t + lane;
    bool v = e < count;
    const float s = v ? in_s[base + e] : -INFINITY;
    const uint32_t i = v ? in_i[base + e] : kNoId;
    v = v && i != kNoId;
    L.offer(s, i, v, k - 1, lane);
  }
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int p = j * 32 + lane;
    if (p >= k) continue;
    if constexpr (FINAL) {
      const std::size_t r = static_cast<std::size_t>(q) * k + p;
      if (L.id[j] == kNoId) {
        res_s[r] = metric == 2 ? INFINITY : -INFINITY;
        res_i[r] = -1;
      } else {
        res_s[r] = metric == 2 ? -L.s[j] : L.s[j];
        const int64_t row = L.id[j];
        res_i[r] = gen ? ((static_cast<int64_t>(gen[row]) << 32) | row) : row;
      }
    } else {
      const std::size_t r = (static_cast<std::size_t>(q) * n_out + o) * k + p;
      out_s[r] = L.s[j];
      out_i[r] = L.id[j];
    }
  }
}

inline int pick_j(std::size_t k) {
  int j = 1;
  while (static_cast<std::size_t>(32 * j) < k) j *= 2;
  return j;
}

template <int J>
void launch_merges(cudaStream_t st, detail::Scratch& scr, const float* cs, const uint32_t* ci,
                   int n_lists, int nq, int k, int metric, float* out_s, int64_t* out_i,
                   const uint32_t* gen) {
  while (true) {
    if (n_lists <= kMergeGroup) {
      launch(merge_kernel<J, true>, dim3(nq, 1), 32, 0, st, cs, ci, n_lists, k, n_lists, nullptr,
             nullptr, 1, metric, out_s, out_i, gen);
      return;
    }
    const int n_out = (n_lists + kMergeGroup - 1) / kMergeGroup;
    float* ns = scr.alloc<float>(static_cast<std::size_t>(nq) * n_out * k);
    uint32_t* ni = scr.alloc<uint32_t>(static_cast<std::size_t>(nq) * n_out * k);
    launch(merge_kernel<J, false>, dim3(nq, n_out), 32, 0, st, cs, ci, n_lists, k, kMergeGroup, ns,
           ni, n_out, metric, nullptr, nullptr, nullptr);
    cs = ns;
    ci = ni;
    n_lists = n_out;
  }
}

inline void merges(int J, cudaStream_t st, detail::Scratch& scr, const float* cs,
                   const uint32_t* ci, int n_lists, int nq, int k, int metric, float* out_s,
                   int64_t* out_i, const uint32_t* gen) {
  switch (J) {
    case 1: return launch_merges<1>(st, scr, cs, ci, n_lists, nq, k, metric, out_s, out_i, gen);
    case 2: return launch_merges<2>(st, scr, cs, ci, n_lists, nq, k, metric, out_s, out_i, gen);
    case 4: return launch_merges<4>(st, scr, cs, ci, n_lists, nq, k, metric, out_s, out_i, gen);
    case 8: return launch_merges<8>(st, scr, cs, ci, n_lists, nq, k, metric, out_s, out_i, gen);
    case 16: return launch_merges<16>(st, scr, cs, ci, n_lists, nq, k, metric, out_s, out_i, gen);
    default: return launch_merges<32>(st, scr, cs, ci, n_lists, nq, k, metric, out_s, out_i, gen);
  }
}

}  // namespace lamina::cuda::detail
