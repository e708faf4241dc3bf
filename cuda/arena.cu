// GPU-resident vector arena (see arena.hpp).
#include <cuda_fp16.h>

#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <cstring>

#include "arena.hpp"
#include "check.cuh"
#include "codec.hpp"
#include "lamina_cuda.hpp"
#include "topk.hpp"
#include "topk_select.cuh"

namespace lamina::cuda {

using detail::warp_sum;

namespace {

template <typename T>
__device__ __forceinline__ bool nonfinite(T v) {
  return !(fabsf(static_cast<float>(v)) <= 3.402823466e38f);
}

template <typename T>
__global__ void check_finite_kernel(const T* __restrict__ v, std::size_t count, unsigned* flag) {
  bool bad = false;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(blockDim.x) * gridDim.x)
    bad = bad || nonfinite(v[i]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(flag, 1u);
}

// One warp per new row: copy, |x|^2 and the columns.
template <typename T>
__global__ void scatter_kernel(const T* __restrict__ src, std::size_t n, int dim,
                               std::size_t stride, const uint32_t* __restrict__ rows,
                               const uint64_t* __restrict__ ns, const uint8_t* __restrict__ layers,
                               const uint32_t* __restrict__ gens, T* __restrict__ dst,
                               uint64_t* d_ns, uint8_t* d_layer, uint8_t* d_live, float* d_sq,
                               uint32_t* d_gen) {
  const int lane = threadIdx.x & 31;
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x / 32) + (threadIdx.x >> 5);
  if (i >= n) return;
  const uint32_t r = rows[i];
  const T* s = src + i * dim;
  T* o = dst + static_cast<std::size_t>(r) * stride;
  float ss = 0.f;
  for (int j = lane; j < dim; j += 32) {
    const T v = s[j];
    o[j] = v;
    const float f = static_cast<float>(v);
    ss = fmaf(f, f, ss);
  }
  ss = warp_sum(ss);
  if (lane == 0) {
    d_sq[r] = ss;
    d_ns[r] = ns[i];
    d_layer[r] = layers[i];
    d_live[r] = 1;
    d_gen[r] = gens[i];
  }
}

template <typename T>
__global__ void clear_kernel(T* __restrict__ dst, std::size_t stride,
                             const uint32_t* __restrict__ rows, const uint32_t* __restrict__ gens,
                             std::size_t n, uint64_t* d_ns, uint8_t* d_layer, uint8_t* d_live,
                             float* d_sq, uint32_t* d_gen) {
  const int lane = threadIdx.x & 31;
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x / 32) + (threadIdx.x >> 5);
  if (i >= n) return;
  const uint32_t r = rows[i];
  T* o = dst + static_cast<std::size_t>(r) * stride;
  for (std::size_t j = lane; j < stride; j += 32) o[j] = T(0.f);
  if (lane == 0) {
    d_sq[r] = 0.f;
    d_ns[r] = 0;
    d_layer[r] = 0;
    d_live[r] = 0;
    d_gen[r] = gens[i];
  }
}

template <typename T>
__global__ void gather_kernel(const T* __restrict__ src, std::size_t stride, int dim,
                              const uint32_t* __restrict__ rows, std::size_t n, T* __restrict__ out) {
  const int lane = threadIdx.x & 31;
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x / 32) + (threadIdx.x >> 5);
  if (i >= n) return;
  const T* s = src + static_cast<std::size_t>(rows[i]) * stride;
  for (int j = lane; j < dim; j += 32) out[i * dim + j] = s[j];
}

// One warp per row: its code bytes and constants (from `src`, n x stride, host-encoded).
__global__ void scatter_codes_kernel(const uint8_t* __restrict__ src, const float* __restrict__ fac,
                                     const int32_t* __restrict__ cnt, std::size_t n,
                                     std::size_t stride, const uint32_t* __restrict__ rows,
                                     uint8_t* __restrict__ codes, float* d_fac, int32_t* d_cnt) {
  const int lane = threadIdx.x & 31;
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x / 32) + (threadIdx.x >> 5);
  if (i >= n) return;
  const uint32_t r = rows[i];
  for (std::size_t j = lane; j < stride; j += 32) codes[r * stride + j] = src[i * stride + j];
  if (lane == 0) {
    d_fac[r] = fac[i];
    d_cnt[r] = cnt[i];
  }
}

