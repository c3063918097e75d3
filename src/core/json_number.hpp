// json_number.hpp — a JSON value into a C++ number, or nothing, never a wrapped or undefined one.
//
// nlohmann::json's get<int>() static_casts whatever number it holds: 1e63 into an int, or 1e300
// into a float, is undefined behaviour, 4294967386 into an int silently becomes 90, and 8.5 becomes
// 8. Every reader of user-written JSON (specs, platforms, model configs) converts through here, so a
// value out of the target's range, a fractional count, or a non-number is refused and the caller
// names the field in its error.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace moerun {

// Integers: a JSON integer in T's range, or a float with an integral value in range ("2048.0" is an
// integer written by a float-minded tool). Floating point: any JSON number whose magnitude fits T
// (so a float field refuses 1e300 instead of becoming infinity). Anything else: nullopt.
template <typename T>
  requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
std::optional<T> json_number(const nlohmann::json& v) {
  using Lim = std::numeric_limits<T>;
  if constexpr (std::is_integral_v<T>) {
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(Lim::max())) return std::nullopt;
      return static_cast<T>(u);
    }
    if (v.is_number_integer()) {
      const auto i = v.get<std::int64_t>();
      if constexpr (std::is_unsigned_v<T>) {
        if (i < 0 || static_cast<std::uint64_t>(i) > static_cast<std::uint64_t>(Lim::max())) return std::nullopt;
      } else {
        if (i < static_cast<std::int64_t>(Lim::min()) || i > static_cast<std::int64_t>(Lim::max())) return std::nullopt;
      }
      return static_cast<T>(i);
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      // Compare against 2^digits bounds as doubles: Lim::max() of a 64-bit type is not a double.
      const double hi = std::ldexp(1.0, Lim::digits);  // exclusive
      const double lo = std::is_signed_v<T> ? -hi : 0.0;
      if (!(std::isfinite(d) && std::floor(d) == d && d >= lo && d < hi)) return std::nullopt;
      return static_cast<T>(d);
    }
    return std::nullopt;
  } else {
    if (!v.is_number()) return std::nullopt;
    const double d = v.get<double>();
    if (!(std::fabs(d) <= static_cast<double>(Lim::max()))) return std::nullopt;
    return static_cast<T>(d);
  }
}

}  // namespace moerun
