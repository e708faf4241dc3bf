// CUDA select_hot and evict_to_capacity (see kernels.hpp). Comparisons only, no float
// arithmetic: results equal the CPU's exactly (same threshold rounding, same tie rule).
#include <algorithm>
#include <cmath>
#include <vector>

#include "check.cuh"
#include "cub_util.cuh"
#include "kernels.hpp"
#include "lamina/kernel_math.hpp"

namespace lamina::cuda {

using detail::read_scalar;

namespace {

constexpr unsigned long long kNone = ~0ull;

// First i (atomicMin) with a non-finite value (where live, if given).
__global__ void first_nonfinite(const float* __restrict__ x, const uint8_t* __restrict__ live,
                                std::size_t n, unsigned long long* first) {
  LAMINA_GRID_LOOP(i, n) {
    if (!kmath::is_finite(x[i]) && (!live || live[i])) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

__global__ void hot_flags(const float* __restrict__ heat, std::size_t n, float thr,
                          uint8_t* __restrict__ flags, int64_t* __restrict__ iota) {
  LAMINA_GRID_LOOP(i, n) {
    flags[i] = heat[i] > thr;
    iota[i] = static_cast<int64_t>(i);
  }
}

template <class T>
__global__ void gather_kernel(const T* __restrict__ src, const int64_t* __restrict__ idx,
                              std::size_t m, T* __restrict__ dst) {
  LAMINA_GRID_LOOP(i, m) dst[i] = src[idx[i]];
}

// Live candidates and their eviction keys: (score order key << 32) | ~index, so an ascending
// sort puts lower scores first and, among equal scores, larger indices first
// (kmath::evict_before).
__global__ void evict_keys(const float* __restrict__ scores, const int64_t* __restrict__ rows,
                           std::size_t m, uint64_t* __restrict__ keys) {
  LAMINA_GRID_LOOP(i, m) {
    const int64_t r = rows[i];
    keys[i] = (static_cast<uint64_t>(detail::float_order_key(scores[r])) << 32) |
              static_cast<uint64_t>(~static_cast<uint32_t>(r));
  }
}

__global__ void live_flags(const uint8_t* __restrict__ live, std::size_t n,
                           uint8_t* __restrict__ flags, int64_t* __restrict__ iota) {
  LAMINA_GRID_LOOP(i, n) {
    flags[i] = live ? static_cast<uint8_t>(live[i] != 0) : uint8_t(1);
    iota[i] = static_cast<int64_t>(i);
  }
}

// Capacity of each group (namespace run): the mapping (sorted keys) or the default.
__global__ void group_caps(const uint64_t* __restrict__ keys, std::size_t G,
                           const uint64_t* __restrict__ cap_keys, const int64_t* __restrict__ cap_vals,
                           std::size_t n_caps, int64_t default_cap, int64_t* __restrict__ cap) {
  LAMINA_GRID_LOOP(g, G) {
    const uint64_t k = keys[g];
    std::size_t lo = 0, hi = n_caps;
    while (lo < hi) {
      const std::size_t mid = (lo + hi) / 2;
      if (cap_keys[mid] < k) lo = mid + 1;
      else hi = mid;
    }
    cap[g] = (lo < n_caps && cap_keys[lo] == k) ? cap_vals[lo] : default_cap;
  }
}

// Position p of the grouped order belongs to group g = upper_bound(starts, p) - 1; it is
// evicted when it is among the first c - C of its group.
__global__ void mark_evicted(const int64_t* __restrict__ rows, std::size_t m,
                             const int* __restrict__ starts, const int* __restrict__ counts,
                             const int64_t* __restrict__ cap, std::size_t G,
                             uint8_t* __restrict__ evict) {
  LAMINA_GRID_LOOP(p, m) {
    std::size_t lo = 0, hi = G;
    while (lo < hi) {
      const std::size_t mid = (lo + hi) / 2;
      if (static_cast<std::size_t>(starts[mid]) <= p) lo = mid + 1;
      else hi = mid;
    }
    const std::size_t g = lo - 1;
    const int64_t c = counts[g], C = cap[g];
    const int64_t rank = static_cast<int64_t>(p) - starts[g];
    if (C >= 0 && c > C && rank < c - C) evict[rows[p]] = 1;
  }
}

}  // namespace

std::size_t select_hot(const float* heat, std::size_t n, double threshold,
                       const uint64_t* namespaces, int64_t* out, void* stream) {
  LAMINA_CHECK(!std::isnan(threshold), "threshold must not be NaN");
  float thr = static_cast<float>(threshold);
  if (static_cast<double>(thr) > threshold) thr = std::nextafter(thr, -HUGE_VALF);
  if (n == 0) return 0;
  detail::check_cub_items(n, "select_hot");
  const cudaStream_t st = as_stream(stream);
  Scratch scr(st);
  unsigned long long* bad = scr.alloc<unsigned long long>(1);
  LAMINA_CUDA_CHECK(cudaMemsetAsync(bad, 0xff, sizeof *bad, st));
  launch(first_nonfinite, blocks_for(n, 256, kStrideBlocks), 256, 0, st, heat, nullptr, n, bad);
  uint8_t* flags = scr.alloc<uint8_t>(n);
  int64_t* iota = scr.alloc<int64_t>(n);
  int* d_count = scr.alloc<int>(1);
  launch(hot_flags, blocks_for(n, 256, kStrideBlocks), 256, 0, st, heat, n, thr, flags, iota);
  if (const unsigned long long i = read_scalar(bad, st); i != kNone) {
    float v = 0.0f;
    LAMINA_CUDA_CHECK(cudaMemcpy(&v, heat + i, sizeof v, cudaMemcpyDeviceToHost));
    throw ValueError(::lamina::detail::concat("heat[", i, "] = ", v,
                                    " is not finite; heat scores must be finite"));
  }
  int64_t* sel = namespaces ? scr.alloc<int64_t>(n) : out;
  detail::select_flagged(scr, iota, flags, sel, d_count, n, st);
  const std::size_t k = static_cast<std::size_t>(read_scalar(d_count, st));
  if (namespaces && k > 0) {
    uint64_t* keys = scr.alloc<uint64_t>(k);
    uint64_t* keys_out = scr.alloc<uint64_t>(k);
    launch(gather_kernel<uint64_t>, blocks_for(k, 256, kStrideBlocks), 256, 0, st, namespaces, sel,
           k, keys);
    detail::sort_pairs(scr, keys, keys_out, sel, out, k, st);  // stable: indices stay ascending
  }
  LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
  return k;
}

std::size_t evict_to_capacity(const float* scores, const uint64_t* namespaces, std::size_t n,
                              const uint8_t* live, int64_t default_capacity,
                              const uint64_t* cap_keys, const int64_t* cap_values,
                              std::size_t n_caps, int64_t* out, void* stream) {
  LAMINA_CHECK(default_capacity >= -1,
               "capacity must be >= 0 (or -1 for unbounded), got ", default_capacity);
  for (std::size_t k = 0; k < n_caps; ++k)
    LAMINA_CHECK(cap_values[k] >= 0, "capacity for namespace ", cap_keys[k], " must be >= 0, got ",
                 cap_values[k]);
  std::vector<std::pair<uint64_t, int64_t>> caps(n_caps);
  for (std::size_t k = 0; k < n_caps; ++k) caps[k] = {cap_keys[k], cap_values[k]};
  std::sort(caps.begin(), caps.end());
  for (std::size_t k = 1; k < n_caps; ++k)
    LAMINA_CHECK(caps[k].first != caps[k - 1].first, "capacity mapping lists namespace ",
                 caps[k].first, " twice");
  if (n == 0) return 0;
  LAMINA_CHECK(n < (std::size_t(1) << 32) && n <= static_cast<std::size_t>(INT_MAX),
               "evict_to_capacity on the GPU takes at most 2^31 - 1 rows per call, got ", n);
  const cudaStream_t st = as_stream(stream);
  Scratch scr(st);
  unsigned long long* bad = scr.alloc<unsigned long long>(1);
  LAMINA_CUDA_CHECK(cudaMemsetAsync(bad, 0xff, sizeof *bad, st));
  launch(first_nonfinite, blocks_for(n, 256, kStrideBlocks), 256, 0, st, scores, live, n, bad);
  if (const unsigned long long i = read_scalar(bad, st); i != kNone) {
    float v = 0.0f;
    LAMINA_CUDA_CHECK(cudaMemcpy(&v, scores + i, sizeof v, cudaMemcpyDeviceToHost));
    throw ValueError(::lamina::detail::concat("scores[", i, "] = ", v,
                                    " is not finite; eviction scores must be finite"));
  }
  if (default_capacity < 0 && n_caps == 0) return 0;

  // 1. live rows
  uint8_t* flags = scr.alloc<uint8_t>(n);
  int64_t* iota = scr.alloc<int64_t>(n);
  int* d_count = scr.alloc<int>(1);
  launch(live_flags, blocks_for(n, 256, kStrideBlocks), 256, 0, st, live, n, flags, iota);
  int64_t* rows = scr.alloc<int64_t>(n);
  detail::select_flagged(scr, iota, flags, rows, d_count, n, st);
  const std::size_t m = static_cast<std::size_t>(read_scalar(d_count, st));
  if (m == 0) return 0;
  // 2. eviction order, then a stable sort by namespace: groups in eviction order
  uint64_t* keys = scr.alloc<uint64_t>(m);
  uint64_t* keys2 = scr.alloc<uint64_t>(m);
  int64_t* rows2 = scr.alloc<int64_t>(m);
  launch(evict_keys, blocks_for(m, 256, kStrideBlocks), 256, 0, st, scores, rows, m, keys);
  detail::sort_pairs(scr, keys, keys2, rows, rows2, m, st);
  launch(gather_kernel<uint64_t>, blocks_for(m, 256, kStrideBlocks), 256, 0, st, namespaces, rows2,
         m, keys);
  detail::sort_pairs(scr, keys, keys2, rows2, rows, m, st);
  // 3. namespace runs: keys, counts, starts, capacities
  uint64_t* gkeys = scr.alloc<uint64_t>(m);
  int* gcounts = scr.alloc<int>(m);
  int* gstarts = scr.alloc<int>(m);
  int* d_runs = scr.alloc<int>(1);
  {
    std::size_t bytes = 0;
    LAMINA_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(nullptr, bytes, keys2, gkeys, gcounts,
                                                         d_runs, static_cast<int>(m), st));
    void* tmp = scr.alloc<char>(bytes);
    LAMINA_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(tmp, bytes, keys2, gkeys, gcounts,
                                                         d_runs, static_cast<int>(m), st));
  }
  const std::size_t G = static_cast<std::size_t>(read_scalar(d_runs, st));
  detail::exclusive_sum(scr, gcounts, gstarts, G, st);
  uint64_t* d_cap_keys = scr.alloc<uint64_t>(n_caps);
  int64_t* d_cap_vals = scr.alloc<int64_t>(n_caps);
  if (n_caps) {
    std::vector<uint64_t> hk(n_caps);
    std::vector<int64_t> hv(n_caps);
    for (std::size_t k = 0; k < n_caps; ++k) {
      hk[k] = caps[k].first;
      hv[k] = caps[k].second;
    }
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(d_cap_keys, hk.data(), n_caps * sizeof(uint64_t),
                                      cudaMemcpyHostToDevice, st));
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(d_cap_vals, hv.data(), n_caps * sizeof(int64_t),
                                      cudaMemcpyHostToDevice, st));
  }
  int64_t* gcap = scr.alloc<int64_t>(G);
  launch(group_caps, blocks_for(G, 256, kStrideBlocks), 256, 0, st, gkeys, G, d_cap_keys,
         d_cap_vals, n_caps, default_capacity, gcap);
  // 4. mark, then compact ascending
  LAMINA_CUDA_CHECK(cudaMemsetAsync(flags, 0, n, st));
  launch(mark_evicted, blocks_for(m, 256, kStrideBlocks), 256, 0, st, rows, m, gstarts, gcounts,
         gcap, G, flags);
  detail::select_flagged(scr, iota, flags, out, d_count, n, st);
  const std::size_t k = static_cast<std::size_t>(read_scalar(d_count, st));
  if (n_caps) LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));  // host staging buffers
  return k;
}

}  // namespace lamina::cuda
