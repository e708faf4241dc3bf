// The compressed candidate scan on the GPU (see codec.hpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "check.cuh"
#include "code_enqueue.cuh"
#include "codec.hpp"
#include "topk_parts.cuh"
#include "topk_select.cuh"

namespace lamina::cuda {

using detail::Filter;
using detail::kNoId;
using detail::kThreads;
using detail::kWarps;
using detail::WarpList;

namespace {

enum : int { kFlagNonFinite = detail::kCodeNonFinite };

struct CodeScanArgs {
  int codec;  // 1 binary, 2 int8
  int metric;
  const uint8_t* codes;
  std::size_t stride;
  int dim;
  const float* factor;
  const int32_t* count;
  const float* sqnorms;
  // queries (device): binary planes nq x 4 x W, lo/delta/usum; int8 q8 nq x L, scale
  const uint64_t* planes;
  int W;
  const float* lo;
  const float* delta;
  const float* usum;
  const int8_t* q8;
  int L;
  const float* scale;
  const float* qsq;
  const float* qinv;
  Filter f;
  std::size_t n_units;
  const int64_t* seg;
  std::size_t units_per_block;
  int m;
  int n_lists;
  float* cand_s;
  uint32_t* cand_i;
  unsigned* flags;
};

// <q, x> estimated from row `row`'s code for query q (lamina/codec.hpp).
__device__ __forceinline__ float code_estimate(const CodeScanArgs& a, int q, uint32_t row) {
  const uint8_t* code = a.codes + static_cast<std::size_t>(row) * a.stride;
  if (a.codec == 1) {
    const uint64_t* x = reinterpret_cast<const uint64_t*>(code);
    const uint64_t* pl = a.planes + static_cast<std::size_t>(q) * 4 * a.W;
    int dot = 0;
    for (int w = 0; w < a.W; ++w) {
      const uint64_t v = __ldg(x + w);
      dot += __popcll(__ldg(pl + w) & v) + 2 * __popcll(__ldg(pl + a.W + w) & v) +
             4 * __popcll(__ldg(pl + 2 * a.W + w) & v) + 8 * __popcll(__ldg(pl + 3 * a.W + w) & v);
    }
    const float lo = a.lo[q], delta = a.delta[q];
    const float qsum = float(a.dim) * lo + delta * a.usum[q];
    return a.factor[row] * (2.0f * lo * float(a.count[row]) + 2.0f * delta * float(dot) - qsum);
  }
  const int4* x = reinterpret_cast<const int4*>(code);
  const int4* qq = reinterpret_cast<const int4*>(a.q8 + static_cast<std::size_t>(q) * a.L);
  int dot = 0;
  for (int c = 0; c < a.L / 16; ++c) {
    const int4 xv = __ldg(x + c), qv = __ldg(qq + c);
    dot = __dp4a(xv.x, qv.x, dot);
    dot = __dp4a(xv.y, qv.y, dot);
    dot = __dp4a(xv.z, qv.z, dot);
    dot = __dp4a(xv.w, qv.w, dot);
  }
  return a.factor[row] * (a.scale[q] * float(dot));
}

// Block (q, y): query q, units [y * upb, (y + 1) * upb) of its range; lane per row; each warp
// keeps one list of m candidates and writes it out as list (y * kWarps + warp).
template <int J>
__global__ void __launch_bounds__(kThreads) code_scan_kernel(const CodeScanArgs a) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int q = blockIdx.x;
  std::size_t lo = 0, hi = a.n_units;
  if (a.seg) {
    lo = static_cast<std::size_t>(a.seg[2 * q]);
    hi = static_cast<std::size_t>(a.seg[2 * q + 1]);
  }
  const std::size_t b0 = lo + static_cast<std::size_t>(blockIdx.y) * a.units_per_block;
  const std::size_t b1 = min(hi, b0 + a.units_per_block);
  WarpList<J> L;
  L.init();
  for (std::size_t base = b0 + static_cast<std::size_t>(warp) * 32; base < b1;
       base += kWarps * 32) {
    const std::size_t u = base + lane;
    bool ok = u < b1;
    uint32_t row = 0;
    if (ok) {
      row = a.f.row_of(u);
      ok = a.f.passes(row);
    }
    float s = -INFINITY;
    if (ok) {
      s = code_estimate(a, q, row);
      if (a.metric == 1) {
        const float r2 = a.sqnorms[row];
        s *= a.qinv[q] * (r2 > 0.f ? rsqrtf(r2) : 0.f);
      } else if (a.metric == 2) {
        s = -fmaxf(a.qsq[q] + a.sqnorms[row] - 2.0f * s, 0.0f);
      }
      if (!(fabsf(s) <= FLT_MAX)) {
        detail::raise_flag(a.flags, kFlagNonFinite);
        ok = false;
      }
    }
    L.offer(s, row, ok, a.m - 1, lane);
  }
  const std::size_t o = (static_cast<std::size_t>(q) * a.n_lists + blockIdx.y * kWarps + warp) * a.m;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const int p = j * 32 + lane;
    if (p < a.m) {
      a.cand_s[o + p] = L.s[j];
      a.cand_i[o + p] = L.id[j];
    }
  }
}

