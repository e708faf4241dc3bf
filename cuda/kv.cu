// CUDA KV selection core (see kv.hpp). Compiled with -fmad=false (CMakeLists.txt): the
// score and entropy arithmetic must round exactly as cpp/kv_score.cpp does.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "check.cuh"
#include "cub_util.cuh"
#include "kv.hpp"
#include "lamina/kernel_math.hpp"

namespace lamina::cuda::kv {

using detail::read_scalar;
using lamina::kv::Pool;
using lamina::kv::Reduce;
using lamina::kv::ScoreSpec;

namespace {

enum : unsigned {
  kBadInput = 1u,      // NaN/Inf in the scores / window attention, or a window sum overflow
  kBadNorm = 2u,       // NaN/Inf in per-token value norms
  kNegNorm = 4u,       // negative per-token value norm
  kBadScale = 8u,      // row scale not finite or < 0
  kOverflow = 16u,     // scaled score not finite
  kBadIndex = 32u,     // kept position outside [0, S)
};

__device__ __forceinline__ bool finite(float v) { return (v - v) == 0.0f; }

// ---- window_scores -------------------------------------------------------------------------

// Window reduction (w > 0): red[(l*H + h)*n + j] for j < n, with the CPU's order and checks.
// Positions j >= n are only checked. One thread per (l, h, j), j < S.
__global__ void window_reduce_kernel(const float* __restrict__ in, std::size_t LH, std::size_t w,
                                     std::size_t S, std::size_t n, bool mean, bool causal,
                                     float* __restrict__ red, unsigned* flags) {
  bool bad = false;
  LAMINA_GRID_LOOP(e, LH * S) {
    const std::size_t lh = e / S, j = e % S;
    const float* base = in + lh * w * S + j;
    if (j < n) {
      float s = base[0];
      for (std::size_t t = 1; t < w; ++t) s += base[t * S];
      bad = bad || !finite(s);
      if (mean) s /= static_cast<float>(w);
      else if (causal) s /= static_cast<float>(min(w, S - j));
      red[lh * n + j] = s;
    } else {
      for (std::size_t t = 0; t < w; ++t) bad = bad || !finite(base[t * S]);
    }
  }
  if (bad) atomicOr(flags, kBadInput);
}

// Per-position input (w == 0): every value must be finite.
__global__ void check_finite_kernel(const float* __restrict__ x, std::size_t n, unsigned bit,
                                    unsigned* flags) {
  bool bad = false;
  LAMINA_GRID_LOOP(i, n) bad = bad || !finite(x[i]);
  if (bad) atomicOr(flags, bit);
}

// Scale of each row: per_row[r], or max_{j<n} per_token[r][j] after checking the whole row.
__global__ void row_scale_kernel(const float* __restrict__ per_row,
                                 const float* __restrict__ per_token, std::size_t R,
                                 std::size_t S, std::size_t n, float* __restrict__ nu,
                                 unsigned* flags) {
  LAMINA_GRID_LOOP(r, R) {
    float v;
    if (per_row) {
      v = per_row[r];
    } else {
      const float* x = per_token + r * S;
      bool ok = true;
      float mn = x[0];
      v = 0.0f;
      for (std::size_t j = 0; j < S; ++j) {
        const float t = x[j];
        ok = ok && finite(t);
        mn = t < mn ? t : mn;
        if (j < n) v = (j == 0 || t > v) ? t : v;
      }
      if (!ok) {
        atomicOr(flags, kBadNorm);
        continue;
      }
      if (!(mn >= 0.0f)) atomicOr(flags, kNegNorm);
    }
    if (!(finite(v) && v >= 0.0f)) atomicOr(flags, kBadScale);
    nu[r] = v;
  }
}

// One thread per output element (r = l*H_kv + g, j < n): pooling, GQA reduction, scale.
__global__ void score_kernel(const float* __restrict__ a, std::size_t a_stride, std::size_t H,
                             std::size_t Hkv, std::size_t n, int pool, std::size_t kernel,
                             bool group_max, const float* __restrict__ nu,
                             float* __restrict__ out, unsigned* flags) {
  const std::size_t G = H / Hkv, rad = kernel / 2;
  const float kf = static_cast<float>(kernel), gf = static_cast<float>(G);
  bool bad = false;
  const std::size_t total = n * Hkv;  // per layer; blockIdx.y = layer
  const std::size_t l = blockIdx.y;
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::size_t>(blockDim.x) * gridDim.x) {
    const std::size_t g = e / n, j = e % n;
    float acc = 0.0f;
    for (std::size_t q = 0; q < G; ++q) {
      const float* row = a + (l * H + g * G + q) * a_stride;
      float p;
      if (pool != static_cast<int>(Pool::None) && kernel > 1) {
        const std::size_t lo = j >= rad ? j - rad : 0, hi = min(n - 1, j + rad);
        p = row[lo];
        if (pool == static_cast<int>(Pool::Max)) {
          for (std::size_t i = lo + 1; i <= hi; ++i) p = row[i] > p ? row[i] : p;
        } else {
          for (std::size_t i = lo + 1; i <= hi; ++i) p += row[i];
          p /= kf;
        }
      } else {
        p = row[j];
      }
      if (q == 0) acc = p;
      else if (group_max) acc = p > acc ? p : acc;
      else acc += p;
    }
    if (G > 1 && !group_max) acc /= gf;
    if (nu) acc *= nu[l * Hkv + g];
    bad = bad || !finite(acc);
    out[(l * Hkv + g) * n + j] = acc;
  }
  if (bad) atomicOr(flags, kOverflow);
}

// ---- layer_entropy -------------------------------------------------------------------------

constexpr std::size_t kEntBlock = 1024, kLanes = 16;

// One thread per (row, block of 1024, lane): the CPU's float partial sums of s and s·log s
// over one score row (lane 0 also takes the block's tail), and a per-row negative flag.
__global__ void entropy_partials(const float* __restrict__ s, std::size_t R, std::size_t n,
                                 std::size_t n_blocks, float* __restrict__ pz,
                                 float* __restrict__ ps, unsigned* __restrict__ neg_rows) {
  LAMINA_GRID_LOOP(e, R * n_blocks * kLanes) {
    const std::size_t lane = e % kLanes, b = (e / kLanes) % n_blocks, r = e / (kLanes * n_blocks);
    const float* x = s + r * n + b * kEntBlock;
    const std::size_t len = min(n - b * kEntBlock, kEntBlock);
    float z = 0.0f, sl = 0.0f;
    bool neg = false;
    auto add = [&](float v) {
      uint32_t u = __float_as_uint(v);
      u = u > 0x00800000u ? u : 0x00800000u;
      const float t = v * kmath::fast_logf(__uint_as_float(u));  // as the CPU twin
      z += v;
      sl += t;
      neg = neg || v < 0.0f;
    };
    std::size_t i = 0;
    for (; i + kLanes <= len; i += kLanes) add(x[i + lane]);
    if (lane == 0)
      for (; i < len; ++i) add(x[i]);
    if (neg) atomicOr(neg_rows + r, 1u);
    pz[e] = z;
    ps[e] = sl;
  }
}

// Per row: the double accumulation of the partial sums, blocks then lanes in order.
__global__ void entropy_finish(const float* __restrict__ pz, const float* __restrict__ ps,
                               std::size_t R, std::size_t per_row, double* __restrict__ z,
                               double* __restrict__ sl) {
  LAMINA_GRID_LOOP(r, R) {
    double a = 0.0, b = 0.0;
    for (std::size_t i = 0; i < per_row; ++i) {
      a += pz[r * per_row + i];
      b += ps[r * per_row + i];
    }
    z[r] = a;
    sl[r] = b;
  }
}

// ---- selections ----------------------------------------------------------------------------

// key = order(score) << 32 | ~(index within the segment): a descending sort ranks higher
// scores first and, among equal scores, smaller indices first.
__global__ void make_keys(const float* __restrict__ s, std::size_t total, std::size_t seg,
                          uint64_t* __restrict__ keys) {
  LAMINA_GRID_LOOP(i, total) {
    keys[i] = (static_cast<uint64_t>(detail::float_order_key(s[i])) << 32) |
              static_cast<uint64_t>(~static_cast<uint32_t>(i % seg));
  }
}

// Rows whose first k[r] sorted keys are kept: flag them (by position).
__global__ void flag_top(const uint64_t* __restrict__ sorted, std::size_t R, std::size_t n,
                         const int64_t* __restrict__ k, uint8_t* __restrict__ flags) {
  LAMINA_GRID_LOOP(e, R * n) {
    const std::size_t r = e / n, i = e % n;
    const std::size_t kr = static_cast<std::size_t>(k[r]);
    if (kr == n) {
      flags[e] = 1;
    } else if (i < kr) {
      const uint32_t j = ~static_cast<uint32_t>(sorted[e] & 0xffffffffu);
      flags[r * n + j] = 1;
    }
  }
}

__global__ void flag_full_rows(std::size_t R, std::size_t n, const int64_t* __restrict__ k,
                               uint8_t* __restrict__ flags) {
  LAMINA_GRID_LOOP(e, R * n) flags[e] = static_cast<std::size_t>(k[e / n]) == n;
}

__global__ void emit_rows(const uint8_t* __restrict__ flags, const int* __restrict__ pos,
                          std::size_t R, std::size_t n, std::size_t tail,
                          int64_t* __restrict__ out) {
  LAMINA_GRID_LOOP(e, R * n) {
    if (flags[e]) out[static_cast<std::size_t>(pos[e]) + (e / n) * tail] = static_cast<int64_t>(e % n);
  }
}

__global__ void emit_tail(const int64_t* __restrict__ offsets, const int64_t* __restrict__ k,
                          std::size_t R, std::size_t n, std::size_t tail,
                          int64_t* __restrict__ out) {
  LAMINA_GRID_LOOP(e, R * tail) {
    const std::size_t r = e / tail, t = e % tail;
    out[offsets[r] + k[r] + static_cast<int64_t>(t)] = static_cast<int64_t>(n + t);
  }
}

// Pinned entries (each row's top f) get the largest key, above every finite score; the index
// bits become the flat (head, position) index of the layer.
__global__ void pin_keys(const uint64_t* __restrict__ row_sorted, const float* __restrict__ s,
                         std::size_t L, std::size_t Hkv, std::size_t n,
                         const int64_t* __restrict__ floor, uint64_t* __restrict__ keys) {
  const std::size_t N = Hkv * n;
  LAMINA_GRID_LOOP(e, L * N) {
    const std::size_t l = e / N, f = static_cast<std::size_t>(floor[l]);
    const std::size_t within_row = e % n, row = e / n;
    const std::size_t g = row % Hkv;
    // entry e of the row-sorted array is the within_row-th best of its row
    const uint32_t j = ~static_cast<uint32_t>(row_sorted[e] & 0xffffffffu);
    const uint32_t flat = static_cast<uint32_t>(g * n + j);
    const std::size_t dst = l * N + g * n + j;
    const uint64_t ok = within_row < f ? 0xffffffffull
                                       : static_cast<uint64_t>(detail::float_order_key(s[dst]));
    keys[dst] = (ok << 32) | static_cast<uint64_t>(~flat);
  }
}

__global__ void count_heads(const uint64_t* __restrict__ layer_sorted, std::size_t L,
                            std::size_t Hkv, std::size_t n, const int64_t* __restrict__ total,
                            unsigned long long* __restrict__ counts) {
  const std::size_t N = Hkv * n;
  LAMINA_GRID_LOOP(e, L * N) {
    const std::size_t l = e / N, i = e % N;
    if (i < static_cast<std::size_t>(total[l])) {
      const uint32_t flat = ~static_cast<uint32_t>(layer_sorted[e] & 0xffffffffu);
      atomicAdd(counts + l * Hkv + flat / n, 1ull);
    }
  }
}

__global__ void fill_rows_kernel(const int64_t* __restrict__ pattern, std::size_t len,
                                 std::size_t R, int64_t* __restrict__ out) {
  LAMINA_GRID_LOOP(e, R * len) out[e] = pattern[e % len];
}

__global__ void l1_kernel(const float* __restrict__ v, std::size_t rows, std::size_t dim,
                          float* __restrict__ out, unsigned* flags) {
  LAMINA_GRID_LOOP(r, rows) {
    const float* x = v + r * dim;
    float s = 0.0f;
    for (std::size_t d = 0; d < dim; ++d) s += fabsf(x[d]);
    if (!finite(s)) atomicOr(flags, kBadInput);
    out[r] = s;
  }
}

__global__ void check_positions(const int64_t* __restrict__ idx, std::size_t total,
                                std::size_t S, unsigned* flags) {
  bool bad = false;
  LAMINA_GRID_LOOP(i, total) bad = bad || idx[i] < 0 || static_cast<std::size_t>(idx[i]) >= S;
  if (bad) atomicOr(flags, kBadIndex);
}

// One warp per kept entry: copy row_bytes from its source row in units of U bytes.
template <class U>
__global__ void gather_kernel(const U* __restrict__ src, std::size_t R, std::size_t S,
                              std::size_t units, const int64_t* __restrict__ offsets,
                              const int64_t* __restrict__ idx, std::size_t total,
                              std::size_t padded_len, U* __restrict__ dst) {
  const std::size_t warps = static_cast<std::size_t>(blockDim.x / 32) * gridDim.x;
  const unsigned lane = threadIdx.x & 31;
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x / 32) + threadIdx.x / 32;
       e < total; e += warps) {
    std::size_t lo = 0, hi = R;  // row r: offsets[r] <= e < offsets[r + 1]
    while (lo < hi) {
      const std::size_t mid = (lo + hi) / 2;
      if (static_cast<std::size_t>(offsets[mid + 1]) <= e) lo = mid + 1;
      else hi = mid;
    }
    const std::size_t r = lo;
    const U* s = src + (r * S + static_cast<std::size_t>(idx[e])) * units;
    U* d = dst + (padded_len ? r * padded_len + (e - static_cast<std::size_t>(offsets[r])) : e) * units;
    for (std::size_t u = lane; u < units; u += 32) d[u] = s[u];
  }
}

