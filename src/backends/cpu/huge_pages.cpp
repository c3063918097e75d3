// cpu/huge_pages.cpp — huge_pages.hpp.
#include "backends/cpu/huge_pages.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "core/knobs.hpp"

namespace moerun::cpu {

bool huge_pages_enabled() noexcept {
  try {
    return knob_on("MOERUN_CPU_HUGEPAGES", true);
  } catch (...) {  // (only a missing table entry, which the knob tests rule out)
    return true;
  }
}

void advise_huge_pages(void* p, size_t bytes) noexcept {
#if defined(MADV_HUGEPAGE)
  if (!p || bytes < kHugePageBytes || !huge_pages_enabled()) return;
  // Only whole huge pages inside the region: madvise wants a page-aligned start.
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (a + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const uintptr_t hi = (a + bytes) / kHugePageBytes * kHugePageBytes;
  if (hi > lo) (void)::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

void* alloc_large(size_t bytes) noexcept {
  const size_t align = bytes >= kHugePageBytes ? kHugePageBytes : 64;
  const size_t rounded = (bytes + align - 1) / align * align;  // aligned_alloc wants a multiple
  void* p = std::aligned_alloc(align, rounded);
  advise_huge_pages(p, rounded);
  return p;
}

int64_t anon_huge_page_bytes() noexcept {
#if defined(__linux__)
  std::FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (!f) return -1;
  char line[256];
  int64_t kb = -1;
  while (std::fgets(line, sizeof line, f)) {
    long long v = 0;
    if (std::sscanf(line, "AnonHugePages: %lld kB", &v) == 1) {
      kb = v;
      break;
    }
  }
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
#else
  return -1;
#endif
}

}  // namespace moerun::cpu
