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
  for (std::size_t j = 0; j < d; ++j)
    if (!std::isfinite(f[j])) return false;
  return true;
}
}  // namespace

std::size_t arena_row_stride(std::size_t dim, DType dtype) {
  LAMINA_CHECK(dim >= 1 && dim <= (1u << 20), "dim must be in [1, 2^20], got ", dim);
  const std::size_t per_line = dtype == DType::F16 ? 32 : 16;
  return (dim + per_line - 1) / per_line * per_line;
}

void check_finite_rows(const void* rows, std::size_t n, std::size_t dim, DType dtype) {
  const char* src = static_cast<const char*>(rows);
  const std::size_t row_bytes = dim * (dtype == DType::F16 ? 2 : 4);
  for (std::size_t i = 0; i < n; ++i)
    LAMINA_CHECK(finite_row(src + i * row_bytes, dim, dtype), "vectors[", i,
                 "] contains NaN or Inf; only finite vectors can be stored");
}

VectorArena::VectorArena(std::size_t dim, DType dtype, std::size_t capacity, Codec codec)
    : dim_(dim), dtype_(dtype), stride_(arena_row_stride(dim, dtype)), codec_(codec) {
  code_stride_ = lamina::code_stride(codec, dim);
  std::unique_lock lk(mu_);
  grow_locked(std::max<std::size_t>(capacity, 16));
}

void VectorArena::grow_locked(std::size_t min_capacity) {
  if (min_capacity <= slots_.capacity() && storage_) return;
  const std::size_t cap = slots_.grown_capacity(min_capacity);
  const std::size_t high_water = slots_.high_water();
  // Grow in place of a copy where the old buffer is a mapping no view holds (the pages move;
  // 110k rows of 384 floats: no 100-200 ms copy-and-zero pause); else copy the live rows.
  const std::size_t bytes = round_bytes(cap * stride_ * elt());
  if (!(storage_ && remap_grow(storage_, bytes))) {
    auto fresh = alloc_aligned(bytes);
    if (storage_ && high_water)
      std::memcpy(fresh.get(), storage_.get(), high_water * stride_ * elt());
    storage_ = std::move(fresh);
  }
  slots_.resize(cap);
  sqnorm_.resize(cap);
  if (codec_ != Codec::None) {
    codes_.resize(cap * code_stride_);
    code_factor_.resize(cap);
    code_count_.resize(cap);
  }
}

void VectorArena::reserve(std::size_t capacity) {
  std::unique_lock lk(mu_);
  grow_locked(capacity);
}

void VectorArena::add(const void* vectors, std::size_t n, const uint64_t* ns, bool ns_per_row,
                      const uint8_t* layers, bool layers_per_row, int64_t* out) {
  if (n == 0) return;
  check_finite_rows(vectors, n, dim_, dtype_);
  const char* src = static_cast<const char*>(vectors);
  const std::size_t row_bytes = dim_ * elt();
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
  grow_locked(slots_.high_water() + slots_.rows_past_high_water(n));
  char* base = static_cast<char*>(storage_.get());
  for (std::size_t i = 0; i < n; ++i) {
    const uint32_t row = slots_.acquire(ns_per_row ? ns[i] : ns[0],
                                        layers_per_row ? layers[i] : layers[0]);
    std::memcpy(base + row * stride_ * elt(), src + i * row_bytes, row_bytes);
    sqnorm_[row] = norms[i];
    if (codec_ != Codec::None) {
      std::memcpy(codes_.data() + row * code_stride_, codes.data() + i * code_stride_,
                  code_stride_);
      code_factor_[row] = factor[i];
      code_count_[row] = count[i];
    }
    out[i] = slots_.handle_of(row);
  }
}

void VectorArena::remove(const int64_t* handles, std::size_t n) {
  std::unique_lock lk(mu_);
  const std::vector<uint32_t> rows = slots_.rows_to_remove(handles, n);
  char* base = static_cast<char*>(storage_.get());
  for (uint32_t row : rows) {
    slots_.release(row);
    std::memset(base + row * stride_ * elt(), 0, stride_ * elt());
    sqnorm_[row] = 0.f;
    if (codec_ != Codec::None) {
      std::memset(codes_.data() + row * code_stride_, 0, code_stride_);
      code_factor_[row] = 0.f;
      code_count_[row] = 0;
    }
  }
}

