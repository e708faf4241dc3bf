// The fleet step as one CUDA graph (see fleet.hpp). Compiled with -fmad=false
// (CMakeLists.txt): relevance, gate and heat round as on the CPU.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "check.cuh"
#include "code_enqueue.cuh"
#include "cub_util.cuh"
#include "fleet.hpp"
#include "gate_row.cuh"
#include "lamina/kernel_math.hpp"
#include "lamina_cuda.hpp"
#include "topk_enqueue.cuh"

namespace lamina::cuda {

namespace {

// Error words of the step's pinned block: the search's (topk_enqueue.cuh), then these, then
// the code scan's (code_enqueue.cuh).
enum : int {
  kGateBad = detail::kTopkWords,
  kHeatBad = kGateBad + 1,
  kCodeWords = kHeatBad + 1,
  kWordsUsed = kCodeWords + detail::kCodeWords
};
// The pinned block (and d_params_, its device copy from kWordBytes on, at the same offsets):
// error words | now (double) | L x nq ranges (int64 pairs) | [queries] | [query codes]
constexpr std::size_t kWordBytes = 64;
constexpr std::size_t kParamBytes = 8;
constexpr std::size_t kHostHead = kWordBytes + kParamBytes;
constexpr std::size_t align256(std::size_t b) { return (b + 255) / 256 * 256; }
static_assert(kWordsUsed * sizeof(unsigned) <= kWordBytes, "error words overflow their block");

// One thread per (query, layer): the layer's list into out (nq, L, k) and its relevance.
__global__ void finish_kernel(const float* __restrict__ lay_s, const int64_t* __restrict__ lay_i,
                              std::size_t nq, int L, int k, int top, float* __restrict__ out_s,
                              int64_t* __restrict__ out_i, float* __restrict__ relevance) {
  LAMINA_GRID_LOOP(t, nq * static_cast<std::size_t>(L)) {
    const std::size_t q = t / L, l = t % L;
    const std::size_t src = (l * nq + q) * k, dst = t * k;
    float acc = 0.f;
    int cnt = 0;
    for (int j = 0; j < k; ++j) {
      const float s = lay_s[src + j];
      const int64_t id = lay_i[src + j];
      out_s[dst + j] = s;
      out_i[dst + j] = id;
      if (j < top && id >= 0) {
        acc = acc + s;
        ++cnt;
      }
    }
    relevance[t] = cnt ? acc / static_cast<float>(cnt) : 0.f;
  }
}

__global__ void gate_kernel(const float* __restrict__ relevance, std::size_t nq, int L,
                            double beta, bool entropy, float eps, int max_doublings,
                            float* __restrict__ gamma, double* __restrict__ beta_used,
                            unsigned* flags) {
  LAMINA_GRID_LOOP(q, nq) {
    const double used =
        detail::gate_row(relevance + q * L, L, beta, entropy, eps, max_doublings, gamma + q * L);
    if (isnan(used)) detail::raise_flag(flags, kGateBad);
    beta_used[q] = isnan(used) ? beta : used;
  }
}

__device__ __forceinline__ void add_one(float* p) { atomicAdd(p, 1.0f); }
__device__ __forceinline__ void add_one(int32_t* p) { atomicAdd(p, 1); }
__device__ __forceinline__ void add_one(int64_t* p) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), 1ull);  // two's complement: the same bits
}

// One thread per returned handle: visits += 1 (atomically: a row may be returned twice),
// last_access = now.
template <class V>
__global__ void bump_kernel(const int64_t* __restrict__ ids, std::size_t n_ids,
                            const double* __restrict__ now, V* visits, double* last_access) {
  const double t = *now;
  LAMINA_GRID_LOOP(e, n_ids) {
    const int64_t h = ids[e];
    if (h < 0) continue;
    const std::size_t row = static_cast<std::size_t>(h) & 0xffffffffull;
    add_one(visits + row);
    last_access[row] = t;
  }
}