__global__ void widen_u8(const uint8_t* __restrict__ f, std::size_t n, int* __restrict__ out) {
  LAMINA_GRID_LOOP(i, n) out[i] = f[i];
}

unsigned read_flags(unsigned* d, cudaStream_t st) { return read_scalar(d, st); }

}  // namespace

void window_scores(const float* in, const ScoreSpec& sp, const float* scale_per_row,
                   const float* scale_per_token, float* out, void* stream) {
  lamina::kv::check_score_spec(sp, scale_per_row != nullptr, scale_per_token != nullptr);
  const std::size_t L = sp.layers, H = sp.heads, Hkv = sp.kv_heads, S = sp.seq_len,
                    w = sp.window, n = sp.n_candidates, R = L * Hkv;
  LAMINA_CHECK(L <= 65535, "window_scores on the GPU supports at most 65535 layers");
  const cudaStream_t st = as_stream(stream);
  Scratch scr(st);
  unsigned* flags = scr.alloc<unsigned>(1);
  LAMINA_CUDA_CHECK(cudaMemsetAsync(flags, 0, sizeof(unsigned), st));
  const float* a = in;
  std::size_t a_stride = S;
  if (w > 0) {
    float* red = scr.alloc<float>(L * H * n);
    launch(window_reduce_kernel, blocks_for(L * H * S, 256, kStrideBlocks), 256, 0, st, in, L * H,
           w, S, n, sp.window_reduce == Reduce::Mean, sp.causal_normalize, red, flags);
    a = red;
    a_stride = n;
  } else {
    launch(check_finite_kernel, blocks_for(L * H * S, 256, kStrideBlocks), 256, 0, st, in,
           L * H * S, kBadInput, flags);
  }
  float* nu = nullptr;
  if (scale_per_row || scale_per_token) {
    nu = scr.alloc<float>(R);
    launch(row_scale_kernel, blocks_for(R, 128, kStrideBlocks), 128, 0, st, scale_per_row,
           scale_per_token, R, S, n, nu, flags);
  }
  unsigned f = read_flags(flags, st);
  LAMINA_CHECK(!(f & kBadInput), "scores / window attention contain NaN or Inf (or a window "
               "sum overflows float32); pass finite attention weights");
  LAMINA_CHECK(!(f & kBadNorm), "value_norms contain NaN or Inf");
  LAMINA_CHECK(!(f & kNegNorm), "value_norms must be >= 0 (they are L1 norms)");
  LAMINA_CHECK(!(f & kBadScale), "a value norm scale (LAVa's nu) is not finite or is < 0");
  if (n == 0) return;
  dim3 grid(blocks_for(n * Hkv, 256, 4096), static_cast<unsigned>(L));
  launch(score_kernel, grid, 256, 0, st, a, a_stride, H, Hkv, n, static_cast<int>(sp.pool),
         sp.kernel, sp.group_reduce == Reduce::Max, nu, out, flags);
  f = read_flags(flags, st);
  LAMINA_CHECK(!(f & kOverflow), "scores overflow float32 after scaling; rescale the inputs");
}

