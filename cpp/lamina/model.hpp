// lamina/model.hpp — a llama-architecture decoder on quantised weights, with a ragged KV cache.
//
// The forward of a llama-family model (RMSNorm, RoPE in llama.cpp's adjacent-pair layout,
// grouped-query attention, SwiGLU, final norm and output projection) over weights that stay in
// their GGUF encodings (GGML blocks of 32: Q4_0, Q4_1, Q8_0; or F16 / F32 rows). Nothing is
// dequantised ahead of time:
//   * decode (fewer than kGemmMinTokens rows: decode steps, and the last-token logits): a GEMV
//     per matrix that decodes each block in registers; by default the activation is quantised
//     to int8 per block of 32 and multiplied with integer dot products (llama.cpp's scheme),
//     optionally kept in float32 (q8_decode = false; per-block float sums of the activation
//     then carry the Q4_1 offset and the Q4_0 bias);
//   * prefill: a blocked GEMM that dequantises a panel of weight rows (panel_width rows × K,
//     stored k-major) into a per-thread float buffer, then runs a register-blocked FMA
//     micro-kernel over every token of the chunk.
// The loops are compiled once per ISA (cpp/model_kernels.inc in model_kernels_<isa>.cpp) and
// chosen at run time by lamina/isa.hpp's rule (model_dispatch.cpp), like every kernel family.
//
// Threads: one forward call starts one team through lamina::parallel_for (n_tasks = n_threads,
// each task a thread for the whole call). The call is a sequence of phases (embedding; per
// layer Q/K/V with RoPE and the cache append, attention, output projection, gate/up with
// SwiGLU, down projection; logits — plus RMSNorm phases on the prefill path, while decode
// threads recompute the few normalised rows themselves). A phase's chunks are handed out by an
// atomic counter and a phase ends when all its chunks are done (a completion count, not a
// barrier of threads), so a thread the OS deschedules on a shared machine holds up only the
// chunk it is in. Nothing inside the team throws: every check happens before it starts.
//
// KV cache: per (layer, KV head) a ragged list of entries — a key row and a value row of
// head_dim float32 each (keys stored after RoPE) and the token's absolute position. Heads may
// hold different numbers of entries (`keep` compacts one head to a sorted subset and gives the
// freed memory back), so a head-wise budget frees memory instead of masking. Attention of a
// query runs over its KV head's entries in storage order; the entries appended by the current
// call are causally masked (entry j of the call is visible to its queries i >= j).
//
// Position scaling (Ms-PoE, Zhang et al. 2024, "Found in the Middle"; optional; also in the
// CUDA forward, cuda/model.hpp, the window variant included):
// in layers [first_layer, n_layers) every KV head g is rotated at position p / r_g instead
// of p, queries and keys alike, with r_i = ratio_min + (ratio_max - ratio_min) · i / Hk.
// The ratios are assigned on the cache's first call (it must start empty): each query head's
// outlier share — the fraction of its last query's softmax row (un-rotated q · k, as the
// released code scores) above 3× the row mean — is averaged over its KV group, the groups
// are sorted by that score (descending, stable), and the order is applied as `order` says:
// Rank (group of rank k gets r_k: the most position-aware head the smallest ratio), Gather
// (group g gets r_{order[g]}: the released code indexes its ratio table with the permutation
// itself) or Normal (group g gets r_{Hk-1-g}, no scoring used). The cache remembers the
// assignment for every later call. Variants that keep local offsets exact: `window` > 0
// keeps a relative distance δ < window as is and maps δ >= window to window + (δ - window)/r
// (queries rotated at p/r + window·(1 - 1/r) for the far keys); `plain_heads` marks query
// heads (copy heads: previous-token / induction) that stay at ratio 1. The cache then keeps
// a second, scaled copy of every key (keys() stays the plain RoPE key).
//
// Single-channel hidden-state scaling (Yu et al. 2024, "Mitigate Position Bias in Large
// Language Models via Scaling a Single Dimension"; optional; also in the CUDA forward): in layers
// [first_layer, last_layer) channel `channel` of the attention input — the residual stream
// after the layer's RMSNorm, where the released code scales it — is multiplied by `factor`
// before the query and key projections (values are projected from the plain input, as the
// released code's default change_value = false does). Projections are linear, so the scaled
// query / key is the plain one plus (factor - 1) · hn[channel] · W[:, channel] (a rank-one
// correction with the dequantised column; factor 1 adds nothing). `last_tokens` = 0: every
// query and key of every call is scaled; `last_tokens` = n >= 1 (the released code's
// last_recompute_tokens): only the last n queries of each call are scaled and read the scaled
// keys of every entry, the call's other queries stay plain and read the plain keys. A decode
// step is the last token of its call, so every generated token reads through the scaled
// channel. In that mode the cache keeps both keys (the scaled copy in the storage Ms-PoE
// uses: KV memory ×1.5); the two options cannot be combined.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lamina/head_grid.hpp"

