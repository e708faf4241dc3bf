// The llama forward on a CUDA device in fp16 (cuda/model.hpp).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "check.cuh"
#include "lamina/model_f16.hpp"
#include "lamina_cuda.hpp"
#include "model.hpp"

namespace lamina::cuda::model {

namespace {

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// Eight fp16 values (one 16-byte load) to float32.
__device__ __forceinline__ void load8(const __half* p, float* f) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __half22float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

// ---- matmul ----------------------------------------------------------------------------------
// GEMV: a warp per output row n; every token's dot product against the row, the row read once.
__global__ void gemv_kernel(const float* __restrict__ X, int T, int K, const __half* __restrict__ W,
                            int N, float* __restrict__ Y, int ldy, int accumulate) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (warp >= N) return;
  const __half* row = W + static_cast<std::size_t>(warp) * K;
  float acc[kGemvMaxTokens];
#pragma unroll
  for (int t = 0; t < static_cast<int>(kGemvMaxTokens); ++t) acc[t] = 0.0f;
  for (int k = lane * 8; k < K; k += 32 * 8) {
    float w[8];
    load8(row + k, w);
#pragma unroll
    for (int t = 0; t < static_cast<int>(kGemvMaxTokens); ++t) {
      if (t >= T) break;
      const float4 a = *reinterpret_cast<const float4*>(X + static_cast<std::size_t>(t) * K + k);
      const float4 b = *reinterpret_cast<const float4*>(X + static_cast<std::size_t>(t) * K + k + 4);
      acc[t] += w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x + w[5] * b.y +
                w[6] * b.z + w[7] * b.w;
    }
  }
#pragma unroll
  for (int t = 0; t < static_cast<int>(kGemvMaxTokens); ++t) {
    if (t >= T) break;
    const float s = warp_sum(acc[t]);
    if (lane == 0) {
      float* y = Y + static_cast<std::size_t>(t) * ldy + warp;
      *y = accumulate ? *y + s : s;
    }
  }
}

// Tiled GEMM: a 64 (tokens) × 64 (output columns) tile per block of 256 threads, 4 × 4 outputs
// per thread, K in steps of 16 through shared memory (the weight tile converted to float32).
constexpr int kTM = 64, kTN = 64, kTK = 16;
__global__ void __launch_bounds__(256) gemm_kernel(const float* __restrict__ X, int T, int K,
                                                   const __half* __restrict__ W, int N,
                                                   float* __restrict__ Y, int ldy, int accumulate) {
  __shared__ float As[kTK][kTM + 4];
  __shared__ float Bs[kTK][kTN + 4];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int m0 = blockIdx.y * kTM, n0 = blockIdx.x * kTN;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kTK) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int idx = tid + i * 256, r = idx / kTK, kk = idx % kTK;
      const int m = m0 + r, n = n0 + r, k = k0 + kk;
      As[kk][r] = (m < T && k < K) ? X[static_cast<std::size_t>(m) * K + k] : 0.0f;
      Bs[kk][r] = (n < N && k < K) ? __half2float(W[static_cast<std::size_t>(n) * K + k]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = As[kk][ty * 4 + i];
        b[i] = Bs[kk][tx * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = m0 + ty * 4 + i;
    if (m >= T) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tx * 4 + j;
      if (n >= N) continue;
      float* y = Y + static_cast<std::size_t>(m) * ldy + n;
      *y = accumulate ? *y + acc[i][j] : acc[i][j];
    }
  }
}

// ---- elementwise -----------------------------------------------------------------------------
__global__ void embed_kernel(const int32_t* __restrict__ ids, const __half* __restrict__ E, int d,
                             float* __restrict__ x) {
  const int t = blockIdx.x;
  const __half* row = E + static_cast<std::size_t>(ids[t]) * d;
  for (int j = threadIdx.x; j < d; j += blockDim.x)
    x[static_cast<std::size_t>(t) * d + j] = __half2float(row[j]);
}

// A block per row; the sum of squares in double, as on the CPU.
__global__ void rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ w, int d,
                               float eps, float* __restrict__ out) {
  __shared__ double part[32];
  const float* r = x + static_cast<std::size_t>(blockIdx.x) * d;
  double ss = 0.0;
  for (int j = threadIdx.x; j < d; j += blockDim.x) ss += static_cast<double>(r[j]) * r[j];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(kFull, ss, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    const int nw = static_cast<int>(blockDim.x >> 5);
    double v = static_cast<int>(threadIdx.x) < nw ? part[threadIdx.x] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
    if (threadIdx.x == 0) part[0] = v;
  }
  __syncthreads();
  const float scale = static_cast<float>(1.0 / sqrt(part[0] / static_cast<double>(d) + eps));
  float* o = out + static_cast<std::size_t>(blockIdx.x) * d;
  for (int j = threadIdx.x; j < d; j += blockDim.x) o[j] = r[j] * scale * w[j];
}

__global__ void swiglu_kernel(const float* __restrict__ gu, std::size_t T, int F,
                              float* __restrict__ out) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * F) return;
  const std::size_t t = i / F, j = i % F;
  const float g = gu[t * 2 * F + j], u = gu[t * 2 * F + F + j];
  out[i] = g / (1.0f + expf(-g)) * u;
}

// ---- RoPE and the cache append ---------------------------------------------------------------
__global__ void rope_append_kernel(float* __restrict__ qkv, int T, int H, int Hk, int D,
                                   const float2* __restrict__ rope, const int* __restrict__ qmap,
                                   const int* __restrict__ kmap, const HeadSlot* __restrict__ slots,
                                   float* __restrict__ qfar) {
  const int t = blockIdx.x, hh = blockIdx.y, i = threadIdx.x, half_d = D / 2;
  if (i >= half_d) return;
  float* row = qkv + static_cast<std::size_t>(t) * (H + 2 * Hk) * D;
  auto table = [&](int r) { return rope[(static_cast<std::size_t>(r + 1) * T + t) * half_d + i]; };
  if (hh < H) {
    float* q = row + hh * D;
    const int r = qmap[hh];  // -1: the plain table 0
    const float x0 = q[2 * i], x1 = q[2 * i + 1];
    if (qfar && r >= 0) {
      // Window variant: the far query (table 1 + Hk + r) beside, the plain one in place.
      const float2 cf = table(Hk + r);
      float* f = qfar + (static_cast<std::size_t>(t) * H + hh) * D;
      f[2 * i] = x0 * cf.x - x1 * cf.y;
      f[2 * i + 1] = x0 * cf.y + x1 * cf.x;
    }
    const float2 cs = table(qfar ? -1 : r);
    q[2 * i] = x0 * cs.x - x1 * cs.y;
    q[2 * i + 1] = x0 * cs.y + x1 * cs.x;
    return;
  }
  const int kv = hh - H;
  const float* kp = row + (H + kv) * D;
  const float* vp = row + (H + Hk + kv) * D;
  const HeadSlot s = slots[kv];
  const std::size_t at = (s.len0 + static_cast<unsigned long long>(t)) * D + 2 * i;
  const float x0 = kp[2 * i], x1 = kp[2 * i + 1];
  const float2 cs = table(-1);
  __half* K = static_cast<__half*>(s.k);
  K[at] = __float2half_rn(x0 * cs.x - x1 * cs.y);
  K[at + 1] = __float2half_rn(x0 * cs.y + x1 * cs.x);
  const int r = kmap[kv];
  if (r >= 0) {
    const float2 c2 = table(r);
    __half* KS = static_cast<__half*>(s.ks);
    KS[at] = __float2half_rn(x0 * c2.x - x1 * c2.y);
    KS[at + 1] = __float2half_rn(x0 * c2.y + x1 * c2.x);
  }
  __half* V = static_cast<__half*>(s.v);
  V[at] = __float2half_rn(vp[2 * i]);
  V[at + 1] = __float2half_rn(vp[2 * i + 1]);
}