void layer_entropy(const float* scores, std::size_t layers, std::size_t kv_heads, std::size_t n,
                   double* out_host, void* stream) {
  const std::size_t R = layers * kv_heads;
  std::vector<lamina::kv::RowEntropySums> sums(R);
  if (R > 0 && n > 0) {
    const cudaStream_t st = as_stream(stream);
    Scratch scr(st);
    const std::size_t nb = (n + kEntBlock - 1) / kEntBlock;
    unsigned* neg = scr.alloc<unsigned>(R);
    LAMINA_CUDA_CHECK(cudaMemsetAsync(neg, 0, R * sizeof(unsigned), st));
    float* pz = scr.alloc<float>(R * nb * kLanes);
    float* ps = scr.alloc<float>(R * nb * kLanes);
    double* dz = scr.alloc<double>(R);
    double* ds = scr.alloc<double>(R);
    launch(entropy_partials, blocks_for(R * nb * kLanes, 256, kStrideBlocks), 256, 0, st, scores, R,
           n, nb, pz, ps, neg);
    launch(entropy_finish, blocks_for(R, 64, kStrideBlocks), 64, 0, st, pz, ps, R, nb * kLanes, dz,
           ds);
    std::vector<double> z(R), sl(R);
    std::vector<unsigned> ng(R);
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(z.data(), dz, R * sizeof(double), cudaMemcpyDeviceToHost, st));
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(sl.data(), ds, R * sizeof(double), cudaMemcpyDeviceToHost, st));
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(ng.data(), neg, R * sizeof(unsigned), cudaMemcpyDeviceToHost, st));
    LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
    for (std::size_t r = 0; r < R; ++r) {
      sums[r].sum = z[r];
      sums[r].sum_slogs = sl[r];
      sums[r].min = ng[r] ? -1.0f : 0.0f;  // only its sign is read (the negative-score check)
    }
  }
  // The CPU's combination of the row sums into E_l (cpp/kv_score.cpp), the same code.
  lamina::kv::entropy_from_sums(sums.data(), layers, kv_heads, n, out_host);
}

