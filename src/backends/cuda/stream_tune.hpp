// cuda/stream_tune.hpp — which 16-row stream tiling a decode call takes, measured when a runner is made.
//
// Up to kStreamMaxTpe tokens per expert the GEMMs stream each activated expert's weights once in 16-row
// tiles, 16x32 (2 warps, 8 stages) or 16x64 (4 warps, 6 stages). Neither wins everywhere, and no fixed
// rule on tokens per expert, block count or K separates them (H200, graph replay, side by side):
//   16x64 faster: gpt-oss-120b M = 1 67.8 vs 72.8 us, M = 16 593 vs 607 us; qwen3-30b-a3b M = 16 201
//   vs 209 us; deepseek-v3 M = 16 2.070 vs 2.090 ms;
//   16x32 faster: deepseek-v3 M = 1 209 vs 229 us; mixtral-8x7b M = 16 689 vs 727 us.
// Both take the same k steps in the same order for every output element, so they give bitwise the same
// output and the choice can be made by timing: the runner times both on its own weights at a few token
// counts (tune_points), keeps the faster per bucket, and every later call of that size takes it.
// Only where it pays: a one-token call must stream at least kTuneMinBytes (small layers, tests).
// MOERUN_CUDA_STREAM_TUNE=0 keeps the 16x32 tiles everywhere, =1 tunes every runner (tests).
// The timing depends on the layer's shape and the kind of device, not on the weights' values, so a
// process times each shape once (StreamTuneCache): a model's dozens of identical MoE layers, and the
// same layer on several identical GPUs, pay for one. One timing costs 50-780 ms on the H200
// (qwen3-30b-a3b 51 ms, deepseek-v3 775 ms). The first runner of a shape keeps workspaces sized for
// the largest timed call (deepseek-v3: 256 tokens).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cuda/kernels/launch.hpp"
#include "core/knobs.hpp"

namespace moerun::cuda_detail {

inline constexpr int64_t kTuneMinBytes = int64_t{16} << 20;

enum class StreamTune { kOff, kAuto, kAlways };
inline StreamTune stream_tune_mode() {
  const std::optional<std::string_view> v = knob_choice("MOERUN_CUDA_STREAM_TUNE");
  if (!v) return StreamTune::kAuto;
  return *v == "1" ? StreamTune::kAlways : StreamTune::kOff;
}

// Whether a runner whose one-token call streams `bytes_at_m1` weight bytes times the two tilings.
inline bool stream_tune_wanted(StreamTune mode, int64_t bytes_at_m1) {
  return mode == StreamTune::kAlways || (mode == StreamTune::kAuto && bytes_at_m1 >= kTuneMinBytes);
}

// The token counts timed: 1, 2, 4, ... up to the largest m that still streams (m * top_k / experts <=
// max_tpe), which is timed too when it is not a power of two. Each covers the counts above the previous.
inline std::vector<int64_t> tune_points(int experts, int top_k, double max_tpe) {
  std::vector<int64_t> out;
  if (experts <= 0 || top_k <= 0) return out;
  const auto m_max = static_cast<int64_t>(max_tpe * experts / top_k);
  for (int64_t m = 1; m <= m_max; m *= 2) out.push_back(m);
  if (m_max >= 1 && out.back() != m_max) out.push_back(m_max);
  return out;
}

struct StreamPick {
  int64_t m_hi = 0;  // calls of up to m_hi tokens (and above the previous pick's)
  cuda_kernels::GemmConfig cfg = cuda_kernels::GemmConfig::kStreamM16N32;
  float us_n32 = 0.0f, us_m16 = 0.0f;  // the medians timed
};

// The tiling a call of m tokens takes: the first pick whose bucket holds m; past the last, the last;
// with no picks, `fallback`.
inline cuda_kernels::GemmConfig stream_pick_for(const std::vector<StreamPick>& picks, int64_t m,
                                                cuda_kernels::GemmConfig fallback) {
  for (const StreamPick& p : picks)
    if (m <= p.m_hi) return p.cfg;
  return picks.empty() ? fallback : picks.back().cfg;
}

// Picks per key (the kind of device, the layer's shape, the knobs), timed the first time a key is asked
// for. Each key has its own lock, held while it is timed: runners of one shape made at once on several
// GPUs (tensor parallel) wait for the first one's timing instead of each timing again, and other keys
// are not held up.
class StreamTuneCache {
 public:
  template <class Tune>
  std::vector<StreamPick> get(const std::string& key, Tune&& tune) {
    Entry* e;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::unique_ptr<Entry>& slot = entries_[key];
      if (!slot) slot = std::make_unique<Entry>();
      e = slot.get();  // entries are never erased: the pointer stays valid
    }
    std::lock_guard<std::mutex> lock(e->mu);
    if (!e->done) {
      e->picks = tune();  // if it throws, the key stays untimed and the next runner times it
      e->done = true;
    }
    return e->picks;
  }

  // Keys timed so far (tests).
  size_t timed() {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& kv : entries_) {
      std::lock_guard<std::mutex> l(kv.second->mu);
      n += kv.second->done ? 1 : 0;
    }
    return n;
  }

 private:
  struct Entry {
    std::mutex mu;
    bool done = false;
    std::vector<StreamPick> picks;
  };
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Entry>> entries_;
};

// The process's cache (runners of every backend instance share it).
inline StreamTuneCache& stream_tune_cache() {
  static StreamTuneCache cache;
  return cache;
}

}  // namespace moerun::cuda_detail