// ---- single-channel scaling -------------------------------------------------------------------
// A block per (token t, head hh: query heads, then KV heads), a thread per dimension pair.
__global__ void channel_scale_kernel(float* __restrict__ qkv, const float* __restrict__ hn, int d,
                                     int channel, float delta, int T, int H, int Hk, int D,
                                     const float* __restrict__ col, int t_q, int keys_copy,
                                     const float2* __restrict__ rope,
                                     const HeadSlot* __restrict__ slots) {
  const int t = blockIdx.x, hh = blockIdx.y, i = threadIdx.x, half_d = D / 2;
  if (i >= half_d) return;
  const float s = delta * hn[static_cast<std::size_t>(t) * d + channel];
  float* row = qkv + static_cast<std::size_t>(t) * (H + 2 * Hk) * D;
  const float* c = col + static_cast<std::size_t>(hh) * D;
  if (hh < H) {
    if (t < t_q) return;
    float* q = row + hh * D;
    q[2 * i] += s * c[2 * i];
    q[2 * i + 1] += s * c[2 * i + 1];
    return;
  }
  const int kv = hh - H;
  float* k = row + (H + kv) * D;
  const float x0 = k[2 * i] + s * c[2 * i], x1 = k[2 * i + 1] + s * c[2 * i + 1];
  if (!keys_copy) {
    k[2 * i] = x0;
    k[2 * i + 1] = x1;
    return;
  }
  const float2 cs = rope[static_cast<std::size_t>(t) * half_d + i];  // table 0: plain angles
  const HeadSlot sl = slots[kv];
  const std::size_t at = (sl.len0 + static_cast<unsigned long long>(t)) * D + 2 * i;
  __half* KS = static_cast<__half*>(sl.ks);
  KS[at] = __float2half_rn(x0 * cs.x - x1 * cs.y);
  KS[at + 1] = __float2half_rn(x0 * cs.y + x1 * cs.x);
}

// fp16 column `channel` of rows [0, n) of a (n_rows × d) fp16 matrix, as float32.
__global__ void column_kernel(const __half* __restrict__ w, std::size_t d, int channel, int n,
                              float* __restrict__ out) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < n) out[r] = __half2float(w[static_cast<std::size_t>(r) * d + channel]);
}

// ---- attention -------------------------------------------------------------------------------
constexpr int kAttnWarps = 4;
constexpr int kMaxR = kMaxHeadDim / 32;

// A warp per (token t, query head hh, key split s): online softmax over keys [j0, j1) of the
// visible n = len0 + t + 1. With one split the normalised output goes to `out`; otherwise the
// partial (max, sum, unnormalised accumulator) to `part`. Ms-PoE's window variant (qfar set):
// a rescaled head's keys j < far[kv·T + t] are scored with its far query against the scaled
// keys, the rest with the plain query against the plain keys — one softmax over both, which
// is what the CPU's two softmaxes merged by their partition functions compute.
__global__ void __launch_bounds__(kAttnWarps * 32)
    attention_kernel(const float* __restrict__ q, std::size_t ldq, int T, int H, int Hk, int D,
                     const int* __restrict__ qmap, int t_dual, const HeadSlot* __restrict__ slots, int splits,
                     int chunk, float scale, const float* __restrict__ qfar, const int* __restrict__ far,
                     float* __restrict__ part, float* __restrict__ out) {
  __shared__ float qs[kAttnWarps][kMaxHeadDim];
  __shared__ float qf[kAttnWarps][kMaxHeadDim];
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const std::size_t item = static_cast<std::size_t>(blockIdx.x) * kAttnWarps + w;
  if (item >= static_cast<std::size_t>(T) * H * splits) return;  // whole warps leave together
  const int hh = static_cast<int>(item % H);
  const int t = static_cast<int>((item / H) % T);
  const int s = static_cast<int>(item / (static_cast<std::size_t>(H) * T));
  const int kv = hh / (H / Hk);
  const HeadSlot slot = slots[kv];
  const std::size_t n = slot.len0 + static_cast<std::size_t>(t) + 1;
  const std::size_t j0 = splits == 1 ? 0 : static_cast<std::size_t>(s) * chunk;
  const std::size_t j1 = splits == 1 ? n : std::min(n, j0 + chunk);
  const float* qr = q + static_cast<std::size_t>(t) * ldq + static_cast<std::size_t>(hh) * D;
  for (int e = lane; e < D; e += 32) qs[w][e] = qr[e];
  // The window variant's rescaled head: entries [0, n_far) lie window or more behind the query.
  const bool windowed = qfar != nullptr && qmap[hh] >= 0;
  const std::size_t n_far = windowed ? static_cast<std::size_t>(far[static_cast<std::size_t>(kv) * T + t]) : 0;
  if (windowed) {
    const float* fr = qfar + (static_cast<std::size_t>(t) * H + hh) * D;
    for (int e = lane; e < D; e += 32) qf[w][e] = fr[e];
  }
  __syncwarp();
  const __half* K =
      static_cast<const __half*>(!windowed && (qmap[hh] >= 0 || t >= t_dual) ? slot.ks : slot.k);
  const __half* KF = static_cast<const __half*>(slot.ks);
  const __half* V = static_cast<const __half*>(slot.v);
  float m = -INFINITY, l = 0.0f, acc[kMaxR];
#pragma unroll
  for (int r = 0; r < kMaxR; ++r) acc[r] = 0.0f;
  for (std::size_t jb = j0; jb < j1; jb += 32) {
    const std::size_t j = jb + lane;
    float score = -INFINITY;
    if (j < j1) {
      const bool fj = j < n_far;
      const __half* kr = (fj ? KF : K) + j * D;
      const float* qv = fj ? qf[w] : qs[w];
      float dot = 0.0f;
      for (int e = 0; e < D; e += 8) {
        float f[8];
        load8(kr + e, f);
#pragma unroll
        for (int u = 0; u < 8; ++u) dot += qv[e + u] * f[u];
      }
      score = dot * scale;
    }
    const float m_new = fmaxf(m, warp_max(score));
    const float p = j < j1 ? expf(score - m_new) : 0.0f;
    const float corr = expf(m - m_new);  // 0 on the first block (m = -inf)
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int r = 0; r < kMaxR; ++r) acc[r] *= corr;
    const int cnt = static_cast<int>(std::min<std::size_t>(32, j1 - jb));
    for (int i = 0; i < 32; ++i) {
      const float pj = __shfl_sync(kFull, p, i);
      if (i >= cnt) break;  // uniform across the warp
      const __half* vr = V + (jb + i) * D;
#pragma unroll
      for (int r = 0; r < kMaxR; ++r) {
        const int e = lane + 32 * r;
        if (e < D) acc[r] += pj * __half2float(vr[e]);
      }
    }
    m = m_new;
  }
  if (splits == 1) {
    float* o = out + static_cast<std::size_t>(t) * H * D + static_cast<std::size_t>(hh) * D;
    const float inv = 1.0f / l;
#pragma unroll
    for (int r = 0; r < kMaxR; ++r) {
      const int e = lane + 32 * r;
      if (e < D) o[e] = acc[r] * inv;
    }
    return;
  }
  float* pp = part + item * (D + 2);
  if (lane == 0) {
    pp[0] = m;
    pp[1] = l;  // 0 when the split holds nothing visible
  }