// After every bump: heat of each returned row from its final columns (rows returned twice are
// written twice with the same value).
template <class V, class Len>
__global__ void heat_kernel(const int64_t* __restrict__ ids, std::size_t n_ids,
                            const double* __restrict__ now, const V* visits, const Len* ilen,
                            const double* last_access, float a, float b, float c, double inv_mu,
                            float* heat, unsigned* flags) {
  const double t = *now;
  bool bad = false;
  LAMINA_GRID_LOOP(e, n_ids) {
    const int64_t h = ids[e];
    if (h < 0) continue;
    const std::size_t row = static_cast<std::size_t>(h) & 0xffffffffull;
    const float x = kmath::heat_recency_arg(t, last_access[row], inv_mu);
    const float v = kmath::heat_value(kmath::count_to_float(visits[row]),
                                      kmath::count_to_float(ilen[row]), kmath::fast_expf(x), a, b,
                                      c);
    bad = bad || !kmath::is_finite(x) || !kmath::is_finite(v);
    heat[row] = v;
  }
  if (bad) detail::raise_flag(flags, kHeatBad);
}

template <class V>
void launch_bump_heat(const int64_t* ids, std::size_t n_ids, const double* now,
                      const FleetColumns& c, const FleetParams& p, unsigned* flags,
                      cudaStream_t st) {
  const unsigned grid = blocks_for(n_ids, 256, kStrideBlocks);
  V* visits = static_cast<V*>(c.visits);
  launch(bump_kernel<V>, grid, 256, 0, st, ids, n_ids, now, visits, c.last_access);
  const float fa = static_cast<float>(p.a), fb = static_cast<float>(p.b),
              fc = static_cast<float>(p.c);
  const double inv_mu = 1.0 / p.mu;
  switch (c.len_kind) {
    case ColKind::F32:
      launch(heat_kernel<V, float>, grid, 256, 0, st, ids, n_ids, now, visits,
             static_cast<const float*>(c.interaction_len), c.last_access, fa, fb, fc, inv_mu,
             c.heat, flags);
      break;
    case ColKind::I32:
      launch(heat_kernel<V, int32_t>, grid, 256, 0, st, ids, n_ids, now, visits,
             static_cast<const int32_t*>(c.interaction_len), c.last_access, fa, fb, fc, inv_mu,
             c.heat, flags);
      break;
    case ColKind::I64:
      launch(heat_kernel<V, int64_t>, grid, 256, 0, st, ids, n_ids, now, visits,
             static_cast<const int64_t*>(c.interaction_len), c.last_access, fa, fb, fc, inv_mu,
             c.heat, flags);
      break;
  }
}

// Segment-length bucket: the scan grid's blocks per query, rounded up to a power of two so that
// agents of slowly growing size keep one graph.
std::size_t segment_blocks(std::size_t longest) {
  const std::size_t need = std::max<std::size_t>(1, (longest + detail::kSegmentRowsPerBlock - 1) /
                                                        detail::kSegmentRowsPerBlock);
  std::size_t b = 1;
  while (b < need) b *= 2;
  return b;
}

}  // namespace

