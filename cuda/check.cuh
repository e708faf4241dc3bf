// cuda/check.cuh — internal to cuda/*.cu: error checking and small device helpers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "lamina/common.hpp"

#define LAMINA_CUDA_CHECK(expr)                                                          \
  do {                                                                                   \
    cudaError_t err__ = (expr);                                                          \
    if (err__ != cudaSuccess)                                                            \
      throw std::runtime_error(std::string("CUDA error at " #expr ": ") +                \
                               cudaGetErrorString(err__));                               \
  } while (0)

// After a launch: configuration errors surface here (asynchronous faults surface at the next
// synchronising call, which every public launcher makes or documents).
#define LAMINA_CUDA_LAUNCHED() LAMINA_CUDA_CHECK(cudaGetLastError())

namespace lamina::cuda::detail {

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

/// Stream-ordered scratch memory: cudaMallocAsync on one stream, freed (stream-ordered) when
/// the object goes out of scope, so no synchronisation is needed.
class Scratch {
 public:
  explicit Scratch(cudaStream_t s) : s_(s) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    for (int i = 0; i < count_; ++i) cudaFreeAsync(ptrs_[i], s_);
  }
  template <class T>
  T* alloc(std::size_t n) {
    if (count_ == kMax) throw std::logic_error("lamina internal error: Scratch full");
    void* p = nullptr;
    LAMINA_CUDA_CHECK(cudaMallocAsync(&p, (n ? n : 1) * sizeof(T), s_));
    ptrs_[count_++] = p;
    return static_cast<T*>(p);
  }

 private:
  static constexpr int kMax = 32;
  cudaStream_t s_;
  void* ptrs_[kMax] = {};
  int count_ = 0;
};

inline int sm_count() {
  int dev = 0, n = 0;
  LAMINA_CUDA_CHECK(cudaGetDevice(&dev));
  LAMINA_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

}  // namespace lamina::cuda::detail
