// The llama forward of Model (lamina/model.hpp) as stages: a Pass plans one call (checks,
// positions, the attention record, position / channel scaling, the GEMV or GEMM path, rotation
// tables, buffers), then every thread of its team runs the same phases: the embedding; per
// layer the attention block (norm, Q/K/V with RoPE and the KV write, Ms-PoE's ranking on the
// first call, attention, output projection) and the FFN; the final norm and the logits.
// cuda/model_forward.cu is its GPU twin.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

#include "lamina/common.hpp"
#include "lamina/model.hpp"
#include "lamina/model_isa.hpp"
#include "lamina/parallel.hpp"
#include "model_internal.hpp"

namespace lamina::model {

using detail::dequant;
using detail::dequant_packed_row;

// One forward over T token rows. batch = false: the rows are consecutive tokens of caches[0]
// (causal among themselves). batch = true: row t is the next token of caches[t] and attends
// over that cache alone (a decode step of T independent sequences; the matmuls still run over
// the T rows together, so the weights are read once for all of them).
class Model::Pass {
 public:
  Pass(const Model& m, const int32_t* ids, std::size_t T, KVCache* const* caches, bool batch,
       Logits mode, float* logits, int n_threads, const AttentionRecord* record, bool q8_decode,
       float* hidden);
  // Runs the team, then sums the record's accumulation and commits the caches.
  void run();

 private:
  // The team's phases, in order. A phase is a set of chunks handed out by an atomic counter;
  // a thread that finds none left waits until every chunk is done (a completion count, not a
  // barrier of threads): a thread the OS has descheduled holds up only the chunk it is in, and
  // the others take the rest of the phase. Chunk results are published by the release of the
  // completion count and read after its acquire.
  struct Phase {
    std::atomic<std::size_t> next{0}, done{0};
  };
  struct Scratch {
    std::vector<float> panel, ctile, probs, xsum_q, xd, acc, h, out2, tile;
    std::vector<int8_t> xq;
    std::vector<int32_t> xqs;
    std::vector<float> row;  // a dequantised weight row (float decode of a packed matrix)
  };
  // One thread of the team: its scratch and the index of the next phase it joins.
  struct Thread {
    Scratch& S;
    std::size_t phase_i = 0;
  };
  // Decode attention: entries per block and the partial softmaxes of every (block, query).
  static constexpr std::size_t kDecodeBlock = 256;
  static constexpr std::size_t kRows = 64;  // GEMV rows per chunk

  // ---- the plan (constructor) ----
  void check_inputs() const;
  void plan_positions();
  void plan_record();
  void plan_scaling();
  void plan_path(int n_threads);
  void allocate();
  void allocate_scratch();

  // ---- helpers of the team ----
  template <class Fn>
  void run(Thread& th, std::size_t total, const Fn& fn);
  void prepare(Thread& th, const float* X, std::size_t K);
  void float_rows(Thread& th, const Matrix& W, const float* xr, std::size_t r0, std::size_t r1,
                  float* y) const;
  void mm(Thread& th, const Matrix& W, const float* X, float* Y, std::size_t ldy, std::size_t c0,
          std::size_t c1) const;
  void mm_panels(Thread& th, const Matrix& W, const float* X, float* Y, std::size_t ldy,
                 std::size_t c0, std::size_t c1) const;
  void norm_row(const float* wn, std::size_t t, float* out) const;
  const float* rmsnorm(Thread& th, const float* wn);
  const float* table(std::size_t i, std::size_t t) const {
    return rope.data() + (i * T + t) * D;
  }
  void rot_by(float* r, const float* cs) const;
  void rot(float* r, std::size_t t) const { rot_by(r, table(0, t)); }
  std::size_t kv_at(std::size_t t, std::size_t l, std::size_t hh) const {
    return ((batch ? t : 0) * L + l) * Hk + hh;
  }
  // The slot row t writes in (row t, layer l, KV head hh), and the entries it then sees (+1).
  std::size_t slot_of(std::size_t t, std::size_t l, std::size_t hh) const {
    return len0[kv_at(t, l, hh)] + (batch ? 0 : t);
  }
  int ratio_of_head(std::size_t l, std::size_t hh) const;
  void rotate_queries(std::size_t l, std::size_t hh);
  bool chan_layer(std::size_t l) const { return l >= cfirst && l < clast; }
  // Query t of layer l reads the scaled key copy (channel scaling, last-tokens mode).
  bool chan_keys(std::size_t l, std::size_t t) const { return dual && chan_layer(l) && t >= t_scaled; }
  void chan_add(float* r, const float* hn_t, const float* col) const;
  void chan_queries(std::size_t l, std::size_t hh, const float* hn);
  void store_keys(std::size_t l, std::size_t hh, const float* hn);
  std::size_t n_chunks(std::size_t N) const { return (N + col_unit - 1) / col_unit; }
  // Column chunk i of an N-column matmul as [c0, c1).
  void cols(std::size_t i, std::size_t N, std::size_t& c0, std::size_t& c1) const {
    c0 = i * col_unit;
    c1 = std::min(N, c0 + col_unit);
  }

