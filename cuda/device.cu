// Device / stream helpers used by the bindings' dispatch.
#include "check.cuh"
#include "lamina_cuda.hpp"

namespace lamina::cuda {

int pointer_device(const void* ptr) {
  // One driver query per array on the launch path; the device count only explains a failure.
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (device_count() == 0)
      throw std::runtime_error(
          "no usable CUDA device (no GPU or no driver); pass numpy arrays to run on the CPU");
    throw ValueError(std::string("pointer is not a CUDA allocation (") + cudaGetErrorString(err) +
                     ")");
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    throw ValueError(
        "__cuda_array_interface__ data pointer is not device memory; pass a CuPy/PyTorch CUDA "
        "array, or a numpy array for the CPU path");
  return attr.device;
}

namespace {

// 0 (the default stream, legacy in this build) and 1 (cudaStreamLegacy) are the same stream.
void* canonical_stream(void* s) { return s == cudaStreamLegacy ? nullptr : s; }

// One event per thread and device, reused: cudaStreamWaitEvent waits for the record made
// before it, so recording the event again for the next wait does not disturb an earlier one.
// (Creating and destroying an event per wait cost two driver calls on every launch.)
struct WaitEvents {
  static constexpr int kDevices = 64;
  cudaEvent_t ev[kDevices] = {};
  ~WaitEvents() {
    for (cudaEvent_t e : ev)
      if (e) cudaEventDestroy(e);  // errors ignored (the driver may be gone at exit)
  }
};

cudaEvent_t wait_event() {
  using Events = WaitEvents;
  thread_local Events events;
  int dev = 0;
  LAMINA_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= Events::kDevices)
    throw std::runtime_error("CUDA device ordinal beyond lamina's event table");
  cudaEvent_t& e = events.ev[dev];
  if (!e) LAMINA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

}  // namespace

void stream_wait(void* consumer, void* producer) {
  consumer = canonical_stream(consumer);
  producer = canonical_stream(producer);
  if (consumer == producer) return;
  const cudaEvent_t ev = wait_event();
  LAMINA_CUDA_CHECK(cudaEventRecord(ev, detail::as_stream(producer)));
  LAMINA_CUDA_CHECK(cudaStreamWaitEvent(detail::as_stream(consumer), ev, 0));
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