#pragma unroll
  for (int r = 0; r < kMaxR; ++r) {
    const int e = lane + 32 * r;
    if (e < D) pp[2 + e] = acc[r];
  }
}

// Merge the splits of every (t, hh): a block per query, a thread per dimension.
__global__ void attention_merge_kernel(const float* __restrict__ part, int T, int H, int D,
                                       int splits, float* __restrict__ out) {
  const int qi = blockIdx.x, e = threadIdx.x;  // qi = t·H + hh
  if (e >= D) return;
  const std::size_t stride = static_cast<std::size_t>(T) * H;
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) {
    const float* pp = part + (s * stride + qi) * (D + 2);
    if (pp[1] > 0.0f) M = fmaxf(M, pp[0]);
  }
  float num = 0.0f, den = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float* pp = part + (s * stride + qi) * (D + 2);
    if (pp[1] <= 0.0f) continue;
    const float wgt = expf(pp[0] - M);
    num += wgt * pp[2 + e];
    den += wgt * pp[1];
  }
  out[static_cast<std::size_t>(qi) * D + e] = num / den;
}

// Split-K layout of an attention call: (splits, chunk).
void attention_splits(std::size_t T, int H, std::size_t max_len, int* splits, int* chunk) {
  const std::size_t items = T * static_cast<std::size_t>(H);
  if (items >= 2048 || max_len <= 256) {
    *splits = 1;
    *chunk = static_cast<int>(std::max<std::size_t>(max_len, 1));
    return;
  }
  std::size_t s = (max_len + 255) / 256;
  s = std::min(s, std::max<std::size_t>(1, 65536 / items));
  std::size_t c = (max_len + s - 1) / s;
  c = (c + 31) / 32 * 32;
  *splits = static_cast<int>((max_len + c - 1) / c);
  *chunk = static_cast<int>(c);
}

// ---- Ms-PoE scoring --------------------------------------------------------------------------
__device__ float block_reduce(float v, bool is_max, float* sh) {
  v = is_max ? warp_max(v) : warp_sum(v);
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    const int nw = static_cast<int>(blockDim.x >> 5);
    float x = static_cast<int>(threadIdx.x) < nw ? sh[threadIdx.x] : (is_max ? -INFINITY : 0.0f);
    x = is_max ? warp_max(x) : warp_sum(x);
    if (threadIdx.x == 0) sh[0] = x;
  }
  __syncthreads();
  const float r = sh[0];
  __syncthreads();
  return r;
}

__global__ void outlier_kernel(const float* __restrict__ qkv, int T, int H, int Hk, int D,
                               float* __restrict__ share) {
  __shared__ float sh[32];
  const int hh = blockIdx.x, QKV = (H + 2 * Hk) * D;
  const float* ql = qkv + static_cast<std::size_t>(T - 1) * QKV + hh * D;
  const int kcol = (H + hh / (H / Hk)) * D;
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  auto score = [&](int j) {
    const float* kr = qkv + static_cast<std::size_t>(j) * QKV + kcol;
    float s = 0.0f;
    for (int e = 0; e < D; ++e) s += ql[e] * kr[e];
    return s * scale;
  };
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < T; j += blockDim.x) mx = fmaxf(mx, score(j));
  mx = block_reduce(mx, true, sh);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < T; j += blockDim.x) sum += expf(score(j) - mx);
  sum = block_reduce(sum, false, sh);
  const float thr = 3.0f / static_cast<float>(T);
  float above = 0.0f;
  for (int j = threadIdx.x; j < T; j += blockDim.x) above += expf(score(j) - mx) / sum > thr ? 1.0f : 0.0f;
  above = block_reduce(above, false, sh);
  if (threadIdx.x == 0) share[hh] = above / static_cast<float>(T);
}

__global__ void gather_kernel(const __half* __restrict__ src, const int64_t* __restrict__ idx,
                              std::size_t n, std::size_t row, __half* __restrict__ dst) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * row) return;
  dst[i] = src[static_cast<std::size_t>(idx[i / row]) * row + i % row];
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------------
void matmul_f16(const float* X, std::size_t T, std::size_t K, const void* w, std::size_t N,
                float* Y, std::size_t ldy, bool accumulate, void* stream) {
  if (T == 0 || N == 0) return;
  LAMINA_CHECK(K % 8 == 0 && K > 0, "matmul_f16: K must be a positive multiple of 8, got ", K);
  LAMINA_CHECK(T < (std::size_t{1} << 31) && N < (std::size_t{1} << 31) && K < (std::size_t{1} << 31),
               "matmul_f16: sizes exceed 2^31");
  const __half* W = static_cast<const __half*>(w);
  if (T <= kGemvMaxTokens) {
    launch(gemv_kernel, blocks_for(N * 32, 128), 128, 0, as_stream(stream), X, static_cast<int>(T),
           static_cast<int>(K), W, static_cast<int>(N), Y, static_cast<int>(ldy), accumulate);
  } else {
    const dim3 grid(blocks_for(N, kTN), blocks_for(T, kTM));
    launch(gemm_kernel, grid, 256, 0, as_stream(stream), X, static_cast<int>(T),
           static_cast<int>(K), W, static_cast<int>(N), Y, static_cast<int>(ldy), accumulate);
  }
}

