// cuda/check.cuh — internal to cuda/*.cu: error checking and small device helpers.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

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

// ---- launches ------------------------------------------------------------------------------
/// No cap on the blocks of a launch (a kernel that maps one item per thread needs them all).
constexpr unsigned kAllBlocks = 0xffffffffu;
/// The cap of the grid-stride kernels' grids (LAMINA_GRID_LOOP) in the selection code.
constexpr unsigned kStrideBlocks = 65535u;
/// The blocks of a 1-D grid over `n` items, `per_block` items a block: ceil(n / per_block),
/// at most `max_blocks` (only for kernels that stride over their grid), and 0 for n = 0 (then
/// launch() runs nothing).
inline unsigned blocks_for(std::size_t n, std::size_t per_block, std::size_t max_blocks = kAllBlocks) {
  const std::size_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(b < max_blocks ? b : max_blocks);
}

/// The one way this backend launches a kernel: kernel<<<grid, block, smem, st>>>(args...),
/// then the launch is checked (a configuration error throws std::runtime_error through
/// LAMINA_CUDA_LAUNCHED; asynchronous faults surface at the next synchronising call). A grid
/// with no blocks (no items: blocks_for(0, ...)) launches nothing.
template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t st,
            A&&... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  kernel<<<grid, block, smem, st>>>(std::forward<A>(args)...);
  LAMINA_CUDA_LAUNCHED();
}

/// A caller-owned device block that Scratch can carve allocations from (bump allocation, 256-
/// byte aligned), so that a sequence of launches can be captured into a CUDA graph without
/// memory nodes and replayed with the same pointers. `need` counts the bytes the last sequence
/// asked for (the owner grows the block to it); `overflow` says a capture ran out of room (its
/// graph must be discarded and captured again after growing).
struct Workspace {
  char* base = nullptr;
  std::size_t cap = 0;
  std::size_t used = 0;
  std::size_t need = 0;
  bool overflow = false;
  void rewind() {
    used = need = 0;
    overflow = false;
  }
};

/// Stream-ordered scratch memory: cudaMallocAsync on one stream, freed (stream-ordered) when
/// the object goes out of scope, so no synchronisation is needed. With a Workspace, requests
/// are carved from it; one that does not fit falls back to cudaMallocAsync, except while the
/// stream is being captured (no allocation may enter the graph): then it returns the block's
/// base (the captured graph is never run: the owner sees `overflow` and captures again).
class Scratch {
 public:
  explicit Scratch(cudaStream_t s, Workspace* ws = nullptr) : s_(s), ws_(ws) {
    if (ws_) {
      cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
      LAMINA_CUDA_CHECK(cudaStreamIsCapturing(s_, &cs));
      capturing_ = cs == cudaStreamCaptureStatusActive;
    }
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    for (int i = 0; i < count_; ++i) cudaFreeAsync(ptrs_[i], s_);
  }
  template <class T>
  T* alloc(std::size_t n) {
    const std::size_t bytes = (n ? n : 1) * sizeof(T);
    if (ws_) {
      const std::size_t b = (bytes + 255) / 256 * 256;
      ws_->need += b;
      if (ws_->base && ws_->used + b <= ws_->cap) {
        T* p = reinterpret_cast<T*>(ws_->base + ws_->used);
        ws_->used += b;
        return p;
      }
      if (capturing_) {
        ws_->overflow = true;
        if (!ws_->base) throw std::logic_error("lamina internal error: capture without a workspace");
        return reinterpret_cast<T*>(ws_->base);
      }
    }
    if (count_ == kMax) throw std::logic_error("lamina internal error: Scratch full");
    void* p = nullptr;
    LAMINA_CUDA_CHECK(cudaMallocAsync(&p, bytes, s_));
    ptrs_[count_++] = p;
    return static_cast<T*>(p);
  }

 private:
  static constexpr int kMax = 32;
  cudaStream_t s_;
  Workspace* ws_ = nullptr;
  bool capturing_ = false;
  void* ptrs_[kMax] = {};
  int count_ = 0;
};

