#include "lamina/lexical.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <mutex>
#include <unordered_set>

#include "lamina/common.hpp"
#include "lamina/hashing.hpp"
#include "lamina/parallel.hpp"

namespace lamina {

namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
// Lengths are kept as float for the scoring loop; below 2^24 they are exact.
constexpr std::size_t kMaxDocLen = std::size_t(1) << 24;

}  // namespace

// Entries of the inverted and forward indexes (named namespace: LexicalIndex members hold them).
namespace lexical_detail {
struct Posting {
  uint32_t pos;  // document position in its namespace
  uint32_t tf;
};
struct TermCount {
  uint32_t term;  // term id in the namespace
  uint32_t tf;
};
}  // namespace lexical_detail
using lexical_detail::Posting;
using lexical_detail::TermCount;

// Scoring scratch of one worker: acc[pos] is 0 for every position between queries (reset
// through the touched list), so a query never clears the whole array. Pooled in the index, so a
// worker thread created for one batch reuses warm buffers instead of allocating N floats.
struct LexicalIndex::Scratch {
  std::vector<float> acc;
  std::vector<uint32_t> touched;  // touched[0 .. n_touched): positions with acc != 0
  std::size_t n_touched = 0;
  std::vector<uint32_t> terms, order, rank;
  std::vector<TermCount> matches;  // (1 + processing index, tf)
  std::vector<float> weights, rest, part;
  std::vector<std::size_t> rest_df;
  std::vector<std::pair<float, int64_t>> heap;
};