void embed_f16(const int32_t* ids, std::size_t T, const void* e, std::size_t d, float* x,
               void* stream) {
  if (T == 0) return;
  launch(embed_kernel, static_cast<unsigned>(T), 256, 0, as_stream(stream), ids,
         static_cast<const __half*>(e), static_cast<int>(d), x);
}

void rmsnorm(const float* x, const float* w, std::size_t T, std::size_t d, float eps, float* out,
             void* stream) {
  if (T == 0) return;
  launch(rmsnorm_kernel, static_cast<unsigned>(T), 256, 0, as_stream(stream), x, w,
         static_cast<int>(d), eps, out);
}

void swiglu(const float* gu, std::size_t T, std::size_t F, float* out, void* stream) {
  if (T == 0 || F == 0) return;
  launch(swiglu_kernel, blocks_for(T * F, 256), 256, 0, as_stream(stream), gu, T,
         static_cast<int>(F), out);
}

void rope_append(float* qkv, std::size_t T, int H, int Hk, int D, const float* rope,
                 const int* qmap, const int* kmap, const HeadSlot* slots, float* qfar,
                 void* stream) {
  if (T == 0) return;
  LAMINA_CHECK(D >= 2 && D % 2 == 0 && D <= kMaxHeadDim, "rope_append: bad head_dim ", D);
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(H + Hk));
  launch(rope_append_kernel, grid, static_cast<unsigned>(std::max(32, D / 2)), 0, as_stream(stream),
         qkv, static_cast<int>(T), H, Hk, D, reinterpret_cast<const float2*>(rope), qmap, kmap,
         slots, qfar);
}

void channel_scale(float* qkv, const float* hn, std::size_t T, std::size_t d, int channel,
                   float delta, int H, int Hk, int D, const float* col, std::size_t t_q,
                   bool keys_copy, const float* rope, const HeadSlot* slots, void* stream) {
  if (T == 0) return;
  LAMINA_CHECK(D >= 2 && D % 2 == 0 && D <= kMaxHeadDim, "channel_scale: bad head_dim ", D);
  LAMINA_CHECK(channel >= 0 && static_cast<std::size_t>(channel) < d, "channel_scale: channel ",
               channel, " outside [0, ", d, ")");
  LAMINA_CHECK(t_q <= T, "channel_scale: t_q (", t_q, ") must be in [0, T = ", T, "]");
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(H + Hk));
  launch(channel_scale_kernel, grid, static_cast<unsigned>(std::max(32, D / 2)), 0,
         as_stream(stream), qkv, hn, static_cast<int>(d), channel, delta, static_cast<int>(T), H,
         Hk, D, col, static_cast<int>(t_q), keys_copy ? 1 : 0,
         reinterpret_cast<const float2*>(rope), slots);
}

std::size_t attention_scratch_floats(std::size_t T, int H, int D, std::size_t max_len) {
  int splits = 1, chunk = 1;
  attention_splits(T, H, max_len, &splits, &chunk);
  return splits == 1 ? 0 : static_cast<std::size_t>(splits) * T * H * (D + 2);
}

void attention(const float* q, std::size_t ldq, std::size_t T, int H, int Hk, int D,
               const int* qmap, std::size_t t_dual, const HeadSlot* slots, std::size_t max_len,
               const float* qfar, const int* far, float* part, float* out, void* stream) {
  if (T == 0) return;
  LAMINA_CHECK(t_dual <= T, "attention: t_dual (", t_dual, ") must be in [0, T = ", T, "]");
  LAMINA_CHECK((qfar == nullptr) == (far == nullptr),
               "attention: the far queries and the far-entry counts go together");
  LAMINA_CHECK(!qfar || t_dual == T, "attention: the window variant has no dual keys");
  LAMINA_CHECK(D % 8 == 0 && D <= kMaxHeadDim, "attention: head_dim must be a multiple of 8 and <= ",
               kMaxHeadDim, ", got ", D);
  LAMINA_CHECK(Hk >= 1 && H % Hk == 0, "attention: n_heads must be a multiple of n_kv_heads");
  int splits = 1, chunk = 1;
  attention_splits(T, H, max_len, &splits, &chunk);
  const std::size_t items = T * static_cast<std::size_t>(H) * splits;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  launch(attention_kernel, blocks_for(items, kAttnWarps), kAttnWarps * 32, 0, as_stream(stream), q,
         ldq, static_cast<int>(T), H, Hk, D, qmap, static_cast<int>(t_dual), slots, splits, chunk,
         scale, qfar, far, part, out);
  if (splits > 1) {
    launch(attention_merge_kernel, static_cast<unsigned>(T * H),
           static_cast<unsigned>(std::max(32, D)), 0, as_stream(stream), part, static_cast<int>(T),
           H, D, splits, out);
  }
}

void outlier_share(const float* qkv, std::size_t T, int H, int Hk, int D, float* share,
                   void* stream) {
  if (T == 0) return;
  launch(outlier_kernel, static_cast<unsigned>(H), 256, 0, as_stream(stream), qkv,
         static_cast<int>(T), H, Hk, D, share);
}

void gather_rows_f16(const void* src, const int64_t* idx, std::size_t n, std::size_t row_elems,
                     void* dst, void* stream) {
  if (n == 0 || row_elems == 0) return;
  launch(gather_kernel, blocks_for(n * row_elems, 256), 256, 0, as_stream(stream),
         static_cast<const __half*>(src), idx, n, row_elems, static_cast<__half*>(dst));
}

// ---- DeviceKVCache ---------------------------------------------------------------------------
DeviceKVCache::DeviceKVCache(int n_layers, int n_kv_heads, int head_dim)
    : HeadGrid(n_layers, n_kv_heads, head_dim) {
  if (device_count() == 0)
    throw std::runtime_error("no usable CUDA device (no GPU or no driver): use device='cpu'");
  LAMINA_CUDA_CHECK(cudaGetDevice(&device_));
}

DeviceKVCache::~DeviceKVCache() {
  for (Head& h : heads_)
    if (h.mem) cudaFree(h.mem);  // never throws from a destructor
}


std::size_t DeviceKVCache::bytes() const {
  std::size_t b = 0;
  for (const Head& h : heads_) b += h.cap * hd_ * sizeof(__half) * (h.has_ks ? 3 : 2);
  return b;
}

