// lamina/hashing.hpp — a deterministic feature-hashing text embedder (no model, no network).
//
// Features of a text (after ASCII lower-casing; bytes >= 0x80, i.e. UTF-8 sequences, are kept
// as word characters so non-English text still produces features):
//   - word unigrams (weight 1.0; a small built-in English stop-word list gets 0.15),
//   - word bigrams of adjacent words (weight 0.6),
//   - character n-grams, n in [ngram_min, ngram_max], of each word padded as "<word>"
//     (total weight 0.6 per word, shared equally by its n-grams).
// Words are maximal runs of [a-z0-9] and bytes >= 0x80; apostrophes inside a word are dropped
// ("don't" -> "dont"). Each feature string is hashed with 64-bit FNV-1a followed by the
// murmur3 fmix64 finaliser, seeded per feature kind; the bucket is (h >> 1) % dim and the sign
// is the low bit (signed hashing, Weinberger et al. 2009). The vector is L2-normalised.
//
// Determinism: the hash is fixed (no std::hash, no randomised seeds) and the arithmetic is a
// fixed-order float32 accumulation, so the output is bit-identical across runs, thread counts
// and machines with IEEE float32.
//
// Text with no word characters (punctuation only) falls back to character trigrams of the raw
// bytes; an empty text is a ValueError (the embedding would be undefined).
//
// Thread safety: the embedder is immutable after construction; embed() may be called from any
// number of threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lamina {

/// 64-bit FNV-1a of bytes, starting from `seed`. The default, 1469598103934665603, is NOT the
/// standard FNV offset basis (14695981039346656037: a digit was lost when this was first written);
/// it is kept because the hashing embedder's vectors — stored in users' databases — depend on it.
/// Any fixed seed hashes equally well (fmix64 finalises every feature hash).
uint64_t fnv1a64(std::string_view s, uint64_t seed = 1469598103934665603ull);

/// MurmurHash3's 64-bit finaliser: mixes every bit of `k` into every bit of the result (a
/// bijection; used to spread hash keys over buckets).
inline uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

class HashingEmbedder {
 public:
  /// dim >= 8; 1 <= ngram_min <= ngram_max <= 8.
  HashingEmbedder(std::size_t dim, int ngram_min = 3, int ngram_max = 4);

  std::size_t dim() const { return dim_; }
  int ngram_min() const { return nmin_; }
  int ngram_max() const { return nmax_; }

  /// Embed one text into out[0..dim) (unit L2 norm). Throws ValueError on an empty text.
  void embed_one(std::string_view text, float* out) const;

  /// Embed n texts into out (n x dim, row-major), in parallel over texts with up to n_threads
  /// threads (<= 0: default). Throws ValueError naming the first empty text.
  void embed(const std::vector<std::string>& texts, float* out, int n_threads) const;

 private:
  std::size_t dim_;
  int nmin_, nmax_;
};

}  // namespace lamina