  // ---- the stages ----
  void team(std::size_t rank);
  void embed(Thread& th);
  void attention_block(Thread& th, std::size_t l);
  void rank_heads(Thread& th, std::size_t l, const float* hn);
  void attend_tiles(Thread& th, std::size_t l);
  void attend_decode(Thread& th, std::size_t l);
  void attend_rows(Thread& th, std::size_t l);
  void attend_window(Thread& th, std::size_t t, std::size_t hh, std::size_t at, std::size_t n,
                     float* out);
  void record_row(Thread& th, std::size_t l, std::size_t t, std::size_t hh, std::size_t n);
  void add_projection(Thread& th, const Matrix& W, const float* in, std::size_t i);
  void ffn(Thread& th, std::size_t l);
  void output_logits(Thread& th);

  // ---- inputs ----
  const Model& model;
  const Weights& w_;
  const int32_t* ids;
  const std::size_t T;
  KVCache* const* caches;
  const bool batch;
  const Logits mode;
  float* logits;
  const AttentionRecord* record;
  const bool q8_decode;
  float* hidden;
  const Config& c;
  KVCache& cache;
  const std::size_t NB;  // caches of the call
  const std::size_t L, d, F, H, Hk, D, V, G;

  // ---- the plan ----
  int64_t pos0 = 0;
  std::vector<int64_t> row_pos;   // position of row t
  std::vector<std::size_t> len0;  // entries per (cache, layer, KV head) before the call
  std::size_t max_len = 0;
  std::size_t S_rec = 0, W_rec = 0;
  bool accumulate = false, acc_max = false;
  const PositionScaling& P;
  std::size_t first = 0, win = 0;
  bool scaled = false, ranking = false;
  const ChannelScaling& CS;
  std::size_t cfirst = 0, clast = 0, t_scaled = 0;
  bool dual = false;
  float chan_delta = 0.0f;
  std::size_t chan_c = 0;
  const misa::Kernels& kern;
  std::size_t NR = 0, maxK = 0, col_unit = 0, kAttnChunk = 1, n_dblk = 0;
  bool gemm = false, q8g = false;
  int nt = 1;
  float eps = 0.0f, scale = 0.0f;

