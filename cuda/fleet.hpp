// cuda/fleet.hpp — the fleet step on a CUDA device: for a batch of agents, search their
// memories layer by layer, gate the layers and bump the heat of what was returned, as one CUDA
// graph launch (host launcher API, no CUDA headers).
//
// One step, for queries q = 0 .. nq-1 with namespaces ns[q] (one agent per query) over the
// rows of a CudaVectorArena, and L arena layer labels layers[0 .. L-1]:
//  1. search: for each layer l, the top-k of query q among the live rows of namespace ns[q]
//     with layer label layers[l] (topk.hpp's segmented scan over the arena's
//     (namespace, layer) ranges: one launch for all queries, each reading only its agent's rows
//     of that layer) -> scores / ids (nq, L, k), ids as arena handles, -1 / -inf padding.
//     Exact with oversample = 0; with oversample = r > 0 (an arena with a codec) the code scan
//     (codec.hpp) keeps k·r candidates per query and layer and the exact scan re-scores
//     them from the float rows, as CudaVectorArena::search does (the queries are encoded on the
//     host, so they are read back first when they are in device memory);
//  2. relevance r[q, l]: the mean of the first min(relevance_top, found) scores of that list,
//     summed best first in float32 and divided by the count in float32 (0 for an empty list);
//  3. gate: γ = softmax(β·r) per query with the entropy bound (lamina/gating.hpp), γ (nq, L)
//     and the β used (nq);
//  4. heat bump, for every returned handle h (row = h & 0xffffffff), once per time it was
//     returned: visits[row] += 1, last_access[row] = now; then heat[row] is recomputed with
//     lamina/heat.hpp's formula from the bumped columns.
// The CPU twin is lamina.fleet.FleetStep on a CPU arena (the test oracle). Steps 2-4 use the
// CPU's formulas (compiled with -fmad=false): given the same search results they give the same
// bits; the search scores may differ from the CPU's by float32 summation order.
//
// Graph: the step is captured once into a CUDA graph (stream capture on the step's own stream,
// no allocation, no synchronisation and no host read inside) and replayed. What changes from
// step to step without a new capture — the (namespace, layer) row ranges, `now`, and host
// queries or the queries' codes — is copied by the graph's first node from pinned host memory
// (written by the host before each launch) to a device block the step keeps. A new batch size,
// another segment-length bucket (a power of two of 2048-row blocks), other array pointers
// (device queries, outputs, columns), or an arena that grew or reallocated its index make a new
// capture, applied with cudaGraphExecUpdate (instantiated afresh when the update is refused). Every launch is followed by one synchronisation of the step's stream, after which
// the error words are read: errors are raised as lamina::ValueError as by the separate kernels.
//
// Streams: the step's stream waits for the caller's stream and the arena's stream before its
// work; the call returns when the work is done. Thread safety: one step at a time per object
// (an internal mutex); it holds the arena's reader lock for the step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "arena.hpp"
#include "kernels.hpp"

