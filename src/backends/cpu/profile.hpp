// cpu/profile.hpp — MOERUN_CPU_PROFILE=1: where a cpu forward's time goes.
//
// A runner created with the variable set times its forwards after the first (which grows the
// workspaces and would be counted as planning) and, when it is destroyed, prints one report to stderr: the wall time of each stage of the forward (runner.cpp NOTES), and inside the two
// GEMM stages the threads' busy time split into kernel calls and epilogues (mean over threads), and the
// slowest thread's busy time (wall minus slowest: barriers and wake-ups; slowest minus mean: imbalance). It is a
// measurement aid for benchmarks (cpu_moe_bench rows run with it set), off by default, and costs three
// tick reads per kernel call (and two per down item, for its stores) when on.
//
// Busy time is read in ticks (ticks(): the time-stamp counter on x86-64, nanoseconds elsewhere) and
// turned into seconds at the report by the wall clock's seconds per tick over the same forwards; each
// thread's row lies on cache lines of its own. The counter is taken to run at one rate on every core
// (an invariant TSC, as on the CPUs this backend targets); a read that goes backwards (cores whose
// counters are not in step) counts as no time rather than as 2^64 ticks. Before (omp_get_wtime, 49 ns
// a read on the GPU host's Xeon against the counter's 21; rows sharing lines), the profile made
// qwen3-30b-a3b bf16 at one token 1.8% slower, alternated in one process; now 0.6% (256 tokens: 0.993x
// before, 1.002x now; session 51).
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
  // Busy time of one thread in phase p: from tick t0 to tick t1, both read on that thread.
  void add(int thread, Phase p, uint64_t t0, uint64_t t1) {
    busy_[static_cast<size_t>(thread)][static_cast<size_t>(p)] += span(t0, t1);
  }
  static double now();       // wall seconds (the stage marks)
  static uint64_t ticks();   // a cheap count at a constant rate (the busy reads)
  static double span(uint64_t t0, uint64_t t1) { return t1 > t0 ? static_cast<double>(t1 - t0) : 0.0; }

  // The report (empty when no forward ran); `what` names the layer.
  std::string report(const std::string& what) const;

 private:
  static constexpr size_t kN = static_cast<size_t>(Phase::kCount);
  // (ticks) each thread's row padded to whole cache lines of its own: the threads add to their rows
  // after every call, and rows sharing a line would bounce it between the cores
  struct alignas(128) Row : std::array<double, kN> {};  // (128: the adjacent-line prefetcher's pair)
  std::vector<Row> busy_;
  std::vector<Row> seen_busy_;  // busy_ at the previous mark
  std::array<double, kN> wall_{};
  std::array<double, kN> slowest_{};  // per GEMM stage: the sum over forwards of the slowest thread's busy (ticks)
  double last_ = 0.0;
  uint64_t last_ticks_ = 0;
  double marked_seconds_ = 0.0, marked_ticks_ = 0.0;  // over every begin -> mark span: seconds per tick
  int64_t seen_ = 0, forwards_ = 0, tokens_ = 0;
  int threads_ = 0;
};

}  // namespace moerun::cpu