void layer_head_counts(const float* scores, std::size_t layers, std::size_t kv_heads,
                       std::size_t n, const int64_t* total, const int64_t* floor,
                       int64_t* counts_host, void* stream) {
  const bool need = lamina::kv::check_head_counts(layers, kv_heads, n, total, floor);
  const std::size_t N = kv_heads * n;
  for (std::size_t l = 0; l < layers; ++l)
    for (std::size_t g = 0; g < kv_heads; ++g)
      counts_host[l * kv_heads + g] = total[l] == 0 ? 0 : static_cast<int64_t>(n);
  if (!need) return;
  LAMINA_CHECK(N < (std::size_t(1) << 32), "layer_head_counts: a layer has too many entries");
  const std::size_t T = layers * N;
  const cudaStream_t st = as_stream(stream);
  Scratch scr(st);
  uint64_t* keys = scr.alloc<uint64_t>(T);
  uint64_t* sorted = scr.alloc<uint64_t>(T);
  int64_t* d_total = scr.alloc<int64_t>(layers);
  std::vector<int> seg_layer(layers + 1);
  for (std::size_t l = 0; l <= layers; ++l) seg_layer[l] = static_cast<int>(l * N);
  detail::check_cub_items(T, "layer_head_counts");
  int* d_seg_layer = scr.alloc<int>(layers + 1);
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(d_seg_layer, seg_layer.data(), (layers + 1) * sizeof(int),
                                    cudaMemcpyHostToDevice, st));
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(d_total, total, layers * sizeof(int64_t),
                                    cudaMemcpyHostToDevice, st));
  bool any_floor = false;
  for (std::size_t l = 0; floor && l < layers; ++l) any_floor = any_floor || floor[l] > 0;
  if (any_floor) {
    // each row's ranking, then pinned keys with flat (head, position) indices
    const std::size_t R = layers * kv_heads;
    std::vector<int> seg_row(R + 1);
    for (std::size_t r = 0; r <= R; ++r) seg_row[r] = static_cast<int>(r * n);
    int* d_seg_row = scr.alloc<int>(R + 1);
    int64_t* d_floor = scr.alloc<int64_t>(layers);
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(d_seg_row, seg_row.data(), (R + 1) * sizeof(int),
                                      cudaMemcpyHostToDevice, st));
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(d_floor, floor, layers * sizeof(int64_t),
                                      cudaMemcpyHostToDevice, st));
    launch(make_keys, blocks_for(T, 256, kStrideBlocks), 256, 0, st, scores, T, n, keys);
    detail::segmented_sort_keys_desc(scr, keys, sorted, T, R, d_seg_row, st);
    launch(pin_keys, blocks_for(T, 256, kStrideBlocks), 256, 0, st, sorted, scores, layers,
           kv_heads, n, d_floor, keys);
  } else {
    launch(make_keys, blocks_for(T, 256, kStrideBlocks), 256, 0, st, scores, T, N, keys);
  }
  detail::segmented_sort_keys_desc(scr, keys, sorted, T, layers, d_seg_layer, st);
  unsigned long long* d_counts = scr.alloc<unsigned long long>(layers * kv_heads);
  LAMINA_CUDA_CHECK(cudaMemsetAsync(d_counts, 0, layers * kv_heads * sizeof(unsigned long long), st));
  launch(count_heads, blocks_for(T, 256, kStrideBlocks), 256, 0, st, sorted, layers, kv_heads, n,
         d_total, d_counts);
  std::vector<unsigned long long> c(layers * kv_heads);
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(c.data(), d_counts, c.size() * sizeof(unsigned long long),
                                    cudaMemcpyDeviceToHost, st));
  LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
  for (std::size_t l = 0; l < layers; ++l) {
    if (total[l] == 0 || static_cast<std::size_t>(total[l]) == N) continue;
    for (std::size_t g = 0; g < kv_heads; ++g)
      counts_host[l * kv_heads + g] = static_cast<int64_t>(c[l * kv_heads + g]);
  }
}