namespace {

using Scratch = LexicalIndex::Scratch;

struct ResetTouched {
  Scratch& s;
  ~ResetTouched() {
    for (std::size_t i = 0; i < s.n_touched; ++i) s.acc[s.touched[i]] = 0.0f;
    s.n_touched = 0;
  }
};

// Length normalisation of one query: norm(len) = c0 + c1 * len = k1 * (1 - b + b * len / avgdl).
struct Norm {
  float c0, c1;
  // One term's BM25 contribution, w = idf * (k1 + 1). Both search phases use it, so a score
  // never depends on the phase that computed it.
  float contribution(float w, uint32_t tf_count, float len) const {
    const float tf = static_cast<float>(tf_count);
    return w * tf / (tf + c0 + c1 * len);
  }
};

// "a ranks before b": higher score, then smaller key.
inline bool ranks_before(const std::pair<float, int64_t>& a, const std::pair<float, int64_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

void check_offsets(const int64_t* offsets, std::size_t n, std::size_t n_hashes, const char* what) {
  LAMINA_CHECK(offsets[0] == 0, what, " offsets must start at 0, got ", offsets[0]);
  for (std::size_t i = 0; i < n; ++i)
    LAMINA_CHECK(offsets[i + 1] >= offsets[i], what, " offsets must be non-decreasing; offsets[",
                 i + 1, "] = ", offsets[i + 1], " < offsets[", i, "] = ", offsets[i]);
  LAMINA_CHECK(static_cast<uint64_t>(offsets[n]) == n_hashes, what, " offsets must end at the ",
               "number of term hashes (", n_hashes, "), got ", offsets[n]);
}

}  // namespace

// The standard FNV-1a 64 offset basis, passed explicitly: fnv1a64's default seed in
// hashing.hpp is 1469598103934665603, one digit short of it.
uint64_t term_hash(std::string_view term) { return fnv1a64(term, 14695981039346656037ull); }

struct LexicalIndex::Namespace {
  uint64_t id = 0;
  // Per position (documents in insertion order; dead ones stay until compaction).
  std::vector<int64_t> key;
  std::vector<float> len;
  std::vector<uint8_t> live;
  // Forward index: the distinct terms of position p and their counts are
  // fwd[fwd_off[p] .. fwd_off[p + 1]).
  std::vector<std::size_t> fwd_off{0};
  std::vector<TermCount> fwd;
  // Inverted index: term hash -> term id -> postings sorted by position.
  std::unordered_map<uint64_t, uint32_t> term_ids;
  std::vector<std::vector<Posting>> postings;
  std::vector<uint32_t> df;  // live documents per term
  std::size_t n_live = 0, n_dead = 0, n_postings = 0, n_terms_live = 0;
  uint64_t total_len = 0;  // sum of live lengths
};

LexicalIndex::LexicalIndex(double k1, double b) : k1_(k1), b_(b) {
  LAMINA_CHECK(std::isfinite(k1) && k1 >= 0.0, "k1 must be finite and >= 0, got ", k1);
  LAMINA_CHECK(std::isfinite(b) && b >= 0.0 && b <= 1.0, "b must be in [0, 1], got ", b);
}

LexicalIndex::~LexicalIndex() = default;

LexicalIndex::Namespace* LexicalIndex::find_locked(uint64_t ns) const {
  auto it = spaces_.find(ns);
  return it == spaces_.end() ? nullptr : it->second.get();
}

void LexicalIndex::add(const int64_t* keys, std::size_t n, const uint64_t* ns, bool ns_per_doc,
                       const uint64_t* hashes, std::size_t n_hashes, const int64_t* offsets) {
  check_offsets(offsets, n, n_hashes, "document");
  std::unique_lock lk(mu_);
  {
    std::unordered_set<int64_t> batch;
    if (n > 1) batch.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      LAMINA_CHECK(keys[i] >= 0, "keys must be >= 0 (-1 pads search results), got keys[", i,
                   "] = ", keys[i]);
      LAMINA_CHECK(!keys_.count(keys[i]), "key ", keys[i],
                   " is already in the index; remove it first to replace its text");
      LAMINA_CHECK(n == 1 || batch.insert(keys[i]).second, "key ", keys[i],
                   " appears more than once in one add");
      const std::size_t len = static_cast<std::size_t>(offsets[i + 1] - offsets[i]);
      LAMINA_CHECK(len < kMaxDocLen, "document ", i, " has ", len, " terms; the limit is ",
                   kMaxDocLen - 1);
      const uint64_t ns_id = ns_per_doc ? ns[i] : ns[0];
      const Namespace* sp = find_locked(ns_id);
      LAMINA_CHECK(!sp || sp->key.size() + n < kNone - 1, "namespace ", ns_id,
                   " would exceed 2^32 - 2 documents");
    }
  }
  keys_.reserve(keys_.size() + n);
  std::vector<uint64_t> sorted;
  for (std::size_t i = 0; i < n; ++i) {
    const uint64_t ns_id = ns_per_doc ? ns[i] : ns[0];
    auto& slot = spaces_[ns_id];
    if (!slot) {
      slot = std::make_unique<Namespace>();
      slot->id = ns_id;
    }
    Namespace& s = *slot;
    const uint32_t pos = static_cast<uint32_t>(s.key.size());
    const std::size_t len = static_cast<std::size_t>(offsets[i + 1] - offsets[i]);
    sorted.assign(hashes + offsets[i], hashes + offsets[i + 1]);
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t j = 0; j < sorted.size();) {
      std::size_t e = j + 1;
      while (e < sorted.size() && sorted[e] == sorted[j]) ++e;
      auto [it, fresh] = s.term_ids.try_emplace(sorted[j], static_cast<uint32_t>(s.postings.size()));
      if (fresh) {
        s.postings.emplace_back();
        s.df.push_back(0);
      }
      const uint32_t t = it->second;
      s.postings[t].push_back({pos, static_cast<uint32_t>(e - j)});
      if (s.df[t]++ == 0) ++s.n_terms_live;
      s.fwd.push_back({t, static_cast<uint32_t>(e - j)});
      ++s.n_postings;
      j = e;
    }
    s.fwd_off.push_back(s.fwd.size());
    s.key.push_back(keys[i]);
    s.len.push_back(static_cast<float>(len));
    s.live.push_back(1);
    s.total_len += len;
    ++s.n_live;
    keys_.emplace(keys[i], Loc{&s, pos});
  }
}

