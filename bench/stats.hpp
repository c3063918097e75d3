// bench/stats.hpp — the median the bench drivers report: of an even count, the mean of the two middle
// samples (taking the upper one biased every even-sized row up by half the gap between them).
#pragma once

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace moerun_bench {

template <typename T>
double median(std::vector<T> v) {
  if (v.empty()) throw std::invalid_argument("median of no samples");
  const size_t h = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(h), v.end());
  const double upper = static_cast<double>(v[h]);
  if (v.size() % 2) return upper;
  const double lower = static_cast<double>(*std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(h)));
  return (lower + upper) / 2;
}

}  // namespace moerun_bench
