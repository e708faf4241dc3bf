// cuda/model.hpp — the llama forward on a CUDA device in fp16 (the CPU path of
// lamina/model.hpp is its oracle). Includable from plain C++ (no CUDA headers).
//
// Weights: every matrix dequantised to fp16 on the host (lamina/model_f16.hpp) and uploaded
// once; Q, K and V are stored as one fused matrix, and so are the FFN's gate and up. Norm
// weights stay float32. Matmuls multiply fp16 weights with float32 activations, accumulating
// in float32: a GEMV for calls of up to kGemvMaxTokens tokens (a warp per output row, 16-byte
// weight loads, every token of the call against the row held in registers) and a tiled GEMM
// otherwise (64 × 64 output tiles, the weight tile converted to float32 in shared memory).
// No cuBLAS: the module links only cudart_static.
//
// RoPE is llama.cpp's adjacent-pair layout with the CPU model's rotation tables (computed on
// the host in double precision, as cpp/model.cpp does, and uploaded per call). Ms-PoE
// (lamina::model::PositionScaling): on a cache's first call the rescaled layers' heads are
// scored on the device (the outlier share of the last query's un-rotated softmax row, as on
// the CPU) and assigned their ratios on the host, layer by layer; a rescaled query head is
// rotated at p / r and attends over the KV head's scaled keys, which the cache keeps beside
// the plain ones (memory × 1.5, as on the CPU). The window variant (window > 0) keeps the
// query plain and adds a far copy rotated at p / r + window · (1 - 1/r): the entries at
// position <= p - window (counted on the host from the cache's positions, per layer, KV head
// and query) are scored with the far query against the scaled keys, the nearer ones with the
// plain query against the plain keys, in one softmax (the CPU merges two softmaxes by their
// partition functions: the same numbers up to rounding).
// Single-channel scaling (lamina::model::ChannelScaling) as on the CPU: the scaled query /
// key is the plain projection plus (factor - 1) · hn[channel] · the weights' column (here the
// fp16 column the device multiplies with), added before RoPE (channel_scale); in last-tokens
// mode the cache keeps a scaled copy of every key and the last queries read it.
//
// Attention: grouped-query, causal, online softmax in float32 over the fp16 cache; a warp per
// (token, query head, key split), keys 32 at a time (a lane per key for the dot products, a
// lane per dimension for the values); calls with few queries split the keys (split-K, partial
// softmaxes merged in a second kernel), so a decode step over a long cache spreads over the
// device.
//
// KV cache (DeviceKVCache): per (layer, KV head) its own device allocation of fp16 keys
// (after RoPE), values (and scaled keys under Ms-PoE) with its own length, so a head-wise
// budget holds fewer entries and frees the rest (keep() reallocates to exactly the kept
// entries). Token positions are kept on the host (they are only read there). nbytes() is the
// device memory held (capacity, not length).
//
// Streams: the model owns one stream; forward() returns after the logits are on the host.
// The cache's own operations (keep, clone, keys, ...) are synchronous. Not thread-safe per
// cache; forwards on one model are serialised by a mutex (the activation scratch is per call,
// but the simple rule costs nothing for a single sequence).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "lamina/model.hpp"