// New storage of `cap` entries holding the first `len` entries of the old one.
void DeviceKVCache::realloc(Head& h, std::size_t cap, bool ks) const {
  DeviceGuard guard(device_);
  const std::size_t D = static_cast<std::size_t>(hd_), row = D * sizeof(__half);
  void* mem = nullptr;
  if (cap > 0) LAMINA_CUDA_CHECK(cudaMalloc(&mem, cap * row * (ks ? 3 : 2)));
  if (h.mem && h.len > 0 && mem) {
    char* dst = static_cast<char*>(mem);
    const char* src = static_cast<const char*>(h.mem);
    LAMINA_CUDA_CHECK(cudaMemcpy(dst, src, h.len * row, cudaMemcpyDeviceToDevice));
    LAMINA_CUDA_CHECK(cudaMemcpy(dst + cap * row, src + h.cap * row, h.len * row, cudaMemcpyDeviceToDevice));
    if (ks && h.has_ks)
      LAMINA_CUDA_CHECK(cudaMemcpy(dst + 2 * cap * row, src + 2 * h.cap * row, h.len * row,
                                   cudaMemcpyDeviceToDevice));
    LAMINA_CUDA_CHECK(cudaStreamSynchronize(0));
  }
  if (h.mem) LAMINA_CUDA_CHECK(cudaFree(h.mem));
  h.mem = mem;
  h.cap = cap;
  h.has_ks = ks;
}

std::unique_ptr<DeviceKVCache> DeviceKVCache::clone() const {
  DeviceGuard guard(device_);
  auto c = std::make_unique<DeviceKVCache>(n_layers_, n_kv_, hd_);
  c->n_seen_ = n_seen_;
  c->ratio_index_ = ratio_index_;
  c->outlier_ = outlier_;
  c->dual_ = dual_;
  const std::size_t row = static_cast<std::size_t>(hd_) * sizeof(__half);
  for (std::size_t i = 0; i < heads_.size(); ++i) {
    const Head& s = heads_[i];
    Head& d = c->heads_[i];
    if (s.cap > 0) {
      LAMINA_CUDA_CHECK(cudaMalloc(&d.mem, s.cap * row * (s.has_ks ? 3 : 2)));
      LAMINA_CUDA_CHECK(cudaMemcpy(d.mem, s.mem, s.cap * row * (s.has_ks ? 3 : 2),
                                   cudaMemcpyDeviceToDevice));
    }
    d.cap = s.cap;
    d.len = s.len;
    d.has_ks = s.has_ks;
    d.pos = s.pos;
  }
  LAMINA_CUDA_CHECK(cudaStreamSynchronize(0));
  return c;
}

