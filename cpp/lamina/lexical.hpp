// lamina/lexical.hpp — an incremental Okapi BM25 inverted index, one set of statistics per
// namespace.
//
// Documents are identified by int64 keys (>= 0, unique across the whole index) and each lives in
// one uint64 namespace (e.g. one user's layer). A document is a bag of terms given as 64-bit term
// hashes (see term_hash); its length is the number of terms, repeats included. Every statistic
// of BM25 — the number of documents N, the average length avgdl, the document frequency df of a
// term — is computed over the live documents of the query's own namespace only: namespaces never
// see each other's documents or statistics.
//
// Score of document d for a query (repeated query terms count once):
//   score(d) = sum over distinct query terms t present in d of
//              idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * len(d) / avgdl))
//   idf(t)   = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))          (always > 0)
// Only documents sharing at least one term with the query are candidates, so every returned
// score is > 0. Scores are accumulated in float32, term by term, rarest term (largest idf)
// first, ties in query order: two documents with the same term counts and length score
// identically (bit for bit).
//
// Ordering, ties, padding: results are sorted by descending score; equal scores are ordered by
// the smaller key first (deterministic, independent of insertion order and thread count). When
// fewer than k documents match, the tail holds key -1 and score -inf.
//
// Removal: remove() marks documents dead (tombstones) and updates N, avgdl and df at once, so a
// removed document never scores and never counts in the statistics. A namespace whose dead
// documents outnumber its live ones is compacted (postings and the forward index rebuilt from
// the live documents, O(postings of that namespace)), so removals cost amortised O(terms of
// the document) and dead documents cost no memory or search time in the long run. A namespace
// whose last document is removed is dropped entirely.
//
// Complexity: add is O(len(d) log len(d)) per document (one hash lookup per distinct term).
// A query is scored term at a time into a per-thread dense accumulator indexed by the
// document's position in its namespace, with a touched list (no per-query allocation once
// warm): at most O(sum of the df of its terms + m log k), m = matching documents. Exact
// MaxScore pruning: once the k-th best partial score exceeds the largest score the remaining
// (common) terms could still add, documents not yet seen cannot reach the top k, and the
// documents seen are completed from a forward index instead of reading the remaining posting
// lists. The result is identical with or without pruning.
//
// Memory: per document 21 bytes of columns and one hash-map node for its key (~50 bytes), plus
// 16 bytes per distinct term of the document (posting and forward entry); per distinct term of
// a namespace, one hash-map node and one posting-list header (~70 bytes).
//
// Thread safety: any number of concurrent readers (search, contains, count, size, stats) or one
// writer (add, remove, compact) at a time, enforced by an internal reader/writer lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lamina {

/// The term hash of the lexical index: 64-bit FNV-1a of the term's bytes (UTF-8), standard
/// offset basis and prime. Deterministic across runs, platforms and builds.
uint64_t term_hash(std::string_view term);

/// Per-namespace statistics (live documents only, except `postings` and `dead_docs`).
struct LexicalStats {
  std::size_t docs = 0;       // live documents N
  double avg_len = 0.0;       // avgdl (0 when N == 0)
  std::size_t terms = 0;      // distinct terms with df > 0
  std::size_t postings = 0;   // stored postings, live and dead (memory and search work)
  std::size_t dead_docs = 0;  // tombstoned documents not yet compacted away
};

class LexicalIndex {
 public:
  /// k1 >= 0 and finite; b in [0, 1].
  explicit LexicalIndex(double k1 = 1.2, double b = 0.75);
  ~LexicalIndex();
  LexicalIndex(const LexicalIndex&) = delete;
  LexicalIndex& operator=(const LexicalIndex&) = delete;

  double k1() const { return k1_; }
  double b() const { return b_; }

  /// Add n documents. keys[i] >= 0 must be new and distinct (ValueError otherwise);
  /// ns: one namespace for all (ns_per_doc = false) or n values. Document i's terms are
  /// hashes[offsets[i] .. offsets[i+1]); offsets has n + 1 entries, offsets[0] == 0,
  /// non-decreasing, offsets[n] == n_hashes (ValueError otherwise). A document with no terms
  /// is allowed: it counts in N and avgdl but never matches. All checks run first: either
  /// every document is added or none.
  void add(const int64_t* keys, std::size_t n, const uint64_t* ns, bool ns_per_doc,
           const uint64_t* hashes, std::size_t n_hashes, const int64_t* offsets);

  /// Remove n documents by key. Unknown keys raise IndexError unless missing_ok (then they are
  /// skipped); a key repeated in one call is a ValueError. All checks run first: either all are
  /// removed or none. Returns the number removed.
  std::size_t remove(const int64_t* keys, std::size_t n, bool missing_ok);

  /// out[i] = 1 when keys[i] names a live document, else 0.
  void contains(const int64_t* keys, std::size_t n, uint8_t* out) const;

  /// Live documents in namespace ns / in the whole index.
  std::size_t count(uint64_t ns) const;
  std::size_t size() const;
  LexicalStats stats(uint64_t ns) const;

  /// Top-k for nq queries. Query q has terms hashes[offsets[q] .. offsets[q+1]) (offsets: nq + 1
  /// entries, validated as in add) and searches namespace ns[q] (ns_per_query) or ns[0].
  /// An unknown namespace or a query with no known term gives an all-padding row.
  /// Writes out_scores[nq x k] (float32) and out_keys[nq x k] (int64). k >= 1.
  /// Queries run in parallel over up to n_threads threads (<= 0: default, 1 for small work).
  /// allow: keys sorted ascending (n_allow of them; null: every key): only these documents are
  /// candidates, for every query (ValueError when not sorted), so a query returns as many
  /// results as allowed documents match, up to k (a metadata filter pushed into the search).
  void search(const uint64_t* hashes, std::size_t n_hashes, const int64_t* offsets,
              std::size_t nq, const uint64_t* ns, bool ns_per_query, std::size_t k, int n_threads,
              float* out_scores, int64_t* out_keys, const int64_t* allow = nullptr,
              std::size_t n_allow = 0) const;

  /// Compact every namespace that holds dead documents now (normally automatic).
  void compact();

  struct Scratch;  // scoring buffers of one search worker (pooled; see lexical.cpp)

 private:
  struct Namespace;
  struct Loc {
    Namespace* space;
    uint32_t pos;
  };
  Namespace* find_locked(uint64_t ns) const;
  void compact_locked(Namespace& s);
  void search_one(Scratch& sc, Namespace* s, const uint64_t* terms, std::size_t n_terms,
                  std::size_t k, float* out_scores, int64_t* out_keys, const int64_t* allow,
                  std::size_t n_allow) const;

  double k1_, b_;
  std::unordered_map<uint64_t, std::unique_ptr<Namespace>> spaces_;
  std::unordered_map<int64_t, Loc> keys_;
  mutable std::shared_mutex mu_;
  mutable std::mutex scratch_mu_;  // guards scratch_pool_ (buffers of finished searches)
  mutable std::vector<std::unique_ptr<Scratch>> scratch_pool_;
};

}  // namespace lamina