FleetStep::FleetStep(std::shared_ptr<CudaVectorArena> arena, FleetParams params)
    : arena_(std::move(arena)), p_(std::move(params)) {
  LAMINA_CHECK(arena_ != nullptr, "the fleet step needs an arena");
  const std::size_t L = p_.layers.size();
  LAMINA_CHECK(L >= 1 && L <= 256, "layers must name 1 to 256 arena layers, got ", L);
  {
    std::vector<uint8_t> s(p_.layers);
    std::sort(s.begin(), s.end());
    LAMINA_CHECK(std::adjacent_find(s.begin(), s.end()) == s.end(),
                 "layers contains a layer more than once; name each layer once");
  }
  LAMINA_CHECK(p_.k >= 1 && p_.k <= kMaxK, "k must be in [1, ", kMaxK, "] on the GPU, got ", p_.k);
  LAMINA_CHECK(p_.metric == Metric::IP || p_.metric == Metric::Cosine,
               "the fleet step's metric must be 'ip' or 'cosine' (the gate needs higher-is-better "
               "scores); 'l2' is not supported");
  LAMINA_CHECK(p_.relevance_top >= 1 && p_.relevance_top <= p_.k,
               "relevance_top must be in [1, k] = [1, ", p_.k, "], got ", p_.relevance_top);
  LAMINA_CHECK(std::isfinite(p_.beta) && std::fabs(p_.beta) <= FLT_MAX, "beta = ", p_.beta,
               " is not a finite float32 value");
  if (p_.has_max_entropy) {
    LAMINA_CHECK(p_.beta > 0.0, "beta = ", p_.beta,
                 " must be > 0 when max_entropy is given (doubling beta sharpens the gate only "
                 "for beta > 0)");
    LAMINA_CHECK(std::isfinite(p_.max_entropy) && p_.max_entropy >= 0.0,
                 "max_entropy (epsilon) must be finite and >= 0, got ", p_.max_entropy);
    LAMINA_CHECK(p_.max_doublings >= 0 && p_.max_doublings <= 1024,
                 "max_doublings must be in [0, 1024], got ", p_.max_doublings);
  }
  LAMINA_CHECK(std::isfinite(p_.a) && std::isfinite(p_.b) && std::isfinite(p_.c),
               "the heat weights a, b, c must be finite, got ", p_.a, ", ", p_.b, ", ", p_.c);
  LAMINA_CHECK(std::isfinite(p_.mu) && p_.mu > 0.0,
               "mu (the recency time scale, seconds) must be finite and > 0, got ", p_.mu);
  if (p_.oversample > 0) {
    LAMINA_CHECK(arena_->codec() != Codec::None,
                 "oversample > 0 needs an arena with a codec (VectorArena(..., codec=...))");
    LAMINA_CHECK(p_.oversample <= kMaxK / p_.k, "k * oversample must be at most ", kMaxK,
                 " on the GPU, got k=", p_.k, ", oversample=", p_.oversample);
  }
  device_ = arena_->device();
  DeviceGuard g(device_);
  cudaStream_t s;
  LAMINA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
}

FleetStep::~FleetStep() {
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) return;  // driver gone (interpreter shutdown)
  cudaSetDevice(device_);
  cudaStreamSynchronize(as_stream(stream_));
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (ws_block_) cudaFree(ws_block_);
  if (host_) cudaFreeHost(host_);
  if (d_params_) cudaFree(d_params_);
  cudaStreamDestroy(as_stream(stream_));
  cudaSetDevice(prev);
}

FleetStats FleetStep::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

void FleetStep::reserve_host(std::size_t bytes) {
  if (host_ && bytes <= host_bytes_) return;
  const std::size_t cap = std::max<std::size_t>(bytes, 2 * host_bytes_);
  // no step is in flight (each one synchronises before it returns)
  if (host_) LAMINA_CUDA_CHECK(cudaFreeHost(host_));
  if (d_params_) LAMINA_CUDA_CHECK(cudaFree(d_params_));
  host_ = nullptr;
  d_params_ = nullptr;
  host_bytes_ = 0;
  void* h = nullptr;
  LAMINA_CUDA_CHECK(cudaHostAlloc(&h, cap, cudaHostAllocMapped | cudaHostAllocPortable));
  host_ = static_cast<unsigned char*>(h);
  void* d = nullptr;
  LAMINA_CUDA_CHECK(cudaMalloc(&d, cap));
  d_params_ = static_cast<unsigned char*>(d);
  host_bytes_ = cap;
}

void FleetStep::grow_workspace(std::size_t bytes) {
  if (ws_block_ && bytes <= ws_cap_) return;
  const std::size_t cap = std::max<std::size_t>(bytes + bytes / 4, std::size_t(1) << 20);
  LAMINA_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
  if (ws_block_) LAMINA_CUDA_CHECK(cudaFree(ws_block_));
  ws_block_ = nullptr;
  ws_cap_ = 0;
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, cap);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error("out of device memory for the fleet step's workspace (" +
                             std::to_string(cap) + " bytes: " + cudaGetErrorString(e) + ")");
  }
  ws_block_ = p;
  ws_cap_ = cap;
}

