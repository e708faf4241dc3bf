// cuda/cub_util.cuh — internal to cuda/*.cu: thin checked wrappers over CUB device algorithms
// (temporary storage from a Scratch, so stream-ordered and freed with it) and small kernels
// shared by the selection code.
#pragma once

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cub/device/device_select.cuh>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "check.cuh"

namespace lamina::cuda::detail {

#define LAMINA_GRID_LOOP(i, n)                                                              \
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;     \
       i < (n); i += static_cast<std::size_t>(blockDim.x) * gridDim.x)

template <class T>
__global__ void iota_kernel_t(T* v, std::size_t n) {
  LAMINA_GRID_LOOP(i, n) v[i] = static_cast<T>(i);
}

/// Order-preserving map of a finite float to uint32 (larger float -> larger key); -0.0 and
/// +0.0 map to the same key.
__device__ __forceinline__ uint32_t float_order_key(float f) {
  uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

inline void check_cub_items(std::size_t n, const char* what) {
  LAMINA_CHECK(n <= static_cast<std::size_t>(INT_MAX), what, ": ", n,
               " items exceed the 2^31 - 1 limit of one device sort/select; split the call");
}

/// Stable ascending radix sort of (keys, values) pairs on [begin_bit, end_bit).
template <class K, class V>
void sort_pairs(Scratch& scr, const K* keys_in, K* keys_out, const V* vals_in, V* vals_out,
                std::size_t n, cudaStream_t st, int begin_bit = 0, int end_bit = sizeof(K) * 8) {
  if (n == 0) return;
  check_cub_items(n, "sort");
  std::size_t bytes = 0;
  LAMINA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys_in, keys_out, vals_in,
                                                    vals_out, static_cast<int>(n), begin_bit,
                                                    end_bit, st));
  void* tmp = scr.alloc<char>(bytes);
  LAMINA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(tmp, bytes, keys_in, keys_out, vals_in,
                                                    vals_out, static_cast<int>(n), begin_bit,
                                                    end_bit, st));
}

/// Descending sort of the keys of each segment [offsets[s], offsets[s + 1]).
template <class K>
void segmented_sort_keys_desc(Scratch& scr, const K* keys_in, K* keys_out, std::size_t n,
                              std::size_t n_segments, const int* offsets, cudaStream_t st) {
  if (n == 0 || n_segments == 0) return;
  check_cub_items(n, "segmented sort");
  std::size_t bytes = 0;
  LAMINA_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortKeysDescending(
      nullptr, bytes, keys_in, keys_out, static_cast<int>(n), static_cast<int>(n_segments),
      offsets, offsets + 1, 0, static_cast<int>(sizeof(K) * 8), st));
  void* tmp = scr.alloc<char>(bytes);
  LAMINA_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortKeysDescending(
      tmp, bytes, keys_in, keys_out, static_cast<int>(n), static_cast<int>(n_segments), offsets,
      offsets + 1, 0, static_cast<int>(sizeof(K) * 8), st));
}

/// out <- the in[i] with flags[i] != 0, in order; *d_count (device) <- how many.
template <class T, class F>
void select_flagged(Scratch& scr, const T* in, const F* flags, T* out, int* d_count,
                    std::size_t n, cudaStream_t st) {
  check_cub_items(n, "select");
  std::size_t bytes = 0;
  LAMINA_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, bytes, in, flags, out, d_count,
                                               static_cast<int>(n), st));
  void* tmp = scr.alloc<char>(bytes);
  LAMINA_CUDA_CHECK(cub::DeviceSelect::Flagged(tmp, bytes, in, flags, out, d_count,
                                               static_cast<int>(n), st));
}

/// Exclusive prefix sum.
template <class T>
void exclusive_sum(Scratch& scr, const T* in, T* out, std::size_t n, cudaStream_t st) {
  if (n == 0) return;
  check_cub_items(n, "scan");
  std::size_t bytes = 0;
  LAMINA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, static_cast<int>(n), st));
  void* tmp = scr.alloc<char>(bytes);
  LAMINA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(tmp, bytes, in, out, static_cast<int>(n), st));
}

template <class T>
T read_scalar(const T* d, cudaStream_t st) {
  T h{};
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, st));
  LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
  return h;
}

}  // namespace lamina::cuda::detail