__global__ void clear_codes_kernel(const uint32_t* __restrict__ rows, std::size_t n,
                                   std::size_t stride, uint8_t* __restrict__ codes, float* d_fac,
                                   int32_t* d_cnt) {
  const int lane = threadIdx.x & 31;
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x / 32) + (threadIdx.x >> 5);
  if (i >= n) return;
  const uint32_t r = rows[i];
  for (std::size_t j = lane; j < stride; j += 32) codes[r * stride + j] = 0;
  if (lane == 0) {
    d_fac[r] = 0.f;
    d_cnt[r] = 0;
  }
}

__global__ void set_layer_kernel(uint8_t* d_layer, const uint32_t* __restrict__ rows,
                                 std::size_t n, uint8_t layer) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) d_layer[rows[i]] = layer;
}

__global__ void iota_kernel(uint32_t* v, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) v[i] = static_cast<uint32_t>(i);
}

__global__ void gather_ns_kernel(const uint64_t* __restrict__ ns, const uint32_t* __restrict__ rows,
                                 std::size_t n, uint64_t* __restrict__ out) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = ns[rows[i]];
}

template <class T>
T* upload(Scratch& scr, const std::vector<T>& h, cudaStream_t st) {
  T* d = scr.alloc<T>(h.size());
  if (!h.empty())
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, st));
  return d;
}

template <class T>
void grow_column(T*& col, std::size_t used, std::size_t cap, cudaStream_t st) {
  T* fresh = nullptr;
  LAMINA_CUDA_CHECK(cudaMalloc(&fresh, cap * sizeof(T)));
  LAMINA_CUDA_CHECK(cudaMemsetAsync(fresh, 0, cap * sizeof(T), st));
  if (col && used)
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(fresh, col, used * sizeof(T), cudaMemcpyDeviceToDevice, st));
  LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
  if (col) LAMINA_CUDA_CHECK(cudaFree(col));
  col = fresh;
}

// Orders the arena's stream after the caller's on entry, and the caller's after the arena's on
// exit (also when an exception leaves the method).
class StreamScope {
 public:
  StreamScope(void* caller, void* own) : caller_(caller), own_(own) { stream_wait(own_, caller_); }
  ~StreamScope() {
    try {
      stream_wait(caller_, own_);
    } catch (...) {
    }
  }

 private:
  void* caller_;
  void* own_;
};

}  // namespace

CudaVectorArena::CudaVectorArena(std::size_t dim, DType dtype, std::size_t capacity, int device,
                                 Codec codec)
    : dim_(dim), dtype_(dtype), stride_(arena_row_stride(dim, dtype)), device_(device),
      codec_(codec) {
  code_stride_ = lamina::code_stride(codec, dim);
  LAMINA_CHECK(device >= 0 && device < device_count(), "CUDA device ", device,
               " does not exist (", device_count(), " usable devices)");
  DeviceGuard g(device_);
  cudaStream_t s;
  LAMINA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
  std::unique_lock lk(mu_);
  grow_locked(std::max<std::size_t>(capacity, 16));
}

CudaVectorArena::~CudaVectorArena() {
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) return;  // driver gone (interpreter shutdown)
  cudaSetDevice(device_);
  cudaStreamSynchronize(as_stream(stream_));
  for (void* p : {rows_, static_cast<void*>(d_ns_), static_cast<void*>(d_layer_),
                  static_cast<void*>(d_live_), static_cast<void*>(d_sqnorm_),
                  static_cast<void*>(d_gen_), static_cast<void*>(d_csr_),
                  static_cast<void*>(d_codes_), static_cast<void*>(d_cfactor_),
                  static_cast<void*>(d_ccount_)})
    if (p) cudaFree(p);
  cudaStreamDestroy(as_stream(stream_));
  cudaSetDevice(prev);
}

void CudaVectorArena::count_ns_layer(uint64_t ns, uint8_t layer, bool add) {
  const std::pair<uint64_t, uint8_t> key{ns, layer};
  if (add) {
    ++nl_count_[key];
    return;
  }
  auto it = nl_count_.find(key);
  LAMINA_ASSERT(it != nl_count_.end() && it->second > 0);
  if (--it->second == 0) nl_count_.erase(it);
}

