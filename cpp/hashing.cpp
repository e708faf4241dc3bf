#include "lamina/hashing.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "lamina/common.hpp"
#include "lamina/parallel.hpp"

namespace lamina {

namespace {

constexpr uint64_t kFnvPrime = 1099511628211ull;
// Per-kind seeds so that the word "ab" and the n-gram "ab" land in different buckets.
constexpr uint64_t kSeedWord = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kSeedBigram = 0xc2b2ae3d27d4eb4full;
constexpr uint64_t kSeedChar = 0x165667b19e3779f9ull;

constexpr float kWordWeight = 1.0f;
constexpr float kStopWeight = 0.15f;
constexpr float kBigramWeight = 0.6f;
constexpr float kCharWeightPerWord = 0.6f;

unsigned char lower(unsigned char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<unsigned char>(c - 'A' + 'a') : c;
}

bool is_word_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c >= 0x80;
}

const std::unordered_set<std::string>& stop_words() {
  static const std::unordered_set<std::string> s = {
      "a",     "an",    "the",   "and",   "or",    "but",   "if",    "of",    "to",    "in",
      "on",    "at",    "by",    "for",   "with",  "from",  "as",    "is",    "am",    "are",
      "was",   "were",  "be",    "been",  "being", "it",    "its",   "this",  "that",  "these",
      "those", "i",     "im",    "me",    "my",    "we",    "our",   "you",   "your",  "he",
      "him",   "his",   "she",   "her",   "they",  "them",  "their", "do",    "does",  "did",
      "have",  "has",   "had",   "so",    "just",  "very",  "really", "not",  "no",    "yes",
      "there", "here",  "what",  "which", "who",   "when",  "where", "how",   "about", "into",
      "than",  "then",  "too",   "also",  "can",   "will",  "would", "could", "should", "oh",
      "um",    "well",  "yeah",  "ive",   "youre", "thats", "dont",  "ill",   "id",    "all",
      "some",  "any",   "up",    "out",   "over",  "much",  "more",  "lot",   "get",   "got"};
  return s;
}

struct Acc {
  float* out;
  std::size_t dim;
  void add(uint64_t seed, std::string_view feat, float w) {
    const uint64_t h = fmix64(fnv1a64(feat, seed));
    const std::size_t b = static_cast<std::size_t>((h >> 1) % dim);
    out[b] += (h & 1u) ? -w : w;
  }
};

}  // namespace

uint64_t fnv1a64(std::string_view s, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : s) {
    h ^= c;
    h *= kFnvPrime;
  }
  return h;
}

HashingEmbedder::HashingEmbedder(std::size_t dim, int ngram_min, int ngram_max)
    : dim_(dim), nmin_(ngram_min), nmax_(ngram_max) {
  LAMINA_CHECK(dim >= 8, "dim must be >= 8, got ", dim);
  LAMINA_CHECK(ngram_min >= 1 && ngram_max <= 8 && ngram_min <= ngram_max,
               "need 1 <= ngram_min <= ngram_max <= 8, got ", ngram_min, ", ", ngram_max);
}

void HashingEmbedder::embed_one(std::string_view text, float* out) const {
  LAMINA_CHECK(!text.empty(), "cannot embed an empty text");
  std::fill(out, out + dim_, 0.0f);
  Acc acc{out, dim_};

  // Tokenise: lower-case ASCII, words = runs of word bytes, apostrophes inside words dropped.
  std::vector<std::string> words;
  std::string cur;
  for (std::size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    c = lower(c);
    if (is_word_byte(c)) {
      cur.push_back(static_cast<char>(c));
    } else if ((c == '\'') && !cur.empty() && i + 1 < text.size() &&
               is_word_byte(lower(static_cast<unsigned char>(text[i + 1])))) {
      continue;  // "don't" -> "dont"
    } else if (!cur.empty()) {
      words.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));

  if (words.empty()) {
    // Punctuation-only text: character trigrams of the raw bytes (or the whole text).
    const std::size_t n = text.size();
    if (n < 3) {
      acc.add(kSeedChar, text, 1.0f);
    } else {
      for (std::size_t i = 0; i + 3 <= n; ++i) acc.add(kSeedChar, text.substr(i, 3), 1.0f);
    }
  } else {
    const auto& stops = stop_words();
    std::string buf;
    for (std::size_t wi = 0; wi < words.size(); ++wi) {
      const std::string& w = words[wi];
      const bool stop = stops.count(w) != 0;
      acc.add(kSeedWord, w, stop ? kStopWeight : kWordWeight);
      if (wi + 1 < words.size()) {
        buf.assign(w);
        buf.push_back(' ');
        buf.append(words[wi + 1]);
        const bool both_stop = stop && stops.count(words[wi + 1]) != 0;
        acc.add(kSeedBigram, buf, both_stop ? kStopWeight * kBigramWeight : kBigramWeight);
      }
      if (stop) continue;  // stop words carry no sub-word signal worth the noise
      buf.assign("<");
      buf.append(w);
      buf.push_back('>');
      const int len = static_cast<int>(buf.size());
      int count = 0;
      for (int n = nmin_; n <= nmax_; ++n) count += std::max(0, len - n + 1);
      if (count == 0) continue;
      const float cw = kCharWeightPerWord / static_cast<float>(count);
      for (int n = nmin_; n <= nmax_; ++n)
        for (int i = 0; i + n <= len; ++i) acc.add(kSeedChar, std::string_view(buf).substr(i, n), cw);
    }
  }

  double ss = 0.0;
  for (std::size_t j = 0; j < dim_; ++j) ss += static_cast<double>(out[j]) * out[j];
  if (ss <= 0.0) {
    // All features cancelled exactly (vanishingly rare): fall back to one fixed bucket.
    out[fmix64(fnv1a64(text)) % dim_] = 1.0f;
    return;
  }
  const float inv = static_cast<float>(1.0 / std::sqrt(ss));
  for (std::size_t j = 0; j < dim_; ++j) out[j] *= inv;
}

void HashingEmbedder::embed(const std::vector<std::string>& texts, float* out,
                            int n_threads) const {
  for (std::size_t i = 0; i < texts.size(); ++i)
    LAMINA_CHECK(!texts[i].empty(), "texts[", i, "] is empty; every text needs at least one character");
  const int t = threads_for(texts.size(), 64, n_threads);
  parallel_for(texts.size(), t, [&](std::size_t i, int) { embed_one(texts[i], out + i * dim_); });
}

}  // namespace lamina
