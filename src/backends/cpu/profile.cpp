// cpu/profile.cpp — see profile.hpp.
#include "backends/cpu/profile.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <span>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "core/knobs.hpp"

namespace moerun::cpu {

bool ForwardProfile::requested() {
  return knob_on("MOERUN_CPU_PROFILE", false);
}

double ForwardProfile::now() { return omp_get_wtime(); }

uint64_t ForwardProfile::ticks() {
#if defined(__x86_64__)
  return __rdtsc();  // (profile.hpp: taken to be invariant and in step across cores)
#else
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
#endif
}

bool ForwardProfile::begin(int threads, int64_t m) {
  if (seen_++ == 0) return false;
  if (busy_.size() < static_cast<size_t>(threads)) {
    busy_.resize(static_cast<size_t>(threads), Row{});
    seen_busy_.resize(busy_.size(), Row{});
  }
  threads_ = std::max(threads_, threads);
  ++forwards_;
  tokens_ += m;
  last_ = now();
  last_ticks_ = ticks();
  return true;
}

void ForwardProfile::mark(Phase p) {
  const double t = now();
  const uint64_t k = ticks();
  wall_[static_cast<size_t>(p)] += t - last_;
  marked_seconds_ += t - last_;
  marked_ticks_ += span(last_ticks_, k);
  last_ = t;
  last_ticks_ = k;
  if (p != Phase::kGemm1 && p != Phase::kGemm2) return;
  // The stage's busy phases: kernel calls, epilogue (and the stores after gemm2).
  const Phase parts1[] = {Phase::kGemm1, Phase::kEpilogue1}, parts2[] = {Phase::kGemm2, Phase::kEpilogue2, Phase::kStore};
  const auto parts = p == Phase::kGemm1 ? std::span<const Phase>(parts1) : std::span<const Phase>(parts2);
  double slowest = 0.0;
  for (size_t th = 0; th < busy_.size(); ++th) {
    double b = 0.0;
    for (Phase q : parts) {
      const auto i = static_cast<size_t>(q);
      b += busy_[th][i] - seen_busy_[th][i];
      seen_busy_[th][i] = busy_[th][i];
    }
    slowest = std::max(slowest, b);
  }
  slowest_[static_cast<size_t>(p)] += slowest;
}

std::string ForwardProfile::report(const std::string& what) const {
  if (forwards_ == 0) return {};
  const double per = 1e3 / static_cast<double>(forwards_);  // ms per forward
  const double sec_per_tick = marked_ticks_ > 0 ? marked_seconds_ / marked_ticks_ : 0.0;
  auto busy = [&](Phase p) {
    double s = 0.0;
    for (const auto& b : busy_) s += b[static_cast<size_t>(p)];
    return s * sec_per_tick * per / std::max(1, threads_);
  };
  auto wall = [&](Phase p) { return wall_[static_cast<size_t>(p)] * per; };
  double total = 0.0;
  for (double w : wall_) total += w * per;
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "moerun cpu profile (%s; %d threads, %lld forwards after the first, %.0f tokens each): ms per forward\n"
                "  wall: convert %.2f  route %.2f  plan %.2f  gather %.2f  gemm1 %.2f  post1 %.2f  gemm2 %.2f  "
                "[total %.2f]\n"
                "  busy (mean over threads): gemm1 kernels %.2f + epilogue %.2f | gemm2 kernels %.2f + epilogue "
                "%.2f + store %.2f\n"
                "  slowest thread's busy: gemm1 %.2f | gemm2 %.2f\n",
                what.c_str(), threads_, static_cast<long long>(forwards_),
                static_cast<double>(tokens_) / static_cast<double>(forwards_), wall(Phase::kConvert),
                wall(Phase::kRoute), wall(Phase::kPlan), wall(Phase::kGather), wall(Phase::kGemm1),
                wall(Phase::kPost1), wall(Phase::kGemm2), total, busy(Phase::kGemm1), busy(Phase::kEpilogue1),
                busy(Phase::kGemm2), busy(Phase::kEpilogue2), busy(Phase::kStore),
                slowest_[static_cast<size_t>(Phase::kGemm1)] * sec_per_tick * per,
                slowest_[static_cast<size_t>(Phase::kGemm2)] * sec_per_tick * per);
  return buf;
}

}  // namespace moerun::cpu
