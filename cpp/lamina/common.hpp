// lamina/common.hpp — error reporting and small utilities shared by the C++ core.
//
// User mistakes are reported with LAMINA_CHECK (-> lamina::ValueError, mapped to Python
// ValueError) or LAMINA_CHECK_INDEX (-> lamina::IndexError, mapped to IndexError).
// Internal invariants use LAMINA_ASSERT (-> std::logic_error: a bug in lamina, not in the caller).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <type_traits>
#include <stdexcept>
#include <string>

namespace lamina {

/// A caller passed a bad value (shape, dtype, range...). Python: ValueError.
struct ValueError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
/// A caller passed an index / slot that does not exist. Python: IndexError.
struct IndexError : std::out_of_range {
  using std::out_of_range::out_of_range;
};
/// A caller passed an argument of the wrong type. Python: TypeError.
struct TypeError : std::domain_error {
  using std::domain_error::domain_error;
};

namespace detail {
// Message building without iostreams: a module that links libstdc++ statically (some
// toolchains do by default) can crash formatting numbers through an uninitialised locale.
inline void append(std::string& s, const char* x) { s += x ? x : "(null)"; }
inline void append(std::string& s, const std::string& x) { s += x; }
inline void append(std::string& s, char x) { s += x; }
inline void append(std::string& s, bool x) { s += x ? "true" : "false"; }
template <class T>
inline void append(std::string& s, const T& x) {
  static_assert(std::is_arithmetic_v<T>, "LAMINA_CHECK message parts: strings or numbers");
  char buf[64];
  if constexpr (std::is_floating_point_v<T>) {
    std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(x));
  } else if constexpr (std::is_signed_v<T>) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(x));
  } else {
    std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(x));
  }
  s += buf;
}
template <class... Args>
std::string concat(Args&&... args) {
  std::string s;
  (append(s, args), ...);
  return s;
}
}  // namespace detail

}  // namespace lamina

#define LAMINA_CHECK(cond, ...)                                                  \
  do {                                                                           \
    if (!(cond)) throw ::lamina::ValueError(::lamina::detail::concat(__VA_ARGS__)); \
  } while (0)

#define LAMINA_CHECK_INDEX(cond, ...)                                            \
  do {                                                                           \
    if (!(cond)) throw ::lamina::IndexError(::lamina::detail::concat(__VA_ARGS__)); \
  } while (0)

#define LAMINA_ASSERT(cond)                                                      \
  do {                                                                           \
    if (!(cond))                                                                 \
      throw std::logic_error(::lamina::detail::concat(                           \
          "lamina internal error: ", #cond, " at ", __FILE__, ":", __LINE__));   \
  } while (0)

namespace lamina {

/// IEEE binary16 -> binary32 (exact), portable.
static inline float half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

/// True when a binary16 value is NaN or +-Inf.
static inline bool half_is_nonfinite(uint16_t h) { return ((h >> 10) & 0x1fu) == 0x1fu; }

}  // namespace lamina