namespace lamina::cuda::model {

using lamina::model::ChannelScaling;
using lamina::model::Config;
using lamina::model::Logits;
using lamina::model::PositionScaling;
using lamina::model::QType;

/// Calls with at most this many tokens use the GEMV kernel; longer ones the tiled GEMM.
constexpr std::size_t kGemvMaxTokens = 8;
/// Largest head dimension the attention kernel takes (8 floats of accumulator per lane).
constexpr int kMaxHeadDim = 256;

// ---- launchers (raw device pointers, sizes, a cudaStream_t passed as void*) -------------------
// Every launch is checked (configuration errors throw std::runtime_error); faults surface at the
// caller's next synchronisation. `w` points to fp16 (binary16) values.

/// Y[t·ldy + n] (+)= Σ_k X[t·K + k] · W[n·K + k] for t < T, n < N. K a multiple of 8,
/// W 16-byte aligned. GEMV kernel (T <= kGemvMaxTokens) or tiled GEMM, chosen by T.
void matmul_f16(const float* X, std::size_t T, std::size_t K, const void* w, std::size_t N,
                float* Y, std::size_t ldy, bool accumulate, void* stream);
/// x[t·d + j] = float(E[ids[t]·d + j]) (ids already checked against the vocabulary).
void embed_f16(const int32_t* ids, std::size_t T, const void* e, std::size_t d, float* x,
               void* stream);
/// out[t] = x[t] / rms(x[t]) · w, rows t < T of d floats.
void rmsnorm(const float* x, const float* w, std::size_t T, std::size_t d, float eps, float* out,
             void* stream);
/// out[t·F + j] = silu(gu[t·2F + j]) · gu[t·2F + F + j].
void swiglu(const float* gu, std::size_t T, std::size_t F, float* out, void* stream);

/// Per (layer, KV head) device pointers for one call: keys, values, scaled keys (or null)
/// and the entries held before the call (the call's entries are appended at len0 ..).
struct HeadSlot {
  void* k = nullptr;
  void* v = nullptr;
  void* ks = nullptr;
  unsigned long long len0 = 0;
};

/// RoPE and the cache append for one layer. qkv: T rows of (H + 2·Hk)·D floats (Q heads,
/// K heads, V heads). Query heads are rotated in place; keys rotated and written as fp16 to
/// slot len0 + t of their head (and, where kmap >= 0, rotated by the scaled table into ks),
/// values copied. rope: float2 (cos, sin) tables, [1 + Hk (+ Hk)][T][D/2]: table 0 the plain
/// angles, table 1 + r ratio index r's, table 1 + Hk + r (window variant) ratio index r's far
/// angles. qmap (H) / kmap (Hk): ratio index per head, -1 plain. slots: Hk device HeadSlots of
/// this layer. qfar (window variant, else null; T × H·D floats): a query head with qmap >= 0
/// is rotated by its far table into qfar row t, head hh, and by the plain table in place.
void rope_append(float* qkv, std::size_t T, int H, int Hk, int D, const float* rope,
                 const int* qmap, const int* kmap, const HeadSlot* slots, float* qfar,
                 void* stream);

/// Attention of the T queries of one layer over their KV heads' cache entries (causal: query
/// t sees the first len0 + t + 1 entries). q: rows of `ldq` floats, head hh at hh·D;
/// out: T × H·D. qmap: per query head, >= 0 reads the scaled keys; queries t >= t_dual read
/// the scaled keys too (channel scaling's last-tokens mode; T: none). max_len: the largest
/// len0 + T over the heads (sizes the key splits). Window variant (qfar and far both set, else
/// both null; not with t_dual < T): a query head with qmap >= 0 scores its KV head's entries
/// j < far[kv·T + t] with its far query (qfar, T × H·D floats, rope_append's) against the
/// scaled keys and the others with its plain query against the plain keys, in one softmax.
/// part: split-K scratch of attention_scratch_floats(T, H, D, max_len) floats.
void attention(const float* q, std::size_t ldq, std::size_t T, int H, int Hk, int D,
               const int* qmap, std::size_t t_dual, const HeadSlot* slots, std::size_t max_len,
               const float* qfar, const int* far, float* part, float* out, void* stream);

/// Single-channel scaling of one layer (lamina::model::ChannelScaling; before rope_append):
/// the projection of the input with channel `channel` scaled by factor = 1 + delta is the
/// plain one plus delta · hn[t·d + channel] · col (col: the fp16 weights' column, (H + Hk)·D
/// floats, query heads then KV heads). Query rows t >= t_q of qkv get it in place. Keys:
/// keys_copy false: every key row of qkv in place (the cache then holds scaled keys);
/// keys_copy true: qkv's keys stay plain and the scaled key of every t, rotated by the plain
/// table of `rope` (table 0 of rope_append's layout), is written as fp16 to slot len0 + t of
/// its head's scaled keys (ks).
void channel_scale(float* qkv, const float* hn, std::size_t T, std::size_t d, int channel,
                   float delta, int H, int Hk, int D, const float* col, std::size_t t_q,
                   bool keys_copy, const float* rope, const HeadSlot* slots, void* stream);
std::size_t attention_scratch_floats(std::size_t T, int H, int D, std::size_t max_len);

/// Ms-PoE scoring: share[hh] = the fraction of the last token's softmax row (query head hh,
/// un-rotated q · k over the call's T keys, scaled by 1/sqrt(D)) above 3/T.
void outlier_share(const float* qkv, std::size_t T, int H, int Hk, int D, float* share,
                   void* stream);

/// dst row i = src row idx[i] (rows of `row_elems` fp16 values), i < n.
void gather_rows_f16(const void* src, const int64_t* idx, std::size_t n, std::size_t row_elems,
                     void* dst, void* stream);

// ---- the cache and the model ---------------------------------------------------------------

/// One head of a DeviceKVCache: its fp16 block on the device and its positions on the host.
struct DeviceKVHead {
  void* mem = nullptr;  // [K cap·D][V cap·D][KS cap·D if scaled] fp16
  std::size_t cap = 0, len = 0;
  bool has_ks = false;
  std::vector<int32_t> pos;  // host, len entries
};

/// n_layers, n_kv_heads, head_dim, n_seen and length(layer, head) come from
/// lamina::model::HeadGrid (lamina/head_grid.hpp), as for the host KVCache.
class DeviceKVCache : public lamina::model::HeadGrid<DeviceKVHead> {
 public:
  /// An empty cache on the current device.
  DeviceKVCache(int n_layers, int n_kv_heads, int head_dim);
  ~DeviceKVCache();
  DeviceKVCache(const DeviceKVCache&) = delete;
  DeviceKVCache& operator=(const DeviceKVCache&) = delete;
  /// An independent copy (entries, positions, seen count, Ms-PoE assignment, scaled keys;
  /// same capacity).
  std::unique_ptr<DeviceKVCache> clone() const;