namespace lamina::model {

/// GGML tensor types read by the runtime (values are GGML's type ids).
enum class QType : int { F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 8 };

/// "F32", "F16", "Q4_0", "Q4_1", "Q8_0"; ValueError for any other name.
QType qtype_from_name(const std::string& name);
const char* qtype_name(QType t);
/// Bytes of one row of `cols` elements (cols a multiple of 32 for the block types;
/// ValueError otherwise).
std::size_t row_bytes(QType t, std::size_t cols);

/// A matrix (rows × cols, row-major, `cols` = the input width) in its stored encoding.
/// Non-owning: `data` must outlive the model (the Python side keeps the memory-mapped file).
/// A Model repacks every block-quantised matrix once into the layout of lamina/model_isa.hpp
/// (`packed` set, `data` its own copy), so the original may then be released.
struct Matrix {
  QType type = QType::F32;
  const void* data = nullptr;
  std::size_t rows = 0, cols = 0;
  bool packed = false;
};

/// Hyper-parameters (names as in python/lamina/model/gguf_file.py: LlamaConfig).
struct Config {
  int n_layers = 0, d_model = 0, d_ff = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int vocab_size = 0;
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
};

/// Weights of one block. Norm weights: F32 vectors of d_model (non-owning, like Matrix).
struct Layer {
  const float* attn_norm = nullptr;
  Matrix wq, wk, wv, wo;  // (H·D × d), (Hk·D × d), (Hk·D × d), (d × H·D)
  const float* ffn_norm = nullptr;
  Matrix w_gate, w_up, w_down;  // (d_ff × d), (d_ff × d), (d × d_ff)
};

struct Weights {
  Matrix token_embd;  // (vocab × d)
  std::vector<Layer> layers;
  const float* output_norm = nullptr;  // d
  Matrix output;                       // (vocab × d): token_embd when tied
};

/// How a query head's KV group is assigned its ratio (see the file comment).
enum class RatioOrder : int { Rank = 0, Gather = 1, Normal = 2 };

/// Ms-PoE settings of a model (see the file comment). `plain_heads`: n_layers × n_heads
/// flags (1: the query head stays at ratio 1), or empty.
struct PositionScaling {
  bool enabled = false;
  int first_layer = 2;
  float ratio_min = 1.2f, ratio_max = 1.8f;
  RatioOrder order = RatioOrder::Rank;
  int window = 0;
  std::vector<uint8_t> plain_heads;
};

/// Single-channel scaling settings of a model (see the file comment).
struct ChannelScaling {
  bool enabled = false;
  int first_layer = 0, last_layer = 0;  // layers [first_layer, last_layer)
  int channel = 0;                      // in [0, d_model)
  float factor = 1.0f;                  // finite
  int last_tokens = 1;                  // 0: every position; n >= 1: the last n of each call
};

/// The checks every forward (the CPU's Model and the CUDA DeviceModel) makes before it
/// takes a model: every size >= 1, n_heads a multiple of n_kv_heads, an even head_dim,
/// rms_eps and rope_base > 0. ValueError naming the field.
void check_config(const Config& c);
/// Every matrix of `w` has its shape under `c` and every norm weight is present; a
/// block-quantised matrix needs a multiple of 32 columns, and every matrix a multiple of
/// `col_multiple` (1: no further rule; the CUDA path passes 8). ValueError naming the tensor.
void check_weights(const Config& c, const Weights& w, std::size_t col_multiple = 1);
/// Ms-PoE's settings against the model shape (when enabled): first_layer in [0, n_layers],
/// 0 < ratio_min <= ratio_max (finite), window >= 0, plain_heads empty or n_layers × n_heads.
void check_position_scaling(const Config& c, const PositionScaling& p);
/// Channel scaling's settings against the model shape (when enabled): layers
/// 0 <= first_layer < last_layer <= n_layers, channel in [0, d_model), a finite factor,
/// last_tokens >= 0.
void check_channel_scaling(const Config& c, const ChannelScaling& cs);
/// What one forward call of T tokens over n_layers does with a channel scaling (both forwards
/// use it): layers [first, last) (n_layers, n_layers when off); in last-tokens mode (`dual`) the
/// queries t >= t_scaled are scaled and the cache keeps a scaled copy of every key (t_scaled is
/// T when off and 0 when every position is scaled).
struct ChannelSpan {
  std::size_t first, last, t_scaled;
  bool dual;
};
ChannelSpan channel_span(const ChannelScaling& cs, std::size_t n_layers, std::size_t T);
/// A cache starts keeping scaled keys only before its first call: ValueError when it already
/// holds `n_seen` tokens of a forward without channel scaling.
void check_dual_keys_start(int64_t n_seen);

/// Ratio r_i of Ms-PoE index i: ratio_min + (ratio_max - ratio_min) · i / n_kv_heads.
float ratio_of(const PositionScaling& p, int n_kv_heads, int i);
/// Ms-PoE's ratio assignment of one layer (both forwards): each KV head's score is the mean
/// outlier share of its n_heads / n_kv_heads query heads (`share`, n_heads floats); the KV
/// heads ranked by score (descending, stable) get ratio_index[n_kv_heads] as `order` says.
void assign_ratios(const float* share, int n_heads, int n_kv_heads, RatioOrder order,
                   int* ratio_index);
/// The RoPE rotation tables of T rows (both forwards; the CUDA one uploads them): table 0
/// holds the angles p_t·θ_i (p_t = positions[t], θ_i = rope_base^(-2i / head_dim)); with
/// Ms-PoE ratios r_j (j < n = ratios.size()) tables 1 + j hold (p_t / r_j)·θ_i and, when
/// window > 0, tables 1 + n + j the far queries' (p_t / r_j + window·(1 - 1/r_j))·θ_i.
/// Layout [table][t][head_dim / 2] of (cos, sin) float pairs; angles in double.
std::vector<float> rope_tables(const Config& c, const int64_t* positions, std::size_t T,
                               const std::vector<float>& ratios, std::size_t window);

/// One head of a KVCache: its entries' keys, values and positions.
struct KVCacheHead {
  std::vector<float> k, v, ks;  // ks: scaled keys (Ms-PoE), empty otherwise
  std::vector<int32_t> pos;
  std::size_t len = 0;
};

/// The KV cache of one sequence (see the file comment). Not thread-safe: one forward (or one
/// keep/clear) at a time per cache; distinct caches are independent. n_layers, n_kv_heads,
/// head_dim, n_seen and length(layer, head) come from HeadGrid (lamina/head_grid.hpp).
class KVCache : public HeadGrid<KVCacheHead> {
 public:
  KVCache(int n_layers, int n_kv_heads, int head_dim);