void select_rows(const float* scores, std::size_t n_rows, std::size_t n, const int64_t* k,
                 std::size_t tail, const int64_t* offsets, int64_t* out, void* stream) {
  bool need_scores = false;
  for (std::size_t r = 0; r < n_rows; ++r) {
    LAMINA_CHECK(k[r] >= 0 && static_cast<std::size_t>(k[r]) <= n, "select_rows: k[", r,
                 "] = ", k[r], " is outside [0, ", n, "]");
    LAMINA_CHECK(offsets[r + 1] - offsets[r] == k[r] + static_cast<int64_t>(tail),
                 "select_rows: offsets do not match k + tail at row ", r);
    if (k[r] > 0 && static_cast<std::size_t>(k[r]) < n) need_scores = true;
  }
  LAMINA_CHECK(offsets[0] == 0, "select_rows: offsets must start at 0");
  LAMINA_CHECK(!need_scores || scores != nullptr, "select_rows: scores are required");
  if (n_rows == 0 || offsets[n_rows] == 0) return;
  const std::size_t T = n_rows * n;
  LAMINA_CHECK(n < (std::size_t(1) << 32), "select_rows: rows are too long");
  const cudaStream_t st = as_stream(stream);
  Scratch scr(st);
  int64_t* d_k = scr.alloc<int64_t>(n_rows);
  int64_t* d_off = scr.alloc<int64_t>(n_rows + 1);
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(d_k, k, n_rows * sizeof(int64_t), cudaMemcpyHostToDevice, st));
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(d_off, offsets, (n_rows + 1) * sizeof(int64_t),
                                    cudaMemcpyHostToDevice, st));
  if (T > 0) {
    detail::check_cub_items(T, "select_rows");
    uint8_t* flags = scr.alloc<uint8_t>(T);
    if (need_scores) {
      std::vector<int> seg(n_rows + 1);
      for (std::size_t r = 0; r <= n_rows; ++r) seg[r] = static_cast<int>(r * n);
      int* d_seg = scr.alloc<int>(n_rows + 1);
      LAMINA_CUDA_CHECK(cudaMemcpyAsync(d_seg, seg.data(), (n_rows + 1) * sizeof(int),
                                        cudaMemcpyHostToDevice, st));
      uint64_t* keys = scr.alloc<uint64_t>(T);
      uint64_t* sorted = scr.alloc<uint64_t>(T);
      launch(make_keys, blocks_for(T, 256, kStrideBlocks), 256, 0, st, scores, T, n, keys);
      detail::segmented_sort_keys_desc(scr, keys, sorted, T, n_rows, d_seg, st);
      LAMINA_CUDA_CHECK(cudaMemsetAsync(flags, 0, T, st));
      launch(flag_top, blocks_for(T, 256, kStrideBlocks), 256, 0, st, sorted, n_rows, n, d_k,
             flags);
    } else {
      launch(flag_full_rows, blocks_for(T, 256, kStrideBlocks), 256, 0, st, n_rows, n, d_k, flags);
    }
    int* ones = scr.alloc<int>(T);
    int* pos = scr.alloc<int>(T);
    // position of each kept entry in the kept list (flags widened to int for the scan); the
    // tails of the rows before it are added in emit_rows
    launch(widen_u8, blocks_for(T, 256, kStrideBlocks), 256, 0, st, flags, T, ones);
    detail::exclusive_sum(scr, ones, pos, T, st);
    launch(emit_rows, blocks_for(T, 256, kStrideBlocks), 256, 0, st, flags, pos, n_rows, n, tail,
           out);
  }
  if (tail > 0) {
    launch(emit_tail, blocks_for(n_rows * tail, 256, kStrideBlocks), 256, 0, st, d_off, d_k, n_rows,
           n, tail, out);
  }
  LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));  // host staging buffers (k, offsets, segments)
}