// One thread per query: the merged list (row ids, -1 padding at the end) as a row list and the
// query's segment of it.
__global__ void compact_kernel(const int64_t* __restrict__ merged, int nq, int m,
                               uint32_t* __restrict__ rows, int64_t* __restrict__ seg) {
  const int q = blockIdx.x * blockDim.x + threadIdx.x;
  if (q >= nq) return;
  const std::size_t base = static_cast<std::size_t>(q) * m;
  int n = 0;
  for (int i = 0; i < m; ++i) {
    const int64_t r = merged[base + i];
    rows[base + i] = r >= 0 ? static_cast<uint32_t>(r) : 0u;
    n += r >= 0;
  }
  seg[2 * q] = static_cast<int64_t>(base);
  seg[2 * q + 1] = static_cast<int64_t>(base + n);
}

using CodeKernel = void (*)(const CodeScanArgs);

CodeKernel code_kernel_for(int J) {
  switch (J) {
    case 1: return code_scan_kernel<1>;
    case 2: return code_scan_kernel<2>;
    case 4: return code_scan_kernel<4>;
    case 8: return code_scan_kernel<8>;
    case 16: return code_scan_kernel<16>;
    default: return code_scan_kernel<32>;
  }
}

template <class T>
T* upload(detail::Scratch& scr, const std::vector<T>& h, cudaStream_t st) {
  T* d = scr.alloc<T>(std::max<std::size_t>(h.size(), 1));
  if (!h.empty())
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, st));
  return d;
}

}  // namespace

namespace {

constexpr std::size_t align16(std::size_t b) { return (b + 15) / 16 * 16; }

}  // namespace

std::size_t detail::query_codes_bytes(Codec c, std::size_t nq, std::size_t dim) {
  const std::size_t W = (dim + 63) / 64, L = (dim + 63) / 64 * 64;
  std::size_t b = 2 * align16(nq * sizeof(float));  // qsq, qinv
  if (c == Codec::Binary)
    b += align16(nq * 4 * W * sizeof(uint64_t)) + 3 * align16(nq * sizeof(float));
  else
    b += align16(nq * L) + align16(nq * sizeof(float));
  return b;
}

detail::DeviceQueryCodes detail::stage_query_codes(Codec c, const float* queries,
                                                   std::size_t nq, std::size_t dim,
                                                   Metric metric, unsigned char* host,
                                                   const unsigned char* device) {
  LAMINA_CHECK(c != Codec::None, "stage_query_codes needs a codec");
  const QueryCodes qc = encode_queries(c, queries, nq, dim, metric);
  DeviceQueryCodes q;
  q.W = static_cast<int>(qc.W);
  q.L = static_cast<int>(qc.L);
  std::size_t off = 0;
  auto put = [&](const void* src, std::size_t bytes, const void** dst) {
    if (bytes) std::memcpy(host + off, src, bytes);
    *dst = device + off;
    off += align16(bytes);
  };
  if (c == Codec::Binary) {
    LAMINA_ASSERT(qc.planes.size() == nq * 4 * qc.W);
    put(qc.planes.data(), qc.planes.size() * sizeof(uint64_t), reinterpret_cast<const void**>(&q.planes));
    put(qc.lo.data(), nq * sizeof(float), reinterpret_cast<const void**>(&q.lo));
    put(qc.delta.data(), nq * sizeof(float), reinterpret_cast<const void**>(&q.delta));
    put(qc.usum.data(), nq * sizeof(float), reinterpret_cast<const void**>(&q.usum));
  } else {
    LAMINA_ASSERT(qc.q8.size() == nq * qc.L);
    put(qc.q8.data(), qc.q8.size(), reinterpret_cast<const void**>(&q.q8));
    put(qc.scale.data(), nq * sizeof(float), reinterpret_cast<const void**>(&q.scale));
  }
  put(qc.qsq.data(), nq * sizeof(float), reinterpret_cast<const void**>(&q.qsq));
  put(qc.qinv.data(), nq * sizeof(float), reinterpret_cast<const void**>(&q.qinv));
  LAMINA_ASSERT(off == query_codes_bytes(c, nq, dim));
  return q;
}

