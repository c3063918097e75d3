// Session 51: what one clock read costs on this machine (ns per call, the fastest of 5 runs of 200000
// reads): omp_get_wtime (the cpu profile's busy reads before session 51), std::chrono::steady_clock,
// and the time-stamp counter (__rdtsc, after). Build: g++ -O2 -fopenmp clock_probe.cpp -o clock_probe
#include <omp.h>
#include <x86intrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>

template <typename F>
double ns_per_read(F read) {
  constexpr int kReads = 200000;
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    volatile double sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kReads; ++i) sink = sink + static_cast<double>(read());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s * 1e9 / kReads);
  }
  return best;
}

int main() {
  std::printf("omp_get_wtime  %8.1f ns\n", ns_per_read([] { return omp_get_wtime(); }));
  std::printf("steady_clock   %8.1f ns\n",
              ns_per_read([] { return std::chrono::steady_clock::now().time_since_epoch().count(); }));
  std::printf("rdtsc          %8.1f ns\n", ns_per_read([] { return __rdtsc(); }));
}
