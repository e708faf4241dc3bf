// lamina/codec.hpp — compact per-row codes beside an arena's float rows, for a compressed first
// scan that an exact re-ranking from the float rows then corrects.
//
// Codes (one per row, `code_stride(codec, dim)` bytes, zero padded):
//  * binary: bit j of the row is x_j > 0 (64 dims per little-endian uint64 word: 48 bytes for
//    384 dims). Per-row constants: factor = |x|^2 / |x|_1 (0 for a zero row), count = the number
//    of set bits. The query is not binarised: it is quantised to 4 bits per dimension,
//    u_j = round((q_j - lo) / delta) in [0, 15], kept as four bit planes, so that
//      <q, s> ~ 2 (lo * count + delta * sum_p 2^p popcount(plane_p & bits)) - sum_j q_j
//    for the sign vector s in {-1, +1}^d, and <q, x> ~ factor * <q, s> (exact when every
//    |x_j| is equal; the estimator of RaBitQ without its random rotation).
//  * int8: c_j = rint(x_j / scale) (ties to even), scale = max_j |x_j| / 127 (0 for a zero row) — factor =
//    scale, count = sum_j c_j. The query is quantised the same way (its own scale), so
//      <q, x> ~ scale_q * scale_x * sum_j cq_j c_j, an exact integer dot product.
// Estimates of <q, x> become the metric's score as in topk.hpp (cosine divides by the norms,
// l2 is |q|^2 + |x|^2 - 2 <q, x>), using the rows' exact squared norms.
//
// Kernels: one family (lamina/isa.hpp) with per-function target attributes: scalar; AVX2 (the
// popcnt instruction, 8-bit multiply-adds); AVX-512 with VPOPCNTDQ, BW and VNNI (the AVX2 table
// where the CPU lacks one of them). Integer arithmetic: every path gives the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "lamina/topk.hpp"

namespace lamina {

enum class Codec : int { None = 0, Binary = 1, Int8 = 2 };

/// "binary" | "int8" | "none" (also "" ) -> Codec; ValueError otherwise.
Codec parse_codec(const std::string& name);
const char* codec_name(Codec c);
/// Bytes of one row's code (0 for Codec::None).
std::size_t code_stride(Codec c, std::size_t dim);

/// Encode n rows (row i at rows + i * row_stride elements; binary16 bits when f16) into
/// codes[i * stride ...] (stride = code_stride(c, dim); padding written as zero) and the per-row
/// constants factor[i], count[i] (see above).
void encode_rows(Codec c, const void* rows, std::size_t row_stride, bool f16, std::size_t n,
                 std::size_t dim, uint8_t* codes, float* factor, int32_t* count);

/// A batch of queries in the codec's query form (see above), nq of them:
///  binary: planes (nq x 4 x W words, W = ceil(dim / 64)), lo, delta, usum (sum_j u_j);
///  int8: q8 (nq x L bytes, L = dim rounded up to 64, zero padded), qu = q8 + 128, scale;
///  both: qsq = |q|^2 and qinv = 1 / |q| (0 for a zero query), for cosine and l2.
/// ValueError: a NaN/Inf query, or a zero query under cosine.
struct QueryCodes {
  std::size_t W = 0, L = 0;
  std::vector<uint64_t> planes;
  std::vector<float> lo, delta, usum;
  std::vector<int8_t> q8;
  std::vector<uint8_t> qu;
  std::vector<float> scale;
  std::vector<float> qsq, qinv;
};
QueryCodes encode_queries(Codec c, const float* queries, std::size_t nq, std::size_t dim,
                          Metric metric);

/// Codes to scan: row r's code at base + r * stride; its constants factor[r], count[r]; its
/// exact squared norm sqnorms[r] (for cosine and l2).
struct CodeStore {
  Codec codec = Codec::None;
  const uint8_t* base = nullptr;
  std::size_t stride = 0;
  std::size_t dim = 0;
  const float* factor = nullptr;
  const int32_t* count = nullptr;
  const float* sqnorms = nullptr;
};

/// The best `m` rows per query by the code's estimate of the metric's score, among the rows
/// `filter` admits: out_rows[q * m + i], sorted best first, -1 padded. Queries: nq x dim float32
/// (finite; non-zero for cosine: ValueError otherwise).
void code_candidates(const float* queries, std::size_t nq, const CodeStore& codes,
                     std::size_t n_rows, const RowFilter& filter, std::size_t m, Metric metric,
                     int n_threads, int64_t* out_rows);

/// The ISA of the codec kernels; force("scalar"/"avx2"/"avx512") for tests, "" restores.
const char* codec_isa();
void set_codec_isa(const std::string& name);

}  // namespace lamina