void CudaVectorArena::grow_locked(std::size_t min_capacity) {
  if (min_capacity <= slots_.capacity() && rows_) return;
  const std::size_t cap = slots_.grown_capacity(min_capacity);
  const std::size_t high_water = slots_.high_water();
  const cudaStream_t st = as_stream(stream_);
  char* rows = static_cast<char*>(rows_);
  {
    char* fresh = nullptr;
    const cudaError_t e = cudaMalloc(&fresh, cap * stride_ * elt());
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw std::runtime_error("out of device memory growing the GPU arena to " +
                               std::to_string(cap) + " rows (" + cudaGetErrorString(e) + ")");
    }
    LAMINA_CUDA_CHECK(cudaMemsetAsync(fresh, 0, cap * stride_ * elt(), st));
    if (rows && high_water)
      LAMINA_CUDA_CHECK(cudaMemcpyAsync(fresh, rows, high_water * stride_ * elt(),
                                        cudaMemcpyDeviceToDevice, st));
    LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
    if (rows) LAMINA_CUDA_CHECK(cudaFree(rows));
    rows_ = fresh;
  }
  grow_column(d_ns_, high_water, cap, st);
  grow_column(d_layer_, high_water, cap, st);
  grow_column(d_live_, high_water, cap, st);
  grow_column(d_sqnorm_, high_water, cap, st);
  grow_column(d_gen_, high_water, cap, st);
  if (codec_ != Codec::None) {
    grow_column(d_codes_, high_water * code_stride_, cap * code_stride_, st);
    grow_column(d_cfactor_, high_water, cap, st);
    grow_column(d_ccount_, high_water, cap, st);
  }
  slots_.resize(cap);
}

void CudaVectorArena::reserve(std::size_t capacity) {
  DeviceGuard g(device_);
  std::unique_lock lk(mu_);
  grow_locked(capacity);
}

void CudaVectorArena::add(const void* vectors, bool on_device, std::size_t n, const uint64_t* ns,
                          bool ns_per_row, const uint8_t* layers, bool layers_per_row,
                          int64_t* out, void* stream) {
  if (n == 0) return;
  DeviceGuard g(device_);
  StreamScope scope(stream, stream_);
  const cudaStream_t st = as_stream(stream_);
  const std::size_t count = n * dim_;
  const bool f16 = dtype_ == DType::F16;
  if (on_device) {
    Scratch scr(st);
    unsigned* flag = scr.alloc<unsigned>(1);
    LAMINA_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(unsigned), st));
    const unsigned blocks = blocks_for(count, 256, 4096);
    if (f16)
      launch(check_finite_kernel<__half>, blocks, 256, 0, st, static_cast<const __half*>(vectors),
             count, flag);
    else
      launch(check_finite_kernel<float>, blocks, 256, 0, st, static_cast<const float*>(vectors),
             count, flag);
    unsigned h = 0;
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(&h, flag, sizeof h, cudaMemcpyDeviceToHost, st));
    LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
    LAMINA_CHECK(h == 0, "vectors contain NaN or Inf; only finite vectors can be stored");
  } else {
    check_finite_rows(vectors, n, dim_, dtype_);
  }

  std::unique_lock lk(mu_);
  grow_locked(slots_.high_water() + slots_.rows_past_high_water(n));
  std::vector<uint32_t> rows(n), gens(n);
  std::vector<uint64_t> nsv(n);
  std::vector<uint8_t> lv(n);
  for (std::size_t i = 0; i < n; ++i) {
    nsv[i] = ns_per_row ? ns[i] : ns[0];
    lv[i] = layers_per_row ? layers[i] : layers[0];
    const uint32_t row = slots_.acquire(nsv[i], lv[i]);
    rows[i] = row;
    gens[i] = slots_.generation(row);
    count_ns_layer(nsv[i], lv[i], true);
    out[i] = slots_.handle_of(row);
  }
  {
    std::lock_guard cl(csr_mu_);
    csr_dirty_ = true;
  }
  if (codec_ != Codec::None) {
    if (on_device) {  // the codes are encoded on the host: bring the rows over once
      std::vector<char> host(count * elt());
      LAMINA_CUDA_CHECK(cudaMemcpyAsync(host.data(), vectors, host.size(), cudaMemcpyDeviceToHost, st));
      LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
      write_codes_locked(host.data(), rows);
    } else {
      write_codes_locked(vectors, rows);
    }
  }
  Scratch scr(st);
  const void* src = vectors;
  if (!on_device) {
    void* d = scr.alloc<char>(count * elt());
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(d, vectors, count * elt(), cudaMemcpyHostToDevice, st));
    src = d;
  }
  const uint32_t* d_rows = upload(scr, rows, st);
  const uint64_t* d_nsv = upload(scr, nsv, st);
  const uint8_t* d_lv = upload(scr, lv, st);
  const uint32_t* d_gens = upload(scr, gens, st);
  const unsigned blocks = blocks_for(n, 8);
  if (f16)
    launch(scatter_kernel<__half>, blocks, 256, 0, st, static_cast<const __half*>(src), n,
           int(dim_), stride_, d_rows, d_nsv, d_lv, d_gens, static_cast<__half*>(rows_), d_ns_,
           d_layer_, d_live_, d_sqnorm_, d_gen_);
  else
    launch(scatter_kernel<float>, blocks, 256, 0, st, static_cast<const float*>(src), n, int(dim_),
           stride_, d_rows, d_nsv, d_lv, d_gens, static_cast<float*>(rows_), d_ns_, d_layer_,
           d_live_, d_sqnorm_, d_gen_);
}