  int device() const { return device_; }
  /// Device bytes held (keys, values, scaled keys; capacity), all heads.
  std::size_t bytes() const;
  /// Host copies (float32 from the fp16 store): length × head_dim, row-major.
  void keys(int layer, int head, float* out) const;
  void values(int layer, int head, float* out) const;
  const int32_t* positions(int layer, int head) const;

  /// As lamina::model::KVCache: keep entries idx (strictly increasing), reallocating exactly.
  void keep(int layer, int head, const int64_t* idx, std::size_t n);
  void truncate(int64_t n);
  void clear();
  void reserve(std::size_t n);

  // ---- used by DeviceModel::forward ---------------------------------------------------------
  bool scaled() const { return !ratio_index_.empty(); }
  void begin_scaled(int n_heads);
  /// True once a channel-scaled forward (last-tokens mode) keeps a scaled copy of every key.
  bool dual_keys() const { return dual_; }
  void begin_dual_keys();
  std::vector<int>& ratio_index() { return ratio_index_; }
  const std::vector<int>& ratio_index() const { return ratio_index_; }
  std::vector<float>& outlier_share() { return outlier_; }
  const std::vector<float>& outlier_share() const { return outlier_; }
  /// Room for n more entries on every head (growth by 1/8, at least 32 entries).
  void reserve_more(std::size_t n);
  /// The slot of (layer, head) for a call (pointers valid until the next reallocation).
  HeadSlot slot(int layer, int head) const;
  /// After a forward wrote n entries at positions n_seen() .. on every head.
  void commit(std::size_t n);

 private:
  using Head = DeviceKVHead;
  void realloc(Head& h, std::size_t cap, bool ks) const;
  int device_ = 0;
  std::vector<int> ratio_index_;
  std::vector<float> outlier_;
  bool dual_ = false;
  // Heads keep a third block of scaled keys (Ms-PoE or channel scaling's last-tokens mode).
  bool needs_ks() const { return scaled() || dual_; }
};

/// The host weights to upload: the CPU model's view (lamina::model::Weights, GGUF-stored rows;
/// `packed` must be false), checked by the same lamina::model::check_weights.
using HostMatrix = lamina::model::Matrix;
using HostLayer = lamina::model::Layer;
using HostWeights = lamina::model::Weights;

class DeviceModel {
 public:
  /// Checks the shapes (lamina::model::check_weights, ValueError naming the tensor; the CUDA
  /// path also needs multiples of 8 columns), dequantises every matrix to fp16 and uploads it
  /// to the current device.
  DeviceModel(const Config& cfg, const HostWeights& w, const PositionScaling& pos = {});
  ~DeviceModel();
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  const Config& config() const { return cfg_; }
  int device() const { return device_; }
  /// Device bytes of the weights.
  std::size_t weight_bytes() const { return weight_bytes_; }
  float ratio_of(int i) const;

  /// As lamina::model::Model::forward: ids host int32 [T], logits a host buffer (vocab or
  /// T × vocab floats, or null with Logits::None). `queries` (optional, host, L × q_window ×
  /// H × D floats): the last q_window queries of every layer after RoPE, from which the host
  /// computes an attention record (lamina/model_f16.hpp: window_attention_rows); q_window in
  /// [1, T], and not with position scaling (ValueError).
  void forward(const int32_t* ids, std::size_t T, DeviceKVCache& cache, Logits mode,
               float* logits, float* queries = nullptr, std::size_t q_window = 0);
  /// True when the model rescales positions (Ms-PoE) in some layer.
  bool scaled() const { return pos_.enabled && pos_.first_layer < cfg_.n_layers; }

  /// Set (or, with enabled = false, remove) single-channel scaling, as
  /// lamina::model::Model::set_channel_scaling (same checks, same ValueErrors): the channel's
  /// column of the layers' fp16 query / key weights is copied out on the device. Not
  /// thread-safe against forwards (set it before the model is shared).
  void set_channel_scaling(const ChannelScaling& cs);
  const ChannelScaling& channel_scaling() const { return chan_; }

 private:
  // forward()'s argument checks (ValueError), before it takes the lock.
  void check_forward(const int32_t* ids, std::size_t T, const DeviceKVCache& cache, Logits mode,
                     const float* logits, const float* queries, std::size_t q_window) const;
  struct DLayer {
    float* attn_norm = nullptr;
    float* ffn_norm = nullptr;
    void* wqkv = nullptr;  // (H + 2Hk)·D × d
    void* wo = nullptr;    // d × H·D
    void* wgu = nullptr;   // 2F × d
    void* wdown = nullptr; // d × F
  };
  Config cfg_;
  PositionScaling pos_;
  int device_ = 0;
  void* stream_ = nullptr;
  std::vector<void*> allocs_;
  std::vector<DLayer> layers_;
  void* embd_ = nullptr;
  void* out_ = nullptr;
  float* out_norm_ = nullptr;
  std::size_t weight_bytes_ = 0;
  ChannelScaling chan_;
  float* chan_cols_ = nullptr;  // per layer (H + Hk)·D floats: the channel's wq / wk column
  std::mutex mu_;
};

}  // namespace lamina::cuda::model
