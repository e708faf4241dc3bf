// Exhaustive check behind kv_score.cpp's div_by: for every divisor d = 1..33 and every one of
// the 2^32 float bit patterns x (NaN and Inf skipped), the multiply-and-correct quotient
//   q = x * r, r = RN(1/d);  e = fma(-q, d, x);  q' = e == 0 ? q : fma(e, r, q)
// is compared with the IEEE quotient x / d. It is exact for odd d and powers of two, not for
// the other even d (subnormal quotients differ), so div_by uses it only for the former
// (exact_divisor). About 5 s per divisor on one AVX-512 core:
//   g++ -O3 -mavx2 -mfma -o /tmp/check_div bench/tools/check_exact_division.cpp && /tmp/check_div
// Prints one line per divisor and exits 1 if a divisor div_by uses has a mismatch.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

static uint64_t mismatches(float d) {
  const float r = 1.0f / d;
  uint64_t bad = 0;
  for (uint64_t u = 0; u < (1ull << 32); ++u) {
    const uint32_t bits = static_cast<uint32_t>(u);
    if ((bits & 0x7f800000u) == 0x7f800000u) continue;  // NaN, Inf
    float x;
    std::memcpy(&x, &bits, sizeof x);
    const float q = x * r, e = std::fma(-q, d, x);
    const float fast = e == 0.0f ? q : std::fma(e, r, q);
    const float ref = x / d;
    uint32_t a, b;
    std::memcpy(&a, &fast, sizeof a);
    std::memcpy(&b, &ref, sizeof b);
    bad += a != b;
  }
  return bad;
}

int main() {
  int rc = 0;
  for (int d = 1; d <= 33; ++d) {
    const bool used = (d & 1) != 0 || (d & (d - 1)) == 0;  // kv_score.cpp exact_divisor
    const uint64_t bad = mismatches(static_cast<float>(d));
    std::printf("d = %2d: %llu mismatches%s\n", d, static_cast<unsigned long long>(bad),
                used ? " (used by div_by)" : "");
    std::fflush(stdout);
    rc |= used && bad != 0;
  }
  return rc;
}
