#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "lamina_cuda.hpp"

#include "check.cuh"

namespace lamina::cuda {

namespace {
__global__ void axpy_kernel(float a, const float* __restrict__ x, float* __restrict__ y,
                            std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(blockDim.x) * gridDim.x)
    y[i] = a * x[i] + y[i];
}
}  // namespace

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver / no device" error
    return 0;
  }
  return n;
}

std::string runtime_version() {
  int v = 0;
  LAMINA_CUDA_CHECK(cudaRuntimeGetVersion(&v));
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

void axpy(float a, const float* x, float* y, std::size_t n, void* stream) {
  if (n == 0) return;
  const int threads = 256;
  const unsigned blocks = detail::blocks_for(n, threads, detail::kStrideBlocks);
  detail::launch(axpy_kernel, blocks, threads, 0, static_cast<cudaStream_t>(stream), a, x, y, n);
}

void selftest() {
  if (device_count() == 0) throw std::runtime_error("no CUDA device is available");
  const std::size_t n = 1 << 16;
  std::vector<float> hx(n), hy(n);
  for (std::size_t i = 0; i < n; ++i) {
    hx[i] = float(i % 97);
    hy[i] = float(i % 13);
  }
  float *dx = nullptr, *dy = nullptr;
  LAMINA_CUDA_CHECK(cudaMalloc(&dx, n * sizeof(float)));
  LAMINA_CUDA_CHECK(cudaMalloc(&dy, n * sizeof(float)));
  try {
    LAMINA_CUDA_CHECK(cudaMemcpy(dx, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    LAMINA_CUDA_CHECK(cudaMemcpy(dy, hy.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    axpy(2.0f, dx, dy, n, nullptr);
    LAMINA_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> out(n);
    LAMINA_CUDA_CHECK(cudaMemcpy(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < n; ++i)
      if (out[i] != 2.0f * hx[i] + hy[i]) throw std::runtime_error("CUDA selftest mismatch");
  } catch (...) {
    cudaFree(dx);
    cudaFree(dy);
    throw;
  }
  LAMINA_CUDA_CHECK(cudaFree(dx));
  LAMINA_CUDA_CHECK(cudaFree(dy));
}

}  // namespace lamina::cuda