void fill_rows(const int64_t* pattern, std::size_t len, std::size_t n_rows, int64_t* out,
               void* stream) {
  if (len == 0 || n_rows == 0) return;
  const cudaStream_t st = as_stream(stream);
  Scratch scr(st);
  int64_t* d = scr.alloc<int64_t>(len);
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(d, pattern, len * sizeof(int64_t), cudaMemcpyHostToDevice, st));
  launch(fill_rows_kernel, blocks_for(len * n_rows, 256, kStrideBlocks), 256, 0, st, d, len, n_rows,
         out);
  LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
}

void l1_norms(const float* values, std::size_t rows, std::size_t dim, float* out, void* stream) {
  LAMINA_CHECK(dim >= 1, "values must have a non-empty last axis (head_dim)");
  if (rows == 0) return;
  const cudaStream_t st = as_stream(stream);
  Scratch scr(st);
  unsigned* flags = scr.alloc<unsigned>(1);
  LAMINA_CUDA_CHECK(cudaMemsetAsync(flags, 0, sizeof(unsigned), st));
  launch(l1_kernel, blocks_for(rows, 256, kStrideBlocks), 256, 0, st, values, rows, dim, out,
         flags);
  LAMINA_CHECK(!(read_flags(flags, st) & kBadInput), "values contain NaN or Inf");
}