// The step's stream work. Everything it reads from the host (now, the segments) comes through
// the one copy from the pinned block, so the same sequence is valid eagerly and in a graph.
void FleetStep::enqueue(const CudaVectorArena::SearchView& v, const Staged& sg,
                        std::size_t nq, std::size_t max_segment, const FleetColumns& cols,
                        const FleetOutputs& out) {
  const cudaStream_t st = as_stream(stream_);
  detail::Workspace ws{static_cast<char*>(ws_block_), ws_cap_};
  unsigned* flags = reinterpret_cast<unsigned*>(host_);
  const std::size_t L = p_.layers.size(), k = p_.k;
  {
    detail::Scratch scr(st, &ws);
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(d_params_ + kWordBytes, host_ + kWordBytes,
                                      sg.bytes - kWordBytes, cudaMemcpyHostToDevice, st));
    const double* d_now = reinterpret_cast<const double*>(d_params_ + kWordBytes);
    const int64_t* d_seg = reinterpret_cast<const int64_t*>(d_params_ + kHostHead);
    const auto* qcodes = static_cast<const detail::DeviceQueryCodes*>(sg.query_codes);
    float* lay_s = scr.alloc<float>(L * nq * k);
    int64_t* lay_i = scr.alloc<int64_t>(L * nq * k);
    for (std::size_t l = 0; l < L; ++l) {
      // the (namespace, layer) ranges of the CSR: only this layer's rows are read; the live mask
      // skips removed rows (they sit in the range of namespace 0, layer 0)
      DeviceFilter f;
      f.live = v.live;
      f.use_row_list = true;
      f.row_list = v.csr;
      f.row_list_len = v.high_water;
      f.segments = d_seg + 2 * l * nq;
      f.max_segment = max_segment;
      if (qcodes) {  // the code scan's k·r candidates, re-scored exactly (search_codes_locked)
        const std::size_t m = k * p_.oversample;
        uint32_t* cand = scr.alloc<uint32_t>(nq * m);
        int64_t* cseg = scr.alloc<int64_t>(2 * nq);
        detail::code_enqueue(*qcodes, nq, v.codes, v.high_water, f, m, p_.metric, cand, cseg,
                             scr, flags + kCodeWords, st);
        f = candidate_filter(cand, cseg, nq, m);
      }
      detail::topk_enqueue(sg.queries, nq, v.rows, v.high_water, f, k, p_.metric,
                           v.generations, lay_s + l * nq * k, lay_i + l * nq * k, scr, flags, st);
    }
    const int iL = static_cast<int>(L);
    launch(finish_kernel, blocks_for(nq * L, 128, kStrideBlocks), 128, 0, st, lay_s, lay_i, nq, iL,
           static_cast<int>(k), static_cast<int>(p_.relevance_top), out.scores, out.ids,
           out.relevance);
    launch(gate_kernel, blocks_for(nq, 128, kStrideBlocks), 128, 0, st, out.relevance, nq, iL,
           p_.beta, p_.has_max_entropy, static_cast<float>(p_.max_entropy), p_.max_doublings,
           out.gamma, out.beta_used, flags);
    const std::size_t n_ids = nq * L * k;
    switch (cols.visits_kind) {
      case ColKind::F32: launch_bump_heat<float>(out.ids, n_ids, d_now, cols, p_, flags, st); break;
      case ColKind::I32: launch_bump_heat<int32_t>(out.ids, n_ids, d_now, cols, p_, flags, st); break;
      case ColKind::I64: launch_bump_heat<int64_t>(out.ids, n_ids, d_now, cols, p_, flags, st); break;
    }
  }
  ws_need_ = ws.need;
  if (ws.overflow) throw std::length_error("workspace");  // only while capturing; see capture()
}

