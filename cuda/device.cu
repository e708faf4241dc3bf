// Device / stream helpers used by the bindings' dispatch.
#include "check.cuh"
#include "lamina_cuda.hpp"

namespace lamina::cuda {

int pointer_device(const void* ptr) {
  if (device_count() == 0)
    throw std::runtime_error(
        "no usable CUDA device (no GPU or no driver); pass numpy arrays to run on the CPU");
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw ValueError(std::string("pointer is not a CUDA allocation (") + cudaGetErrorString(err) +
                     ")");
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    throw ValueError(
        "__cuda_array_interface__ data pointer is not device memory; pass a CuPy/PyTorch CUDA "
        "array, or a numpy array for the CPU path");
  return attr.device;
}

void stream_wait(void* consumer, void* producer) {
  if (consumer == producer) return;
  cudaEvent_t ev;
  LAMINA_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudaError_t e1 = cudaEventRecord(ev, detail::as_stream(producer));
  cudaError_t e2 = e1 == cudaSuccess ? cudaStreamWaitEvent(detail::as_stream(consumer), ev, 0) : e1;
  cudaEventDestroy(ev);  // safe: destruction is deferred until the event completes
  LAMINA_CUDA_CHECK(e2);
}

void stream_sync(void* stream) { LAMINA_CUDA_CHECK(cudaStreamSynchronize(detail::as_stream(stream))); }

DeviceGuard::DeviceGuard(int device) {
  LAMINA_CUDA_CHECK(cudaGetDevice(&prev_));
  if (prev_ != device) LAMINA_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int cur = -1;
  if (prev_ >= 0 && cudaGetDevice(&cur) == cudaSuccess && cur != prev_) cudaSetDevice(prev_);
}

void mem_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  LAMINA_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

}  // namespace lamina::cuda