  /// Bytes of key, value and position storage allocated (capacity, not length), all heads.
  std::size_t bytes() const;
  /// Keys / values of (layer, head): length × head_dim float32, row-major; positions: length.
  const float* keys(int layer, int head) const;
  const float* values(int layer, int head) const;
  const int32_t* positions(int layer, int head) const;

  /// Keep only entries idx[0..n) of (layer, head) (strictly increasing, each < length) in that
  /// order; the storage is reallocated to exactly n entries (memory given back). ValueError on
  /// a bad index list.
  void keep(int layer, int head, const int64_t* idx, std::size_t n);
  /// Drop every entry and the seen-token count; frees the storage.
  void clear();
  /// Allocate room for `n` entries on every head holding fewer (never shrinks, never drops):
  /// a decoder kept at a fixed budget reserves the budget once and then never reallocates.
  void reserve(std::size_t n);
  /// Roll the cache back to its first `n` tokens (backtracking): every head drops its entries
  /// at position >= n and the seen-token count becomes n, so the next forward continues at
  /// position n. No recompute and no reallocation (capacity and nbytes stay; the next tokens
  /// reuse it); entries a press removed stay removed, Ms-PoE's ratio assignment is kept.
  /// O(entries dropped) per head. ValueError unless 0 <= n <= n_seen().
  void truncate(int64_t n);