std::size_t LexicalIndex::remove(const int64_t* keys, std::size_t n, bool missing_ok) {
  std::unique_lock lk(mu_);
  std::vector<std::pair<int64_t, Loc>> found;
  found.reserve(n);
  {
    std::unordered_set<int64_t> batch;
    if (n > 1) batch.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      LAMINA_CHECK(n == 1 || batch.insert(keys[i]).second, "key ", keys[i],
                   " appears more than once in one remove");
      auto it = keys_.find(keys[i]);
      if (it == keys_.end()) {
        LAMINA_CHECK_INDEX(missing_ok, "key ", keys[i],
                           " is not in the index (never added or already removed); pass "
                           "missing_ok=True to skip unknown keys");
        continue;
      }
      found.emplace_back(keys[i], it->second);
    }
  }
  std::vector<Namespace*> touched;
  for (const auto& [key, loc] : found) {
    Namespace& s = *loc.space;
    const uint32_t p = loc.pos;
    LAMINA_ASSERT(s.live[p] && s.key[p] == key);
    s.live[p] = 0;
    --s.n_live;
    ++s.n_dead;
    s.total_len -= static_cast<uint64_t>(s.len[p]);
    for (std::size_t j = s.fwd_off[p]; j < s.fwd_off[p + 1]; ++j)
      if (--s.df[s.fwd[j].term] == 0) --s.n_terms_live;
    keys_.erase(key);
    if (touched.empty() || touched.back() != &s) touched.push_back(&s);
  }
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (Namespace* s : touched) {
    if (s->n_live == 0)
      spaces_.erase(s->id);  // no key points into it any more
    else if (s->n_dead > s->n_live)
      compact_locked(*s);
  }
  return found.size();
}

void LexicalIndex::compact_locked(Namespace& s) {
  if (s.n_dead == 0) return;
  // In place, in one pass per structure: positions and term ids only move down, so every
  // entry is read before its slot is written (no per-term allocation: a namespace with a
  // long tail of terms spent most of a compaction allocating and freeing posting lists).
  const std::size_t n_pos = s.key.size();
  std::vector<uint32_t> new_pos(n_pos, kNone);
  uint32_t next = 0;
  for (std::size_t p = 0; p < n_pos; ++p)
    if (s.live[p]) new_pos[p] = next++;
  // Terms that still have live documents keep their old order; their postings are filtered.
  std::vector<uint32_t> new_term(s.postings.size(), kNone);
  uint32_t n_terms = 0;
  std::size_t n_postings = 0;
  for (std::size_t t = 0; t < s.postings.size(); ++t) {
    if (s.df[t] == 0) continue;
    std::vector<Posting>& src = s.postings[t];
    std::size_t w = 0;
    for (const Posting& q : src)
      if (new_pos[q.pos] != kNone) src[w++] = {new_pos[q.pos], q.tf};
    LAMINA_ASSERT(w == s.df[t]);
    src.resize(w);
    if (src.capacity() > 2 * w + 8) src.shrink_to_fit();
    new_term[t] = n_terms;
    if (n_terms != t) {
      s.postings[n_terms] = std::move(src);  // (the slot held a dead term or a moved-from list)
      s.df[n_terms] = s.df[t];
    }
    ++n_terms;
    n_postings += w;
  }
  s.postings.resize(n_terms);
  s.df.resize(n_terms);
  for (auto it = s.term_ids.begin(); it != s.term_ids.end();) {
    const uint32_t t = new_term[it->second];
    if (t == kNone) {
      it = s.term_ids.erase(it);
    } else {
      it->second = t;
      ++it;
    }
  }
  // Documents: the live ones move down to their new positions with their forward entries.
  std::size_t w_fwd = 0;
  uint32_t w = 0;
  for (std::size_t p = 0; p < n_pos; ++p) {
    if (new_pos[p] == kNone) continue;
    const std::size_t lo = s.fwd_off[p], hi = s.fwd_off[p + 1];  // (read before slot w <= p is written)
    s.fwd_off[w] = w_fwd;
    for (std::size_t j = lo; j < hi; ++j) s.fwd[w_fwd++] = {new_term[s.fwd[j].term], s.fwd[j].tf};
    s.key[w] = s.key[p];
    s.len[w] = s.len[p];
    keys_.at(s.key[w]).pos = w;
    ++w;
  }
  LAMINA_ASSERT(w == next && w_fwd == n_postings);
  s.fwd_off[w] = w_fwd;
  s.fwd_off.resize(static_cast<std::size_t>(w) + 1);
  s.fwd.resize(w_fwd);
  s.key.resize(w);
  s.len.resize(w);
  s.live.assign(w, 1);
  s.n_postings = n_postings;
  s.n_dead = 0;
  s.n_terms_live = n_terms;
}

