// bench/llc.hpp — the last-level cache the bench's threads can use, from sysfs: the sum of the
// distinct level-3 cache instances over the CPUs this process may run on. (glibc's
// sysconf(_SC_LEVEL3_CACHE_SIZE) reads a package-wide CPUID figure on AMD: 320 MiB on a Zen 4 guest
// whose sysfs, like lscpu, says one 32 MiB L3.)
#pragma once

#include <sched.h>

#include <cstddef>
#include <fstream>
#include <set>
#include <string>

namespace moerun_bench {

// Bytes; 0 where sysfs does not say.
inline size_t llc_bytes() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 0;
  std::set<std::string> seen;  // instances, by the CPUs sharing them
  size_t total = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    for (int index = 0; index < 8; ++index) {
      const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index" + std::to_string(index) + "/";
      int level = 0;
      if (!(std::ifstream(dir + "level") >> level)) break;
      if (level != 3) continue;
      std::string shared, size;
      std::ifstream(dir + "shared_cpu_list") >> shared;
      std::ifstream(dir + "size") >> size;
      if (shared.empty() || size.empty() || !seen.insert(shared).second) continue;
      size_t n = 0, i = 0;
      while (i < size.size() && size[i] >= '0' && size[i] <= '9') n = n * 10 + static_cast<size_t>(size[i++] - '0');
      const char unit = i < size.size() ? size[i] : 'B';
      total += unit == 'K' ? n << 10 : unit == 'M' ? n << 20 : unit == 'G' ? n << 30 : n;
    }
  }
  return total;
}

}  // namespace moerun_bench
