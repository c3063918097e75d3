// cpu/profile.hpp — MOERUN_CPU_PROFILE=1: where a cpu forward's time goes.
//
// A runner created with the variable set times its forwards after the first (which grows the
// workspaces and would be counted as planning) and, when it is destroyed, prints one report to stderr: the wall time of each stage of the forward (runner.cpp NOTES), and inside the two
// GEMM stages the threads' busy time split into kernel calls and epilogues (mean over threads), and the
// slowest thread's busy time (wall minus slowest: barriers and wake-ups; slowest minus mean: imbalance). It is a
// measurement aid for benchmarks (cpu_moe_bench rows run with it set), off by default, and costs two
// clock reads per work item when on.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace moerun::cpu {

enum class Phase : int {
  kConvert = 0,  // hidden -> f32 (wall)
  kRoute,        // router logits and top-k (wall)
  kPlan,         // dispatch, jobs, work items, workspaces (wall)
  kGather,       // token rows (and bf16 copies), gate_up LoRA (wall)
  kGemm1,        // gate_up stage (wall); busy: kernel calls
  kEpilogue1,    // busy: scales, bias, LoRA, activation
  kPost1,        // intermediate padding, fp8 act quant, bf16 copies, down LoRA (wall)
  kGemm2,        // down stage (wall); busy: kernel calls
  kEpilogue2,    // busy: scales, bias, router-weighted accumulation
  kStore,        // busy: output columns in the act dtype
  kCount
};

class ForwardProfile {
 public:
  // True when MOERUN_CPU_PROFILE is "1".
  static bool requested();

  // Before a forward of m tokens on `threads` threads. Returns false for the runner's first forward,
  // which is not timed (the caller then passes no profile to it).
  bool begin(int threads, int64_t m);
  // Mean tokens of the timed forwards (0 before any).
  int64_t mean_tokens() const noexcept { return forwards_ ? tokens_ / forwards_ : 0; }
  // Wall time since the previous mark (or begin) goes to phase p. Called by one thread, after the
  // phase's barrier.
  void mark(Phase p);
  // Busy seconds of one thread in phase p.
  void add(int thread, Phase p, double seconds) { busy_[static_cast<size_t>(thread)][static_cast<size_t>(p)] += seconds; }
  static double now();

  // The report (empty when no forward ran); `what` names the layer.
  std::string report(const std::string& what) const;

 private:
  static constexpr size_t kN = static_cast<size_t>(Phase::kCount);
  std::vector<std::array<double, kN>> busy_;
  std::vector<std::array<double, kN>> seen_busy_;  // busy_ at the previous mark
  std::array<double, kN> wall_{};
  std::array<double, kN> slowest_{};  // per GEMM stage: the sum over forwards of the slowest thread's busy
  double last_ = 0.0;
  int64_t seen_ = 0, forwards_ = 0, tokens_ = 0;
  int threads_ = 0;
};

}  // namespace moerun::cpu