void CudaVectorArena::write_codes_locked(const void* host_rows, const std::vector<uint32_t>& rows) {
  const std::size_t n = rows.size();
  std::vector<uint8_t> codes(n * code_stride_);
  std::vector<float> factor(n);
  std::vector<int32_t> count(n);
  encode_rows(codec_, host_rows, dim_, dtype_ == DType::F16, n, dim_, codes.data(), factor.data(),
              count.data());
  const cudaStream_t st = as_stream(stream_);
  Scratch scr(st);
  const uint8_t* d_src = upload(scr, codes, st);
  const float* d_fac = upload(scr, factor, st);
  const int32_t* d_cnt = upload(scr, count, st);
  const uint32_t* d_rows = upload(scr, rows, st);
  launch(scatter_codes_kernel, blocks_for(n, 8), 256, 0, st, d_src, d_fac, d_cnt, n, code_stride_,
         d_rows, d_codes_, d_cfactor_, d_ccount_);
  // the host buffers must outlive the copies
  LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
}

void CudaVectorArena::remove(const int64_t* handles, std::size_t n, void* stream) {
  DeviceGuard g(device_);
  StreamScope scope(stream, stream_);
  std::unique_lock lk(mu_);
  const std::vector<uint32_t> rows = slots_.rows_to_remove(handles, n);
  if (n == 0) return;
  std::vector<uint32_t> gens(n);
  for (std::size_t i = 0; i < n; ++i) {
    const uint32_t row = rows[i];
    count_ns_layer(slots_.ns(row), slots_.layer(row), false);
    slots_.release(row);
    gens[i] = slots_.generation(row);
  }
  {
    std::lock_guard cl(csr_mu_);
    csr_dirty_ = true;
  }
  const cudaStream_t st = as_stream(stream_);
  Scratch scr(st);
  const uint32_t* d_rows = upload(scr, rows, st);
  const uint32_t* d_gens = upload(scr, gens, st);
  if (dtype_ == DType::F16)
    launch(clear_kernel<__half>, blocks_for(n, 8), 256, 0, st, static_cast<__half*>(rows_), stride_,
           d_rows, d_gens, n, d_ns_, d_layer_, d_live_, d_sqnorm_, d_gen_);
  else
    launch(clear_kernel<float>, blocks_for(n, 8), 256, 0, st, static_cast<float*>(rows_), stride_,
           d_rows, d_gens, n, d_ns_, d_layer_, d_live_, d_sqnorm_, d_gen_);
  if (codec_ != Codec::None) {
    launch(clear_codes_kernel, blocks_for(n, 8), 256, 0, st, d_rows, n, code_stride_, d_codes_,
           d_cfactor_, d_ccount_);
  }
}