  // ---- used by Model::forward -------------------------------------------------------
  /// Make room for `n` more entries on every head (amortised doubling).
  void reserve_more(std::size_t n);
  float* keys_mut(int layer, int head);
  float* values_mut(int layer, int head);
  int32_t* positions_mut(int layer, int head);
  /// After a forward wrote `n` entries past each head's length: commit them.
  void commit(std::size_t n);

  // ---- position scaling (Ms-PoE) ----------------------------------------------------------
  /// True once a scaled forward assigned the ratios (on the cache's first call).
  bool scaled() const { return !ratio_index_.empty(); }
  /// Ratio index (0 .. n_kv_heads-1) of (layer, KV head); -1: the layer is not rescaled.
  /// Empty until scaled().
  const std::vector<int>& ratio_index() const { return ratio_index_; }
  /// Outlier share of each (layer, query head) the assignment was made from (n_layers ×
  /// n_heads; 0 for layers not rescaled). Empty until scaled().
  const std::vector<float>& outlier_share() const { return outlier_; }
  /// Start storing scaled keys (called by the forward on the ranking call, cache empty).
  void begin_scaled(int n_heads);
  float* scaled_keys_mut(int layer, int head);
  const float* scaled_keys(int layer, int head) const;
  int* ratio_index_mut() { return ratio_index_.data(); }
  /// True once a channel-scaled forward (last-tokens mode) started keeping a scaled copy of
  /// every key next to the plain one (on the cache's first call).
  bool dual_keys() const { return dual_; }
  /// Start keeping the scaled key copy (cache empty).
  void begin_dual_keys();
  float* outlier_share_mut() { return outlier_.data(); }

 private:
  using Head = KVCacheHead;
  std::vector<int> ratio_index_;
  std::vector<float> outlier_;
  bool dual_ = false;
  bool second_keys() const { return dual_ || !ratio_index_.empty(); }
};

/// Which logits a forward writes.
enum class Logits { None, Last, All };

/// Attention probabilities recorded by a forward for KV-cache presses: for every layer and
/// query head, the softmax rows of the last `window` queries of the call over the entries of
/// their KV head. Requires every head to hold the same number S of entries after the call
/// (true until a head is compacted). Layout (L, H, window, S) float32, row-major; entries an
/// early query cannot see are 0.
/// `accumulated` (optional): Σ over every query of the call of its softmax row, per (layer,
/// query head, entry) — H2O's accumulated attention — (L, H, S) float32; with
/// `accumulate_max` the maximum over those queries instead of the sum (KVzip's score).
struct AttentionRecord {
  int window = 0;
  float* out = nullptr;          // L·H·window·S floats, S = cache length after the call
  float* accumulated = nullptr;  // L·H·S floats, or null
  bool accumulate_max = false;   // max over the call's queries instead of the sum
};

/// A llama-architecture model over quantised weights: F32/F16 tensors and the norms stay
/// non-owned; block-quantised matrices are repacked (owned) at construction. Thread-safe for concurrent
/// forwards on distinct caches (the model is read-only after construction).
class Model {
 public:
  /// Checks every shape against `cfg` (ValueError naming the tensor) and the position
  /// scaling against the shape (first_layer in [0, n_layers], 0 < ratio_min <= ratio_max,
  /// window >= 0, plain_heads empty or n_layers × n_heads).
  Model(const Config& cfg, Weights w, PositionScaling pos = {});

  const Config& config() const { return cfg_; }
  const PositionScaling& position_scaling() const { return pos_; }
  /// Ratio r_i of index i (ratio_min + (ratio_max - ratio_min) · i / n_kv_heads).
  float ratio_of(int i) const;