void LexicalIndex::compact() {
  std::unique_lock lk(mu_);
  for (auto& entry : spaces_) compact_locked(*entry.second);
}

void LexicalIndex::contains(const int64_t* keys, std::size_t n, uint8_t* out) const {
  std::shared_lock lk(mu_);
  for (std::size_t i = 0; i < n; ++i) out[i] = keys_.count(keys[i]) ? 1 : 0;
}

std::size_t LexicalIndex::count(uint64_t ns) const {
  std::shared_lock lk(mu_);
  const Namespace* s = find_locked(ns);
  return s ? s->n_live : 0;
}

std::size_t LexicalIndex::size() const {
  std::shared_lock lk(mu_);
  return keys_.size();
}

LexicalStats LexicalIndex::stats(uint64_t ns) const {
  std::shared_lock lk(mu_);
  LexicalStats st;
  const Namespace* s = find_locked(ns);
  if (!s) return st;
  st.docs = s->n_live;
  st.avg_len = s->n_live ? static_cast<double>(s->total_len) / static_cast<double>(s->n_live) : 0.0;
  st.terms = s->n_terms_live;
  st.postings = s->n_postings;
  st.dead_docs = s->n_dead;
  return st;
}

void LexicalIndex::search_one(Scratch& sc, Namespace* s, const uint64_t* terms, std::size_t n_terms,
                              std::size_t k, float* out_scores, int64_t* out_keys, const int64_t* allow,
                               std::size_t n_allow) const {
  std::fill(out_scores, out_scores + k, -std::numeric_limits<float>::infinity());
  std::fill(out_keys, out_keys + k, int64_t(-1));
  if (!s || s->n_live == 0 || n_terms == 0) return;
  const double n_docs = static_cast<double>(s->n_live);
  // Distinct known query terms with their weight w = idf * (k1 + 1), an upper bound of any
  // document's contribution from the term (tf / (tf + norm) <= 1, also after float rounding).
  sc.terms.clear();
  sc.weights.clear();
  for (std::size_t i = 0; i < n_terms; ++i) {
    auto it = s->term_ids.find(terms[i]);
    if (it == s->term_ids.end() || s->df[it->second] == 0) continue;
    if (std::find(sc.terms.begin(), sc.terms.end(), it->second) != sc.terms.end()) continue;
    const double df = static_cast<double>(s->df[it->second]);
    sc.terms.push_back(it->second);
    sc.weights.push_back(static_cast<float>(std::log1p((n_docs - df + 0.5) / (df + 0.5)) * (k1_ + 1.0)));
  }
  const std::size_t m = sc.terms.size();
  if (m == 0) return;
  // Rarest (heaviest) terms first; ties keep the query order. This fixes the summation order.
  sc.order.resize(m);
  for (std::size_t i = 0; i < m; ++i) sc.order[i] = static_cast<uint32_t>(i);
  std::stable_sort(sc.order.begin(), sc.order.end(),
                   [&](uint32_t a, uint32_t b) { return sc.weights[a] > sc.weights[b]; });
  // rest[i]: float sum, in processing order, of the weights of terms i..m-1. Float addition is
  // monotone, so a document that matches only terms >= i ends with a score <= rest[i].
  sc.rest.assign(m + 1, 0.0f);
  sc.rest_df.assign(m + 1, 0);
  for (std::size_t i = 0; i < m; ++i) {
    float r = 0.0f;
    for (std::size_t j = i; j < m; ++j) r += sc.weights[sc.order[j]];
    sc.rest[i] = r;
  }
  for (std::size_t i = m; i-- > 0;)
    sc.rest_df[i] = sc.rest_df[i + 1] + s->postings[sc.terms[sc.order[i]]].size();

  if (sc.acc.size() < s->key.size()) sc.acc.resize(s->key.size(), 0.0f);
  ResetTouched reset{sc};
  const float c0 = static_cast<float>(k1_ * (1.0 - b_));
  const double avgdl = static_cast<double>(s->total_len) / n_docs;
  const float c1 = avgdl > 0.0 ? static_cast<float>(k1_ * b_ / avgdl) : 0.0f;
  const Norm norm{c0, c1};
  float* acc = sc.acc.data();
  const float* len = s->len.data();
  const uint8_t* live = s->live.data();
  const int64_t* key = s->key.data();
  // a document is a candidate when live and, with an allow list, listed in it
  auto ok = [&](uint32_t p) {
    return live[p] && (allow == nullptr || std::binary_search(allow, allow + n_allow, key[p]));
  };

  // Phase 1: every posting of the heaviest terms opens or updates an accumulator. Once the k-th
  // best partial score theta (a lower bound of the final k-th score) exceeds rest[i], no
  // document outside the touched set can reach the top k (MaxScore, Turtle & Flood 1995): phase
  // 2 then completes only the touched documents, from their forward-index entries, instead of
  // reading the long posting lists of the remaining (common) terms.
  const double terms_per_doc =
      static_cast<double>(s->n_postings) / static_cast<double>(std::max<std::size_t>(s->key.size(), 1));
  if (sc.touched.size() < s->key.size() + 1) sc.touched.resize(s->key.size() + 1);
  uint32_t* touched = sc.touched.data();
  std::size_t n_touched = 0;
  std::size_t i = 0;
  bool pruned = false;
  for (; i < m; ++i) {
    const uint32_t t = sc.terms[sc.order[i]];
    const float w = sc.weights[sc.order[i]];
    for (const Posting& q : s->postings[t]) {
      const float c = norm.contribution(w, q.tf, len[q.pos]);
      // Branch-free append: the slot is always written, kept only on a first touch.
      touched[n_touched] = q.pos;
      n_touched += acc[q.pos] == 0.0f;
      acc[q.pos] += c;
    }
    sc.n_touched = n_touched;
    if (i + 1 == m) break;
    // Finding theta and completing the touched documents cost O(touched * terms per document):
    // only worth it when well below the postings left to read.
    const double cost = static_cast<double>(n_touched) * (terms_per_doc + 2.0);
    if (n_touched < k || 2.0 * cost > static_cast<double>(sc.rest_df[i + 1])) continue;
    sc.part.clear();
    for (std::size_t j = 0; j < n_touched; ++j) {
      const uint32_t p = touched[j];
      if (ok(p)) sc.part.push_back(acc[p]);
    }
    if (sc.part.size() < k) continue;
    std::nth_element(sc.part.begin(), sc.part.begin() + (k - 1), sc.part.end(), std::greater<float>());
    if (sc.rest[i + 1] < sc.part[k - 1]) {
      pruned = true;
      ++i;
      break;
    }
  }
  if (pruned) {
    // rank[t] = 1 + processing index of query term t, for the terms left (0: not left).
    if (sc.rank.size() < s->postings.size()) sc.rank.resize(s->postings.size(), 0);
    for (std::size_t j = i; j < m; ++j) sc.rank[sc.terms[sc.order[j]]] = static_cast<uint32_t>(j + 1);
    struct ResetRank {
      Scratch& sc;
      std::size_t from, m;
      ~ResetRank() {
        for (std::size_t j = from; j < m; ++j) sc.rank[sc.terms[sc.order[j]]] = 0;
      }
    } reset_rank{sc, i, m};
    const uint32_t* rank = sc.rank.data();
    const TermCount* fwd = s->fwd.data();
    const std::size_t* off = s->fwd_off.data();
    for (std::size_t j = 0; j < n_touched; ++j) {
      const uint32_t p = touched[j];
      if (!ok(p)) continue;
      // Matches of document p with the terms left, added in processing order as in phase 1.
      sc.matches.clear();
      for (std::size_t e = off[p]; e < off[p + 1]; ++e)
        if (const uint32_t r = rank[fwd[e].term]) sc.matches.push_back({r, fwd[e].tf});
      if (sc.matches.empty()) continue;
      std::sort(sc.matches.begin(), sc.matches.end(),
                [](const TermCount& x, const TermCount& y) { return x.term < y.term; });
      float a = acc[p];
      for (const TermCount& mt : sc.matches)
        a += norm.contribution(sc.weights[sc.order[mt.term - 1]], mt.tf, len[p]);
      acc[p] = a;
    }
  }

  // Bounded heap whose front is the worst kept candidate.
  auto& heap = sc.heap;
  heap.clear();
  for (std::size_t j = 0; j < n_touched; ++j) {
    const uint32_t p = touched[j];
    if (!ok(p)) continue;
    std::pair<float, int64_t> cand{acc[p], key[p]};
    if (heap.size() < k) {
      heap.push_back(cand);
      std::push_heap(heap.begin(), heap.end(), ranks_before);
    } else if (ranks_before(cand, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), ranks_before);
      heap.back() = cand;
      std::push_heap(heap.begin(), heap.end(), ranks_before);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), ranks_before);
  for (std::size_t j = 0; j < heap.size(); ++j) {
    out_scores[j] = heap[j].first;
    out_keys[j] = heap[j].second;
  }
}