namespace {
void copy_rows_to_host(const void* src, std::size_t n_half, float* out) {
  std::vector<uint16_t> tmp(n_half);
  if (n_half) LAMINA_CUDA_CHECK(cudaMemcpy(tmp.data(), src, n_half * 2, cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < n_half; ++i) out[i] = half_to_float(tmp[i]);
}
}  // namespace

void DeviceKVCache::keys(int layer, int hh, float* out) const {
  const Head& h = head(layer, hh);
  DeviceGuard guard(device_);
  copy_rows_to_host(h.mem, h.len * hd_, out);
}

void DeviceKVCache::values(int layer, int hh, float* out) const {
  const Head& h = head(layer, hh);
  DeviceGuard guard(device_);
  copy_rows_to_host(h.len ? static_cast<const char*>(h.mem) + h.cap * hd_ * sizeof(__half) : nullptr,
                    h.len * hd_, out);
}

const int32_t* DeviceKVCache::positions(int layer, int hh) const { return head(layer, hh).pos.data(); }

void DeviceKVCache::keep(int layer, int hh, const int64_t* idx, std::size_t n) {
  Head& h = head(layer, hh);
  for (std::size_t i = 0; i < n; ++i) {
    LAMINA_CHECK(idx[i] >= 0 && static_cast<std::size_t>(idx[i]) < h.len, "keep: index ", idx[i],
                 " is outside the ", h.len, " entries of (layer ", layer, ", head ", hh, ")");
    LAMINA_CHECK(i == 0 || idx[i] > idx[i - 1], "keep: indices must be strictly increasing");
  }
  DeviceGuard guard(device_);
  const std::size_t D = static_cast<std::size_t>(hd_), row = D * sizeof(__half);
  const int parts = h.has_ks ? 3 : 2;
  void* mem = nullptr;
  if (n > 0) {
    int64_t* d_idx = nullptr;
    LAMINA_CUDA_CHECK(cudaMalloc(&mem, n * row * parts));
    cudaError_t err = cudaMalloc(&d_idx, n * sizeof(int64_t));
    if (err == cudaSuccess) err = cudaMemcpy(d_idx, idx, n * sizeof(int64_t), cudaMemcpyHostToDevice);
    if (err == cudaSuccess) {
      try {
        for (int p = 0; p < parts; ++p)
          gather_rows_f16(static_cast<const char*>(h.mem) + p * h.cap * row, d_idx, n, D,
                          static_cast<char*>(mem) + p * n * row, nullptr);
      } catch (...) {
        cudaFree(d_idx);
        cudaFree(mem);
        throw;
      }
      err = cudaStreamSynchronize(0);
    }
    if (d_idx) cudaFree(d_idx);
    if (err != cudaSuccess) {
      cudaFree(mem);
      LAMINA_CUDA_CHECK(err);
    }
  }
  std::vector<int32_t> pos(n);
  for (std::size_t i = 0; i < n; ++i) pos[i] = h.pos[static_cast<std::size_t>(idx[i])];
  if (h.mem) LAMINA_CUDA_CHECK(cudaFree(h.mem));
  h.mem = mem;
  h.cap = n;
  h.len = n;
  h.pos.swap(pos);
}

void DeviceKVCache::truncate(int64_t n) {
  LAMINA_CHECK(n >= 0 && n <= n_seen_, "truncate: n must be in [0, ", n_seen_,
               "] (tokens seen), got ", n);
  for (Head& h : heads_) {
    while (h.len > 0 && h.pos[h.len - 1] >= n) --h.len;
    h.pos.resize(h.len);
  }
  n_seen_ = n;
}

void DeviceKVCache::clear() {
  DeviceGuard guard(device_);
  for (Head& h : heads_) {
    if (h.mem) LAMINA_CUDA_CHECK(cudaFree(h.mem));
    h = Head{};
  }
  n_seen_ = 0;
  ratio_index_.clear();
  outlier_.clear();
  dual_ = false;
}

void DeviceKVCache::reserve(std::size_t n) {
  for (Head& h : heads_)
    if (h.cap < n) realloc(h, n, needs_ks());
}

void DeviceKVCache::reserve_more(std::size_t n) {
  for (Head& h : heads_) {
    if (h.len + n > h.cap) {
      const std::size_t want = std::max(h.len + n, h.cap + std::max(h.cap / 8, std::size_t{32}));
      realloc(h, want, needs_ks());
    } else if (needs_ks() && !h.has_ks) {
      realloc(h, h.cap, true);
    }
  }
}

HeadSlot DeviceKVCache::slot(int layer, int hh) const {
  const Head& h = head(layer, hh);
  const std::size_t row = static_cast<std::size_t>(hd_) * sizeof(__half);
  HeadSlot s;
  s.k = h.mem;
  s.v = h.mem ? static_cast<char*>(h.mem) + h.cap * row : nullptr;
  s.ks = h.has_ks ? static_cast<char*>(h.mem) + 2 * h.cap * row : nullptr;
  s.len0 = h.len;
  return s;
}

void DeviceKVCache::commit(std::size_t n) {
  for (Head& h : heads_) {
    LAMINA_ASSERT(h.len + n <= h.cap);
    for (std::size_t t = 0; t < n; ++t) h.pos.push_back(static_cast<int32_t>(n_seen_ + static_cast<int64_t>(t)));
    h.len += n;
  }
  n_seen_ += static_cast<int64_t>(n);
}

void DeviceKVCache::begin_dual_keys() {
  LAMINA_ASSERT(n_seen_ == 0);
  dual_ = true;
}

void DeviceKVCache::begin_scaled(int n_heads) {
  LAMINA_ASSERT(n_seen_ == 0);
  ratio_index_.assign(static_cast<std::size_t>(n_layers_) * n_kv_, -1);
  outlier_.assign(static_cast<std::size_t>(n_layers_) * n_heads, 0.0f);
}

// ---- DeviceModel -----------------------------------------------------------------------------
namespace {


}  // namespace

DeviceModel::DeviceModel(const Config& c, const HostWeights& w, const PositionScaling& pos)
    : cfg_(c), pos_(pos) {
  lamina::model::check_config(c);
  LAMINA_CHECK(c.head_dim % 8 == 0 && c.head_dim <= kMaxHeadDim,
               "the CUDA path needs head_dim a multiple of 8 and <= ", kMaxHeadDim, ", got ",
               c.head_dim);
  lamina::model::check_weights(c, w, 8);
  lamina::model::check_position_scaling(c, pos_);
  const std::size_t d = c.d_model;
  if (device_count() == 0)
    throw std::runtime_error("no usable CUDA device (no GPU or no driver): use device='cpu'");
  LAMINA_CUDA_CHECK(cudaGetDevice(&device_));
  try {
    cudaStream_t s = nullptr;
    LAMINA_CUDA_CHECK(cudaStreamCreate(&s));
    stream_ = s;
    // Upload helpers: one host fp16 buffer at a time (the fused matrices concatenate rows).
    auto upload = [&](const void* host, std::size_t bytes) {
      void* p = nullptr;
      LAMINA_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)));
      allocs_.push_back(p);
      LAMINA_CUDA_CHECK(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice));
      weight_bytes_ += bytes;
      return p;
    };
    auto upload_matrices = [&](std::initializer_list<const HostMatrix*> ms) {
      std::size_t total = 0;
      for (const HostMatrix* m : ms) total += m->rows * m->cols;
      std::vector<uint16_t> buf(total);
      std::size_t at = 0;
      for (const HostMatrix* m : ms) {
        lamina::model::dequantize_f16(m->type, m->data, m->rows, m->cols, buf.data() + at);
        at += m->rows * m->cols;
      }
      return upload(buf.data(), total * sizeof(uint16_t));
    };
    auto upload_vec = [&](const float* v, std::size_t n) {
      return static_cast<float*>(upload(v, n * sizeof(float)));
    };
    embd_ = upload_matrices({&w.token_embd});
    out_ = w.output.data == w.token_embd.data && w.output.type == w.token_embd.type
               ? embd_
               : upload_matrices({&w.output});
    out_norm_ = upload_vec(w.output_norm, d);
    for (const HostLayer& L : w.layers) {
      DLayer D;
      D.attn_norm = upload_vec(L.attn_norm, d);
      D.ffn_norm = upload_vec(L.ffn_norm, d);
      D.wqkv = upload_matrices({&L.wq, &L.wk, &L.wv});
      D.wo = upload_matrices({&L.wo});
      D.wgu = upload_matrices({&L.w_gate, &L.w_up});
      D.wdown = upload_matrices({&L.w_down});
      layers_.push_back(D);
    }
  } catch (...) {
    for (void* p : allocs_) cudaFree(p);
    if (stream_) cudaStreamDestroy(as_stream(stream_));
    throw;
  }
}

DeviceModel::~DeviceModel() {
  if (chan_cols_) cudaFree(chan_cols_);
  for (void* p : allocs_) cudaFree(p);
  if (stream_) cudaStreamDestroy(as_stream(stream_));
}

void DeviceModel::set_channel_scaling(const ChannelScaling& cs) {
  std::lock_guard<std::mutex> lock(mu_);
  DeviceGuard guard(device_);
  if (cs.enabled) {
    LAMINA_CHECK(!pos_.enabled, "channel scaling: cannot be combined with Ms-PoE position scaling");
    lamina::model::check_channel_scaling(cfg_, cs);
  }
  if (chan_cols_) {
    LAMINA_CUDA_CHECK(cudaFree(chan_cols_));
    chan_cols_ = nullptr;
  }
  chan_ = ChannelScaling{};
  if (!cs.enabled) return;
  const Config& c = cfg_;
  const std::size_t n = static_cast<std::size_t>(c.n_heads + c.n_kv_heads) * c.head_dim;
  float* cols = nullptr;
  LAMINA_CUDA_CHECK(cudaMalloc(&cols, static_cast<std::size_t>(c.n_layers) * n * sizeof(float)));
  cudaStream_t st = as_stream(stream_);
  try {
    for (int l = cs.first_layer; l < cs.last_layer; ++l) {
      // wqkv rows [0, (H + Hk)·D) are wq then wk: their column `channel`, as the device has it.
      launch(column_kernel, blocks_for(n, 256), 256, 0, st,
             static_cast<const __half*>(layers_[static_cast<std::size_t>(l)].wqkv),
             static_cast<std::size_t>(c.d_model), cs.channel, static_cast<int>(n),
             cols + static_cast<std::size_t>(l) * n);
    }
    LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
  } catch (...) {
    cudaFree(cols);
    throw;
  }
  chan_cols_ = cols;
  chan_ = cs;
}

