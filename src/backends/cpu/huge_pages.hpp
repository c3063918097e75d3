// cpu/huge_pages.hpp — the packed weight stacks on 2 MiB pages, where the OS gives them.
//
// Every forward streams the packed weight stacks (hundreds of MB to GB). On 4 KiB pages each 4 KiB of
// that stream needs a new TLB entry: a page walk every 64 cache lines, which the loads wait on (the
// AMX tile loads in program order). Linux backs a region with transparent huge pages when it is marked
// MADV_HUGEPAGE (and THP is "always" or "madvise" in /sys/kernel/mm/transparent_hugepage/enabled), is
// 2 MiB aligned, and is first touched after the advice. Where the kernel has none to give, or on
// other systems, the memory is ordinary pages: only addresses change, never results.
//
// Measured on the H200 host's Xeon (THP "madvise"; 2 threads, side by side against
// MOERUN_CPU_HUGEPAGES=0, bench/results/2026-12-01_s14_h200-host-xeon/): the streaming rows (bf16 at
// M = 1 and 16, fp8-block and mxfp4 at M = 1 and 64) 1-5% faster in all 16 pairs; bf16 at M = 256 and
// 1024 within +-3%, either sign (that host's noise). That run had the workspaces advised too; they
// stay on ordinary pages: they are reused every forward, so their TLB entries stay warm.
//
// MOERUN_CPU_HUGEPAGES=0 (measurement) skips the advice; allocations keep their alignment.
#pragma once

#include <cstddef>
#include <cstdint>

namespace moerun::cpu {

inline constexpr size_t kHugePageBytes = size_t(2) << 20;

// Marks [p, p + bytes) for huge pages (no-op below kHugePageBytes, off Linux, or with
// MOERUN_CPU_HUGEPAGES=0). Call before the first touch. Never fails: the advice is a hint.
void advise_huge_pages(void* p, size_t bytes) noexcept;

// `bytes` aligned to 2 MiB (64 bytes below 2 MiB; the size rounded up to that alignment) and advised
// as above, not yet touched; nullptr when out of memory. Free with std::free.
void* alloc_large(size_t bytes) noexcept;

// Whether advise_huge_pages advises (the environment switch, read on each call).
bool huge_pages_enabled() noexcept;

// Bytes of this process's anonymous memory on huge pages (Linux: AnonHugePages of
// /proc/self/smaps_rollup), or -1 where that is not known. For benchmark reports.
int64_t anon_huge_page_bytes() noexcept;

}  // namespace moerun::cpu