/// Host-visible error words for one launcher call: pinned, mapped host memory (zero-copy) that
/// kernels write with plain stores of 1 (word i = error kind i; idempotent, so racing blocks
/// need no atomics), read by the host after the one cudaStreamSynchronize the call makes
/// anyway. This replaces a device flag + cudaMemsetAsync + cudaMemcpyAsync (two extra
/// operations and a device-to-host copy on every call). Each thread keeps a small stack of
/// word blocks (allocated once per thread, never freed); a call takes the next
/// block, zeroes it on the host before its launches, and gives it back on return. If a call
/// leaves before synchronising (an exception between launches), the destructor synchronises
/// the stream so no kernel of it can write into a block a later call reuses.
class HostFlags {
 public:
  static constexpr int kWords = 8;
  explicit HostFlags(cudaStream_t s) : s_(s) {
    Pool& p = pool();
    if (p.depth == kDepth) throw std::logic_error("lamina internal error: HostFlags nested too deep");
    if (!p.block[p.depth]) {
      void* h = nullptr;
      LAMINA_CUDA_CHECK(cudaHostAlloc(&h, kWords * sizeof(unsigned),
                                      cudaHostAllocMapped | cudaHostAllocPortable));
      p.block[p.depth] = static_cast<unsigned*>(h);
    }
    h_ = p.block[p.depth++];
    for (int i = 0; i < kWords; ++i) reinterpret_cast<volatile unsigned*>(h_)[i] = 0u;
  }
  HostFlags(const HostFlags&) = delete;
  HostFlags& operator=(const HostFlags&) = delete;
  ~HostFlags() {
    if (!synced_) cudaStreamSynchronize(s_);  // errors surface elsewhere; never throw here
    --pool().depth;
  }
  /// The words as seen by kernels (unified addressing: the host pointer is valid on the device).
  unsigned* device() const { return h_; }
  /// Synchronise the stream (once) and read word i.
  unsigned read(int i) {
    sync();
    return reinterpret_cast<volatile unsigned*>(h_)[i];
  }
  void sync() {
    if (synced_) return;
    synced_ = true;
    LAMINA_CUDA_CHECK(cudaStreamSynchronize(s_));
  }
  /// Zero the words again (after a sync) for a second launch phase of the same call.
  void reset() {
    sync();
    for (int i = 0; i < kWords; ++i) reinterpret_cast<volatile unsigned*>(h_)[i] = 0u;
    synced_ = false;
  }

 private:
  static constexpr int kDepth = 4;
  struct Pool {
    unsigned* block[kDepth] = {};
    int depth = 0;
  };
  static Pool& pool() {
    thread_local Pool p;
    return p;
  }
  cudaStream_t s_;
  unsigned* h_ = nullptr;
  bool synced_ = false;
};

/// Kernel side of HostFlags: mark error kind `word` (a plain store; no atomics on host memory).
__device__ __forceinline__ void raise_flag(unsigned* words, int word) {
  reinterpret_cast<volatile unsigned*>(words)[word] = 1u;
}

/// Multiprocessors of the current device (read once per device ordinal and cached: launch
/// sizing asks for it on every call).
inline int sm_count() {
  constexpr int kCached = 64;
  static std::atomic<int> cache[kCached];  // 0: not read yet (every writer stores the same)
  int dev = 0, n = 0;
  LAMINA_CUDA_CHECK(cudaGetDevice(&dev));
  const bool cached = dev >= 0 && dev < kCached;
  if (cached && (n = cache[dev].load(std::memory_order_relaxed)) > 0) return n;
  LAMINA_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  if (cached) cache[dev].store(n, std::memory_order_relaxed);
  return n;
}

}  // namespace lamina::cuda::detail

namespace lamina::cuda {
// The launch vocabulary of the .cu files, named unqualified in each of them (and in the nested
// lamina::cuda::kv / ::model).
using detail::as_stream;
using detail::blocks_for;
using detail::kStrideBlocks;
using detail::launch;
using detail::Scratch;
}  // namespace lamina::cuda