void CudaVectorArena::get(const int64_t* handles, std::size_t n, void* out, void* stream) const {
  DeviceGuard g(device_);
  StreamScope scope(stream, stream_);
  std::shared_lock lk(mu_);
  const std::vector<uint32_t> rows = slots_.rows_of(handles, n);
  if (n == 0) return;
  const cudaStream_t st = as_stream(stream_);
  Scratch scr(st);
  const uint32_t* d_rows = upload(scr, rows, st);
  char* d_out = scr.alloc<char>(n * dim_ * elt());
  if (dtype_ == DType::F16)
    launch(gather_kernel<__half>, blocks_for(n, 8), 256, 0, st, static_cast<const __half*>(rows_),
           stride_, int(dim_), d_rows, n, reinterpret_cast<__half*>(d_out));
  else
    launch(gather_kernel<float>, blocks_for(n, 8), 256, 0, st, static_cast<const float*>(rows_),
           stride_, int(dim_), d_rows, n, reinterpret_cast<float*>(d_out));
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(out, d_out, n * dim_ * elt(), cudaMemcpyDeviceToHost, st));
  LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
}

void CudaVectorArena::set_layer(const int64_t* handles, std::size_t n, uint8_t layer,
                                void* stream) {
  DeviceGuard g(device_);
  StreamScope scope(stream, stream_);
  std::unique_lock lk(mu_);
  const std::vector<uint32_t> rows = slots_.rows_of(handles, n);
  if (n == 0) return;
  bool moved = false;
  for (uint32_t r : rows) {
    if (slots_.layer(r) == layer) continue;
    count_ns_layer(slots_.ns(r), slots_.layer(r), false);
    count_ns_layer(slots_.ns(r), layer, true);
    slots_.set_layer(r, layer);
    moved = true;
  }
  if (moved) {  // the CSR is sorted by (namespace, layer)
    std::lock_guard cl(csr_mu_);
    csr_dirty_ = true;
  }
  const cudaStream_t st = as_stream(stream_);
  Scratch scr(st);
  const uint32_t* d_rows = upload(scr, rows, st);
  launch(set_layer_kernel, blocks_for(n, 256), 256, 0, st, d_layer_, d_rows, n, layer);
}

DeviceRows CudaVectorArena::device_rows_locked() const {
  DeviceRows rs;
  rs.base = rows_;
  rs.stride = stride_;
  rs.dim = dim_;
  rs.f16 = dtype_ == DType::F16;
  rs.sqnorms = d_sqnorm_;
  return rs;
}

DeviceCodes CudaVectorArena::device_codes_locked() const {
  DeviceCodes dc;
  dc.codec = codec_;
  dc.base = d_codes_;
  dc.stride = code_stride_;
  dc.dim = dim_;
  dc.factor = d_cfactor_;
  dc.count = d_ccount_;
  dc.sqnorms = d_sqnorm_;
  return dc;
}

void CudaVectorArena::ensure_csr_locked() const {
  if (!csr_dirty_) return;
  const cudaStream_t st = as_stream(stream_);
  const std::size_t n = slots_.high_water();
  if (csr_cap_ < n) {
    LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
    if (d_csr_) LAMINA_CUDA_CHECK(cudaFree(d_csr_));
    d_csr_ = nullptr;
    LAMINA_CUDA_CHECK(cudaMalloc(&d_csr_, std::max<std::size_t>(n, 1) * sizeof(uint32_t)));
    csr_cap_ = std::max<std::size_t>(n, 1);
  }
  // Removed rows carry namespace 0 and layer 0, so they sort into that range (the live mask
  // skips them); the host knows every range from its counts without reading the device.
  std::vector<std::pair<std::pair<uint64_t, uint8_t>, std::size_t>> counts(nl_count_.begin(),
                                                                           nl_count_.end());
  const std::size_t dead = n - slots_.live_count();
  if (dead) {
    auto it = std::find_if(counts.begin(), counts.end(), [](auto& p) {
      return p.first.first == 0 && p.first.second == 0;
    });
    if (it == counts.end()) counts.push_back({{0, 0}, dead});
    else it->second += dead;
  }
  std::sort(counts.begin(), counts.end());
  csr_off_.clear();
  csr_nl_off_.clear();
  std::size_t off = 0;
  for (auto& [key, c] : counts) {
    csr_nl_off_[key] = {off, c};
    auto [it, fresh] = csr_off_.try_emplace(key.first, off, 0);
    it->second.second += c;
    off += c;
  }
  LAMINA_ASSERT(off == n);
  if (n > 0) {
    // LSD order: a stable sort by layer, then a stable sort by namespace -> (namespace, layer),
    // rows ascending within each pair
    const uint64_t max_key = counts.empty() ? 0 : counts.back().first.first;
    const int end_bit = max_key ? 64 - __builtin_clzll(max_key) : 1;
    Scratch scr(st);
    uint32_t* vals_in = scr.alloc<uint32_t>(n);
    uint8_t* layer_out = scr.alloc<uint8_t>(n);
    uint32_t* by_layer = scr.alloc<uint32_t>(n);
    uint64_t* ns_in = scr.alloc<uint64_t>(n);
    uint64_t* keys_out = scr.alloc<uint64_t>(n);
    launch(iota_kernel, blocks_for(n, 256), 256, 0, st, vals_in, n);
    std::size_t b1 = 0, b2 = 0;
    LAMINA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, b1, d_layer_, layer_out, vals_in,
                                                      by_layer, n, 0, 8, st));
    LAMINA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, b2, ns_in, keys_out, by_layer,
                                                      d_csr_, n, 0, end_bit, st));
    void* temp = scr.alloc<char>(std::max(b1, b2));
    LAMINA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, b1, d_layer_, layer_out, vals_in,
                                                      by_layer, n, 0, 8, st));
    launch(gather_ns_kernel, blocks_for(n, 256), 256, 0, st, d_ns_, by_layer, n, ns_in);
    LAMINA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, b2, ns_in, keys_out, by_layer,
                                                      d_csr_, n, 0, end_bit, st));
  }
  csr_dirty_ = false;
}