  // ---- buffers ----
  // Activations (row-major, one row per token) and per-rank scratch.
  std::vector<float> x, h, tmp, q, k, v, att, g, u, a;
  std::vector<int8_t> gxq;
  std::vector<float> gxd, gxsum;
  std::vector<int32_t> gxqs;
  std::vector<float> rope;  // rope_tables(): plain, Ms-PoE ratios, far queries
  std::vector<float> q_far;
  int* ratio_idx = nullptr;
  float* outlier = nullptr;
  const uint8_t* plain_flags = nullptr;
  std::vector<Scratch> scratch;
  std::vector<float*> kdst, vdst, ksdst;
  std::vector<int32_t*> pdst;
  std::vector<float> dpart;
  std::vector<Phase> phases;
};

Model::Pass::Pass(const Model& m, const int32_t* ids_, std::size_t T_, KVCache* const* caches_,
                  bool batch_, Logits mode_, float* logits_, int n_threads,
                  const AttentionRecord* record_, bool q8_decode_, float* hidden_)
    : model(m), w_(m.w_), ids(ids_), T(T_), caches(caches_), batch(batch_), mode(mode_),
      logits(logits_), record(record_), q8_decode(q8_decode_), hidden(hidden_), c(m.cfg_),
      cache(*caches_[0]), NB(batch_ ? T_ : 1), L(c.n_layers), d(c.d_model), F(c.d_ff),
      H(c.n_heads), Hk(c.n_kv_heads), D(c.head_dim), V(c.vocab_size), G(H / Hk), P(m.pos_),
      CS(m.chan_), kern(misa::kernels()) {
  check_inputs();
  plan_positions();
  plan_record();
  plan_scaling();
  plan_path(n_threads);
  allocate();
}

void Model::Pass::check_inputs() const {
  LAMINA_CHECK(T >= 1, "forward: no tokens (ids is empty)");
  for (std::size_t b = 0; b < NB; ++b)
    LAMINA_CHECK(caches[b]->n_layers() == c.n_layers && caches[b]->n_kv_heads() == c.n_kv_heads &&
                     caches[b]->head_dim() == c.head_dim,
                 "forward: the KV cache was made for another model shape");
  for (std::size_t t = 0; t < T; ++t)
    LAMINA_CHECK(ids[t] >= 0 && ids[t] < c.vocab_size, "token id ", ids[t], " at index ", t,
                 " is outside the vocabulary [0, ", c.vocab_size, ")");
  LAMINA_CHECK(mode == Logits::None || logits != nullptr, "forward: no logits buffer");
}

void Model::Pass::plan_positions() {
  pos0 = cache.n_seen();
  row_pos.resize(T);
  for (std::size_t t = 0; t < T; ++t) {
    row_pos[t] = batch ? caches[t]->n_seen() : pos0 + static_cast<int64_t>(t);
    LAMINA_CHECK(row_pos[t] + 1 < (int64_t{1} << 31), "forward: position overflow");
  }
  len0.resize(NB * L * Hk);
  for (std::size_t b = 0; b < NB; ++b)
    for (std::size_t l = 0; l < L; ++l)
      for (std::size_t hh = 0; hh < Hk; ++hh) {
        const std::size_t at = (b * L + l) * Hk + hh;
        len0[at] = caches[b]->length(static_cast<int>(l), static_cast<int>(hh));
        max_len = std::max(max_len, len0[at]);
      }
}

// The record needs every (cache, layer, KV head) to hold the same number of entries.
void Model::Pass::plan_record() {
  accumulate = record && record->accumulated;
  acc_max = accumulate && record->accumulate_max;
  if (!record || (record->window <= 0 && !accumulate)) return;
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

void Model::Pass::plan_scaling() {
  // Position scaling: layers [first, L) rescaled; the ratios are assigned on the first call.
  first = P.enabled ? static_cast<std::size_t>(P.first_layer) : L;
  scaled = first < L;
  ranking = scaled && !cache.scaled();
  if (ranking) {
    LAMINA_CHECK(cache.n_seen() == 0,
                 "ms-poe: a cache is ranked on its first call, but this one already holds ",
                 cache.n_seen(), " tokens of a forward without position scaling (use a new cache)");
    cache.begin_scaled(static_cast<int>(H));
  }
  // Channel scaling: layers [cfirst, clast); in last-tokens mode the queries t >= t_scaled
  // are scaled and the cache keeps a scaled copy of every key.
  const ChannelSpan span = channel_span(CS, L, T);
  cfirst = span.first;
  clast = span.last;
  t_scaled = span.t_scaled;
  dual = span.dual;
  if (dual && !cache.dual_keys()) {
    check_dual_keys_start(cache.n_seen());
    cache.begin_dual_keys();
  }
  chan_delta = CS.factor - 1.0f;
  chan_c = static_cast<std::size_t>(CS.channel);
  for (std::size_t b = 0; b < NB; ++b) caches[b]->reserve_more(batch ? 1 : T);
}

void Model::Pass::plan_path(int n_threads) {
  NR = kern.panel_width;
  // A batched decode stays on the GEMV path (each weight block read once for every row): its
  // rows then go through the single-token decode's own kernels (q8_decode included), so a
  // batch differs from B separate steps only in the attention's summation order. (At 8 rows
  // the GEMM path measured no faster: bench_model.py --candidates 8.)
  gemm = T >= kGemmMinTokens && !batch;
  // The prefill multiplies int8-quantised activations with the packed blocks (integer GEMM).
  q8g = gemm && model.q8_prefill_;
  maxK = std::max({d, F, H * D});
  const std::size_t work =
      L * T * (3 * d * F + 2 * d * H * D + 2 * d * Hk * D) + L * T * (max_len + T) * H * D;
  nt = threads_for(work, std::size_t{1} << 21, n_threads);
  // (token, head) pairs per attention chunk: one on the decode path (a step has only H pairs)
  kAttnChunk = gemm ? 8 : 1;
  eps = c.rms_eps;
  scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Chunks of a matmul with N output columns: GEMV row blocks or GEMM panels.
  col_unit = gemm ? std::max(NR, misa::kPackRows) : kRows;
}

void Model::Pass::allocate() {
  for (std::vector<float>* b : {&x, &h, &tmp}) b->resize(T * d);
  for (std::vector<float>* b : {&q, &att}) b->resize(T * H * D);
  for (std::vector<float>* b : {&k, &v}) b->resize(T * Hk * D);
  for (std::vector<float>* b : {&g, &u, &a}) b->resize(T * F);
  gxq.resize(q8g ? T * maxK : 0);
  gxd.resize(q8g ? T * maxK / 32 : 0);
  gxsum.resize(gxd.size());
  gxqs.resize(gxd.size());
  // Scaled rotations per ratio index i: angle (p / r_i)·θ_j, and for the far keys of the
  // window variant (p / r_i + window·(1 - 1/r_i))·θ_j.
  win = scaled ? static_cast<std::size_t>(P.window) : 0;
  std::vector<float> ratios;
  for (std::size_t r = 0; scaled && r < Hk; ++r) ratios.push_back(model.ratio_of(static_cast<int>(r)));
  rope = rope_tables(c, row_pos.data(), T, ratios, win);
  q_far.resize(win ? T * H * D : 0);
  ratio_idx = scaled ? cache.ratio_index_mut() : nullptr;
  outlier = scaled ? cache.outlier_share_mut() : nullptr;
  plain_flags = P.plain_heads.empty() ? nullptr : P.plain_heads.data();
  allocate_scratch();
  kdst.assign(NB * L * Hk, nullptr);
  vdst.assign(NB * L * Hk, nullptr);
  ksdst.assign(NB * L * Hk, nullptr);
  pdst.assign(NB * L * Hk, nullptr);
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
  // (+3: the ranking call's scoring, assignment and rotation phases)
  // (+4 on the integer GEMM path: the quantisation of each matmul input)
  // (+1: the last-tokens channel scaling's attention of the scaled queries on the tile path)
  const std::size_t phases_per_layer = (gemm ? 7 + 4 : 6) + 3 + 1;
  n_dblk = gemm || batch ? 0 : (max_len + T + kDecodeBlock - 1) / kDecodeBlock;
  dpart.resize(n_dblk * T * H * (D + 2));
  phases = std::vector<Phase>(1 + L * phases_per_layer + 3);
}

void Model::Pass::allocate_scratch() {
  scratch.resize(static_cast<std::size_t>(nt));
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
}

void Model::Pass::run() {
  parallel_for(static_cast<std::size_t>(nt), nt, [this](std::size_t rank, int) { team(rank); });
  if (accumulate) {
    float* acc = record->accumulated;
    std::fill(acc, acc + L * H * S_rec, 0.0f);
    for (const Scratch& sc : scratch)
      for (std::size_t j = 0; j < L * H * S_rec; ++j)
        acc[j] = acc_max ? std::max(acc[j], sc.acc[j]) : acc[j] + sc.acc[j];
  }
  for (std::size_t b = 0; b < NB; ++b) caches[b]->commit(batch ? 1 : T);
}

// ---- helpers of the team ---------------------------------------------------------------------
template <class Fn>
void Model::Pass::run(Thread& th, std::size_t total, const Fn& fn) {
  Phase& ph = phases[th.phase_i++];
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
}

// Matmul inputs X (T rows of K) quantised to int8 with their block sums: on the GEMM path once,
// as a phase over tokens, into the shared buffers; on the GEMV path each thread quantises the
// few rows itself.
void Model::Pass::prepare(Thread& th, const float* X, std::size_t K) {
  const std::size_t nb = K / 32;
  if (q8g) {
    run(th, T, [&](std::size_t t) {
      kern.quantise(X + t * K, K, gxq.data() + t * K, gxd.data() + t * nb, gxsum.data() + t * nb,
                    gxqs.data() + t * nb);
    });
    return;
  }
  if (gemm || !q8_decode) return;
  Scratch& S = th.S;
  for (std::size_t t = 0; t < T; ++t)
    kern.quantise(X + t * K, K, S.xq.data() + t * K, S.xd.data() + t * nb,
                  S.xsum_q.data() + t * nb, S.xqs.data() + t * nb);
}

// y[r - r0] = W_r · x for rows [r0, r1) of a packed matrix on float32 activations: each row
// dequantised, then a float dot product.
void Model::Pass::float_rows(Thread& th, const Matrix& W, const float* xr, std::size_t r0,
                             std::size_t r1, float* y) const {
  const std::size_t K = W.cols;
  Scratch& S = th.S;
  for (std::size_t r = r0; r < r1; ++r) {
    dequant_packed_row(W, r, S.row.data(), 1);
    kern.gemv(QType::F32, reinterpret_cast<const uint8_t*>(S.row.data()), 4 * K, K, xr, 0, 1,
              y + (r - r0));
  }
}

// Y[t, c0..c1) (row stride ldy) = X[t, :] · W_c for t < T; c0 a multiple of col_unit.
void Model::Pass::mm(Thread& th, const Matrix& W, const float* X, float* Y, std::size_t ldy,
                     std::size_t c0, std::size_t c1) const {
  const std::size_t K = W.cols, nb = K / 32;
  const uint8_t* base = static_cast<const uint8_t*>(W.data);
  Scratch& S = th.S;
  if (!gemm) {
    for (std::size_t t = 0; t < T; ++t) {
      if (!W.packed) {
        kern.gemv(W.type, base, row_bytes(W.type, K), K, X + t * K, c0, c1, Y + t * ldy + c0);
      } else if (q8_decode) {
        kern.gemv_q8(W.type, base, K, S.xq.data() + t * K, S.xd.data() + t * nb,
                     S.xsum_q.data() + t * nb, S.xqs.data() + t * nb, c0, c1, Y + t * ldy + c0);
      } else {
        float_rows(th, W, X + t * K, c0, c1, Y + t * ldy + c0);
      }
    }
    return;
  }
  if (q8g && W.packed) {  // integer GEMM, a packed group of rows at a time
    for (std::size_t p = c0; p < c1; p += misa::kPackRows) {
      const std::size_t nc = std::min(misa::kPackRows, c1 - p), grp = p / misa::kPackRows;
      if (nc == misa::kPackRows) {  // the whole group lies in Y's columns: written in place
        kern.gemm_q8(W.type, base, K, grp, gxq.data(), gxd.data(), gxsum.data(), gxqs.data(), T,
                     Y + p, ldy);
        continue;
      }
      kern.gemm_q8(W.type, base, K, grp, gxq.data(), gxd.data(), gxsum.data(), gxqs.data(), T,
                   S.ctile.data(), misa::kPackRows);
      for (std::size_t t = 0; t < T; ++t)
        std::memcpy(Y + t * ldy + p, S.ctile.data() + t * misa::kPackRows, nc * sizeof(float));
    }
    return;
  }
  mm_panels(th, W, X, Y, ldy, c0, c1);
}

// The float GEMM: NR rows of W dequantised into a panel at a time.
void Model::Pass::mm_panels(Thread& th, const Matrix& W, const float* X, float* Y,
                            std::size_t ldy, std::size_t c0, std::size_t c1) const {
  const std::size_t K = W.cols;
  Scratch& S = th.S;
  for (std::size_t p = c0; p < c1; p += NR) {
    const std::size_t nc = std::min(NR, c1 - p);
    for (std::size_t j = 0; j < nc; ++j) dequant(W, p + j, S.panel.data() + j, NR);
    for (std::size_t j = nc; j < NR; ++j)
      for (std::size_t kk = 0; kk < K; ++kk) S.panel[kk * NR + j] = 0.0f;
    kern.gemm_panel(S.panel.data(), K, X, K, T, S.ctile.data(), NR);
    for (std::size_t t = 0; t < T; ++t)
      std::memcpy(Y + t * ldy + p, S.ctile.data() + t * NR, nc * sizeof(float));
  }
}

void Model::Pass::norm_row(const float* wn, std::size_t t, float* out) const {
  double ss = 0.0;
  for (std::size_t j = 0; j < d; ++j) ss += static_cast<double>(x[t * d + j]) * x[t * d + j];
  const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
  for (std::size_t j = 0; j < d; ++j) out[t * d + j] = x[t * d + j] * r * wn[j];
}

// RMSNorm of x: a phase over tokens into the shared rows on the GEMM path; on the GEMV path
// each thread normalises the few rows itself (no phase). Returns the rows to read.
const float* Model::Pass::rmsnorm(Thread& th, const float* wn) {
  if (gemm) {
    run(th, T, [&](std::size_t t) { norm_row(wn, t, h.data()); });
    return h.data();
  }
  for (std::size_t t = 0; t < T; ++t) norm_row(wn, t, th.S.h.data());
  return th.S.h.data();
}

// RoPE on adjacent pairs, by a row of (cos, sin) pairs of rope_tables().
void Model::Pass::rot_by(float* r, const float* cs) const {
  for (std::size_t i = 0; i < D / 2; ++i) {
    const float x0 = r[2 * i], x1 = r[2 * i + 1];
    r[2 * i] = x0 * cs[2 * i] - x1 * cs[2 * i + 1];
    r[2 * i + 1] = x0 * cs[2 * i + 1] + x1 * cs[2 * i];
  }
}

// Ratio index of query head hh in layer l (-1: plain RoPE).
int Model::Pass::ratio_of_head(std::size_t l, std::size_t hh) const {
  if (!scaled || l < first) return -1;
  if (plain_flags && plain_flags[l * H + hh]) return -1;
  return ratio_idx[l * Hk + hh / G];
}

// Queries of head hh (all tokens): plain, scaled, or plain + far (window variant).
void Model::Pass::rotate_queries(std::size_t l, std::size_t hh) {
  const int ri = ratio_of_head(l, hh);
  for (std::size_t t = 0; t < T; ++t) {
    float* qr = q.data() + (t * H + hh) * D;
    if (ri < 0) {
      rot(qr, t);
      continue;
    }
    const std::size_t r = static_cast<std::size_t>(ri);
    if (win) {
      float* qf = q_far.data() + (t * H + hh) * D;
      std::memcpy(qf, qr, D * sizeof(float));
      rot_by(qf, table(1 + Hk + r, t));
      rot(qr, t);
    } else {
      rot_by(qr, table(1 + r, t));
    }
  }
}

// Rows [r, r + D) of a projection from the scaled input: += (factor - 1) · hn[channel] · col.
void Model::Pass::chan_add(float* r, const float* hn_t, const float* col) const {
  const float s = chan_delta * hn_t[chan_c];
  for (std::size_t e = 0; e < D; ++e) r[e] += s * col[e];
}

// Query head hh of layer l: rows t >= t_scaled come from the scaled input (before RoPE).
void Model::Pass::chan_queries(std::size_t l, std::size_t hh, const float* hn) {
  if (!chan_layer(l)) return;
  for (std::size_t t = t_scaled; t < T; ++t)
    chan_add(q.data() + (t * H + hh) * D, hn + t * d, model.chan_q_[l].data() + hh * D);
}

// Keys of KV head hh (all tokens) into the cache: plain RoPE, and scaled where rescaled.
// With channel scaling every key is scaled (all positions) or a scaled copy is kept.
void Model::Pass::store_keys(std::size_t l, std::size_t hh, const float* hn) {
  const int ri = scaled && l >= first ? ratio_idx[l * Hk + hh] : -1;
  const bool ch = chan_layer(l);
  const float* col = ch ? model.chan_k_[l].data() + hh * D : nullptr;
  for (std::size_t t = 0; t < T; ++t) {
    float* kr = k.data() + (t * Hk + hh) * D;
    const std::size_t at = kv_at(t, l, hh), slot = slot_of(t, l, hh);
    if (ch && !dual) chan_add(kr, hn + t * d, col);
    if (ch && dual) {
      float* ks = ksdst[at] + slot * D;
      std::memcpy(ks, kr, D * sizeof(float));
      chan_add(ks, hn + t * d, col);
      rot(ks, t);
    }
    if (ri >= 0) {
      float* ks = ksdst[at] + slot * D;
      std::memcpy(ks, kr, D * sizeof(float));
      rot_by(ks, table(1 + static_cast<std::size_t>(ri), t));
    }
    rot(kr, t);
    std::memcpy(kdst[at] + slot * D, kr, D * sizeof(float));
    std::memcpy(vdst[at] + slot * D, v.data() + (t * Hk + hh) * D, D * sizeof(float));
    pdst[at][slot] = static_cast<int32_t>(row_pos[t]);
  }
}

// ---- the stages ------------------------------------------------------------------------------
void Model::Pass::team(std::size_t rank) {
  Thread th{scratch[rank]};
  embed(th);
  for (std::size_t l = 0; l < L; ++l) {
    attention_block(th, l);
    ffn(th, l);
  }
  output_logits(th);
}

void Model::Pass::embed(Thread& th) {
  run(th, T, [&](std::size_t t) {
    dequant(w_.token_embd, static_cast<std::size_t>(ids[t]), x.data() + t * d, 1);
  });
}

void Model::Pass::attention_block(Thread& th, std::size_t l) {
  const Layer& Ly = w_.layers[l];
  const float* hn = rmsnorm(th, Ly.attn_norm);
  prepare(th, hn, d);
  // Q heads, then K/V heads: RoPE and the cache append by the thread that computed them
  // (on the ranking call of a rescaled layer, after the heads are scored and assigned).
  const bool rank_now = ranking && l >= first;
  run(th, H + Hk, [&](std::size_t i) {
    if (i < H) {
      mm(th, Ly.wq, hn, q.data(), H * D, i * D, (i + 1) * D);
      chan_queries(l, i, hn);
      if (!rank_now) rotate_queries(l, i);
      return;
    }
    const std::size_t hh = i - H;
    mm(th, Ly.wk, hn, k.data(), Hk * D, hh * D, (hh + 1) * D);
    mm(th, Ly.wv, hn, v.data(), Hk * D, hh * D, (hh + 1) * D);
    if (!rank_now) store_keys(l, hh, hn);
  });
  if (rank_now) rank_heads(th, l, hn);
  const bool window_layer = win && scaled && l >= first;
  if (gemm && !batch && !record && !window_layer && D % 4 == 0) {
    attend_tiles(th, l);
  } else if (!gemm && !batch && !record && !window_layer) {
    attend_decode(th, l);
  } else {
    attend_rows(th, l);
  }
  prepare(th, att.data(), H * D);
  run(th, n_chunks(d), [&](std::size_t i) { add_projection(th, Ly.wo, att.data(), i); });
}

// Ms-PoE's ranking call: the outlier share of each head's last query row (un-rotated q · k, as
// released), the layer's ratio assignment, then the rotations and the KV write.
void Model::Pass::rank_heads(Thread& th, std::size_t l, const float* hn) {
  run(th, H, [&](std::size_t hh) {
    const float* ql = q.data() + ((T - 1) * H + hh) * D;
    float* pr = th.S.probs.data();
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
  run(th, 1, [&](std::size_t) {
    assign_ratios(outlier + l * H, static_cast<int>(H), static_cast<int>(Hk), P.order,
                  ratio_idx + l * Hk);
  });
  run(th, H + Hk, [&](std::size_t i) {
    if (i < H) rotate_queries(l, i);
    else store_keys(l, i - H, hn);
  });
}

// Prefill without a record or the window variant: tiles of tokens × the G heads of a KV group
// (every K/V row read once per tile; a rescaled head reads the scaled keys, so a group whose
// heads differ runs as several tiles), the latest (costliest) tiles first.
void Model::Pass::attend_tiles(Thread& th, std::size_t l) {
  Scratch& S = th.S;
  const std::size_t TT = kern.tile_tokens, n_tiles = (T + TT - 1) / TT;
  run(th, Hk * n_tiles, [&](std::size_t i) {
    const std::size_t kv = i % Hk, t0 = (n_tiles - 1 - i / Hk) * TT;
    const float* keys_of[2] = {kdst[l * Hk + kv], ksdst[l * Hk + kv]};
    for (std::size_t a0 = 0; a0 < G;) {
      const bool sc = ratio_of_head(l, kv * G + a0) >= 0;
      std::size_t e = a0 + 1;
      while (e < G && (ratio_of_head(l, kv * G + e) >= 0) == sc) ++e;
      const std::size_t off = (t0 * H + kv * G + a0) * D;
      kern.attend_tile(q.data() + off, H * D, e - a0, std::min(TT, T - t0), keys_of[sc],
                       vdst[l * Hk + kv], len0[l * Hk + kv] + t0, D, scale, S.tile.data(),
                       att.data() + off, H * D);
      a0 = e;
    }
  });
  if (!(dual && chan_layer(l))) return;
  // The scaled queries again, over the scaled keys (they replace the tile's rows): a one-token
  // tile of the group's G heads runs the tile's own per-token arithmetic, so factor 1
  // reproduces the plain rows bit for bit.
  run(th, (T - t_scaled) * Hk, [&](std::size_t i) {
    const std::size_t t = t_scaled + i / Hk, kv = i % Hk;
    const std::size_t off = (t * H + kv * G) * D;
    kern.attend_tile(q.data() + off, H * D, G, 1, ksdst[l * Hk + kv], vdst[l * Hk + kv],
                     len0[l * Hk + kv] + t, D, scale, S.tile.data(), att.data() + off, H * D);
  });
}

// Decode: each KV head's entries in blocks of kDecodeBlock; a chunk runs every query of the
// group (the call's T tokens × G heads) over one block, so the block's K/V rows come from
// memory once and stay in cache for the group's other queries, and a long cache spreads over
// every thread. Partial softmaxes (max, sum, normalised output) are merged per query in the
// next phase.
void Model::Pass::attend_decode(Thread& th, std::size_t l) {
  run(th, Hk * n_dblk, [&](std::size_t i) {
    const std::size_t kv = i % Hk, blk = i / Hk, j0 = blk * kDecodeBlock;
    const std::size_t held = len0[l * Hk + kv];
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t a0 = 0; a0 < G; ++a0) {
        const std::size_t hh = kv * G + a0;
        float* part = dpart.data() + ((blk * T + t) * H + hh) * (D + 2);
        const std::size_t n = std::min(held + t + 1, j0 + kDecodeBlock);
        if (n <= j0) {
          part[1] = 0.0f;  // nothing of this block is visible to the query
          continue;
        }
        const float* keys = ratio_of_head(l, hh) >= 0 || chan_keys(l, t) ? ksdst[l * Hk + kv]
                                                                           : kdst[l * Hk + kv];
        kern.attend(q.data() + (t * H + hh) * D, keys + j0 * D, vdst[l * Hk + kv] + j0 * D,
                    n - j0, D, scale, th.S.probs.data(), part + 2, part);
      }
  });
  run(th, T * H, [&](std::size_t i) {
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
}

// Attention over (KV head, token descending, query head of the group): the G queries of a
// token read the same K/V rows back to back; the costliest (latest) tokens go first.
void Model::Pass::attend_rows(Thread& th, std::size_t l) {
  Scratch& S = th.S;
  run(th, (T * H + kAttnChunk - 1) / kAttnChunk, [&](std::size_t chunk) {
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
        attend_window(th, t, hh, at, n, out);
      }
      record_row(th, l, t, hh, n);
    }
  });
}

// The window variant of a rescaled head: entries [0, m) lie window or more behind the query
// (scaled keys, far query), [m, n) nearer (plain keys and query): two softmaxes merged by their
// partition functions, each recovered from its largest probability.
void Model::Pass::attend_window(Thread& th, std::size_t t, std::size_t hh, std::size_t at,
                                std::size_t n, float* out) {
  Scratch& S = th.S;
  const int32_t* pp = pdst[at];
  const int64_t cut = row_pos[t] - static_cast<int64_t>(win);
  const std::size_t m = static_cast<std::size_t>(
      std::upper_bound(pp, pp + n, cut, [](int64_t a0, int32_t b) { return a0 < b; }) - pp);
  const float* qr = q.data() + (t * H + hh) * D;
  const float* qf = q_far.data() + (t * H + hh) * D;
  const float* ks = ksdst[at];
  const float* kp = kdst[at];
  const float* vv = vdst[at];
  float* pr = S.probs.data();
  if (m == 0) {
    kern.attend(qr, kp, vv, n, D, scale, pr, out, nullptr);
    return;
  }
  if (m == n) {
    kern.attend(qf, ks, vv, n, D, scale, pr, out, nullptr);
    return;
  }
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
  const float wa = static_cast<float>(1.0 / (1.0 + std::exp(z2 - z1))), wb = 1.0f - wa;
  for (std::size_t e = 0; e < D; ++e) out[e] = wa * out[e] + wb * o2[e];
  for (std::size_t j = 0; j < m; ++j) pr[j] *= wa;
  for (std::size_t j = m; j < n; ++j) pr[j] *= wb;
}

// The softmax row of (token t, head hh) just computed into the record and the accumulation.
void Model::Pass::record_row(Thread& th, std::size_t l, std::size_t t, std::size_t hh,
                             std::size_t n) {
  Scratch& S = th.S;
  if (W_rec && t + W_rec >= T) {
    float* o = record->out + ((l * H + hh) * W_rec + (t + W_rec - T)) * S_rec;
    std::memcpy(o, S.probs.data(), n * sizeof(float));
  }
  if (!accumulate) return;
  float* acc = S.acc.data() + (l * H + hh) * S_rec;
  if (acc_max) {
    for (std::size_t j = 0; j < n; ++j) acc[j] = std::max(acc[j], S.probs[j]);
  } else {
    for (std::size_t j = 0; j < n; ++j) acc[j] += S.probs[j];
  }
}

// Chunk i of x += in · Wᵀ (the attention output or the FFN down projection, d columns).
void Model::Pass::add_projection(Thread& th, const Matrix& W, const float* in, std::size_t i) {
  std::size_t c0, c1;
  cols(i, d, c0, c1);
  mm(th, W, in, tmp.data(), d, c0, c1);
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t j = c0; j < c1; ++j) x[t * d + j] += tmp[t * d + j];
}

void Model::Pass::ffn(Thread& th, std::size_t l) {
  const Layer& Ly = w_.layers[l];
  const float* hf = rmsnorm(th, Ly.ffn_norm);
  prepare(th, hf, d);
  run(th, n_chunks(F), [&](std::size_t i) {
    std::size_t c0, c1;
    cols(i, F, c0, c1);
    mm(th, Ly.w_gate, hf, g.data(), F, c0, c1);
    mm(th, Ly.w_up, hf, u.data(), F, c0, c1);
    for (std::size_t t = 0; t < T; ++t)
      kern.swiglu(g.data() + t * F + c0, u.data() + t * F + c0, c1 - c0, a.data() + t * F + c0);
  });
  prepare(th, a.data(), F);
  run(th, n_chunks(d), [&](std::size_t i) {
    add_projection(th, Ly.w_down, a.data(), i);
    if (!hidden) return;
    std::size_t c0, c1;
    cols(i, d, c0, c1);
    for (std::size_t t = 0; t < T; ++t)
      std::memcpy(hidden + (l * T + t) * d + c0, x.data() + t * d + c0, (c1 - c0) * sizeof(float));
  });
}

void Model::Pass::output_logits(Thread& th) {
  if (mode == Logits::None) return;
  Scratch& S = th.S;
  const float* ho = rmsnorm(th, w_.output_norm);
  if (mode == Logits::All) {
    prepare(th, ho, d);
    run(th, n_chunks(V), [&](std::size_t i) {
      std::size_t c0, c1;
      cols(i, V, c0, c1);
      mm(th, w_.output, ho, logits, V, c0, c1);
    });
    return;
  }
  // one row: the GEMV path on the last token (T = 1 view of the buffers)
  const float* last = ho + (T - 1) * d;
  const Matrix& W = w_.output;
  const bool q8 = q8_decode && W.packed;
  if (q8) kern.quantise(last, d, S.xq.data(), S.xd.data(), S.xsum_q.data(), S.xqs.data());
  run(th, (V + kRows - 1) / kRows, [&](std::size_t i) {
    const std::size_t c0 = i * kRows, c1 = std::min(V, c0 + kRows);
    const uint8_t* base = static_cast<const uint8_t*>(W.data);
    if (q8) {
      kern.gemv_q8(W.type, base, d, S.xq.data(), S.xd.data(), S.xsum_q.data(), S.xqs.data(), c0,
                   c1, logits + c0);
    } else if (!W.packed) {
      kern.gemv(W.type, base, row_bytes(W.type, d), d, last, c0, c1, logits + c0);
    } else {
      float_rows(th, W, last, c0, c1, logits + c0);
    }
  });
}

void Model::forward_impl(const int32_t* ids, std::size_t T, KVCache* const* caches, bool batch,
                         Logits mode, float* logits, int n_threads,
                         const AttentionRecord* record, bool q8_decode, float* hidden) const {
  Pass(*this, ids, T, caches, batch, mode, logits, n_threads, record, q8_decode, hidden).run();
}

}  // namespace lamina::model
