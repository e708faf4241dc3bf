// Internal to cpp/: the selection machinery shared by the exact scan (topk.cpp) and the
// compressed scan's candidate stage (codec_search.cpp): the bounded heap, the row filter test and
// the parallel driver that streams candidate rows block by block into per-thread heaps.
// Scores are "higher is better"; equal scores rank the smaller row id first, so a kept set is
// unique whatever order rows arrive in (and whatever the thread count).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "lamina/parallel.hpp"
#include "lamina/topk.hpp"

namespace lamina::detail {

struct Entry {
  float s;
  uint32_t id;
};
inline bool better(const Entry& a, const Entry& b) {
  return a.s > b.s || (a.s == b.s && a.id < b.id);
}

// Bounded heap over caller-owned storage e[0 .. cap); the root is the worst kept entry.
struct Heap {
  Entry* e;
  uint32_t size;
  uint32_t cap;

  float threshold() const {
    return size < cap ? -std::numeric_limits<float>::infinity() : e[0].s;
  }
  void offer(float s, uint32_t id) {
    if (size < cap) {
      std::size_t i = size++;
      e[i] = {s, id};
      while (i > 0) {  // sift up: parent must be worse than child
        std::size_t p = (i - 1) / 2;
        if (better(e[i], e[p])) break;
        std::swap(e[i], e[p]);
        i = p;
      }
      return;
    }
    Entry x{s, id};
    if (!better(x, e[0])) return;
    std::size_t i = 0;
    for (;;) {  // sift down: move the worse child up while it is worse than x
      const std::size_t l = 2 * i + 1, r = l + 1;
      if (l >= size) break;
      std::size_t c = l;
      if (r < size && better(e[l], e[r])) c = r;
      if (!better(x, e[c])) break;
      e[i] = e[c];
      i = c;
    }
    e[i] = x;
  }
};

inline bool row_passes(const RowFilter& f, uint32_t r) {
  if (f.live && !f.live[r]) return false;
  if (f.allow && (r >= f.allow_len || !f.allow[r])) return false;
  if (f.ns && f.ns[r] != f.ns_value) return false;
  if (f.layers) {
    const uint8_t l = f.layers[r];
    if (!((f.layer_mask[l >> 6] >> (l & 63)) & 1ull)) return false;
  }
  return true;
}

constexpr std::size_t kBlockRows = 256;

/// The best `k` rows per query among the rows `filter` admits, scored by `score`:
/// out[q] holds them sorted best first (fewer when fewer rows pass). `work` (multiply-adds, or
/// an equivalent cost) sets the thread count with `n_threads` (<= 0: default).
/// Scorer: `Scratch scratch() const` (a task's buffers, made once per task) and
///   void operator()(Scratch&, const uint32_t* ids, std::size_t cnt, std::size_t q0,
///                   std::size_t q1, Heap* heaps /* heaps[q - q0] */) const;
/// it may record a failure in its scratch: `bool Scratch::failed` is or-ed into the result.
template <class Scorer>
bool select_rows(std::size_t nq, std::size_t n_rows, const RowFilter& filter, std::size_t k,
                 std::size_t work, int n_threads, const Scorer& score,
                 std::vector<std::vector<Entry>>& out) {
  const std::size_t n_units = filter.use_row_list ? filter.row_list_len : n_rows;
  const std::size_t cap = std::min<std::size_t>(k, std::max<std::size_t>(n_units, 1));
  const std::size_t n_blocks = (n_units + kBlockRows - 1) / kBlockRows;
  const int T = threads_for(work, std::size_t(1) << 20, n_threads);
  const std::size_t P = std::max<std::size_t>(1, std::min<std::size_t>(T, n_blocks));
  std::size_t G = std::max<std::size_t>(1, (static_cast<std::size_t>(T) + P - 1) / P);
  G = std::min(G, std::max<std::size_t>(nq, 1));
  const std::size_t q_per_g = (nq + G - 1) / std::max<std::size_t>(G, 1);

  std::vector<Entry> store(P * nq * cap);
  std::vector<Heap> heaps(P * nq);
  for (std::size_t p = 0; p < P; ++p)
    for (std::size_t q = 0; q < nq; ++q)
      heaps[p * nq + q] = Heap{store.data() + (p * nq + q) * cap, 0, static_cast<uint32_t>(cap)};

  const bool any_filter = filter.live || filter.layers || filter.ns || filter.allow;
  std::vector<char> failed(P * G, 0);
  parallel_for(P * G, T, [&](std::size_t task, int) {
    const std::size_t p = task / G, g = task % G;
    const std::size_t q0 = g * q_per_g, q1 = std::min(nq, q0 + q_per_g);
    if (q0 >= q1) return;
    const std::size_t u0 = n_units * p / P, u1 = n_units * (p + 1) / P;
    auto scratch = score.scratch();
    std::vector<uint32_t> ids(kBlockRows);
    Heap* hp = heaps.data() + p * nq + q0;
    std::size_t cnt = 0;
    for (std::size_t u = u0; u < u1; ++u) {
      const uint32_t r = filter.use_row_list ? filter.row_list[u] : static_cast<uint32_t>(u);
      if (any_filter && !row_passes(filter, r)) continue;
      ids[cnt++] = r;
      if (cnt == kBlockRows) {
        score(scratch, ids.data(), cnt, q0, q1, hp);
        cnt = 0;
      }
    }
    if (cnt) score(scratch, ids.data(), cnt, q0, q1, hp);
    failed[task] = scratch.failed;
  });

  out.resize(nq);
  for (std::size_t q = 0; q < nq; ++q) {
    std::vector<Entry>& m = out[q];
    m.clear();
    for (std::size_t p = 0; p < P; ++p) {
      const Heap& h = heaps[p * nq + q];
      m.insert(m.end(), h.e, h.e + h.size);
    }
    std::sort(m.begin(), m.end(), better);
    if (m.size() > k) m.resize(k);
  }
  return std::none_of(failed.begin(), failed.end(), [](char b) { return b != 0; });
}

}  // namespace lamina::detail