CudaVectorArena::SearchView CudaVectorArena::search_view(const uint64_t* ns, std::size_t nq,
                                                         const uint8_t* layers, std::size_t L,
                                                         int64_t* seg,
                                                         std::size_t* longest) const {
  DeviceGuard g(device_);
  std::lock_guard cl(csr_mu_);
  ensure_csr_locked();
  std::size_t top = 0;
  for (std::size_t l = 0; l < L; ++l) {
    for (std::size_t q = 0; q < nq; ++q) {
      auto it = csr_nl_off_.find({ns[q], layers[l]});
      const std::size_t off = it == csr_nl_off_.end() ? 0 : it->second.first;
      const std::size_t cnt = it == csr_nl_off_.end() ? 0 : it->second.second;
      int64_t* s = seg + 2 * (l * nq + q);
      s[0] = static_cast<int64_t>(off);
      s[1] = static_cast<int64_t>(off + cnt);
      top = std::max(top, cnt);
    }
  }
  *longest = top;
  SearchView v;
  v.rows = device_rows_locked();
  v.live = d_live_;
  v.layers = d_layer_;
  v.generations = d_gen_;
  v.csr = d_csr_;
  v.codes = device_codes_locked();
  v.high_water = slots_.high_water();
  v.live_count = slots_.live_count();
  return v;
}

void CudaVectorArena::search_codes_locked(const float* queries, std::size_t nq, std::size_t k,
                                          const float* host_queries, Metric metric,
                                          const DeviceFilter& f, std::size_t oversample,
                                          float* out_scores, int64_t* out_ids) const {
  LAMINA_CHECK(oversample <= kMaxK / k, "k * oversample must be at most ", kMaxK,
               " on the GPU, got k=", k, ", oversample=", oversample);
  const std::size_t m = k * oversample;
  const cudaStream_t st = as_stream(stream_);
  std::vector<float> hq;  // the code scan encodes the queries on the host
  if (!host_queries) {
    hq.resize(nq * dim_);
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(hq.data(), queries, hq.size() * sizeof(float),
                                      cudaMemcpyDeviceToHost, st));
    LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
    host_queries = hq.data();
  }
  const DeviceCodes dc = device_codes_locked();
  const std::size_t high_water = slots_.high_water();
  Scratch scr(st);
  uint32_t* cand = scr.alloc<uint32_t>(nq * m);
  int64_t* seg = scr.alloc<int64_t>(2 * nq);
  code_candidates(host_queries, nq, dc, high_water, f, m, metric, cand, seg, stream_);
  topk_search(queries, nq, device_rows_locked(), high_water, candidate_filter(cand, seg, nq, m), k,
              metric, d_gen_, out_scores, out_ids, stream_);
}