float DeviceModel::ratio_of(int i) const { return lamina::model::ratio_of(pos_, cfg_.n_kv_heads, i); }

namespace {

// The window variant's split per (layer >= first, KV head, query t): the number of the head's
// entries at position <= pos0 + t - window (positions ascend: the held ones, all < pos0, then
// the call's pos0 + j for j <= t), read with the far query and the scaled keys. [L, Hk, T].
std::vector<int> far_splits(const DeviceKVCache& cache, int L, int Hk, int first, std::size_t T,
                            int64_t pos0, std::size_t win) {
  std::vector<int> far;
  far.assign(static_cast<std::size_t>(L) * Hk * T, 0);
  for (int l = first; l < L; ++l)
    for (int h = 0; h < Hk; ++h) {
      const int32_t* pp = cache.positions(l, h);
      const std::size_t held = cache.length(l, h);
      int* row = far.data() + (static_cast<std::size_t>(l) * Hk + h) * T;
      for (std::size_t t = 0; t < T; ++t) {
        const int64_t cut = pos0 + static_cast<int64_t>(t) - static_cast<int64_t>(win);
        const std::size_t below = static_cast<std::size_t>(
            std::upper_bound(pp, pp + held, cut, [](int64_t a, int32_t b) { return a < b; }) - pp);
        const std::size_t own = t + 1 >= win ? t + 1 - win : 0;  // j <= t - window
        row[t] = static_cast<int>(below + own);
      }
    }
  return far;
}

}  // namespace

void DeviceModel::check_forward(const int32_t* ids, std::size_t T, const DeviceKVCache& cache,
                                Logits mode, const float* logits, const float* queries,
                                std::size_t q_window) const {
  LAMINA_CHECK(T >= 1, "forward: no tokens (ids is empty)");
  LAMINA_CHECK(cache.n_layers() == cfg_.n_layers && cache.n_kv_heads() == cfg_.n_kv_heads &&
                   cache.head_dim() == cfg_.head_dim,
               "forward: the KV cache was made for another model shape");
  LAMINA_CHECK(cache.device() == device_, "forward: the KV cache is on cuda:", cache.device(),
               " but the model is on cuda:", device_);
  for (std::size_t t = 0; t < T; ++t)
    LAMINA_CHECK(ids[t] >= 0 && ids[t] < cfg_.vocab_size, "token id ", ids[t], " at index ", t,
                 " is outside the vocabulary [0, ", cfg_.vocab_size, ")");
  LAMINA_CHECK(mode == Logits::None || logits != nullptr, "forward: no logits buffer");
  LAMINA_CHECK(!queries || (q_window >= 1 && q_window <= T), "forward: the query window (", q_window,
               ") must be in [1, number of tokens (", T, ")]");
  LAMINA_CHECK(!queries || !scaled(),
               "forward: returning queries for an attention record is not implemented with Ms-PoE on CUDA");
  LAMINA_CHECK(!queries || !chan_.enabled || chan_.last_tokens == 0,
               "forward: returning queries for an attention record is not implemented with "
               "last-tokens channel scaling on CUDA");
}