void gather_rows(const void* src, std::size_t n_rows, std::size_t seq_len, std::size_t row_bytes,
                 const int64_t* offsets, const int64_t* offsets_host, const int64_t* idx,
                 std::size_t padded_len, void* dst, void* stream) {
  const std::size_t total = static_cast<std::size_t>(offsets_host[n_rows]);
  std::size_t max_len = 0;
  for (std::size_t r = 0; r < n_rows; ++r) {
    LAMINA_CHECK(offsets_host[r + 1] >= offsets_host[r], "offsets must be non-decreasing");
    max_len = std::max<std::size_t>(max_len, static_cast<std::size_t>(offsets_host[r + 1] - offsets_host[r]));
  }
  LAMINA_CHECK(padded_len == 0 || padded_len >= max_len, "padded_len (", padded_len,
               ") is shorter than the longest row (", max_len, ")");
  const cudaStream_t st = as_stream(stream);
  Scratch scr(st);
  if (total > 0) {
    unsigned* flags = scr.alloc<unsigned>(1);
    LAMINA_CUDA_CHECK(cudaMemsetAsync(flags, 0, sizeof(unsigned), st));
    launch(check_positions, blocks_for(total, 256, kStrideBlocks), 256, 0, st, idx, total, seq_len,
           flags);
    LAMINA_CHECK_INDEX(!(read_flags(flags, st) & kBadIndex), "a kept position is outside [0, ",
                       seq_len, ") (a KeepSet for another cache?)");
  }
  const std::size_t out_rows = padded_len ? n_rows * padded_len : total;
  if (padded_len && out_rows)
    LAMINA_CUDA_CHECK(cudaMemsetAsync(dst, 0, out_rows * row_bytes, st));
  if (total == 0 || row_bytes == 0) return;
  const auto aligned = [&](std::size_t a) {
    return row_bytes % a == 0 && reinterpret_cast<std::uintptr_t>(src) % a == 0 &&
           reinterpret_cast<std::uintptr_t>(dst) % a == 0;
  };
  const unsigned blocks = blocks_for(total, 8, kStrideBlocks);  // 8 warps per block
  if (aligned(16)) {
    launch(gather_kernel<uint4>, blocks, 256, 0, st, static_cast<const uint4*>(src), n_rows,
           seq_len, row_bytes / 16, offsets, idx, total, padded_len, static_cast<uint4*>(dst));
  } else if (aligned(4)) {
    launch(gather_kernel<uint32_t>, blocks, 256, 0, st, static_cast<const uint32_t*>(src), n_rows,
           seq_len, row_bytes / 4, offsets, idx, total, padded_len, static_cast<uint32_t*>(dst));
  } else {
    launch(gather_kernel<uint8_t>, blocks, 256, 0, st, static_cast<const uint8_t*>(src), n_rows,
           seq_len, row_bytes, offsets, idx, total, padded_len, static_cast<uint8_t*>(dst));
  }
}

}  // namespace lamina::cuda::kv