void CudaVectorArena::search(const float* queries, std::size_t nq, std::size_t k, Metric metric,
                             const uint64_t* ns, std::size_t n_ns, const uint64_t* layer_mask,
                             float* out_scores, int64_t* out_ids, void* stream,
                             std::size_t oversample) const {
  search_impl(queries, nullptr, nq, k, metric, ns, n_ns, layer_mask, out_scores, out_ids, stream,
              oversample);
}

void CudaVectorArena::search_impl(const float* queries, const float* host_queries, std::size_t nq,
                                  std::size_t k, Metric metric, const uint64_t* ns,
                                  std::size_t n_ns, const uint64_t* layer_mask, float* out_scores,
                                  int64_t* out_ids, void* stream, std::size_t oversample) const {
  LAMINA_CHECK(k >= 1, "k must be >= 1, got ", k);
  DeviceGuard g(device_);
  StreamScope scope(stream, stream_);
  std::shared_lock lk(mu_);
  const std::size_t live_count = slots_.live_count(), high_water = slots_.high_water();
  LAMINA_CHECK(live_count > 0, "the arena is empty; add vectors before searching");
  const cudaStream_t st = as_stream(stream_);
  const DeviceRows rs = device_rows_locked();
  DeviceFilter f;
  if (live_count != high_water) f.live = d_live_;
  if (layer_mask) {
    f.layers = d_layer_;
    std::copy(layer_mask, layer_mask + 4, f.layer_mask);
  }
  const bool coded = codec_ != Codec::None && oversample > 0;
  // The search over the rows `filter` admits: the code scan and re-rank, or the exact top-k.
  auto run = [&](const DeviceFilter& filter) {
    if (coded)
      search_codes_locked(queries, nq, k, host_queries, metric, filter, oversample, out_scores,
                          out_ids);
    else
      topk_search(queries, nq, rs, high_water, filter, k, metric, d_gen_, out_scores, out_ids,
                  stream_);
  };
  if (ns == nullptr) {
    run(f);
    return;
  }
  LAMINA_CHECK(n_ns == 1 || n_ns == nq, "namespace must be one value or one per query (", nq,
               "), got ", n_ns);
  std::lock_guard cl(csr_mu_);
  ensure_csr_locked();
  auto range = [&](uint64_t v) -> std::pair<std::size_t, std::size_t> {
    auto it = csr_off_.find(v);
    if (it == csr_off_.end()) return {0, 0};
    return it->second;
  };
  f.use_row_list = true;
  f.row_list = d_csr_;
  if (n_ns == 1 || std::all_of(ns, ns + n_ns, [&](uint64_t v) { return v == ns[0]; })) {
    const auto [off, cnt] = range(ns[0]);
    f.row_list = d_csr_ + off;
    f.row_list_len = cnt;
    run(f);
    return;
  }
  std::vector<int64_t> seg(2 * nq);
  std::size_t longest = 0;
  for (std::size_t q = 0; q < nq; ++q) {
    const auto [off, cnt] = range(ns[q]);
    seg[2 * q] = static_cast<int64_t>(off);
    seg[2 * q + 1] = static_cast<int64_t>(off + cnt);
    longest = std::max(longest, cnt);
  }
  Scratch scr(st);
  f.segments = upload(scr, seg, st);
  f.row_list_len = high_water;
  f.max_segment = longest;
  run(f);
}

void CudaVectorArena::search_host(const float* queries, std::size_t nq, std::size_t k,
                                  Metric metric, const uint64_t* ns, std::size_t n_ns,
                                  const uint64_t* layer_mask, float* out_scores,
                                  int64_t* out_ids, std::size_t oversample) const {
  if (nq == 0) return;
  DeviceGuard g(device_);
  const cudaStream_t st = as_stream(stream_);
  Scratch scr(st);
  float* dq = scr.alloc<float>(nq * dim_);
  float* ds = scr.alloc<float>(nq * k);
  int64_t* di = scr.alloc<int64_t>(nq * k);
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(dq, queries, nq * dim_ * sizeof(float), cudaMemcpyHostToDevice, st));
  search_impl(dq, queries, nq, k, metric, ns, n_ns, layer_mask, ds, di, stream_, oversample);
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(out_scores, ds, nq * k * sizeof(float), cudaMemcpyDeviceToHost, st));
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(out_ids, di, nq * k * sizeof(int64_t), cudaMemcpyDeviceToHost, st));
  LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
}

}  // namespace lamina::cuda
