// lamina/head_grid.hpp — the (layer, KV head) grid of a KV cache, shared by the host cache
// (lamina::model::KVCache, lamina/model.hpp) and the device cache
// (lamina::cuda::model::DeviceKVCache, cuda/model.hpp): its shape, its tokens-seen count and
// the bounds-checked lookup of one head's entries. Each cache brings its own Head (storage
// plus a `len`, the entries it holds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lamina/common.hpp"

namespace lamina::model {

template <class Head>
class HeadGrid {
 public:
  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_; }
  int head_dim() const { return hd_; }
  /// Tokens the cache has seen (the position of the next token); compaction does not change it.
  int64_t n_seen() const { return n_seen_; }
  /// Entries held by (layer, head). IndexError outside the grid.
  std::size_t length(int layer, int h) const { return head(layer, h).len; }

 protected:
  /// n_layers × n_kv_heads empty heads; ValueError unless all three sizes are >= 1.
  HeadGrid(int n_layers, int n_kv_heads, int head_dim)
      : n_layers_(n_layers), n_kv_(n_kv_heads), hd_(head_dim) {
    LAMINA_CHECK(n_layers >= 1 && n_kv_heads >= 1 && head_dim >= 1,
                 "KVCache: n_layers, n_kv_heads and head_dim must be >= 1");
    heads_.resize(static_cast<std::size_t>(n_layers) * n_kv_heads);
  }

  /// Head (layer, h), row-major by layer. IndexError outside the grid.
  Head& head(int layer, int h) {
    LAMINA_CHECK_INDEX(layer >= 0 && layer < n_layers_ && h >= 0 && h < n_kv_,
                       "KV cache (layer ", layer, ", head ", h, ") out of range (", n_layers_,
                       " layers, ", n_kv_, " KV heads)");
    return heads_[static_cast<std::size_t>(layer) * n_kv_ + h];
  }
  const Head& head(int layer, int h) const { return const_cast<HeadGrid*>(this)->head(layer, h); }

  int n_layers_, n_kv_, hd_;
  int64_t n_seen_ = 0;
  std::vector<Head> heads_;
};

}  // namespace lamina::model