namespace lamina::cuda {

/// The fixed part of a fleet step (see above).
struct FleetParams {
  std::vector<uint8_t> layers;     // L >= 1 distinct arena layer labels, in gate order
  std::size_t k = 10;              // results per (query, layer), 1 .. kMaxK
  std::size_t oversample = 0;      // 0: exact; r > 0: code scan of k·r (an arena with a codec)
  Metric metric = Metric::IP;      // IP or Cosine (higher is better, as γ needs)
  std::size_t relevance_top = 3;   // 1 .. k
  double beta = 1.0;               // finite float32 value; > 0 with the entropy bound
  bool has_max_entropy = false;
  double max_entropy = 0.0;        // ε >= 0 (nats)
  int max_doublings = 32;          // 0 .. 1024
  double a = 1.0, b = 1.0, c = 1.0, mu = 1e7;  // heat weights and μ > 0 (seconds)
};

/// The heat columns, indexed by arena row (device pointers, n >= the arena's high water).
struct FleetColumns {
  void* visits = nullptr;  // N_visit, bumped in place
  ColKind visits_kind = ColKind::I64;
  const void* interaction_len = nullptr;
  ColKind len_kind = ColKind::I64;
  double* last_access = nullptr;  // set to `now` for returned rows
  float* heat = nullptr;          // recomputed for returned rows
  std::size_t n = 0;
};

/// The step's outputs (device pointers): scores, ids (nq, L, k); relevance, gamma (nq, L);
/// beta_used (nq).
struct FleetOutputs {
  float* scores = nullptr;
  int64_t* ids = nullptr;
  float* relevance = nullptr;
  float* gamma = nullptr;
  double* beta_used = nullptr;
};

/// Counters of how steps ran (for benchmarks and tests).
struct FleetStats {
  std::size_t eager = 0;           // steps run as separate launches (graph = false)
  std::size_t captures = 0;        // graphs captured (including ones redone after growth)
  std::size_t updates = 0;         // captures applied with cudaGraphExecUpdate
  std::size_t instantiations = 0;  // executable graphs instantiated
  std::size_t replays = 0;         // graph launches
};

class FleetStep {
 public:
  /// Checks the parameters (ValueError naming the bad one). The step keeps the arena alive.
  FleetStep(std::shared_ptr<CudaVectorArena> arena, FleetParams params);
  ~FleetStep();
  FleetStep(const FleetStep&) = delete;
  FleetStep& operator=(const FleetStep&) = delete;

  /// One step: queries (nq x dim float32, C-contiguous; on this arena's device, or in host
  /// memory when `host_queries`: then they travel with the step's one copy), ns (nq, host),
  /// now (finite seconds). graph = false runs the same kernels as separate launches (the
  /// baseline). ValueError: empty arena, columns shorter than the arena's rows, NaN/Inf or
  /// (cosine) zero queries, non-finite scores or heat; the outputs and columns may then be
  /// partly written.
  void run(const float* queries, bool host_queries, std::size_t nq, const uint64_t* ns,
           double now, const FleetColumns& columns, const FleetOutputs& out, bool graph,
           void* stream);

  const FleetParams& params() const { return p_; }
  int arena_device() const { return device_; }
  std::size_t dim() const { return arena_->dim(); }
  FleetStats stats() const;

 private:
  struct Key {
    std::size_t nq = 0, blocks = 0;
    int kinds = 0;
    bool host_queries = false;
    std::vector<const void*> ptrs;
    bool operator==(const Key& o) const {
      return nq == o.nq && blocks == o.blocks && kinds == o.kinds &&
             host_queries == o.host_queries && ptrs == o.ptrs;
    }
  };
  // What one step stages in the pinned block (copied to the same offsets of d_params_).
  struct Staged {
    std::size_t bytes = 0;             // end of the staged part (from offset 0)
    const float* queries = nullptr;    // the queries the scans read (device)
    const void* query_codes = nullptr; // detail::DeviceQueryCodes (host object) or null
  };
  void enqueue(const CudaVectorArena::SearchView& v, const Staged& sg, std::size_t nq,
               std::size_t max_segment, const FleetColumns& cols, const FleetOutputs& out);
  void capture(const CudaVectorArena::SearchView& v, const Staged& sg, std::size_t nq,
               std::size_t max_segment, const FleetColumns& cols, const FleetOutputs& out);
  void grow_workspace(std::size_t bytes);
  void reserve_host(std::size_t bytes);  // the pinned block and d_params_

  std::shared_ptr<CudaVectorArena> arena_;
  FleetParams p_;
  int device_ = 0;
  void* stream_ = nullptr;       // cudaStream_t owned by the step
  void* ws_block_ = nullptr;     // device workspace (persistent across replays)
  std::size_t ws_cap_ = 0;
  std::size_t ws_need_ = 0;
  unsigned char* host_ = nullptr;  // pinned, mapped: error words, then what is staged
  unsigned char* d_params_ = nullptr;  // device copy of the staged part (same offsets)
  std::size_t host_bytes_ = 0;
  void* exec_ = nullptr;         // cudaGraphExec_t
  Key key_;
  FleetStats stats_;
  mutable std::mutex mu_;
};

}  // namespace lamina::cuda
