// cuda/topk_select.cuh — internal: warp-level sorted top-k lists shared by the search kernels.
//
// A WarpList<J> holds the best 32*J (score, id) entries seen by one warp, sorted best first
// with the order of lamina/topk.hpp (higher score first, equal scores -> smaller id first).
// Entry p lives in register j = p / 32 of lane p % 32. Padding is (-inf, kNoId).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lamina::cuda::detail {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr uint32_t kNoId = 0xffffffffu;

__device__ __forceinline__ bool better(float sa, uint32_t ia, float sb, uint32_t ib) {
  return sa > sb || (sa == sb && ia < ib);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;  // bitwise identical in every lane (IEEE addition is commutative)
}

template <int J>
struct WarpList {
  float s[J];
  uint32_t id[J];

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int j = 0; j < J; ++j) {
      s[j] = -INFINITY;
      id[j] = kNoId;
    }
  }
  __device__ __forceinline__ void load(const float* ls, const uint32_t* li, int lane) {
#pragma unroll
    for (int j = 0; j < J; ++j) {
      s[j] = ls[j * 32 + lane];
      id[j] = li[j * 32 + lane];
    }
  }
  __device__ __forceinline__ void store(float* ls, uint32_t* li, int lane) const {
#pragma unroll
    for (int j = 0; j < J; ++j) {
      ls[j * 32 + lane] = s[j];
      li[j * 32 + lane] = id[j];
    }
  }
  /// Entry at (warp-uniform) position p, broadcast to every lane.
  __device__ __forceinline__ void at(int p, float& ts, uint32_t& ti) const {
    const int pj = p >> 5, pl = p & 31;
    float v = s[0];
    uint32_t w = id[0];
#pragma unroll
    for (int j = 1; j < J; ++j)
      if (j == pj) {
        v = s[j];
        w = id[j];
      }
    ts = __shfl_sync(kFullMask, v, pl);
    ti = __shfl_sync(kFullMask, w, pl);
  }
  /// Insert one (warp-uniform) candidate; the last entry drops out.
  __device__ __forceinline__ void insert(float cs, uint32_t cid, int lane) {
    int pos = 0;
#pragma unroll
    for (int j = 0; j < J; ++j) pos += __popc(__ballot_sync(kFullMask, better(s[j], id[j], cs, cid)));
    if (pos >= 32 * J) return;
    float up_s[J], last_s[J];
    uint32_t up_i[J], last_i[J];
#pragma unroll
    for (int j = 0; j < J; ++j) {
      up_s[j] = __shfl_up_sync(kFullMask, s[j], 1);
      up_i[j] = __shfl_up_sync(kFullMask, id[j], 1);
      last_s[j] = __shfl_sync(kFullMask, s[j], 31);
      last_i[j] = __shfl_sync(kFullMask, id[j], 31);
    }
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int p = j * 32 + lane;
      if (p == pos) {
        s[j] = cs;
        id[j] = cid;
      } else if (p > pos) {
        if (lane != 0) {
          s[j] = up_s[j];
          id[j] = up_i[j];
        } else if (j > 0) {  // lane 0 of column j takes the last entry of column j - 1
          s[j] = last_s[j > 0 ? j - 1 : 0];
          id[j] = last_i[j > 0 ? j - 1 : 0];
        }
      }
    }
  }
  /// Offer one candidate per lane (`valid` false: no candidate). `kpos` = k - 1: only
  /// candidates better than the current k-th entry are inserted.
  __device__ __forceinline__ void offer(float cs, uint32_t cid, bool valid, int kpos, int lane) {
    float ts;
    uint32_t ti;
    at(kpos, ts, ti);
    unsigned m = __ballot_sync(kFullMask, valid && better(cs, cid, ts, ti));
    while (m) {
      const int src = __ffs(m) - 1;
      const float vs = __shfl_sync(kFullMask, cs, src);
      const uint32_t vi = __shfl_sync(kFullMask, cid, src);
      insert(vs, vi, lane);
      m &= m - 1;
      if (m) {
        at(kpos, ts, ti);
        m &= __ballot_sync(kFullMask, valid && better(cs, cid, ts, ti));
      }
    }
  }
};

}  // namespace lamina::cuda::detail