void LexicalIndex::search(const uint64_t* hashes, std::size_t n_hashes, const int64_t* offsets,
                          std::size_t nq, const uint64_t* ns, bool ns_per_query, std::size_t k,
                          int n_threads, float* out_scores, int64_t* out_keys,
                          const int64_t* allow, std::size_t n_allow) const {
  LAMINA_CHECK(k >= 1, "k must be >= 1, got ", k);
  if (allow != nullptr)
    for (std::size_t i = 1; i < n_allow; ++i)
      LAMINA_CHECK(allow[i - 1] < allow[i],
                   "allow must be sorted ascending without repeats; pass numpy.unique(allow)");
  check_offsets(offsets, nq, n_hashes, "query");
  std::shared_lock lk(mu_);
  std::vector<Namespace*> spaces(nq);
  std::size_t work = 0;
  for (std::size_t q = 0; q < nq; ++q) {
    spaces[q] = find_locked(ns_per_query ? ns[q] : ns[0]);
    if (spaces[q]) work += spaces[q]->n_postings / std::max<std::size_t>(spaces[q]->term_ids.size(), 1) *
                           static_cast<std::size_t>(offsets[q + 1] - offsets[q]) + 64;
  }
  // One worker per ~64k postings of estimated work: thread start-up costs tens of microseconds.
  const int threads = threads_for(work, std::size_t(1) << 16, n_threads);
  const std::size_t n_workers = (threads <= 1 || nq <= 1) ? 1 : std::min<std::size_t>(threads, nq);
  std::vector<std::unique_ptr<Scratch>> scratch;
  {
    std::lock_guard<std::mutex> g(scratch_mu_);
    while (scratch.size() < n_workers) {
      if (scratch_pool_.empty()) {
        scratch.push_back(std::make_unique<Scratch>());
      } else {
        scratch.push_back(std::move(scratch_pool_.back()));
        scratch_pool_.pop_back();
      }
    }
  }
  struct GiveBack {
    const LexicalIndex& ix;
    std::vector<std::unique_ptr<Scratch>>& s;
    ~GiveBack() {
      std::lock_guard<std::mutex> g(ix.scratch_mu_);
      for (auto& p : s) ix.scratch_pool_.push_back(std::move(p));
    }
  } give_back{*this, scratch};
  auto run = [&](std::size_t q, int worker) {
    search_one(*scratch[static_cast<std::size_t>(worker)], spaces[q], hashes + offsets[q],
               static_cast<std::size_t>(offsets[q + 1] - offsets[q]), k, out_scores + q * k,
               out_keys + q * k, allow, n_allow);
  };
  if (n_workers == 1) {
    for (std::size_t q = 0; q < nq; ++q) run(q, 0);
  } else {
    parallel_for(nq, static_cast<int>(n_workers), run);
  }
}

}  // namespace lamina