void VectorArena::get(const int64_t* handles, std::size_t n, void* out) const {
  std::shared_lock lk(mu_);
  const std::vector<uint32_t> rows = slots_.rows_of(handles, n);
  const char* base = static_cast<const char*>(storage_.get());
  const std::size_t row_bytes = dim_ * elt();
  for (std::size_t i = 0; i < n; ++i)
    std::memcpy(static_cast<char*>(out) + i * row_bytes, base + rows[i] * stride_ * elt(),
                row_bytes);
}

void VectorArena::set_layer(const int64_t* handles, std::size_t n, uint8_t layer) {
  std::unique_lock lk(mu_);
  for (uint32_t r : slots_.rows_of(handles, n)) slots_.set_layer(r, layer);
}

ArenaView VectorArena::view() const {
  std::shared_lock lk(mu_);
  return ArenaView{storage_, slots_.high_water(), dim_, stride_, dtype_};
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
    code_candidates(queries, nq, cs, slots_.high_water(), filter, m, metric, n_threads, cand.data());
    rerank_locked(queries, nq, k, metric, cand.data(), m, n_threads, out_scores, out_ids);
    return;
  }
  topk_search(queries, nq, row_store(), slots_.high_water(), filter, k, metric, n_threads,
              out_scores, out_ids);
  slots_.rows_to_handles(out_ids, nq * k);
}

RowStore VectorArena::row_store() const {
  RowStore rs;
  rs.base = storage_.get();
  rs.stride = stride_;
  rs.dim = dim_;
  rs.f16 = dtype_ == DType::F16;
  rs.sqnorms = sqnorm_.data();
  return rs;
}

// The exact scores of each query's candidate rows (cand_rows[q * m ..], -1 padded), best k.
void VectorArena::rerank_locked(const float* queries, std::size_t nq, std::size_t k,
                                Metric metric, const int64_t* cand_rows, std::size_t m,
                                int n_threads, float* out_scores, int64_t* out_ids) const {
  const RowStore rs = row_store();
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
    topk_search(queries + q * dim_, 1, rs, slots_.high_water(), f, k, metric, 1, out_scores + q * k,
                out_ids + q * k);
  });
  slots_.rows_to_handles(out_ids, nq * k);
}

void VectorArena::search(const float* queries, std::size_t nq, std::size_t k, Metric metric,
                         const uint64_t* ns, std::size_t n_ns, const uint64_t* layer_mask,
                         int n_threads, float* out_scores, int64_t* out_ids,
                         std::size_t oversample, const uint8_t* allow,
                         std::size_t allow_len) const {
  LAMINA_CHECK(k >= 1, "k must be >= 1, got ", k);
  std::shared_lock lk(mu_);
  const std::size_t live_count = slots_.live_count(), high_water = slots_.high_water();
  LAMINA_CHECK(live_count > 0, "the arena is empty; add vectors before searching");
  RowFilter f;
  f.allow = allow;
  f.allow_len = allow_len;
  if (layer_mask) {
    f.layers = slots_.layer_column();
    std::copy(layer_mask, layer_mask + 4, f.layer_mask);
  }
  if (ns == nullptr) {
    if (live_count != high_water) f.live = slots_.live_column();
    search_locked(queries, nq, k, metric, f, n_threads, out_scores, out_ids, oversample);
    return;
  }
  LAMINA_CHECK(n_ns == 1 || n_ns == nq, "namespace must be one value or one per query (", nq,
               "), got ", n_ns);
  auto rows_of = [&](uint64_t v) -> const std::vector<uint32_t>& { return slots_.rows_in(v); };
  f.use_row_list = true;
  if (n_ns == 1 || std::all_of(ns, ns + n_ns, [&](uint64_t v) { return v == ns[0]; })) {
    const auto& lst = rows_of(ns[0]);
    if (lst.size() * 4 > high_water) {
      // A large share of the rows: a sequential scan with a namespace check streams faster
      // than gathering rows in list order.
      f.use_row_list = false;
      f.live = slots_.live_column();
      f.ns = slots_.ns_column();
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
