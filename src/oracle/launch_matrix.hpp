// oracle/launch_matrix.hpp — the launch matrix behind `moerun check`: every preset layer
// (launch_matrix_layers) x platform
// description x parallel config (its last rank, and rank 0 when sharded) x policy either plans or is
// refused with a reason, and every plan that can run on this machine runs its scaled-down layer
// through the reference comparison three times: `tokens` tokens with router logits given, one token
// whose logits the backend computes from the router weight (a decode step's path), and M = 0.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "moerun/oracle.hpp"
#include "moerun/platform.hpp"
#include "moerun/registry.hpp"

namespace moerun {

struct LaunchMatrixOptions {
  std::vector<std::string> presets;     // empty = all
  std::vector<std::string> platforms;   // empty = every known description + "detected"
  std::vector<int> parallel_sizes = {1, 2, 8};  // tp and ep each range over these
  bool run_here = true;                  // run scaled-down forwards for plans runnable on this machine
  int64_t tokens = 5;
  uint64_t seed = 7;
  std::function<void(const std::string&)> progress;  // occasional one-line progress
};

struct LaunchMatrixResult {
  int planned = 0, refused = 0, crashed = 0, mismatched = 0;
  int ran = 0;             // distinct scaled-down layers run (each at the three sizes above)
  int matched = 0;         // of those, the ones that matched the reference at every size
  int repeatable = 0;      // of those that matched, the ones whose repeated calls gave the same bits (verify.hpp)
  int not_runnable_here = 0;
  std::vector<std::string> failures;  // one line per crash or mismatch
  std::string summary() const;        // "planned N, refused R, crashed C, mismatched M"
};

LaunchMatrixResult run_launch_matrix(const Registry& registry, const LaunchMatrixOptions& options);

// The layers the matrix runs for these presets: each as published and, where it has shared experts
// beside quantized routed ones, also with the shared experts left in bf16, as exporters' exclusion lists
// leave them (docs/formats.md): a layer some backends run and others must refuse. Named
// "<preset>" and "<preset> (bf16 shared experts)".
std::vector<std::pair<std::string, MoeSpec>> launch_matrix_layers(const std::vector<std::string>& presets);

// The spec scaled down for a run on this machine, keeping its structure and parallel config valid.
MoeSpec scaled_for_check(const MoeSpec& spec);

}  // namespace moerun
