// lamina/kernel_math.hpp — the per-element formulas of the memory kernels, shared by the CPU
// kernels (cpp/) and a CUDA backend (cuda/): one definition of the arithmetic, so the CPU twin
// is an exact oracle for the GPU code.
//
// Every function is `static inline` and marked LAMINA_HD (`__host__ __device__` under nvcc,
// nothing otherwise). `static` because the header is compiled into translation units with
// different ISA flags (kernels_avx2.cpp, kernels_avx512.cpp): internal linkage keeps the linker
// from picking an AVX-512 out-of-line copy for a caller on the baseline path. The header uses no std containers, no exceptions and no libm calls in the hot
// functions: exp and log are written out (Cephes-style polynomials with branch-free range
// reduction) so GCC auto-vectorises loops that call them at -O3 without -ffast-math, and so the
// host and device produce the same bits (no contraction into FMA: lamina builds with
// -std=c++17, i.e. -ffp-contract=off, and nvcc callers should pass -fmad=false for bit
// equality).
//
// Paper symbols (design-sources/mlmf-paper.txt): α (eq. 5, EMA blend), β and γ (eq. 7, layer
// gate), ε (Alg. 1 line 26, entropy bound), λ (eq. 9-10, retention weight). Heat is MemoryOS's
// a·N_visit + b·L_interaction + c·exp(-Δt/μ) (references/memory-algorithms.md §1.4).
#pragma once

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define LAMINA_HD __host__ __device__
#else
#define LAMINA_HD
#endif

namespace lamina::kmath {

// ---- bit casts -----------------------------------------------------------------------------
/// The bits of `from` read as a To of the same size (memcpy: no aliasing, a register move once
/// compiled); the device code below uses the CUDA intrinsics instead.
template <class To, class From>
static inline LAMINA_HD To bit_cast(From from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs types of one size");
  To to;
  memcpy(&to, &from, sizeof to);
  return to;
}
static inline LAMINA_HD float bits_to_float(int32_t i) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(i);
#else
  return bit_cast<float>(i);
#endif
}
static inline LAMINA_HD int32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_int(f);
#else
  return bit_cast<int32_t>(f);
#endif
}

/// True unless v is NaN or ±Inf (written as v - v == 0 so it vectorises; needs IEEE semantics,
/// i.e. no -ffast-math / -ffinite-math-only).
static inline LAMINA_HD bool is_finite(float v) { return (v - v) == 0.0f; }
static inline LAMINA_HD bool is_finite(double v) { return (v - v) == 0.0; }

/// Core of the exp approximations: for finite x in [ln(FLT_MIN), ln(FLT_MAX)], returns e^r with
/// r = x - n·ln2 (Cody-Waite split, Cephes degree-5 polynomial) and writes n = round(x / ln2)
/// (1.5·2^23 trick, exact for |n| < 2^22); e^x = e^r · 2^n. Callers build 2^n.
static inline LAMINA_HD float expf_reduced(float x, float& n) {
  const float kShift = 12582912.0f;
  n = (x * 1.44269504088896341f + kShift) - kShift;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * (r * r) + r + 1.0f;
}

// ---- exp / log -----------------------------------------------------------------------------
/// e^x in float32, max relative error ~2 ulp for x in [-87.33, 88.72].
/// Results below FLT_MIN (x < -87.3365) flush to +0; x > 88.7228 gives +Inf; NaN gives NaN.
/// Branch-free: range reduction x = n·ln2 + r (Cody-Waite, |r| <= ln2/2), degree-6 polynomial
/// for e^r, scale by 2^n built from the exponent bits (2^n split in two factors so n = 128
/// does not overflow the exponent field).
static inline LAMINA_HD float fast_expf(float x) {
  const float kLo = -87.3365447504f;  // ln(FLT_MIN)
  const float kHi = 88.7228391117f;   // ln(FLT_MAX)
  float xc = x > kLo ? x : kLo;       // NaN -> kLo here; restored at the end
  xc = xc < kHi ? xc : kHi;
  float n;
  const float y = expf_reduced(xc, n);
  const int32_t ni = static_cast<int32_t>(n);          // in [-126, 128]
  const int32_t n1 = ni > 127 ? 127 : ni;              // 2^n = 2^n1 · 2^(n - n1)
  const float scale = bits_to_float((n1 + 127) << 23);
  const float extra = static_cast<float>(ni - n1) + 1.0f;  // 1 or 2
  float out = y * scale * extra;
  out = x < kLo ? 0.0f : out;
  out = x > kHi ? bits_to_float(0x7f800000) : out;
  return x == x ? out : x;
}

