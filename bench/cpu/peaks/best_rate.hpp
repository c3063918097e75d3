// bench/cpu/peaks/best_rate.hpp — the compute-peak probes' common frame: one register-resident loop per
// thread, all threads at once, timed three times, the best rate kept.
#pragma once

#include <omp.h>

#include <algorithm>
#include <chrono>

namespace moerun_bench {

// `loop()` runs one thread's share and returns a value that depends on all of its results (summed and
// tested, so the compiler cannot drop the work); `units` is what one call does (FLOPs, operations).
// Returns threads * units / the fastest of three wall times / 1e9.
template <typename Loop>
double best_rate(int threads, double units, Loop&& loop) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    double sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += static_cast<double>(loop());
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (sink == 12345.0) best += 1e-9;
    best = std::max(best, threads * units / dt / 1e9);
  }
  return best;
}

}  // namespace moerun_bench
