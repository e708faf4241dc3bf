// The llama forward and its KV cache (lamina/model.hpp).
#include "lamina/model.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "lamina/common.hpp"
#include "lamina/enum_names.hpp"
#include "lamina/isa.hpp"
#include "lamina/model_isa.hpp"
#include "lamina/parallel.hpp"
#include "model_internal.hpp"

namespace lamina::model {

// ---- types -----------------------------------------------------------------------------------
namespace {
constexpr EnumName<QType> kQTypeNames[] = {{QType::F32, "F32"},   {QType::F16, "F16"},
                                           {QType::Q4_0, "Q4_0"}, {QType::Q4_1, "Q4_1"},
                                           {QType::Q8_0, "Q8_0"}};
}  // namespace

QType qtype_from_name(const std::string& name) {
  return enum_parse(kQTypeNames, name, [&] {
    return "tensor type " + name + " is not supported (F32, F16, Q4_0, Q4_1, Q8_0)";
  });
}

const char* qtype_name(QType t) { return enum_name(kQTypeNames, t); }

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

namespace detail {

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

void dequant(const Matrix& m, std::size_t r, float* out, std::size_t stride) {
  if (m.packed) return dequant_packed_row(m, r, out, stride);
  dequant_row(m.type, static_cast<const uint8_t*>(m.data) + r * row_bytes(m.type, m.cols), m.cols,
              out, stride);
}

}  // namespace detail


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

float ratio_of(const PositionScaling& p, int n_kv_heads, int i) {
  return p.ratio_min + (p.ratio_max - p.ratio_min) * static_cast<float>(i) /
                           static_cast<float>(n_kv_heads);
}

void assign_ratios(const float* share, int n_heads, int n_kv_heads, RatioOrder order,
                   int* ratio_index) {
  const int G = n_heads / n_kv_heads;
  std::vector<float> score(static_cast<std::size_t>(n_kv_heads), 0.0f);
  std::vector<int> rank(static_cast<std::size_t>(n_kv_heads));
  for (int g = 0; g < n_kv_heads; ++g) {
    for (int j = 0; j < G; ++j) score[g] += share[g * G + j];
    score[g] /= static_cast<float>(G);
    rank[g] = g;
  }
  std::stable_sort(rank.begin(), rank.end(), [&](int a, int b) { return score[a] > score[b]; });
  for (int g = 0; g < n_kv_heads; ++g) {
    if (order == RatioOrder::Rank) ratio_index[rank[g]] = g;
    else if (order == RatioOrder::Gather) ratio_index[g] = rank[g];
    else ratio_index[g] = n_kv_heads - 1 - g;
  }
}

std::vector<float> rope_tables(const Config& c, const int64_t* positions, std::size_t T,
                               const std::vector<float>& ratios, std::size_t window) {
  const std::size_t half_d = static_cast<std::size_t>(c.head_dim / 2), n_r = ratios.size();
  const std::size_t n_tab = 1 + n_r + (window ? n_r : 0);
  std::vector<float> tab(n_tab * T * half_d * 2);
  for (std::size_t r = 0; r < n_tab; ++r) {
    const bool far_tab = r > n_r;
    const double ratio = r == 0 ? 1.0 : static_cast<double>(ratios[far_tab ? r - 1 - n_r : r - 1]);
    const double shift = far_tab ? static_cast<double>(window) * (1.0 - 1.0 / ratio) : 0.0;
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t i = 0; i < half_d; ++i) {
        const double inv = std::pow(static_cast<double>(c.rope_base),
                                    -2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim));
        const double p = static_cast<double>(positions[t]);
        const double ang = r == 0 ? p * inv : far_tab ? (p / ratio + shift) * inv : (p / ratio) * inv;
        const std::size_t o = ((r * T + t) * half_d + i) * 2;
        tab[o] = static_cast<float>(std::cos(ang));
        tab[o + 1] = static_cast<float>(std::sin(ang));
      }
  }
  return tab;
}

// ---- KVCache ---------------------------------------------------------------------------------
KVCache::KVCache(int n_layers, int n_kv_heads, int head_dim)
    : HeadGrid(n_layers, n_kv_heads, head_dim) {}

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

float Model::ratio_of(int i) const { return model::ratio_of(pos_, cfg_.n_kv_heads, i); }

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
      detail::dequant(W, r, row.data(), 1);
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

}  // namespace lamina::model
