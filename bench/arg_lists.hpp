// bench/arg_lists.hpp — the comma-separated lists the bench drivers take (--m 1,16,256, --only a,b),
// parsed strictly: a typo or an out-of-range count is refused by name rather than read as 0 (atoi)
// or as an empty selection that times nothing. Shared by cpu_moe_bench, cpu_kernel_bench and
// cuda_moe_bench.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace moerun_bench {

// The names of a comma-separated list, spaces around each dropped and empty items skipped.
inline std::vector<std::string> name_list(const std::string& list) {
  std::vector<std::string> v;
  for (size_t p = 0; p <= list.size();) {
    const size_t e = std::min(list.find(',', p), list.size());
    std::string name = list.substr(p, e - p);
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    p = e + 1;
    if (!name.empty()) v.push_back(name);
  }
  return v;
}

// Every item a whole decimal integer in [lo, hi]; otherwise nullopt, after one line on stderr naming
// `what` (the option) and the item.
inline std::optional<std::vector<int64_t>> int_list(const char* what, const std::string& list, int64_t lo, int64_t hi) {
  std::vector<int64_t> v;
  for (const std::string& t : name_list(list)) {
    char* end = nullptr;
    const long long x = std::strtoll(t.c_str(), &end, 10);
    if (*end != '\0' || x < lo || x > hi) {
      std::fprintf(stderr, "%s: '%s' is not an integer in %lld..%lld\n", what, t.c_str(), static_cast<long long>(lo),
                   static_cast<long long>(hi));
      return std::nullopt;
    }
    v.push_back(x);
  }
  if (v.empty()) {
    std::fprintf(stderr, "%s: an empty list\n", what);
    return std::nullopt;
  }
  return v;
}

}  // namespace moerun_bench