  /// Runs ids[0..T) (T >= 1, each in [0, vocab)) at positions cache.n_seen() .. + T - 1,
  /// appending their keys/values to `cache`. Writes logits: none, the last token's (vocab
  /// floats) or every token's (T × vocab, row-major) into `logits`. `record` (optional)
  /// captures attention rows for presses. `n_threads` <= 0: the core's default.
  /// `q8_decode`: on the GEMV path (T < kGemmMinTokens), multiply block-quantised weights with
  /// the activation quantised to int8 per block of 32 (llama.cpp's scheme: integer dot
  /// products, about 1.4x faster decode; logits within a mean KL of ~0.005 of float32 over
  /// 2,000 positions); false keeps the activation in float32 (the GEMM path always does).
  /// With position scaling, the first call on a cache assigns its ratios (the cache must
  /// be empty then: ValueError for a cache a plain forward filled).
  /// ValueError on bad ids, a cache of another shape, or a record on a ragged cache.
  /// `hidden` (optional): the residual stream after every layer, (L, T, d_model) float32,
  /// row-major (layer l's output rows of the call's tokens).
  /// With channel scaling in last-tokens mode the cache keeps both keys from its first call
  /// (ValueError for a non-empty cache a forward without it filled).
  void forward(const int32_t* ids, std::size_t T, KVCache& cache, Logits mode, float* logits,
               int n_threads, const AttentionRecord* record = nullptr,
               bool q8_decode = true, float* hidden = nullptr) const;

  /// A decode step of B independent sequences: token ids[b] is appended to caches[b] (at its
  /// own position caches[b]->n_seen()) and attends over that cache alone; logits: B × vocab
  /// floats, row b the next-token logits of sequence b. The matmuls run over the B rows
  /// together (as a B-token call: the weights are read once for all of them), so this costs
  /// about one decode step of a B-token prompt, not B steps. q8_decode as in forward (for
  /// B < kGemmMinTokens; from kGemmMinTokens rows the prefill's GEMM path and its q8_prefill
  /// setting apply). ValueError for B = 0, a missing or repeated cache, a cache of another
  /// shape, bad ids, or a model with Ms-PoE or channel scaling (not implemented batched).
  void forward_batch(const int32_t* ids, std::size_t B, KVCache* const* caches, float* logits,
                     int n_threads, bool q8_decode = true) const;

  /// Set (or, with enabled = false, remove) single-channel scaling (see the file comment).
  /// ValueError for layers outside 0 <= first_layer < last_layer <= n_layers, a channel
  /// outside [0, d_model), a non-finite factor, last_tokens < 0, or a model with Ms-PoE.
  /// Dequantises the query / key columns of the channel in those layers. Not thread-safe:
  /// set it before the model is shared between threads.
  void set_channel_scaling(const ChannelScaling& cs);
  const ChannelScaling& channel_scaling() const { return chan_; }

  /// Name of the ISA the kernels run on ("scalar", "avx2", "avx512").
  static const char* kernel_isa();

  /// The prefill (GEMM path) multiplies block-quantised weights with the activations
  /// quantised to int8 per block of 32, as q8_decode does on decode steps (true, the
  /// default), or with float32 activations on dequantised weight panels (false). Set before
  /// the model is shared between threads.
  void set_q8_prefill(bool on) { q8_prefill_ = on; }
  bool q8_prefill() const { return q8_prefill_; }

 private:
  Config cfg_;
  Weights w_;
  PositionScaling pos_;
  std::vector<std::vector<uint8_t>> packed_;  // the packed block matrices w_ points into
  bool q8_prefill_ = true;
  // forward (batch = false, caches[0]) and forward_batch (batch = true, T caches), run as
  // the stages of one Pass (model_forward.cpp).
  class Pass;
  void forward_impl(const int32_t* ids, std::size_t T, KVCache* const* caches, bool batch,
                    Logits mode, float* logits, int n_threads, const AttentionRecord* record,
                    bool q8_decode, float* hidden) const;
  ChannelScaling chan_;
  // Per layer of the scaled range: column `channel` of wq (H·D) and wk (Hk·D), float32.
  std::vector<std::vector<float>> chan_q_, chan_k_;
};

/// Tokens per call from which the forward uses the GEMM path instead of per-token GEMVs.
constexpr std::size_t kGemmMinTokens = 4;

}  // namespace lamina::model