/// e^x for x <= 0 (softmax logits after the max shift): fast_expf without the overflow and
/// NaN handling (NaN or x > 0 give unspecified values). Same bits as fast_expf for x <= 0.
static inline LAMINA_HD float fast_expf_nonpos(float x) {
  const float kLo = -87.3365447504f;
  const float xc = x > kLo ? x : kLo;
  float n;  // in [-126, 0]
  const float y = expf_reduced(xc, n);
  const float out = y * bits_to_float((static_cast<int32_t>(n) + 127) << 23);
  return x < kLo ? 0.0f : out;
}

/// Natural log in float32 for positive, normal, finite x (max error ~1 ulp); other inputs give
/// unspecified results (the gate calls it with x >= 1, the KV layer entropy with x raised to
/// FLT_MIN). Cephes logf, branch-free (selects only, so elementwise loops vectorise).
static inline LAMINA_HD float fast_logf(float x) {
  const int32_t bits = float_to_bits(x);
  int32_t e = ((bits >> 23) & 0xff) - 126;                      // x = m · 2^e, m in [0.5, 1)
  float m = bits_to_float((bits & 0x807fffff) | 0x3f000000);
  const bool small = m < 0.707106781186547524f;
  e = small ? e - 1 : e;
  m = small ? (m + m) - 1.0f : m - 1.0f;
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m + -1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m + -1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m + -1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m + -2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  const float ef = static_cast<float>(e);
  y = y + ef * -2.12194440e-4f;
  y = y - 0.5f * z;
  return (m + y) + ef * 0.693359375f;
}

// ---- eq. 5: EMA blend ----------------------------------------------------------------------
/// One element of M ← α·M + (1−α)·ŝ (eq. 5). `one_minus_alpha` is 1−α precomputed, so α = 1
/// returns x and α = 0 returns t exactly (for finite x, t).
static inline LAMINA_HD float ema_step(float x, float t, float alpha, float one_minus_alpha) {
  return alpha * x + one_minus_alpha * t;
}

// ---- eq. 9-10: damped (retention-regularised) update ------------------------------------
/// Weights of the closed-form minimiser of ‖e − e*‖² + λ‖e − e_prev‖²:
/// e = (e* + λ·e_prev)/(1+λ) = w_prev·e_prev + w_target·e*, w_prev = λ/(1+λ), w_target =
/// 1/(1+λ). Computed in double; the convex form cannot overflow for large λ. λ >= 0, finite.
static inline LAMINA_HD void damped_weights(double lam, float* w_prev, float* w_target) {
  const double inv = 1.0 / (1.0 + lam);
  *w_prev = static_cast<float>(lam * inv);
  *w_target = static_cast<float>(inv);
}
/// One element of the damped update (eq. 9-10): λ = 0 returns t exactly.
static inline LAMINA_HD float damped_step(float x, float t, float w_prev, float w_target) {
  return w_prev * x + w_target * t;
}

/// Squared change of one element, the summand of ‖Δ‖² (eq. 9's 𝓛_ret term).
static inline LAMINA_HD float sq_delta(float x_new, float x_old) {
  const float d = x_new - x_old;
  return d * d;
}

// ---- eq. 7: softmax gate γ = softmax(β·r) and its entropy --------------------------------
/// Reference relevance of a row for the stable shift: max_j r_j when β >= 0, min_j r_j when
/// β < 0 (so the largest logit β·r is shifted to 0).
static inline LAMINA_HD float gate_ref(float r_max, float r_min, float beta) {
  return beta >= 0.0f ? r_max : r_min;
}
/// Shifted logit z_j = β·(r_j − r_ref) <= 0. β = 0 gives 0 (uniform γ) even when r_j − r_ref
/// overflows. Subtracting before scaling keeps precision for large β.
static inline LAMINA_HD float gate_logit(float r, float r_ref, float beta) {
  return beta == 0.0f ? 0.0f : beta * (r - r_ref);
}
/// exp of a shifted logit (z <= 0).
static inline LAMINA_HD float gate_exp(float z) { return fast_expf_nonpos(z); }
/// γ_j = e_j · (1/s), s = Σ_j e_j >= 1: one division per row instead of L.
static inline LAMINA_HD float gate_inv_sum(float s) { return 1.0f / s; }
static inline LAMINA_HD float gate_gamma(float e, float inv_sum) { return e * inv_sum; }
/// Summand of Σ_j γ_j·z_j used by the entropy; 0 where exp(z_j) underflowed (0·log 0 = 0).
static inline LAMINA_HD float entropy_term(float gamma, float e, float z) {
  return e == 0.0f ? 0.0f : gamma * z;
}
/// H(γ) = −Σ γ_j log γ_j = log s − Σ γ_j z_j with s = Σ exp(z_j) >= 1 (natural log, nats),
/// clamped at 0 against rounding.
static inline LAMINA_HD float gate_entropy(float sum_exp, float sum_gamma_z) {
  const float h = fast_logf(sum_exp) - sum_gamma_z;
  return h > 0.0f ? h : 0.0f;
}