void DeviceModel::forward(const int32_t* ids, std::size_t T, DeviceKVCache& cache, Logits mode,
                          float* logits, float* queries, std::size_t q_window) {
  check_forward(ids, T, cache, mode, logits, queries, q_window);
  const Config& c = cfg_;
  const int64_t pos0 = cache.n_seen();
  LAMINA_CHECK(pos0 + static_cast<int64_t>(T) < (int64_t{1} << 31), "forward: position overflow");
  std::lock_guard<std::mutex> lock(mu_);
  DeviceGuard guard(device_);
  const int L = c.n_layers, H = c.n_heads, Hk = c.n_kv_heads, D = c.head_dim, G = H / Hk;
  const std::size_t d = c.d_model, F = c.d_ff, V = c.vocab_size;
  const std::size_t QKV = static_cast<std::size_t>(H + 2 * Hk) * D;
  const int first = pos_.enabled ? pos_.first_layer : L;
  const bool scaled = first < L;
  const bool ranking = scaled && !cache.scaled();
  if (ranking) {
    LAMINA_CHECK(cache.n_seen() == 0,
                 "ms-poe: a cache is ranked on its first call, but this one already holds ",
                 cache.n_seen(), " tokens of a forward without position scaling (use a new cache)");
    cache.begin_scaled(H);
  }
  // Channel scaling: layers [cfirst, clast); in last-tokens mode the queries t >= t_scaled
  // are scaled and read the scaled copy of every key the cache keeps (as cpp/model.cpp).
  const ChannelScaling& CS = chan_;
  const lamina::model::ChannelSpan span = lamina::model::channel_span(CS, static_cast<std::size_t>(L), T);
  const int cfirst = static_cast<int>(span.first), clast = static_cast<int>(span.last);
  const std::size_t t_scaled = span.t_scaled;
  const bool dual = span.dual;
  if (dual && !cache.dual_keys()) {
    lamina::model::check_dual_keys_start(cache.n_seen());
    cache.begin_dual_keys();
  }
  cache.reserve_more(T);

  // Host tables: rotations (the CPU forward's rope_tables()), head slots and ratio maps.
  // Tables: 0 plain (p), 1 + r ratio index r's (p / r), and with the window variant 1 + Hk + r
  // its far queries' (p / r + window · (1 - 1/r)).
  const std::size_t win = scaled ? static_cast<std::size_t>(pos_.window) : 0;
  std::vector<float> ratios;
  for (int r = 0; scaled && r < Hk; ++r) ratios.push_back(ratio_of(r));
  std::vector<int64_t> positions(T);
  for (std::size_t t = 0; t < T; ++t) positions[t] = pos0 + static_cast<int64_t>(t);
  const std::vector<float> rope = lamina::model::rope_tables(c, positions.data(), T, ratios, win);
  const std::vector<int> far =
      win ? far_splits(cache, L, Hk, first, T, pos0, win) : std::vector<int>();
  std::vector<HeadSlot> slots(static_cast<std::size_t>(L) * Hk);
  std::size_t max_len = 0;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < Hk; ++h) {
      slots[static_cast<std::size_t>(l) * Hk + h] = cache.slot(l, h);
      max_len = std::max<std::size_t>(max_len, cache.length(l, h) + T);
    }
  std::vector<int> qmap(static_cast<std::size_t>(L) * H, -1), kmap(static_cast<std::size_t>(L) * Hk, -1);
  auto maps_of_layer = [&](int l) {
    if (!scaled || l < first) return;
    const std::vector<int>& ri = cache.ratio_index();
    for (int h = 0; h < Hk; ++h) kmap[static_cast<std::size_t>(l) * Hk + h] = ri[static_cast<std::size_t>(l) * Hk + h];
    for (int h = 0; h < H; ++h) {
      const bool plain = !pos_.plain_heads.empty() && pos_.plain_heads[static_cast<std::size_t>(l) * H + h];
      qmap[static_cast<std::size_t>(l) * H + h] = plain ? -1 : ri[static_cast<std::size_t>(l) * Hk + h / G];
    }
  };
  if (!ranking)
    for (int l = 0; l < L; ++l) maps_of_layer(l);

  cudaStream_t st = as_stream(stream_);
  detail::Scratch sc(st);
  int32_t* d_ids = sc.alloc<int32_t>(T);
  float* d_rope = sc.alloc<float>(rope.size());
  HeadSlot* d_slots = sc.alloc<HeadSlot>(slots.size());
  int* d_qmap = sc.alloc<int>(qmap.size());
  int* d_kmap = sc.alloc<int>(kmap.size());
  float* x = sc.alloc<float>(T * d);
  float* h = sc.alloc<float>(T * d);
  float* qkv = sc.alloc<float>(T * QKV);
  float* att = sc.alloc<float>(T * H * D);
  float* gu = sc.alloc<float>(T * 2 * F);
  float* act = sc.alloc<float>(T * F);
  float* part = sc.alloc<float>(attention_scratch_floats(T, H, D, max_len));
  float* share = sc.alloc<float>(static_cast<std::size_t>(H));
  int* d_far = win ? sc.alloc<int>(far.size()) : nullptr;
  float* qfar = win ? sc.alloc<float>(T * H * D) : nullptr;
  const std::size_t rows_out = mode == Logits::All ? T : 1;
  float* d_logits = sc.alloc<float>(mode == Logits::None ? 1 : rows_out * V);
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(d_ids, ids, T * sizeof(int32_t), cudaMemcpyHostToDevice, st));
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(d_rope, rope.data(), rope.size() * sizeof(float), cudaMemcpyHostToDevice, st));
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(d_slots, slots.data(), slots.size() * sizeof(HeadSlot), cudaMemcpyHostToDevice, st));
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(d_qmap, qmap.data(), qmap.size() * sizeof(int), cudaMemcpyHostToDevice, st));
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(d_kmap, kmap.data(), kmap.size() * sizeof(int), cudaMemcpyHostToDevice, st));
  if (win)
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(d_far, far.data(), far.size() * sizeof(int), cudaMemcpyHostToDevice, st));

  embed_f16(d_ids, T, embd_, d, x, st);
  for (int l = 0; l < L; ++l) {
    const DLayer& Ly = layers_[static_cast<std::size_t>(l)];
    int* lq = d_qmap + static_cast<std::size_t>(l) * H;
    int* lk = d_kmap + static_cast<std::size_t>(l) * Hk;
    rmsnorm(x, Ly.attn_norm, T, d, c.rms_eps, h, st);
    matmul_f16(h, T, d, Ly.wqkv, QKV, qkv, QKV, false, st);
    if (ranking && l >= first) {
      // Score the heads (un-rotated q · k of the last query), assign the layer's ratios on
      // the host exactly as cpp/model.cpp does, upload the layer's maps.
      outlier_share(qkv, T, H, Hk, D, share, st);
      float* out_share = cache.outlier_share().data() + static_cast<std::size_t>(l) * H;
      LAMINA_CUDA_CHECK(cudaMemcpyAsync(out_share, share, H * sizeof(float), cudaMemcpyDeviceToHost, st));
      LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
      lamina::model::assign_ratios(out_share, H, Hk, pos_.order,
                                   cache.ratio_index().data() + static_cast<std::size_t>(l) * Hk);
      maps_of_layer(l);
      LAMINA_CUDA_CHECK(cudaMemcpyAsync(lq, qmap.data() + static_cast<std::size_t>(l) * H, H * sizeof(int),
                                        cudaMemcpyHostToDevice, st));
      LAMINA_CUDA_CHECK(cudaMemcpyAsync(lk, kmap.data() + static_cast<std::size_t>(l) * Hk, Hk * sizeof(int),
                                        cudaMemcpyHostToDevice, st));
    }
    const HeadSlot* ls = d_slots + static_cast<std::size_t>(l) * Hk;
    const bool chan_layer = l >= cfirst && l < clast;
    if (chan_layer)
      channel_scale(qkv, h, T, d, CS.channel, CS.factor - 1.0f, H, Hk, D,
                    chan_cols_ + static_cast<std::size_t>(l) * (H + Hk) * D, t_scaled, dual, d_rope,
                    ls, st);
    // The window variant's far queries and split of this layer (null outside the rescaled layers).
    float* lfar_q = win && l >= first ? qfar : nullptr;
    const int* lfar = win && l >= first ? d_far + static_cast<std::size_t>(l) * Hk * T : nullptr;
    rope_append(qkv, T, H, Hk, D, d_rope, lq, lk, ls, lfar_q, st);
    if (queries) {  // the window's rotated queries: q_window rows of H·D floats (stride QKV)
      const std::size_t hd = static_cast<std::size_t>(H) * D;
      LAMINA_CUDA_CHECK(cudaMemcpy2DAsync(queries + static_cast<std::size_t>(l) * q_window * hd,
                                          hd * sizeof(float), qkv + (T - q_window) * QKV,
                                          QKV * sizeof(float), hd * sizeof(float), q_window,
                                          cudaMemcpyDeviceToHost, st));
    }
    attention(qkv, QKV, T, H, Hk, D, lq, chan_layer && dual ? t_scaled : T, ls, max_len, lfar_q, lfar,
              part, att, st);
    matmul_f16(att, T, static_cast<std::size_t>(H) * D, Ly.wo, d, x, d, true, st);
    rmsnorm(x, Ly.ffn_norm, T, d, c.rms_eps, h, st);
    matmul_f16(h, T, d, Ly.wgu, 2 * F, gu, 2 * F, false, st);
    swiglu(gu, T, F, act, st);
    matmul_f16(act, T, F, Ly.wdown, d, x, d, true, st);
  }
  if (mode != Logits::None) {
    const float* src = mode == Logits::Last ? x + (T - 1) * d : x;
    rmsnorm(src, out_norm_, rows_out, d, c.rms_eps, h, st);
    matmul_f16(h, rows_out, d, out_, V, d_logits, V, false, st);
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(logits, d_logits, rows_out * V * sizeof(float),
                                      cudaMemcpyDeviceToHost, st));
  }
  LAMINA_CUDA_CHECK(cudaStreamSynchronize(st));
  cache.commit(T);
}

}  // namespace lamina::cuda::model
