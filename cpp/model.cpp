// The llama forward and its KV cache (lamina/model.hpp).
#include "lamina/model.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "lamina/common.hpp"
#include "lamina/isa.hpp"
#include "lamina/model_isa.hpp"
#include "lamina/parallel.hpp"

namespace lamina::model {

// ---- types -----------------------------------------------------------------------------------
QType qtype_from_name(const std::string& name) {
  if (name == "F32") return QType::F32;
  if (name == "F16") return QType::F16;
  if (name == "Q4_0") return QType::Q4_0;
  if (name == "Q4_1") return QType::Q4_1;
  if (name == "Q8_0") return QType::Q8_0;
  throw ValueError("tensor type " + name + " is not supported (F32, F16, Q4_0, Q4_1, Q8_0)");
}

const char* qtype_name(QType t) {
  switch (t) {
    case QType::F32: return "F32";
    case QType::F16: return "F16";
    case QType::Q4_0: return "Q4_0";
    case QType::Q4_1: return "Q4_1";
    case QType::Q8_0: return "Q8_0";
  }
  return "?";
}

std::size_t row_bytes(QType t, std::size_t cols) {
  switch (t) {
    case QType::F32: return 4 * cols;
    case QType::F16: return 2 * cols;
    default: break;
  }
  LAMINA_CHECK(cols % 32 == 0, qtype_name(t), " rows need a multiple of 32 columns, got ", cols);
  const std::size_t nb = cols / 32;
  switch (t) {
    case QType::Q4_0: return 18 * nb;
    case QType::Q4_1: return 20 * nb;
    case QType::Q8_0: return 34 * nb;
    default: return 0;
  }
}

namespace {

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

// out[j * stride] = element j of a stored row, j < K.
void dequant_row(QType t, const uint8_t* row, std::size_t K, float* out, std::size_t stride) {
  switch (t) {
    case QType::F32: {
      const float* f = reinterpret_cast<const float*>(row);
      for (std::size_t j = 0; j < K; ++j) out[j * stride] = f[j];
      return;
    }
    case QType::F16:
      for (std::size_t j = 0; j < K; ++j) out[j * stride] = half_at(row + 2 * j);
      return;
    case QType::Q4_0:
      for (std::size_t b = 0; b < K / 32; ++b) {
        const uint8_t* blk = row + 18 * b;
        const float d = half_at(blk);
        float* o = out + 32 * b * stride;
        for (int j = 0; j < 16; ++j) {
          o[j * stride] = d * static_cast<float>((blk[2 + j] & 15) - 8);
          o[(j + 16) * stride] = d * static_cast<float>((blk[2 + j] >> 4) - 8);
        }
      }
      return;
    case QType::Q4_1:
      for (std::size_t b = 0; b < K / 32; ++b) {
        const uint8_t* blk = row + 20 * b;
        const float d = half_at(blk), m = half_at(blk + 2);
        float* o = out + 32 * b * stride;
        for (int j = 0; j < 16; ++j) {
          o[j * stride] = d * static_cast<float>(blk[4 + j] & 15) + m;
          o[(j + 16) * stride] = d * static_cast<float>(blk[4 + j] >> 4) + m;
        }
      }
      return;
    case QType::Q8_0:
      for (std::size_t b = 0; b < K / 32; ++b) {
        const uint8_t* blk = row + 34 * b;
        const float d = half_at(blk);
        const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
        float* o = out + 32 * b * stride;
        for (int j = 0; j < 32; ++j) o[j * stride] = d * static_cast<float>(q[j]);
      }
      return;
  }
}

// Element j of row r of a packed block matrix (lamina/model_isa.hpp), j < K, to out[j * stride].
void dequant_packed_row(const Matrix& m, std::size_t r, float* out, std::size_t stride) {
  const std::size_t nb = m.cols / 32, gb = misa::packed_block_bytes(m.type);
  const std::size_t g = r / misa::kPackRows, rr = r % misa::kPackRows;
  const uint8_t* base = static_cast<const uint8_t*>(m.data) + g * nb * gb;
  for (std::size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = base + b * gb;
    const float d = half_at(blk + 2 * rr);
    float* o = out + 32 * b * stride;
    if (m.type == QType::Q8_0) {
      for (std::size_t e = 0; e < 32; ++e)
        o[e * stride] = d * static_cast<float>(static_cast<int8_t>(blk[32 + 64 * (e / 4) + 4 * rr + e % 4]));
      continue;
    }
    const bool q41 = m.type == QType::Q4_1;
    const float off = q41 ? half_at(blk + 32 + 2 * rr) : 0.0f;
    const uint8_t* qs = blk + (q41 ? 64 : 32);
    for (std::size_t e = 0; e < 16; ++e) {
      const uint8_t byte = qs[64 * (e / 4) + 4 * rr + e % 4];
      const int lo = (byte & 15) - (q41 ? 0 : 8), hi = (byte >> 4) - (q41 ? 0 : 8);
      o[e * stride] = d * static_cast<float>(lo) + off;
      o[(e + 16) * stride] = d * static_cast<float>(hi) + off;
    }
  }
}

// Row r of a matrix (packed or stored) to out[j * stride], j < cols.
void dequant(const Matrix& m, std::size_t r, float* out, std::size_t stride) {
  if (m.packed) return dequant_packed_row(m, r, out, stride);
  dequant_row(m.type, static_cast<const uint8_t*>(m.data) + r * row_bytes(m.type, m.cols), m.cols,
              out, stride);
}

// The packed copy of a block-quantised matrix (lamina/model_isa.hpp) into `store`.
Matrix pack(const Matrix& m, std::vector<uint8_t>& store) {
  const std::size_t nb = m.cols / 32, gb = misa::packed_block_bytes(m.type);
  const std::size_t bb = gb / misa::kPackRows, rb = row_bytes(m.type, m.cols);
  const std::size_t groups = (m.rows + misa::kPackRows - 1) / misa::kPackRows;
  const std::size_t head = m.type == QType::Q4_1 ? 4 : 2;  // scale (+ offset) bytes
  const std::size_t slices = m.type == QType::Q8_0 ? 8 : 4;
  store.assign(groups * nb * gb, 0);
  const uint8_t* src = static_cast<const uint8_t*>(m.data);
  for (std::size_t r = 0; r < m.rows; ++r) {
    const std::size_t g = r / misa::kPackRows, rr = r % misa::kPackRows;
    for (std::size_t b = 0; b < nb; ++b) {
      const uint8_t* blk = src + r * rb + b * bb;
      uint8_t* dst = store.data() + (g * nb + b) * gb;
      std::memcpy(dst + 2 * rr, blk, 2);
      if (head == 4) std::memcpy(dst + 32 + 2 * rr, blk + 2, 2);
      const std::size_t q0 = 16 * head;  // 32 or 64: where the slices start
      for (std::size_t j = 0; j < slices; ++j)
        std::memcpy(dst + q0 + 64 * j + 4 * rr, blk + head + 4 * j, 4);
    }
  }
  Matrix out = m;
  out.data = store.data();
  out.packed = true;
  return out;
}

void check_matrix(const Matrix& m, const char* name, std::size_t rows, std::size_t cols,
                  std::size_t col_multiple) {
  LAMINA_CHECK(m.data != nullptr, name, ": missing tensor");
  LAMINA_CHECK(m.rows == rows && m.cols == cols, name, " has shape (", m.rows, ", ", m.cols,
               "), expected (", rows, ", ", cols, ")");
  LAMINA_CHECK(m.type == QType::F32 || m.type == QType::F16 || cols % 32 == 0, name,
               ": block-quantised rows need a multiple of 32 columns");
  LAMINA_CHECK(cols % col_multiple == 0, name, ": this path needs a multiple of ", col_multiple,
               " columns, got ", cols);
}


}  // namespace

// ---- checks shared with the CUDA forward -------------------------------------------------------
void check_config(const Config& c) {
  LAMINA_CHECK(c.n_layers >= 1 && c.d_model >= 1 && c.d_ff >= 1 && c.n_heads >= 1 &&
                   c.n_kv_heads >= 1 && c.head_dim >= 2 && c.vocab_size >= 1,
               "model config: every size must be >= 1");
  LAMINA_CHECK(c.n_heads % c.n_kv_heads == 0, "model config: n_heads (", c.n_heads,
               ") must be a multiple of n_kv_heads (", c.n_kv_heads, ")");
  LAMINA_CHECK(c.head_dim % 2 == 0, "model config: head_dim must be even");
  LAMINA_CHECK(c.rms_eps > 0 && c.rope_base > 0, "model config: rms_eps and rope_base must be > 0");
}

void check_weights(const Config& c, const Weights& w, std::size_t col_multiple) {
  LAMINA_CHECK(col_multiple >= 1, "check_weights: col_multiple must be >= 1");
  const std::size_t d = c.d_model, F = c.d_ff, V = c.vocab_size;
  const std::size_t qd = static_cast<std::size_t>(c.n_heads) * c.head_dim;
  const std::size_t kd = static_cast<std::size_t>(c.n_kv_heads) * c.head_dim;
  check_matrix(w.token_embd, "token_embd", V, d, col_multiple);
  check_matrix(w.output, "output", V, d, col_multiple);
  LAMINA_CHECK(w.output_norm != nullptr, "output_norm: missing tensor");
  LAMINA_CHECK(w.layers.size() == static_cast<std::size_t>(c.n_layers), "model has ",
               w.layers.size(), " layers, config says ", c.n_layers);
  for (const Layer& L : w.layers) {
    LAMINA_CHECK(L.attn_norm && L.ffn_norm, "a layer is missing a norm weight");
    check_matrix(L.wq, "attn_q", qd, d, col_multiple);
    check_matrix(L.wk, "attn_k", kd, d, col_multiple);
    check_matrix(L.wv, "attn_v", kd, d, col_multiple);
    check_matrix(L.wo, "attn_output", d, qd, col_multiple);
    check_matrix(L.w_gate, "ffn_gate", F, d, col_multiple);
    check_matrix(L.w_up, "ffn_up", F, d, col_multiple);
    check_matrix(L.w_down, "ffn_down", d, F, col_multiple);
  }
}

void check_position_scaling(const Config& c, const PositionScaling& p) {
  if (!p.enabled) return;
  LAMINA_CHECK(p.first_layer >= 0 && p.first_layer <= c.n_layers, "ms-poe: first_layer (",
               p.first_layer, ") must be in [0, n_layers = ", c.n_layers, "]");
  LAMINA_CHECK(p.ratio_min > 0 && p.ratio_min <= p.ratio_max && std::isfinite(p.ratio_max),
               "ms-poe: need 0 < ratio_min <= ratio_max (finite), got ", p.ratio_min, ", ",
               p.ratio_max);
  LAMINA_CHECK(p.window >= 0, "ms-poe: window must be >= 0, got ", p.window);
  LAMINA_CHECK(p.plain_heads.empty() ||
                   p.plain_heads.size() == static_cast<std::size_t>(c.n_layers) * c.n_heads,
               "ms-poe: plain_heads must hold n_layers × n_heads flags, got ", p.plain_heads.size());
}

void check_channel_scaling(const Config& c, const ChannelScaling& cs) {
  if (!cs.enabled) return;
  LAMINA_CHECK(cs.first_layer >= 0 && cs.first_layer < cs.last_layer && cs.last_layer <= c.n_layers,
               "channel scaling: layers [", cs.first_layer, ", ", cs.last_layer,
               ") must satisfy 0 <= first < last <= n_layers = ", c.n_layers);
  LAMINA_CHECK(cs.channel >= 0 && cs.channel < c.d_model, "channel scaling: channel ", cs.channel,
               " is outside [0, d_model = ", c.d_model, ")");
  LAMINA_CHECK(std::isfinite(cs.factor), "channel scaling: factor must be finite, got ", cs.factor);
  LAMINA_CHECK(cs.last_tokens >= 0, "channel scaling: last_tokens must be >= 0, got ", cs.last_tokens);
}

ChannelSpan channel_span(const ChannelScaling& cs, std::size_t n_layers, std::size_t T) {
  if (!cs.enabled) return {n_layers, n_layers, T, false};
  const bool dual = cs.last_tokens > 0;
  const std::size_t t_scaled = dual ? T - std::min(T, static_cast<std::size_t>(cs.last_tokens)) : 0;
  return {static_cast<std::size_t>(cs.first_layer), static_cast<std::size_t>(cs.last_layer), t_scaled, dual};
}

void check_dual_keys_start(int64_t n_seen) {
  LAMINA_CHECK(n_seen == 0,
               "channel scaling: a cache keeps its scaled keys from its first call, but this one "
               "already holds ", n_seen, " tokens of a forward without channel scaling (use a new cache)");
}

// ---- KVCache ---------------------------------------------------------------------------------
KVCache::KVCache(int n_layers, int n_kv_heads, int head_dim)
    : n_layers_(n_layers), n_kv_(n_kv_heads), hd_(head_dim) {
  LAMINA_CHECK(n_layers >= 1 && n_kv_heads >= 1 && head_dim >= 1,
               "KVCache: n_layers, n_kv_heads and head_dim must be >= 1");
  heads_.resize(static_cast<std::size_t>(n_layers) * n_kv_heads);
}

KVCache::Head& KVCache::head(int layer, int h) {
  LAMINA_CHECK_INDEX(layer >= 0 && layer < n_layers_ && h >= 0 && h < n_kv_, "KV cache (layer ",
                     layer, ", head ", h, ") out of range (", n_layers_, " layers, ", n_kv_,
                     " KV heads)");
  return heads_[static_cast<std::size_t>(layer) * n_kv_ + h];
}
const KVCache::Head& KVCache::head(int layer, int h) const {
  return const_cast<KVCache*>(this)->head(layer, h);
}

std::size_t KVCache::length(int layer, int h) const { return head(layer, h).len; }
const float* KVCache::keys(int layer, int h) const { return head(layer, h).k.data(); }
const float* KVCache::values(int layer, int h) const { return head(layer, h).v.data(); }
const int32_t* KVCache::positions(int layer, int h) const { return head(layer, h).pos.data(); }
float* KVCache::keys_mut(int layer, int h) { return head(layer, h).k.data(); }
float* KVCache::values_mut(int layer, int h) { return head(layer, h).v.data(); }
int32_t* KVCache::positions_mut(int layer, int h) { return head(layer, h).pos.data(); }

std::size_t KVCache::bytes() const {
  std::size_t b = 0;
  for (const Head& h : heads_)
    b += (h.k.capacity() + h.v.capacity() + h.ks.capacity()) * sizeof(float) +
         h.pos.capacity() * sizeof(int32_t);
  return b;
}

void KVCache::reserve_more(std::size_t n) {
  const std::size_t D = static_cast<std::size_t>(hd_);
  for (Head& h : heads_) {
    const std::size_t cap = h.pos.size();
    if (h.len + n > cap) {
      // Growth by 1/8 (at least 32 entries): bytes() stays within 12.5 % of what is used, and
      // decoding reallocates a head about every cap/8 tokens.
      const std::size_t want = std::max(h.len + n, cap + std::max(cap / 8, std::size_t{32}));
      h.k.reserve(want * D);
      h.v.reserve(want * D);
      h.pos.reserve(want);
      h.k.resize(want * D);
      h.v.resize(want * D);
      h.pos.resize(want);
    }
    if (second_keys() && h.ks.size() != h.k.size()) {  // the scaled keys follow the key storage
      h.ks.reserve(h.k.size());
      h.ks.resize(h.k.size());
    }
  }
}

void KVCache::commit(std::size_t n) {
  for (Head& h : heads_) {
    LAMINA_ASSERT(h.len + n <= h.pos.size());
    h.len += n;
  }
  n_seen_ += static_cast<int64_t>(n);
}

void KVCache::keep(int layer, int hh, const int64_t* idx, std::size_t n) {
  Head& h = head(layer, hh);
  for (std::size_t i = 0; i < n; ++i) {
    LAMINA_CHECK(idx[i] >= 0 && static_cast<std::size_t>(idx[i]) < h.len,
                 "keep: index ", idx[i], " is outside the ", h.len, " entries of (layer ", layer,
                 ", head ", hh, ")");
    LAMINA_CHECK(i == 0 || idx[i] > idx[i - 1], "keep: indices must be strictly increasing");
  }
  const std::size_t D = static_cast<std::size_t>(hd_);
  std::vector<float> k(n * D), v(n * D), ks(second_keys() ? n * D : 0);
  std::vector<int32_t> pos(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t s = static_cast<std::size_t>(idx[i]);
    std::memcpy(k.data() + i * D, h.k.data() + s * D, D * sizeof(float));
    std::memcpy(v.data() + i * D, h.v.data() + s * D, D * sizeof(float));
    if (second_keys()) std::memcpy(ks.data() + i * D, h.ks.data() + s * D, D * sizeof(float));
    pos[i] = h.pos[s];
  }
  h.k.swap(k);
  h.ks.swap(ks);
  h.v.swap(v);
  h.pos.swap(pos);
  h.len = n;
}

void KVCache::reserve(std::size_t n) {
  const std::size_t D = static_cast<std::size_t>(hd_);
  for (Head& h : heads_) {
    if (h.pos.size() >= n) continue;
    h.k.reserve(n * D);  // exact: resize alone may double the capacity
    h.v.reserve(n * D);
    h.pos.reserve(n);
    h.k.resize(n * D);
    h.v.resize(n * D);
    h.pos.resize(n);
    if (second_keys()) {
      h.ks.reserve(n * D);
      h.ks.resize(n * D);
    }
  }
}

void KVCache::truncate(int64_t n) {
  LAMINA_CHECK(n >= 0 && n <= n_seen_, "truncate: n must be in [0, ", n_seen_,
               "] (tokens seen), got ", n);
  for (Head& h : heads_) {
    // positions within a head ascend (appended in order; keep() preserves order)
    while (h.len > 0 && h.pos[h.len - 1] >= n) --h.len;
  }
  n_seen_ = n;
}

void KVCache::clear() {
  for (Head& h : heads_) h = Head{};
  n_seen_ = 0;
  ratio_index_.clear();
  outlier_.clear();
  dual_ = false;
}

void KVCache::begin_scaled(int n_heads) {
  LAMINA_ASSERT(n_seen_ == 0);
  ratio_index_.assign(static_cast<std::size_t>(n_layers_) * n_kv_, -1);
  outlier_.assign(static_cast<std::size_t>(n_layers_) * n_heads, 0.0f);
}

void KVCache::begin_dual_keys() {
  LAMINA_ASSERT(n_seen_ == 0);
  dual_ = true;
}

float* KVCache::scaled_keys_mut(int layer, int h) { return head(layer, h).ks.data(); }
const float* KVCache::scaled_keys(int layer, int h) const { return head(layer, h).ks.data(); }

// ---- Model -----------------------------------------------------------------------------------
Model::Model(const Config& c, Weights w, PositionScaling pos)
    : cfg_(c), w_(std::move(w)), pos_(std::move(pos)) {
  check_config(c);
  check_weights(c, w_);
  check_position_scaling(c, pos_);
  // Repack every block matrix once (a tied output shares the embedding's copy).
  std::vector<std::pair<const void*, Matrix>> done;
  auto repack = [&](Matrix& m) {
    if (m.type == QType::F32 || m.type == QType::F16 || m.packed) return;
    for (const auto& [src, p] : done)
      if (src == m.data && p.type == m.type && p.rows == m.rows && p.cols == m.cols) {
        m = p;
        return;
      }
    packed_.emplace_back();
    const void* src = m.data;
    m = pack(m, packed_.back());
    done.emplace_back(src, m);
  };
  repack(w_.token_embd);
  repack(w_.output);
  for (Layer& L : w_.layers)
    for (Matrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) repack(*m);

}

float Model::ratio_of(int i) const {
  return pos_.ratio_min + (pos_.ratio_max - pos_.ratio_min) * static_cast<float>(i) /
                              static_cast<float>(cfg_.n_kv_heads);
}

void Model::set_channel_scaling(const ChannelScaling& cs) {
  const Config& c = cfg_;
  if (!cs.enabled) {
    chan_ = ChannelScaling{};
    chan_q_.clear();
    chan_k_.clear();
    return;
  }
  LAMINA_CHECK(!pos_.enabled, "channel scaling: cannot be combined with Ms-PoE position scaling");
  check_channel_scaling(c, cs);
  const std::size_t d = c.d_model, ch = static_cast<std::size_t>(cs.channel);
  std::vector<float> row(d);
  auto column = [&](const Matrix& W) {
    std::vector<float> col(W.rows);
    for (std::size_t r = 0; r < W.rows; ++r) {
      dequant(W, r, row.data(), 1);
      col[r] = row[ch];
    }
    return col;
  };
  chan_q_.assign(static_cast<std::size_t>(c.n_layers), {});
  chan_k_.assign(static_cast<std::size_t>(c.n_layers), {});
  for (int l = cs.first_layer; l < cs.last_layer; ++l) {
    chan_q_[static_cast<std::size_t>(l)] = column(w_.layers[static_cast<std::size_t>(l)].wq);
    chan_k_[static_cast<std::size_t>(l)] = column(w_.layers[static_cast<std::size_t>(l)].wk);
  }
  chan_ = cs;
}

const char* Model::kernel_isa() { return misa::kernels().name; }

void Model::forward(const int32_t* ids, std::size_t T, KVCache& cache, Logits mode,
                    float* logits, int n_threads, const AttentionRecord* record,
                    bool q8_decode, float* hidden) const {
  KVCache* one = &cache;
  forward_impl(ids, T, &one, false, mode, logits, n_threads, record, q8_decode, hidden);
}

void Model::forward_batch(const int32_t* ids, std::size_t B, KVCache* const* caches,
                          float* logits, int n_threads, bool q8_decode) const {
  LAMINA_CHECK(B >= 1, "forward_batch: no sequences (ids is empty)");
  LAMINA_CHECK(!pos_.enabled || pos_.first_layer >= cfg_.n_layers,
               "forward_batch: a batched decode is not implemented with Ms-PoE position scaling");
  LAMINA_CHECK(!chan_.enabled,
               "forward_batch: a batched decode is not implemented with channel scaling");
  for (std::size_t b = 0; b < B; ++b) {
    LAMINA_CHECK(caches[b] != nullptr, "forward_batch: cache ", b, " is missing");
    for (std::size_t e = 0; e < b; ++e)
      LAMINA_CHECK(caches[e] != caches[b], "forward_batch: caches ", e, " and ", b,
                   " are the same cache (each sequence needs its own)");
  }
  forward_impl(ids, B, caches, true, Logits::All, logits, n_threads, nullptr, q8_decode, nullptr);
}

// One forward over T token rows. batch = false: the rows are consecutive tokens of caches[0]
// (causal among themselves). batch = true: row t is the next token of caches[t] and attends
// over that cache alone (a decode step of T independent sequences; the matmuls still run over
// the T rows together, so the weights are read once for all of them).
void Model::forward_impl(const int32_t* ids, std::size_t T, KVCache* const* caches, bool batch,
                         Logits mode, float* logits, int n_threads,
                         const AttentionRecord* record, bool q8_decode, float* hidden) const {
  const Config& c = cfg_;
  KVCache& cache = *caches[0];
  const std::size_t NB = batch ? T : 1;  // caches of the call
  LAMINA_CHECK(T >= 1, "forward: no tokens (ids is empty)");
  for (std::size_t b = 0; b < NB; ++b)
    LAMINA_CHECK(caches[b]->n_layers() == c.n_layers && caches[b]->n_kv_heads() == c.n_kv_heads &&
                     caches[b]->head_dim() == c.head_dim,
                 "forward: the KV cache was made for another model shape");
  for (std::size_t t = 0; t < T; ++t)
    LAMINA_CHECK(ids[t] >= 0 && ids[t] < c.vocab_size, "token id ", ids[t], " at index ", t,
                 " is outside the vocabulary [0, ", c.vocab_size, ")");
  LAMINA_CHECK(mode == Logits::None || logits != nullptr, "forward: no logits buffer");
  const std::size_t L = c.n_layers, d = c.d_model, F = c.d_ff, H = c.n_heads,
                    Hk = c.n_kv_heads, D = c.head_dim, V = c.vocab_size, G = H / Hk;
  const int64_t pos0 = cache.n_seen();
  // Position of row t, and the first slot of (row t, layer l, KV head h) in its cache's arrays.
  std::vector<int64_t> row_pos(T);
  for (std::size_t t = 0; t < T; ++t) {
    row_pos[t] = batch ? caches[t]->n_seen() : pos0 + static_cast<int64_t>(t);
    LAMINA_CHECK(row_pos[t] + 1 < (int64_t{1} << 31), "forward: position overflow");
  }
  auto kv_at = [&](std::size_t t, std::size_t l, std::size_t h) {
    return ((batch ? t : 0) * L + l) * Hk + h;
  };

  // Entries held per (cache, layer, KV head) before this call; the record needs them all equal.
  std::vector<std::size_t> len0(NB * L * Hk);
  std::size_t max_len = 0;
  for (std::size_t b = 0; b < NB; ++b)
    for (std::size_t l = 0; l < L; ++l)
      for (std::size_t h = 0; h < Hk; ++h) {
        const std::size_t at = (b * L + l) * Hk + h;
        len0[at] = caches[b]->length(static_cast<int>(l), static_cast<int>(h));
        max_len = std::max(max_len, len0[at]);
      }
  // The slot row t writes in (row t, layer l, KV head h), and the entries it then sees (+1).
  auto slot_of = [&](std::size_t t, std::size_t l, std::size_t h) {
    return len0[kv_at(t, l, h)] + (batch ? 0 : t);
  };
  std::size_t S_rec = 0, W_rec = 0;
  const bool accumulate = record && record->accumulated;
  const bool acc_max = accumulate && record->accumulate_max;
  if (record && (record->window > 0 || accumulate)) {
    for (std::size_t i = 0; i < len0.size(); ++i)
      LAMINA_CHECK(len0[i] == len0[0],
                   "forward: recording attention needs every head to hold the same number of "
                   "entries (the cache was compacted head-wise)");
    LAMINA_CHECK(record->window >= 0 && static_cast<std::size_t>(record->window) <= T &&
                     (record->window == 0 || record->out != nullptr),
                 "forward: the attention record window (", record->window,
                 ") must be in [0, number of tokens (", T, ")]");
    W_rec = static_cast<std::size_t>(record->window);
    S_rec = len0[0] + T;
    if (W_rec) std::fill(record->out, record->out + L * H * W_rec * S_rec, 0.0f);
  }
  // Position scaling: layers [first, L) rescaled; the ratios are assigned on the first call.
  const PositionScaling& P = pos_;
  const std::size_t first = P.enabled ? static_cast<std::size_t>(P.first_layer) : L;
  const bool scaled = first < L;
  const bool ranking = scaled && !cache.scaled();
  if (ranking) {
    LAMINA_CHECK(cache.n_seen() == 0,
                 "ms-poe: a cache is ranked on its first call, but this one already holds ",
                 cache.n_seen(), " tokens of a forward without position scaling (use a new cache)");
    cache.begin_scaled(static_cast<int>(H));
  }
  // Channel scaling: layers [cfirst, clast); in last-tokens mode the queries t >= t_scaled
  // are scaled and the cache keeps a scaled copy of every key.
  const ChannelScaling& CS = chan_;
  const ChannelSpan span = channel_span(CS, L, T);
  const std::size_t cfirst = span.first, clast = span.last, t_scaled = span.t_scaled;
  const bool dual = span.dual;
  if (dual && !cache.dual_keys()) {
    check_dual_keys_start(cache.n_seen());
    cache.begin_dual_keys();
  }
  const float chan_delta = CS.factor - 1.0f;
  const std::size_t chan_c = static_cast<std::size_t>(CS.channel);
  for (std::size_t b = 0; b < NB; ++b) caches[b]->reserve_more(batch ? 1 : T);

  const misa::Kernels& kern = misa::kernels();
  const std::size_t NR = kern.panel_width;
  // A batched decode stays on the GEMV path (each weight block read once for every row): its
  // rows then go through the single-token decode's own kernels (q8_decode included), so a
  // batch differs from B separate steps only in the attention's summation order. (At 8 rows
  // the GEMM path measured no faster: bench_model.py --candidates 8.)
  const bool gemm = T >= kGemmMinTokens && !batch;
  // The prefill multiplies int8-quantised activations with the packed blocks (integer GEMM).
  const bool q8g = gemm && q8_prefill_;
  const std::size_t maxK = std::max({d, F, H * D});
  std::size_t work = L * T * (3 * d * F + 2 * d * H * D + 2 * d * Hk * D) + L * T * (max_len + T) * H * D;
  const int nt = threads_for(work, std::size_t{1} << 21, n_threads);

  // Activations (row-major, one row per token) and per-rank scratch.
  std::vector<float> x(T * d), h(T * d), tmp(T * d), q(T * H * D),
      k(T * Hk * D), v(T * Hk * D), att(T * H * D), g(T * F), u(T * F), a(T * F);
  std::vector<int8_t> gxq(q8g ? T * std::max({d, F, H * D}) : 0);
  std::vector<float> gxd(q8g ? T * std::max({d, F, H * D}) / 32 : 0), gxsum(gxd.size());
  std::vector<int32_t> gxqs(gxd.size());
  std::vector<float> rope_cos(T * (D / 2)), rope_sin(T * (D / 2));
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t i = 0; i < D / 2; ++i) {
      const double inv = std::pow(static_cast<double>(c.rope_base),
                                  -2.0 * static_cast<double>(i) / static_cast<double>(D));
      const double ang = static_cast<double>(row_pos[t]) * inv;
      rope_cos[t * (D / 2) + i] = static_cast<float>(std::cos(ang));
      rope_sin[t * (D / 2) + i] = static_cast<float>(std::sin(ang));
    }
  // Scaled rotations per ratio index i: angle (p / r_i)·θ_j, and for the far keys of the
  // window variant (p / r_i + window·(1 - 1/r_i))·θ_j. Layout [i][t][D/2].
  const std::size_t win = scaled ? static_cast<std::size_t>(P.window) : 0;
  std::vector<float> sc_cos, sc_sin, far_cos, far_sin;
  if (scaled) {
    const std::size_t n_tab = Hk * T * (D / 2);
    sc_cos.resize(n_tab);
    sc_sin.resize(n_tab);
    if (win) {
      far_cos.resize(n_tab);
      far_sin.resize(n_tab);
    }
    for (std::size_t r = 0; r < Hk; ++r) {
      const double ratio = static_cast<double>(ratio_of(static_cast<int>(r)));
      const double shift = static_cast<double>(win) * (1.0 - 1.0 / ratio);
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t i = 0; i < D / 2; ++i) {
          const double inv = std::pow(static_cast<double>(c.rope_base),
                                      -2.0 * static_cast<double>(i) / static_cast<double>(D));
          const double p = static_cast<double>(pos0 + static_cast<int64_t>(t)) / ratio;
          const std::size_t o = (r * T + t) * (D / 2) + i;
          sc_cos[o] = static_cast<float>(std::cos(p * inv));
          sc_sin[o] = static_cast<float>(std::sin(p * inv));
          if (win) {
            far_cos[o] = static_cast<float>(std::cos((p + shift) * inv));
            far_sin[o] = static_cast<float>(std::sin((p + shift) * inv));
          }
        }
    }
  }
  std::vector<float> q_far(win ? T * H * D : 0);
  int* ratio_idx = scaled ? cache.ratio_index_mut() : nullptr;
  float* outlier = scaled ? cache.outlier_share_mut() : nullptr;
  const uint8_t* plain_flags = P.plain_heads.empty() ? nullptr : P.plain_heads.data();
  struct Scratch {
    std::vector<float> panel, ctile, probs, xsum_q, xd, acc, h, out2, tile;
    std::vector<int8_t> xq;
    std::vector<int32_t> xqs;
    std::vector<float> row;  // a dequantised weight row (float decode of a packed matrix)
  };
  std::vector<Scratch> scratch(nt);
  for (Scratch& s : scratch) {
    // GEMV inputs: T rows on the decode path, one (the last-token logits) on the GEMM path.
    const std::size_t rows = gemm ? 1 : T;
    s.xsum_q.resize(rows * (maxK / 32));
    s.xd.resize(rows * (maxK / 32));
    s.xq.resize(rows * maxK);
    s.xqs.resize(rows * (maxK / 32));
    if (!q8_decode) s.row.resize(maxK);
    if (gemm) {
      s.panel.resize(maxK * NR);
      s.ctile.resize(T * std::max(NR, misa::kPackRows));
      s.tile.resize(kern.tile_scratch(D));
    } else {
      s.h.resize(T * d);
    }
    s.probs.resize(max_len + T);
    if (win) s.out2.resize(D);
    if (accumulate) s.acc.assign(L * H * S_rec, 0.0f);
  }
  std::vector<float*> kdst(NB * L * Hk), vdst(NB * L * Hk), ksdst(NB * L * Hk, nullptr);
  std::vector<int32_t*> pdst(NB * L * Hk);
  for (std::size_t b = 0; b < NB; ++b)
    for (std::size_t l = 0; l < L; ++l)
      for (std::size_t hh = 0; hh < Hk; ++hh) {
        const int li = static_cast<int>(l), hi = static_cast<int>(hh);
        const std::size_t at = (b * L + l) * Hk + hh;
        if (scaled || dual) ksdst[at] = caches[b]->scaled_keys_mut(li, hi);
        kdst[at] = caches[b]->keys_mut(li, hi);
        vdst[at] = caches[b]->values_mut(li, hi);
        pdst[at] = caches[b]->positions_mut(li, hi);
      }

  // The team's phases, in order. A phase is a set of chunks handed out by an atomic counter;
  // a thread that finds none left waits until every chunk is done (a completion count, not a
  // barrier of threads): a thread the OS has descheduled holds up only the chunk it is in, and
  // the others take the rest of the phase. Chunk results are published by the release of the
  // completion count and read after its acquire.
  struct Phase {
    std::atomic<std::size_t> next{0}, done{0};
  };
  // (+3: the ranking call's scoring, assignment and rotation phases)
  // (+4 on the integer GEMM path: the quantisation of each matmul input)
  // (+1: the last-tokens channel scaling's attention of the scaled queries on the tile path)
  const std::size_t phases_per_layer = (gemm ? 7 + 4 : 6) + 3 + 1;
  // Decode attention: entries per block and the partial softmaxes of every (block, query).
  constexpr std::size_t kDecodeBlock = 256;
  const std::size_t n_dblk = gemm || batch ? 0 : (max_len + T + kDecodeBlock - 1) / kDecodeBlock;
  std::vector<float> dpart(n_dblk * T * H * (D + 2));
  std::vector<Phase> phases(1 + L * phases_per_layer + 3);
  constexpr std::size_t kRows = 64;       // GEMV rows per chunk
  // (token, head) pairs per attention chunk: one on the decode path (a step has only H pairs)
  const std::size_t kAttnChunk = gemm ? 8 : 1;
  const float eps = c.rms_eps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Chunks of a matmul with N output columns: GEMV row blocks or GEMM panels.
  const std::size_t col_unit = gemm ? std::max(NR, misa::kPackRows) : kRows;
  auto n_chunks = [&](std::size_t N) { return (N + col_unit - 1) / col_unit; };

  auto team = [&](std::size_t rank, int) {
    Scratch& S = scratch[rank];
    std::size_t phase_i = 0;
    auto run = [&](std::size_t total, const auto& fn) {
      Phase& ph = phases[phase_i++];
      for (;;) {
        const std::size_t i = ph.next.fetch_add(1, std::memory_order_relaxed);
        if (i >= total) break;
        fn(i);
        ph.done.fetch_add(1, std::memory_order_acq_rel);
      }
      for (int spins = 0; ph.done.load(std::memory_order_acquire) < total; ++spins) {
        if (spins < 256) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        } else {
          std::this_thread::yield();
        }
      }
    };
    // Matmul inputs X (T rows of K) quantised to int8 with their block sums: on the GEMM
    // path once, as a phase over tokens, into the shared buffers; on the GEMV path each
    // thread quantises the few rows itself.
    auto prepare = [&](const float* X, std::size_t K) {
      const std::size_t nb = K / 32;
      if (q8g) {
        run(T, [&](std::size_t t) {
          kern.quantise(X + t * K, K, gxq.data() + t * K, gxd.data() + t * nb,
                            gxsum.data() + t * nb, gxqs.data() + t * nb);
        });
        return;
      }
      if (gemm || !q8_decode) return;
      for (std::size_t t = 0; t < T; ++t)
        kern.quantise(X + t * K, K, S.xq.data() + t * K, S.xd.data() + t * nb,
                          S.xsum_q.data() + t * nb, S.xqs.data() + t * nb);
    };
    // y[r - r0] = W_r · x for rows [r0, r1) of a packed matrix on float32 activations: each
    // row dequantised, then a float dot product.
    auto float_rows = [&](const Matrix& W, const float* x, std::size_t r0, std::size_t r1,
                          float* y) {
      const std::size_t K = W.cols;
      for (std::size_t r = r0; r < r1; ++r) {
        dequant_packed_row(W, r, S.row.data(), 1);
        kern.gemv(QType::F32, reinterpret_cast<const uint8_t*>(S.row.data()), 4 * K, K, x, 0, 1,
                  y + (r - r0));
      }
    };
    // Y[t, c0..c1) (row stride ldy) = X[t, :] · W_c for t < T; c0 a multiple of col_unit.
    auto mm = [&](const Matrix& W, const float* X, float* Y, std::size_t ldy, std::size_t c0,
                  std::size_t c1) {
      const std::size_t K = W.cols, nb = K / 32;
      const uint8_t* base = static_cast<const uint8_t*>(W.data);
      if (!gemm) {
        for (std::size_t t = 0; t < T; ++t) {
          if (!W.packed) {
            kern.gemv(W.type, base, row_bytes(W.type, K), K, X + t * K, c0, c1, Y + t * ldy + c0);
          } else if (q8_decode) {
            kern.gemv_q8(W.type, base, K, S.xq.data() + t * K, S.xd.data() + t * nb,
                         S.xsum_q.data() + t * nb, S.xqs.data() + t * nb, c0, c1,
                         Y + t * ldy + c0);
          } else {
            float_rows(W, X + t * K, c0, c1, Y + t * ldy + c0);
          }
        }
        return;
      }
      if (q8g && W.packed) {  // integer GEMM, a packed group of rows at a time
        for (std::size_t p = c0; p < c1; p += misa::kPackRows) {
          const std::size_t nc = std::min(misa::kPackRows, c1 - p), g = p / misa::kPackRows;
          if (nc == misa::kPackRows) {  // the whole group lies in Y's columns: written in place
            kern.gemm_q8(W.type, base, K, g, gxq.data(), gxd.data(), gxsum.data(), gxqs.data(),
                         T, Y + p, ldy);
            continue;
          }
          kern.gemm_q8(W.type, base, K, g, gxq.data(), gxd.data(), gxsum.data(), gxqs.data(), T,
                       S.ctile.data(), misa::kPackRows);
          for (std::size_t t = 0; t < T; ++t)
            std::memcpy(Y + t * ldy + p, S.ctile.data() + t * misa::kPackRows, nc * sizeof(float));
        }
        return;
      }
      for (std::size_t p = c0; p < c1; p += NR) {
        const std::size_t nc = std::min(NR, c1 - p);
        for (std::size_t j = 0; j < nc; ++j) dequant(W, p + j, S.panel.data() + j, NR);
        for (std::size_t j = nc; j < NR; ++j)
          for (std::size_t kk = 0; kk < K; ++kk) S.panel[kk * NR + j] = 0.0f;
        kern.gemm_panel(S.panel.data(), K, X, K, T, S.ctile.data(), NR);
        for (std::size_t t = 0; t < T; ++t)
          std::memcpy(Y + t * ldy + p, S.ctile.data() + t * NR, nc * sizeof(float));
      }
    };
    auto norm_row = [&](const float* w, std::size_t t, float* out) {
      double ss = 0.0;
      for (std::size_t j = 0; j < d; ++j) ss += static_cast<double>(x[t * d + j]) * x[t * d + j];
      const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
      for (std::size_t j = 0; j < d; ++j) out[t * d + j] = x[t * d + j] * r * w[j];
    };
    // RMSNorm of x: a phase over tokens into the shared rows on the GEMM path; on the GEMV
    // path each thread normalises the few rows itself (no phase). Returns the rows to read.
    auto rmsnorm = [&](const float* w) -> const float* {
      if (gemm) {
        run(T, [&](std::size_t t) { norm_row(w, t, h.data()); });
        return h.data();
      }
      for (std::size_t t = 0; t < T; ++t) norm_row(w, t, S.h.data());
      return S.h.data();
    };
    auto rot_by = [&](float* r, const float* cs, const float* sn) {  // RoPE, adjacent pairs
      for (std::size_t i = 0; i < D / 2; ++i) {
        const float x0 = r[2 * i], x1 = r[2 * i + 1];
        r[2 * i] = x0 * cs[i] - x1 * sn[i];
        r[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
      }
    };
    auto rot = [&](float* r, std::size_t t) {
      rot_by(r, rope_cos.data() + t * (D / 2), rope_sin.data() + t * (D / 2));
    };
    // Ratio index of query head hh in layer l (-1: plain RoPE).
    auto ratio_of_head = [&](std::size_t l, std::size_t hh) -> int {
      if (!scaled || l < first) return -1;
      if (plain_flags && plain_flags[l * H + hh]) return -1;
      return ratio_idx[l * Hk + hh / G];
    };
    // Queries of head hh (all tokens): plain, scaled, or plain + far (window variant).
    auto rotate_queries = [&](std::size_t l, std::size_t hh) {
      const int ri = ratio_of_head(l, hh);
      for (std::size_t t = 0; t < T; ++t) {
        float* qr = q.data() + (t * H + hh) * D;
        if (ri < 0) {
          rot(qr, t);
          continue;
        }
        const std::size_t o = (static_cast<std::size_t>(ri) * T + t) * (D / 2);
        if (win) {
          float* qf = q_far.data() + (t * H + hh) * D;
          std::memcpy(qf, qr, D * sizeof(float));
          rot_by(qf, far_cos.data() + o, far_sin.data() + o);
          rot(qr, t);
        } else {
          rot_by(qr, sc_cos.data() + o, sc_sin.data() + o);
        }
      }
    };
    // Channel scaling of layer l: true inside the scaled layers.
    auto chan_layer = [&](std::size_t l) { return l >= cfirst && l < clast; };
    // Rows [r, r + D) of a projection from the scaled input: += (factor - 1) · hn[channel] · col.
    auto chan_add = [&](float* r, const float* hn_t, const float* col) {
      const float s = chan_delta * hn_t[chan_c];
      for (std::size_t e = 0; e < D; ++e) r[e] += s * col[e];
    };
    // Query head hh of layer l: rows t >= t_scaled come from the scaled input (before RoPE).
    auto chan_queries = [&](std::size_t l, std::size_t hh, const float* hn) {
      if (!chan_layer(l)) return;
      for (std::size_t t = t_scaled; t < T; ++t)
        chan_add(q.data() + (t * H + hh) * D, hn + t * d, chan_q_[l].data() + hh * D);
    };
    // Keys of KV head hh (all tokens) into the cache: plain RoPE, and scaled where rescaled.
    // With channel scaling every key is scaled (all positions) or a scaled copy is kept.
    auto store_keys = [&](std::size_t l, std::size_t hh, const float* hn) {
      const int ri = scaled && l >= first ? ratio_idx[l * Hk + hh] : -1;
      const bool ch = chan_layer(l);
      for (std::size_t t = 0; t < T; ++t) {
        float* kr = k.data() + (t * Hk + hh) * D;
        const std::size_t at = kv_at(t, l, hh), slot = slot_of(t, l, hh);
        if (ch && !dual) chan_add(kr, hn + t * d, chan_k_[l].data() + hh * D);
        if (ch && dual) {
          float* ks = ksdst[at] + slot * D;
          std::memcpy(ks, kr, D * sizeof(float));
          chan_add(ks, hn + t * d, chan_k_[l].data() + hh * D);
          rot(ks, t);
        }
        if (ri >= 0) {
          float* ks = ksdst[at] + slot * D;
          const std::size_t o = (static_cast<std::size_t>(ri) * T + t) * (D / 2);
          std::memcpy(ks, kr, D * sizeof(float));
          rot_by(ks, sc_cos.data() + o, sc_sin.data() + o);
        }
        rot(kr, t);
        std::memcpy(kdst[at] + slot * D, kr, D * sizeof(float));
        std::memcpy(vdst[at] + slot * D, v.data() + (t * Hk + hh) * D, D * sizeof(float));
        pdst[at][slot] = static_cast<int32_t>(row_pos[t]);
      }
    };
    // Query t of layer l reads the scaled key copy (channel scaling, last-tokens mode).
    auto chan_keys = [&](std::size_t l, std::size_t t) { return dual && chan_layer(l) && t >= t_scaled; };
    // Column chunk i of an N-column matmul as [c0, c1).
    auto cols = [&](std::size_t i, std::size_t N, std::size_t& c0, std::size_t& c1) {
      c0 = i * col_unit;
      c1 = std::min(N, c0 + col_unit);
    };

    run(T, [&](std::size_t t) {
      const Matrix& E = w_.token_embd;
      dequant(E, static_cast<std::size_t>(ids[t]), x.data() + t * d, 1);
    });
    for (std::size_t l = 0; l < L; ++l) {
      const Layer& Ly = w_.layers[l];
      const float* hn = rmsnorm(Ly.attn_norm);
      prepare(hn, d);
      // Q heads, then K/V heads: RoPE and the cache append by the thread that computed them
      // (on the ranking call of a rescaled layer, after the heads are scored and assigned).
      const bool rank_now = ranking && l >= first;
      run(H + Hk, [&](std::size_t i) {
        if (i < H) {
          mm(Ly.wq, hn, q.data(), H * D, i * D, (i + 1) * D);
          chan_queries(l, i, hn);
          if (!rank_now) rotate_queries(l, i);
          return;
        }
        const std::size_t hh = i - H;
        mm(Ly.wk, hn, k.data(), Hk * D, hh * D, (hh + 1) * D);
        mm(Ly.wv, hn, v.data(), Hk * D, hh * D, (hh + 1) * D);
        if (!rank_now) store_keys(l, hh, hn);
      });
      if (rank_now) {
        // Outlier share of each head's last query row (un-rotated q · k, as released).
        run(H, [&](std::size_t hh) {
          const float* ql = q.data() + ((T - 1) * H + hh) * D;
          float* pr = S.probs.data();
          float mx = -3.4e38f;
          for (std::size_t j = 0; j < T; ++j) {
            const float* kr = k.data() + (j * Hk + hh / G) * D;
            float sdot = 0.0f;
            for (std::size_t e = 0; e < D; ++e) sdot += ql[e] * kr[e];
            pr[j] = sdot * scale;
            mx = std::max(mx, pr[j]);
          }
          float sum = 0.0f;
          for (std::size_t j = 0; j < T; ++j) sum += (pr[j] = std::exp(pr[j] - mx));
          const float thr = 3.0f / static_cast<float>(T);
          std::size_t above = 0;
          for (std::size_t j = 0; j < T; ++j) above += pr[j] / sum > thr;
          outlier[l * H + hh] = static_cast<float>(above) / static_cast<float>(T);
        });
        run(1, [&](std::size_t) {
          std::vector<float> score(Hk, 0.0f);
          std::vector<std::size_t> order(Hk);
          for (std::size_t g = 0; g < Hk; ++g) {
            for (std::size_t j = 0; j < G; ++j) score[g] += outlier[l * H + g * G + j];
            score[g] /= static_cast<float>(G);
            order[g] = g;
          }
          std::stable_sort(order.begin(), order.end(),
                           [&](std::size_t a, std::size_t b) { return score[a] > score[b]; });
          int* ri = ratio_idx + l * Hk;
          for (std::size_t g = 0; g < Hk; ++g) {
            if (P.order == RatioOrder::Rank) ri[order[g]] = static_cast<int>(g);
            else if (P.order == RatioOrder::Gather) ri[g] = static_cast<int>(order[g]);
            else ri[g] = static_cast<int>(Hk - 1 - g);
          }
        });
        run(H + Hk, [&](std::size_t i) {
          if (i < H) rotate_queries(l, i);
          else store_keys(l, i - H, hn);
        });
      }
      // Prefill without a record or the window variant: tiles of tokens × the G heads of a
      // KV group (every K/V row read once per tile; a rescaled head reads the scaled keys, so
      // a group whose heads differ runs as several tiles), the latest (costliest) tiles first.
      if (gemm && !batch && !record && !(win && scaled && l >= first) && D % 4 == 0) {
        const std::size_t TT = kern.tile_tokens, n_tiles = (T + TT - 1) / TT;
        run(Hk * n_tiles, [&](std::size_t i) {
          const std::size_t kv = i % Hk, t0 = (n_tiles - 1 - i / Hk) * TT;
          const float* keys_of[2] = {kdst[l * Hk + kv], ksdst[l * Hk + kv]};
          for (std::size_t a = 0; a < G;) {
            const bool sc = ratio_of_head(l, kv * G + a) >= 0;
            std::size_t e = a + 1;
            while (e < G && (ratio_of_head(l, kv * G + e) >= 0) == sc) ++e;
            const std::size_t off = (t0 * H + kv * G + a) * D;
            kern.attend_tile(q.data() + off, H * D, e - a, std::min(TT, T - t0), keys_of[sc],
                             vdst[l * Hk + kv], len0[l * Hk + kv] + t0, D, scale, S.tile.data(),
                             att.data() + off, H * D);
            a = e;
          }
        });
        if (dual && chan_layer(l)) {
          // The scaled queries again, over the scaled keys (they replace the tile's rows): a
          // one-token tile of the group's G heads runs the tile's own per-token arithmetic, so
          // factor 1 reproduces the plain rows bit for bit.
          run((T - t_scaled) * Hk, [&](std::size_t i) {
            const std::size_t t = t_scaled + i / Hk, kv = i % Hk;
            const std::size_t off = (t * H + kv * G) * D;
            kern.attend_tile(q.data() + off, H * D, G, 1, ksdst[l * Hk + kv], vdst[l * Hk + kv],
                             len0[l * Hk + kv] + t, D, scale, S.tile.data(), att.data() + off, H * D);
          });
        }
      } else if (!gemm && !batch && !record && !(win && scaled && l >= first)) {
        // Decode: each KV head's entries in blocks of kDecodeBlock; a chunk runs every query
        // of the group (the call's T tokens × G heads) over one block, so the block's K/V rows
        // come from memory once and stay in cache for the group's other queries, and a long
        // cache spreads over every thread. Partial softmaxes (max, sum, normalised output) are
        // merged per query in the next phase.
        run(Hk * n_dblk, [&](std::size_t i) {
          const std::size_t kv = i % Hk, blk = i / Hk, j0 = blk * kDecodeBlock;
          const std::size_t held = len0[l * Hk + kv];
          for (std::size_t t = 0; t < T; ++t)
            for (std::size_t a = 0; a < G; ++a) {
              const std::size_t hh = kv * G + a;
              float* part = dpart.data() + ((blk * T + t) * H + hh) * (D + 2);
              const std::size_t n = std::min(held + t + 1, j0 + kDecodeBlock);
              if (n <= j0) {
                part[1] = 0.0f;  // nothing of this block is visible to the query
                continue;
              }
              const float* keys = ratio_of_head(l, hh) >= 0 || chan_keys(l, t) ? ksdst[l * Hk + kv]
                                                                                 : kdst[l * Hk + kv];
              kern.attend(q.data() + (t * H + hh) * D, keys + j0 * D, vdst[l * Hk + kv] + j0 * D,
                          n - j0, D, scale, S.probs.data(), part + 2, part);
            }
        });
        run(T * H, [&](std::size_t i) {
          const std::size_t t = i / H, hh = i % H;
          const std::size_t n = len0[l * Hk + hh / G] + t + 1, nblk = (n + kDecodeBlock - 1) / kDecodeBlock;
          float m = -3.4e38f;
          for (std::size_t b = 0; b < nblk; ++b) {
            const float* part = dpart.data() + ((b * T + t) * H + hh) * (D + 2);
            if (part[1] > 0.0f) m = std::max(m, part[0]);
          }
          float* out = att.data() + (t * H + hh) * D;
          std::fill(out, out + D, 0.0f);
          float wsum = 0.0f;
          for (std::size_t b = 0; b < nblk; ++b) {
            const float* part = dpart.data() + ((b * T + t) * H + hh) * (D + 2);
            if (part[1] <= 0.0f) continue;
            const float w = part[1] * std::exp(part[0] - m);
            wsum += w;
            for (std::size_t e = 0; e < D; ++e) out[e] += w * part[2 + e];
          }
          const float inv = 1.0f / wsum;
          for (std::size_t e = 0; e < D; ++e) out[e] *= inv;
        });
      } else {
        // Attention over (KV head, token descending, query head of the group): the G queries of
        // a token read the same K/V rows back to back; the costliest (latest) tokens go first.
        run((T * H + kAttnChunk - 1) / kAttnChunk, [&](std::size_t chunk) {
          for (std::size_t i = chunk * kAttnChunk; i < std::min(T * H, (chunk + 1) * kAttnChunk); ++i) {
            const std::size_t kv = i / (T * G), rem = i % (T * G);
            const std::size_t t = T - 1 - rem / G, hh = kv * G + rem % G;
            const std::size_t at = kv_at(t, l, kv), n = slot_of(t, l, kv) + 1;
            const float* qr = q.data() + (t * H + hh) * D;
            float* out = att.data() + (t * H + hh) * D;
            const int ri = ratio_of_head(l, hh);
            if (ri < 0) {
              const float* keys = chan_keys(l, t) ? ksdst[at] : kdst[at];
              kern.attend(qr, keys, vdst[at], n, D, scale, S.probs.data(), out, nullptr);
            } else if (!win) {
              kern.attend(qr, ksdst[at], vdst[at], n, D, scale, S.probs.data(), out, nullptr);
            } else {
              // Entries [0, m) lie window or more behind the query (scaled keys, far query),
              // [m, n) nearer (plain keys and query): two softmaxes merged by their partition
              // functions, each recovered from its largest probability.
              const int32_t* pp = pdst[at];
              const int64_t cut = row_pos[t] - static_cast<int64_t>(win);
              const std::size_t m = static_cast<std::size_t>(
                  std::upper_bound(pp, pp + n, cut, [](int64_t a, int32_t b) { return a < b; }) - pp);
              const float* qf = q_far.data() + (t * H + hh) * D;
              const float* ks = ksdst[at];
              const float* kp = kdst[at];
              const float* vv = vdst[at];
              float* pr = S.probs.data();
              if (m == 0) {
                kern.attend(qr, kp, vv, n, D, scale, pr, out, nullptr);
              } else if (m == n) {
                kern.attend(qf, ks, vv, n, D, scale, pr, out, nullptr);
              } else {
                float* o2 = S.out2.data();
                kern.attend(qf, ks, vv, m, D, scale, pr, out, nullptr);
                kern.attend(qr, kp + m * D, vv + m * D, n - m, D, scale, pr + m, o2, nullptr);
                auto log_z = [&](const float* qq, const float* K, const float* p, std::size_t cnt) {
                  const std::size_t j = static_cast<std::size_t>(std::max_element(p, p + cnt) - p);
                  float sdot = 0.0f;
                  for (std::size_t e = 0; e < D; ++e) sdot += qq[e] * K[j * D + e];
                  return static_cast<double>(sdot * scale) - std::log(static_cast<double>(p[j]));
                };
                const double z1 = log_z(qf, ks, pr, m), z2 = log_z(qr, kp + m * D, pr + m, n - m);
                const float a = static_cast<float>(1.0 / (1.0 + std::exp(z2 - z1))), b = 1.0f - a;
                for (std::size_t e = 0; e < D; ++e) out[e] = a * out[e] + b * o2[e];
                for (std::size_t j = 0; j < m; ++j) pr[j] *= a;
                for (std::size_t j = m; j < n; ++j) pr[j] *= b;
              }
            }
            if (W_rec && t + W_rec >= T) {
              float* o = record->out + ((l * H + hh) * W_rec + (t + W_rec - T)) * S_rec;
              std::memcpy(o, S.probs.data(), n * sizeof(float));
            }
            if (accumulate) {
              float* a = S.acc.data() + (l * H + hh) * S_rec;
              if (acc_max) {
                for (std::size_t j = 0; j < n; ++j) a[j] = std::max(a[j], S.probs[j]);
              } else {
                for (std::size_t j = 0; j < n; ++j) a[j] += S.probs[j];
              }
            }
          }
        });
      }
      prepare(att.data(), H * D);
      run(n_chunks(d), [&](std::size_t i) {
        std::size_t c0, c1;
        cols(i, d, c0, c1);
        mm(Ly.wo, att.data(), tmp.data(), d, c0, c1);
        for (std::size_t t = 0; t < T; ++t)
          for (std::size_t j = c0; j < c1; ++j) x[t * d + j] += tmp[t * d + j];
      });
      const float* hf = rmsnorm(Ly.ffn_norm);
      prepare(hf, d);
      run(n_chunks(F), [&](std::size_t i) {
        std::size_t c0, c1;
        cols(i, F, c0, c1);
        mm(Ly.w_gate, hf, g.data(), F, c0, c1);
        mm(Ly.w_up, hf, u.data(), F, c0, c1);
        for (std::size_t t = 0; t < T; ++t)
          kern.swiglu(g.data() + t * F + c0, u.data() + t * F + c0, c1 - c0, a.data() + t * F + c0);
      });
      prepare(a.data(), F);
      run(n_chunks(d), [&](std::size_t i) {
        std::size_t c0, c1;
        cols(i, d, c0, c1);
        mm(Ly.w_down, a.data(), tmp.data(), d, c0, c1);
        for (std::size_t t = 0; t < T; ++t)
          for (std::size_t j = c0; j < c1; ++j) x[t * d + j] += tmp[t * d + j];
        if (hidden)
          for (std::size_t t = 0; t < T; ++t)
            std::memcpy(hidden + (l * T + t) * d + c0, x.data() + t * d + c0, (c1 - c0) * sizeof(float));
      });
    }
    if (mode == Logits::None) return;
    const float* ho = rmsnorm(w_.output_norm);
    if (mode == Logits::Last) {
      // one row: the GEMV path on the last token (T = 1 view of the buffers)
      const float* last = ho + (T - 1) * d;
      const Matrix& W = w_.output;
      const bool q8 = q8_decode && W.packed;
      if (q8) kern.quantise(last, d, S.xq.data(), S.xd.data(), S.xsum_q.data(), S.xqs.data());
      run((V + kRows - 1) / kRows, [&](std::size_t i) {
        const std::size_t c0 = i * kRows, c1 = std::min(V, c0 + kRows);
        const uint8_t* base = static_cast<const uint8_t*>(W.data);
        if (q8) {
          kern.gemv_q8(W.type, base, d, S.xq.data(), S.xd.data(), S.xsum_q.data(), S.xqs.data(),
                       c0, c1, logits + c0);
        } else if (!W.packed) {
          kern.gemv(W.type, base, row_bytes(W.type, d), d, last, c0, c1, logits + c0);
        } else {
          float_rows(W, last, c0, c1, logits + c0);
        }
      });
    } else {
      prepare(ho, d);
      run(n_chunks(V), [&](std::size_t i) {
        std::size_t c0, c1;
        cols(i, V, c0, c1);
        mm(w_.output, ho, logits, V, c0, c1);
      });
    }
  };
  parallel_for(static_cast<std::size_t>(nt), nt, team);
  if (accumulate) {
    float* a = record->accumulated;
    std::fill(a, a + L * H * S_rec, 0.0f);
    for (const Scratch& sc : scratch)
      for (std::size_t j = 0; j < L * H * S_rec; ++j)
        a[j] = acc_max ? std::max(a[j], sc.acc[j]) : a[j] + sc.acc[j];
  }
  for (std::size_t b = 0; b < NB; ++b) caches[b]->commit(batch ? 1 : T);
}

}  // namespace lamina::model
