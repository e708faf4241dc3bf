#include "lamina/arena.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "lamina/common.hpp"
#include "lamina/parallel.hpp"
#include "lamina/simd.hpp"

namespace lamina {

namespace {
constexpr uint32_t kMaxGeneration = 0x7fffffffu;  // keeps handles non-negative

std::size_t round_bytes(std::size_t bytes) { return bytes == 0 ? 64 : (bytes + 63) / 64 * 64; }

#if defined(__linux__)
// Large row buffers are anonymous mappings (page aligned, zero on first touch), so that
// growing one is a remap of its pages rather than a copy of its rows (see grow_locked).
constexpr std::size_t kMappedBytes = std::size_t(1) << 21;

struct Unmap {
  std::size_t bytes;
  bool moved = false;  // set when the pages went on to a bigger mapping (mremap)
  void operator()(void* p) const {
    if (!moved) munmap(p, bytes);
  }
};

std::shared_ptr<void> map_zeroed(std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return std::shared_ptr<void>(p, Unmap{bytes});
}
#endif

std::shared_ptr<void> alloc_aligned(std::size_t bytes) {
  bytes = round_bytes(bytes);
#if defined(__linux__)
  if (bytes >= kMappedBytes) return map_zeroed(bytes);
#endif
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

// Moves the pages of `storage` (a mapping nobody else holds) to a mapping of `bytes` bytes;
// the new tail reads as zeros. Returns false (nothing changed) where that is not possible.
bool remap_grow(std::shared_ptr<void>& storage, std::size_t bytes) {
#if defined(__linux__) && defined(MREMAP_MAYMOVE)
  Unmap* d = std::get_deleter<Unmap>(storage);
  if (!d || storage.use_count() != 1) return false;  // a view (a search, numpy) still reads it
  void* p = mremap(storage.get(), d->bytes, bytes, MREMAP_MAYMOVE);
  if (p == MAP_FAILED) return false;
  d->moved = true;
  storage = std::shared_ptr<void>(p, Unmap{bytes});
  return true;
#else
  (void)storage;
  (void)bytes;
  return false;
#endif
}

bool finite_row(const void* v, std::size_t d, DType t) {
  if (t == DType::F16) {
    const uint16_t* h = static_cast<const uint16_t*>(v);
    for (std::size_t j = 0; j < d; ++j)
      if (half_is_nonfinite(h[j])) return false;
    return true;
  }
  const float* f = static_cast<const float*>(v);
  // Sum-based screen: any NaN/Inf makes the product of checks fail; exact per-element test.
  for (std::size_t j = 0; j < d; ++j)
    if (!std::isfinite(f[j])) return false;
  return true;
}
}  // namespace

VectorArena::VectorArena(std::size_t dim, DType dtype, std::size_t capacity, Codec codec)
    : dim_(dim), dtype_(dtype), codec_(codec) {
  LAMINA_CHECK(dim >= 1 && dim <= (1u << 20), "dim must be in [1, 2^20], got ", dim);
  code_stride_ = lamina::code_stride(codec, dim);
  const std::size_t per_line = 64 / elt();
  stride_ = (dim + per_line - 1) / per_line * per_line;
  std::unique_lock lk(mu_);
  grow_locked(std::max<std::size_t>(capacity, 16));
}

std::size_t VectorArena::capacity() const {
  std::shared_lock lk(mu_);
  return capacity_;
}
std::size_t VectorArena::size() const {
  std::shared_lock lk(mu_);
  return live_count_;
}
std::size_t VectorArena::high_water() const {
  std::shared_lock lk(mu_);
  return high_water_;
}

void VectorArena::grow_locked(std::size_t min_capacity) {
  if (min_capacity <= capacity_ && storage_) return;
  LAMINA_CHECK(min_capacity < 0xffffffffull, "arena capacity is limited to 2^32 - 1 rows");
  std::size_t cap = std::max<std::size_t>(capacity_ * 2, min_capacity);
  cap = std::min<std::size_t>(cap, 0xfffffffeull);
  // Grow in place of a copy where the old buffer is a mapping no view holds (the pages move;
  // 110k rows of 384 floats: no 100-200 ms copy-and-zero pause); else copy the live rows.
  const std::size_t bytes = round_bytes(cap * stride_ * elt());
  if (!(storage_ && remap_grow(storage_, bytes))) {
    auto fresh = alloc_aligned(bytes);
    if (storage_ && high_water_)
      std::memcpy(fresh.get(), storage_.get(), high_water_ * stride_ * elt());
    storage_ = std::move(fresh);
  }
  ns_.resize(cap);
  layer_.resize(cap);
  live_.resize(cap);
  sqnorm_.resize(cap);
  gen_.resize(cap);
  ns_pos_.resize(cap);
  if (codec_ != Codec::None) {
    codes_.resize(cap * code_stride_);
    code_factor_.resize(cap);
    code_count_.resize(cap);
  }
  capacity_ = cap;
}

void VectorArena::reserve(std::size_t capacity) {
  std::unique_lock lk(mu_);
  grow_locked(capacity);
}

uint32_t VectorArena::row_of_checked(int64_t h) const {
  LAMINA_CHECK_INDEX(h >= 0, "slot ", h, " is not a valid slot (negative)");
  const uint64_t row = static_cast<uint64_t>(h) & 0xffffffffull;
  const uint64_t gen = static_cast<uint64_t>(h) >> 32;
  LAMINA_CHECK_INDEX(row < high_water_, "slot ", h, " is out of range (arena has ", high_water_,
                     " rows)");
  LAMINA_CHECK_INDEX(live_[row] && gen_[row] == gen, "slot ", h,
                     " is stale: its row was removed (and possibly reused)");
  return static_cast<uint32_t>(row);
}

void VectorArena::add(const void* vectors, std::size_t n, const uint64_t* ns, bool ns_per_row,
                      const uint8_t* layers, bool layers_per_row, int64_t* out) {
  if (n == 0) return;
  const char* src = static_cast<const char*>(vectors);
  const std::size_t row_bytes = dim_ * elt();
  for (std::size_t i = 0; i < n; ++i)
    LAMINA_CHECK(finite_row(src + i * row_bytes, dim_, dtype_), "vectors[", i,
                 "] contains NaN or Inf; only finite vectors can be stored");
  // Norms before taking the lock (pure computation on the caller's buffer).
  std::vector<float> norms(n);
  {
    std::vector<const void*> ptrs(n);
    for (std::size_t i = 0; i < n; ++i) ptrs[i] = src + i * row_bytes;
    const auto& K = simd::kernels();
    if (dtype_ == DType::F16)
      K.sqnorm_f16(reinterpret_cast<const uint16_t* const*>(ptrs.data()), n, dim_, norms.data());
    else
      K.sqnorm_f32(reinterpret_cast<const float* const*>(ptrs.data()), n, dim_, norms.data());
  }
  std::vector<uint8_t> codes(n * code_stride_);
  std::vector<float> factor(codec_ != Codec::None ? n : 0);
  std::vector<int32_t> count(factor.size());
  if (codec_ != Codec::None)
    encode_rows(codec_, src, dim_, dtype_ == DType::F16, n, dim_, codes.data(), factor.data(),
                count.data());
  std::unique_lock lk(mu_);
  const std::size_t reuse = std::min(n, free_.size());
  grow_locked(high_water_ + (n - reuse));
  char* base = static_cast<char*>(storage_.get());
  for (std::size_t i = 0; i < n; ++i) {
    uint32_t row;
    if (!free_.empty()) {
      row = free_.back();
      free_.pop_back();
    } else {
      row = static_cast<uint32_t>(high_water_++);
      gen_[row] = 0;
    }
    std::memcpy(base + row * stride_ * elt(), src + i * row_bytes, row_bytes);
    const uint64_t nsv = ns_per_row ? ns[i] : ns[0];
    ns_[row] = nsv;
    layer_[row] = layers_per_row ? layers[i] : layers[0];
    live_[row] = 1;
    sqnorm_[row] = norms[i];
    if (codec_ != Codec::None) {
      std::memcpy(codes_.data() + row * code_stride_, codes.data() + i * code_stride_,
                  code_stride_);
      code_factor_[row] = factor[i];
      code_count_[row] = count[i];
    }
    auto& lst = ns_rows_[nsv];
    ns_pos_[row] = static_cast<uint32_t>(lst.size());
    lst.push_back(row);
    ++live_count_;
    out[i] = (static_cast<int64_t>(gen_[row]) << 32) | static_cast<int64_t>(row);
  }
}

void VectorArena::remove(const int64_t* handles, std::size_t n) {
  std::unique_lock lk(mu_);
  std::vector<uint32_t> rows(n);
  for (std::size_t i = 0; i < n; ++i) rows[i] = row_of_checked(handles[i]);
  {
    std::vector<uint32_t> sorted(rows);
    std::sort(sorted.begin(), sorted.end());
    auto dup = std::adjacent_find(sorted.begin(), sorted.end());
    LAMINA_CHECK(dup == sorted.end(), "slot for row ", (dup == sorted.end() ? 0 : *dup),
                 " appears more than once in remove(); pass each slot once");
  }
  char* base = static_cast<char*>(storage_.get());
  for (uint32_t row : rows) {
    auto it = ns_rows_.find(ns_[row]);
    LAMINA_ASSERT(it != ns_rows_.end());
    auto& lst = it->second;
    const uint32_t pos = ns_pos_[row];
    LAMINA_ASSERT(pos < lst.size() && lst[pos] == row);
    lst[pos] = lst.back();
    ns_pos_[lst[pos]] = pos;
    lst.pop_back();
    if (lst.empty()) ns_rows_.erase(it);
    live_[row] = 0;
    std::memset(base + row * stride_ * elt(), 0, stride_ * elt());
    sqnorm_[row] = 0.f;
    if (codec_ != Codec::None) {
      std::memset(codes_.data() + row * code_stride_, 0, code_stride_);
      code_factor_[row] = 0.f;
      code_count_[row] = 0;
    }
    ns_[row] = 0;
    layer_[row] = 0;
    --live_count_;
    if (gen_[row] < kMaxGeneration) {
      ++gen_[row];
      free_.push_back(row);
    }  // else: the row is retired for good, so no handle can ever repeat
  }
}

void VectorArena::get(const int64_t* handles, std::size_t n, void* out) const {
  std::shared_lock lk(mu_);
  std::vector<uint32_t> rows(n);
  for (std::size_t i = 0; i < n; ++i) rows[i] = row_of_checked(handles[i]);
  const char* base = static_cast<const char*>(storage_.get());
  const std::size_t row_bytes = dim_ * elt();
  for (std::size_t i = 0; i < n; ++i)
    std::memcpy(static_cast<char*>(out) + i * row_bytes, base + rows[i] * stride_ * elt(),
                row_bytes);
}

void VectorArena::namespaces_of(const int64_t* handles, std::size_t n, uint64_t* out) const {
  std::shared_lock lk(mu_);
  std::vector<uint32_t> rows(n);
  for (std::size_t i = 0; i < n; ++i) rows[i] = row_of_checked(handles[i]);
  for (std::size_t i = 0; i < n; ++i) out[i] = ns_[rows[i]];
}

void VectorArena::layers_of(const int64_t* handles, std::size_t n, uint8_t* out) const {
  std::shared_lock lk(mu_);
  std::vector<uint32_t> rows(n);
  for (std::size_t i = 0; i < n; ++i) rows[i] = row_of_checked(handles[i]);
  for (std::size_t i = 0; i < n; ++i) out[i] = layer_[rows[i]];
}

void VectorArena::set_layer(const int64_t* handles, std::size_t n, uint8_t layer) {
  std::unique_lock lk(mu_);
  std::vector<uint32_t> rows(n);
  for (std::size_t i = 0; i < n; ++i) rows[i] = row_of_checked(handles[i]);
  for (uint32_t r : rows) layer_[r] = layer;
}

void VectorArena::contains(const int64_t* handles, std::size_t n, uint8_t* out) const {
  std::shared_lock lk(mu_);
  for (std::size_t i = 0; i < n; ++i) {
    const int64_t h = handles[i];
    const uint64_t row = static_cast<uint64_t>(h) & 0xffffffffull;
    const uint64_t gen = static_cast<uint64_t>(h) >> 32;
    out[i] = h >= 0 && row < high_water_ && live_[row] && gen_[row] == gen;
  }
}

std::size_t VectorArena::namespace_size(uint64_t ns) const {
  std::shared_lock lk(mu_);
  auto it = ns_rows_.find(ns);
  return it == ns_rows_.end() ? 0 : it->second.size();
}

ArenaView VectorArena::view() const {
  std::shared_lock lk(mu_);
  return ArenaView{storage_, high_water_, dim_, stride_, dtype_};
}

void VectorArena::columns(std::vector<uint64_t>& ns, std::vector<uint8_t>& layers,
                          std::vector<uint8_t>& live) const {
  std::shared_lock lk(mu_);
  ns.assign(ns_.begin(), ns_.begin() + high_water_);
  layers.assign(layer_.begin(), layer_.begin() + high_water_);
  live.assign(live_.begin(), live_.begin() + high_water_);
}

void VectorArena::search_locked(const float* queries, std::size_t nq, std::size_t k,
                                Metric metric, const RowFilter& filter, int n_threads,
                                float* out_scores, int64_t* out_ids,
                                std::size_t oversample) const {
  if (oversample > 0 && codec_ != Codec::None) {
    LAMINA_CHECK(oversample <= (std::size_t(1) << 20) / k, "k * oversample must be at most 2^20, got k=",
                 k, ", oversample=", oversample);
    const std::size_t m = k * oversample;
    CodeStore cs;
    cs.codec = codec_;
    cs.base = codes_.data();
    cs.stride = code_stride_;
    cs.dim = dim_;
    cs.factor = code_factor_.data();
    cs.count = code_count_.data();
    cs.sqnorms = sqnorm_.data();
    std::vector<int64_t> cand(nq * m);
    code_candidates(queries, nq, cs, high_water_, filter, m, metric, n_threads, cand.data());
    rerank_locked(queries, nq, k, metric, cand.data(), m, n_threads, out_scores, out_ids);
    return;
  }
  RowStore rs;
  rs.base = storage_.get();
  rs.stride = stride_;
  rs.dim = dim_;
  rs.f16 = dtype_ == DType::F16;
  rs.sqnorms = sqnorm_.data();
  topk_search(queries, nq, rs, high_water_, filter, k, metric, n_threads, out_scores, out_ids);
  for (std::size_t i = 0; i < nq * k; ++i) {
    const int64_t r = out_ids[i];
    if (r >= 0) out_ids[i] = (static_cast<int64_t>(gen_[r]) << 32) | r;
  }
}

// The exact scores of each query's candidate rows (cand_rows[q * m ..], -1 padded), best k.
void VectorArena::rerank_locked(const float* queries, std::size_t nq, std::size_t k,
                                Metric metric, const int64_t* cand_rows, std::size_t m,
                                int n_threads, float* out_scores, int64_t* out_ids) const {
  RowStore rs;
  rs.base = storage_.get();
  rs.stride = stride_;
  rs.dim = dim_;
  rs.f16 = dtype_ == DType::F16;
  rs.sqnorms = sqnorm_.data();
  const int T = threads_for(nq * m * dim_, std::size_t(1) << 20, n_threads);
  parallel_for(nq, T, [&](std::size_t q, int) {
    std::vector<uint32_t> rows;
    rows.reserve(m);
    const char* base = static_cast<const char*>(rs.base);
    const std::size_t row_bytes = dim_ * elt();
    for (std::size_t i = 0; i < m; ++i) {
      const int64_t r = cand_rows[q * m + i];
      if (r < 0) continue;
      rows.push_back(static_cast<uint32_t>(r));
      // scattered rows: ask for all their lines up front, so the reads overlap
      const char* p = base + std::size_t(r) * stride_ * elt();
      for (std::size_t off = 0; off < row_bytes; off += 64) __builtin_prefetch(p + off);
    }
    RowFilter f;
    f.use_row_list = true;
    f.row_list = rows.data();
    f.row_list_len = rows.size();
    topk_search(queries + q * dim_, 1, rs, high_water_, f, k, metric, 1, out_scores + q * k,
                out_ids + q * k);
  });
  for (std::size_t i = 0; i < nq * k; ++i) {
    const int64_t r = out_ids[i];
    if (r >= 0) out_ids[i] = (static_cast<int64_t>(gen_[r]) << 32) | r;
  }
}

void VectorArena::search(const float* queries, std::size_t nq, std::size_t k, Metric metric,
                         const uint64_t* ns, std::size_t n_ns, const uint64_t* layer_mask,
                         int n_threads, float* out_scores, int64_t* out_ids,
                         std::size_t oversample) const {
  LAMINA_CHECK(k >= 1, "k must be >= 1, got ", k);
  std::shared_lock lk(mu_);
  LAMINA_CHECK(live_count_ > 0, "the arena is empty; add vectors before searching");
  RowFilter f;
  if (layer_mask) {
    f.layers = layer_.data();
    std::copy(layer_mask, layer_mask + 4, f.layer_mask);
  }
  if (ns == nullptr) {
    if (live_count_ != high_water_) f.live = live_.data();
    search_locked(queries, nq, k, metric, f, n_threads, out_scores, out_ids, oversample);
    return;
  }
  LAMINA_CHECK(n_ns == 1 || n_ns == nq, "namespace must be one value or one per query (", nq,
               "), got ", n_ns);
  static const std::vector<uint32_t> kEmpty;
  auto rows_of = [&](uint64_t v) -> const std::vector<uint32_t>& {
    auto it = ns_rows_.find(v);
    return it == ns_rows_.end() ? kEmpty : it->second;
  };
  f.use_row_list = true;
  if (n_ns == 1 || std::all_of(ns, ns + n_ns, [&](uint64_t v) { return v == ns[0]; })) {
    const auto& lst = rows_of(ns[0]);
    if (lst.size() * 4 > high_water_) {
      // A large share of the rows: a sequential scan with a namespace check streams faster
      // than gathering rows in list order.
      f.use_row_list = false;
      f.live = live_.data();
      f.ns = ns_.data();
      f.ns_value = ns[0];
    } else {
      f.row_list = lst.data();
      f.row_list_len = lst.size();
    }
    search_locked(queries, nq, k, metric, f, n_threads, out_scores, out_ids, oversample);
    return;
  }
  // One namespace per query: group queries by namespace; groups are searched in parallel,
  // each one single-threaded (they are small: one agent's rows).
  std::unordered_map<uint64_t, std::vector<uint32_t>> by_ns;
  for (std::size_t q = 0; q < nq; ++q) by_ns[ns[q]].push_back(static_cast<uint32_t>(q));
  std::vector<std::pair<uint64_t, std::vector<uint32_t>>> groups(by_ns.begin(), by_ns.end());
  std::size_t total_rows = 0;
  for (auto& g : groups) total_rows += rows_of(g.first).size() * g.second.size();
  const int T = threads_for(total_rows * dim_, std::size_t(1) << 20, n_threads);
  parallel_for(groups.size(), T, [&](std::size_t gi, int) {
    const auto& [v, qs] = groups[gi];
    const auto& lst = rows_of(v);
    RowFilter fg = f;
    fg.row_list = lst.data();
    fg.row_list_len = lst.size();
    const std::size_t g = qs.size();
    std::vector<float> qbuf(g * dim_), sbuf(g * k);
    std::vector<int64_t> ibuf(g * k);
    for (std::size_t i = 0; i < g; ++i)
      std::memcpy(qbuf.data() + i * dim_, queries + std::size_t(qs[i]) * dim_, dim_ * 4);
    search_locked(qbuf.data(), g, k, metric, fg, 1, sbuf.data(), ibuf.data(), oversample);
    for (std::size_t i = 0; i < g; ++i) {
      std::memcpy(out_scores + std::size_t(qs[i]) * k, sbuf.data() + i * k, k * 4);
      std::memcpy(out_ids + std::size_t(qs[i]) * k, ibuf.data() + i * k, k * 8);
    }
  });
}

}  // namespace lamina