void detail::code_enqueue(const DeviceQueryCodes& q, std::size_t nq, const DeviceCodes& codes,
                          std::size_t n_rows, const DeviceFilter& filter, std::size_t m,
                          Metric metric, uint32_t* out_rows, int64_t* out_seg, Scratch& scr,
                          unsigned* flags, cudaStream_t st) {
  LAMINA_CHECK(codes.codec != Codec::None, "code_candidates needs a codec");
  LAMINA_CHECK(m >= 1 && m <= kMaxK, "k * oversample must be in [1, ", kMaxK, "] on the GPU, got ", m);
  LAMINA_CHECK(n_rows <= 0xfffffffeull, "at most 2^32 - 2 rows per search");
  LAMINA_CHECK(nq <= 0x7fffffffull, "too many queries in one call");
  if (nq == 0) return;
  CodeScanArgs a{};
  a.codec = static_cast<int>(codes.codec);
  a.metric = static_cast<int>(metric);
  a.codes = codes.base;
  a.stride = codes.stride;
  a.dim = static_cast<int>(codes.dim);
  a.factor = codes.factor;
  a.count = codes.count;
  a.sqnorms = codes.sqnorms;
  a.W = q.W;
  a.L = q.L;
  a.planes = q.planes;
  a.lo = q.lo;
  a.delta = q.delta;
  a.usum = q.usum;
  a.q8 = q.q8;
  a.scale = q.scale;
  a.qsq = q.qsq;
  a.qinv = q.qinv;
  a.f = Filter{filter.live, filter.layers, {}, filter.use_row_list ? filter.row_list : nullptr};
  std::copy(filter.layer_mask, filter.layer_mask + 4, a.f.lmask);
  a.n_units = filter.use_row_list ? filter.row_list_len : n_rows;
  a.seg = filter.segments;
  const std::size_t step = kWarps * 32;
  const std::size_t span = filter.segments ? filter.max_segment : a.n_units;
  // enough blocks to fill the device once over all queries, at least a warp's rows each
  const std::size_t want = std::max<std::size_t>(1, (4 * std::size_t(detail::sm_count()) + nq - 1) / nq);
  std::size_t upb = std::max(step, ((span + want - 1) / want + step - 1) / step * step);
  const std::size_t gx = std::max<std::size_t>(1, (span + upb - 1) / upb);
  LAMINA_CHECK(gx <= 65535, "a namespace is too large for one GPU launch");
  a.units_per_block = upb;
  a.m = static_cast<int>(m);
  a.n_lists = static_cast<int>(gx * kWarps);
  a.cand_s = scr.alloc<float>(nq * a.n_lists * m);
  a.cand_i = scr.alloc<uint32_t>(nq * a.n_lists * m);
  a.flags = flags;
  const int J = detail::pick_j(m);
  launch(code_kernel_for(J), dim3(static_cast<unsigned>(nq), static_cast<unsigned>(gx)), kThreads,
         0, st, a);
  float* ms = scr.alloc<float>(nq * m);
  int64_t* mi = scr.alloc<int64_t>(nq * m);
  detail::merges(J, st, scr, a.cand_s, a.cand_i, a.n_lists, static_cast<int>(nq), a.m, 0, ms, mi,
                 nullptr);
  launch(compact_kernel, blocks_for(nq, 128), 128, 0, st, mi, static_cast<int>(nq), a.m, out_rows,
         out_seg);
}

void detail::code_raise(unsigned non_finite) {
  LAMINA_CHECK(!non_finite,
               "an estimated similarity is NaN or Inf: the vectors' or queries' values overflow "
               "float32; pass finite vectors of moderate magnitude");
}

void code_candidates(const float* queries, std::size_t nq, const DeviceCodes& codes,
                     std::size_t n_rows, const DeviceFilter& filter, std::size_t m, Metric metric,
                     uint32_t* out_rows, int64_t* out_seg, void* stream) {
  LAMINA_CHECK(codes.codec != Codec::None, "code_candidates needs a codec");
  LAMINA_CHECK(m >= 1 && m <= kMaxK, "k * oversample must be in [1, ", kMaxK, "] on the GPU, got ", m);
  if (nq == 0) return;
  const cudaStream_t st = detail::as_stream(stream);
  const std::size_t d = codes.dim;
  const QueryCodes qc = encode_queries(codes.codec, queries, nq, d, metric);
  detail::Scratch scr(st);
  detail::HostFlags hf(st);
  detail::DeviceQueryCodes q;
  q.W = static_cast<int>(qc.W);
  q.L = static_cast<int>(qc.L);
  if (codes.codec == Codec::Binary) {
    q.planes = upload(scr, qc.planes, st);
    q.lo = upload(scr, qc.lo, st);
    q.delta = upload(scr, qc.delta, st);
    q.usum = upload(scr, qc.usum, st);
  } else {
    q.q8 = upload(scr, qc.q8, st);
    q.scale = upload(scr, qc.scale, st);
  }
  q.qsq = upload(scr, qc.qsq, st);
  q.qinv = upload(scr, qc.qinv, st);
  detail::code_enqueue(q, nq, codes, n_rows, filter, m, metric, out_rows, out_seg, scr,
                       hf.device(), st);
  detail::code_raise(hf.read(kFlagNonFinite));
}

}  // namespace lamina::cuda