/// γ = softmax(β·r) for one row of L relevances (eq. 7) written to gamma[0..L); returns H(γ).
/// The scalar form of what the CPU tile kernel computes with the same per-element functions
/// (identical results); also the body of a one-thread-per-row GPU kernel. L >= 1, r finite.
static inline LAMINA_HD float softmax_row(const float* r, int L, float beta, float* gamma) {
  float r_max = r[0], r_min = r[0];
  for (int j = 1; j < L; ++j) {
    r_max = r[j] > r_max ? r[j] : r_max;
    r_min = r[j] < r_min ? r[j] : r_min;
  }
  const float ref = gate_ref(r_max, r_min, beta);
  float s = 0.0f;
  for (int j = 0; j < L; ++j) {
    const float e = gate_exp(gate_logit(r[j], ref, beta));
    gamma[j] = e;
    s += e;
  }
  const float inv = gate_inv_sum(s);
  float gz = 0.0f;
  for (int j = 0; j < L; ++j) {
    const float e = gamma[j];
    const float g = gate_gamma(e, inv);
    gamma[j] = g;
    gz += entropy_term(g, e, gate_logit(r[j], ref, beta));
  }
  return gate_entropy(s, gz);
}

// ---- heat (MemoryOS) -----------------------------------------------------------------------
/// Recency exp(−(now − last)/μ) with the time difference taken in double (epoch seconds need
/// it) and the exponential in float32. inv_mu = 1/μ.
static inline LAMINA_HD float heat_recency_arg(double now, double last, double inv_mu) {
  return static_cast<float>((last - now) * inv_mu);  // −Δt/μ
}
static inline LAMINA_HD float heat_recency(double now, double last, double inv_mu) {
  return fast_expf(heat_recency_arg(now, last, inv_mu));
}
/// Count columns (N_visit, L_interaction) as float32. int64 goes through two exact int32
/// halves in double (SSE2 has no int64 -> float conversion, this form vectorises); exact in
/// double for |v| < 2^53, so the single rounding to float32 matches a direct conversion.
/// (Beyond 2^53 the value is rounded twice, to double then to float32; the AVX-512DQ heat loop
/// rounds the same way with vcvtqq2pd + vcvtpd2ps, so every path gives the same bits.)
static inline LAMINA_HD float count_to_float(float v) { return v; }
static inline LAMINA_HD float count_to_float(int32_t v) { return static_cast<float>(v); }
static inline LAMINA_HD float count_to_float(int64_t v) {
  const int32_t hi = static_cast<int32_t>(v >> 32);
  const int32_t lo_biased = static_cast<int32_t>(static_cast<uint32_t>(v) ^ 0x80000000u);
  const double d = static_cast<double>(hi) * 4294967296.0 +
                   (static_cast<double>(lo_biased) + 2147483648.0);
  return static_cast<float>(d);
}
/// Heat = a·N_visit + b·L_interaction + c·exp(−Δt/μ).
static inline LAMINA_HD float heat_value(float visits, float interaction_len, float recency, float a,
                                  float b, float c) {
  return a * visits + b * interaction_len + c * recency;
}

// ---- capacity projection Π_C --------------------------------------------------------------
/// Eviction order of Π_C: row (s_a, i_a) goes before (s_b, i_b) when its score is lower, or
/// on equal scores when its index is larger (so among ties the smaller index is kept, as in
/// top-k). A strict total order on rows with distinct indices.
static inline LAMINA_HD bool evict_before(float s_a, int64_t i_a, float s_b, int64_t i_b) {
  return s_a < s_b || (s_a == s_b && i_a > i_b);
}

}  // namespace lamina::kmath