void FleetStep::capture(const CudaVectorArena::SearchView& v, const Staged& sg,
                        std::size_t nq, std::size_t max_segment, const FleetColumns& cols,
                        const FleetOutputs& out) {
  const cudaStream_t st = as_stream(stream_);
  for (int attempt = 0; attempt < 3; ++attempt) {
    cudaGraph_t graph = nullptr;
    LAMINA_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    bool grow = false;
    try {
      enqueue(v, sg, nq, max_segment, cols, out);
    } catch (const std::length_error&) {
      grow = true;
    } catch (...) {
      cudaStreamEndCapture(st, &graph);  // leave the stream usable
      cudaGetLastError();
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    LAMINA_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    ++stats_.captures;
    if (grow) {  // the graph used the workspace's base for what did not fit: never run it
      cudaGraphDestroy(graph);
      grow_workspace(ws_need_);
      continue;
    }
    cudaGraphExec_t exec = static_cast<cudaGraphExec_t>(exec_);
    if (exec) {
#if CUDART_VERSION >= 12000
      cudaGraphExecUpdateResultInfo info{};
      const cudaError_t e = cudaGraphExecUpdate(exec, graph, &info);
#else
      cudaGraphNode_t err_node = nullptr;
      cudaGraphExecUpdateResult res{};
      const cudaError_t e = cudaGraphExecUpdate(exec, graph, &err_node, &res);
#endif
      if (e == cudaSuccess) {
        ++stats_.updates;
      } else {  // another topology (or a refused change): instantiate afresh
        cudaGetLastError();
        cudaGraphExecDestroy(exec);
        exec = nullptr;
        exec_ = nullptr;
      }
    }
    if (!exec) {
#if CUDART_VERSION >= 12000
      const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
#else
      const cudaError_t e = cudaGraphInstantiate(&exec, graph, nullptr, nullptr, 0);
#endif
      cudaGraphDestroy(graph);
      LAMINA_CUDA_CHECK(e);
      exec_ = exec;
      ++stats_.instantiations;
    } else {
      cudaGraphDestroy(graph);
    }
    return;
  }
  throw std::logic_error("lamina internal error: the fleet step's workspace kept overflowing");
}

void FleetStep::run(const float* queries, bool host_queries, std::size_t nq,
                    const uint64_t* ns, double now, const FleetColumns& cols,
                    const FleetOutputs& out, bool graph, void* stream) {
  LAMINA_CHECK(std::isfinite(now), "now must be finite (seconds), got ", now);
  if (nq == 0) return;
  LAMINA_CHECK(nq <= 0x7fffffffull, "too many queries in one step");
  std::lock_guard lk(mu_);
  DeviceGuard g(device_);
  auto arena_lock = arena_->read_lock();
  const std::size_t L = p_.layers.size(), dim = arena_->dim();
  const bool coded = p_.oversample > 0;
  // the staged layout (see kWordBytes)
  const std::size_t off_q = align256(kHostHead + 16 * nq * L);
  const std::size_t off_c = align256(off_q + (host_queries ? nq * dim * sizeof(float) : 0));
  const std::size_t end =
      off_c + (coded ? detail::query_codes_bytes(arena_->codec(), nq, dim) : 0);
  std::vector<float> read_back;  // device queries the host must encode
  const float* hq = host_queries ? queries : nullptr;
  if (coded && !host_queries) {
    read_back.resize(nq * dim);
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(read_back.data(), queries, read_back.size() * sizeof(float),
                                      cudaMemcpyDeviceToHost, as_stream(stream)));
    LAMINA_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
    hq = read_back.data();
  }
  reserve_host(end);
  Staged sg;
  sg.bytes = end;
  sg.queries = queries;
  if (host_queries) {
    std::memcpy(host_ + off_q, queries, nq * dim * sizeof(float));
    sg.queries = reinterpret_cast<const float*>(d_params_ + off_q);
  }
  detail::DeviceQueryCodes qc;
  if (coded) {  // ValueError on NaN/Inf or (cosine) zero queries, before any launch
    qc = detail::stage_query_codes(arena_->codec(), hq, nq, dim, p_.metric, host_ + off_c,
                                   d_params_ + off_c);
    sg.query_codes = &qc;
  }
  std::size_t longest = 0;
  const CudaVectorArena::SearchView v =
      arena_->search_view(ns, nq, p_.layers.data(), L,
                          reinterpret_cast<int64_t*>(host_ + kHostHead), &longest);
  LAMINA_CHECK(v.live_count > 0, "the arena is empty; add vectors before searching");
  LAMINA_CHECK(cols.n >= v.high_water, "the heat columns have ", cols.n,
               " entries but the arena has ", v.high_water,
               " rows; give one entry per arena row (index: slot & 0xffffffff)");
  const std::size_t blocks = segment_blocks(longest);
  LAMINA_CHECK(blocks <= 65535, "an agent's namespace is too large for one GPU launch");
  std::memcpy(host_ + kWordBytes, &now, sizeof now);
  for (std::size_t i = 0; i < kWordBytes / sizeof(unsigned); ++i)
    reinterpret_cast<volatile unsigned*>(host_)[i] = 0u;
  const cudaStream_t st = as_stream(stream_);
  stream_wait(stream_, stream);
  stream_wait(stream_, arena_->stream());
  const std::size_t max_segment = blocks * detail::kSegmentRowsPerBlock;
  try {
    if (!graph) {
      enqueue(v, sg, nq, max_segment, cols, out);  // overflow falls back to cudaMallocAsync
      ++stats_.eager;
    } else {
      if (!ws_block_) grow_workspace(0);
      // What the captured graph has baked in: shapes, every pointer its nodes use (the arena's
      // columns move when it grows or rebuilds its index), the column types. The arena's row
      // count is not in it: the segmented scan reads only the segments, which every launch
      // copies afresh.
      Key key;
      key.nq = nq;
      key.blocks = blocks;
      key.kinds = static_cast<int>(cols.visits_kind) * 4 + static_cast<int>(cols.len_kind);
      key.host_queries = host_queries;
      key.ptrs = {sg.queries, out.scores, out.ids, out.relevance, out.gamma, out.beta_used,
                  cols.visits, cols.interaction_len, cols.last_access, cols.heat, v.rows.base,
                  v.rows.sqnorms, v.live, v.layers, v.generations, v.csr, v.codes.base,
                  v.codes.factor, v.codes.count, host_, d_params_, ws_block_};
      if (!exec_ || !(key == key_)) {
        key_ = Key{};  // a failed capture leaves no stale key behind
        capture(v, sg, nq, max_segment, cols, out);
        key.ptrs.back() = ws_block_;  // capture() may have grown it
        key_ = key;
      }
      LAMINA_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), st));
      ++stats_.replays;
    }
    LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
  } catch (...) {
    // nothing of this step may still run when the next one rewrites the pinned block
    cudaStreamSynchronize(st);
    cudaGetLastError();
    throw;
  }
  if (!graph && ws_need_ > ws_cap_) grow_workspace(ws_need_);  // the next steps fit
  const volatile unsigned* w = reinterpret_cast<const volatile unsigned*>(host_);
  detail::topk_raise(w[detail::kTopkBadQuery], w[detail::kTopkZeroQuery],
                     w[detail::kTopkNonFinite]);
  LAMINA_CHECK(!w[kGateBad], "a layer relevance is NaN or Inf (scores overflow float32 when "
               "summed); pass vectors of moderate magnitude");
  detail::code_raise(w[kCodeWords + detail::kCodeNonFinite]);
  LAMINA_CHECK(!w[kHeatBad], "a bumped heat is NaN/Inf or overflows float32; check the heat "
               "columns (finite visits, interaction_len, last_access in seconds) and the weights");
}

}  // namespace lamina::cuda
