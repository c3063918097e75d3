// moerun/verify.hpp — the conformance harness: run a backend and the reference on the same random
// case and compare. Used by the test suite, `moerun verify` and `moerun check`.
//
// Tolerances are stated once, here, per activation dtype (tolerance_for), for two measures over the
// whole output: the normalized max error max|out - ref| / max|ref| and the relative L2 error
// ||out - ref|| / ||ref||. Any NaN/Inf where the reference is finite fails regardless. Every test of
// every backend (CPU and GPU suites, `moerun verify`, `moerun run --verify`) uses these.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "moerun/backend.hpp"
#include "moerun/registry.hpp"

namespace moerun {

enum class RoutingPattern {
  kRandom,        // random logits
  kOneHot,        // every token prefers the same top_k experts
  kSparse,        // a quarter of the experts (at least top_k) get logits, the rest -30: those stay empty,
                  // but for a softmax router with a correction bias, where a bias can outweigh a kept
                  // expert's small score and send a token to a masked one (as such a router would)
  kNanRows,       // some rows of logits are all NaN, some partly NaN
  kGivenTopk,     // top-k ids/weights given directly (routing skipped)
  kFromWeights,   // neither: the backend computes the logits with the router weight (and bias)
};

struct VerifyCase {
  MoeSpec spec;
  int64_t tokens = 1;
  uint64_t seed = 0;
  RoutingPattern routing = RoutingPattern::kRandom;
  bool nan_prefill = true;  // output buffer starts as NaN: the backend must write every element
  bool with_lora = false;   // only when spec.lora.max_adapters > 0
  std::string label() const;
};

struct VerifyResult {
  bool passed = false;
  bool skipped = false;     // the backend does not support the case's spec on this platform
  double error = 0.0;       // normalized max error (see above)
  double rel_l2 = 0.0;      // relative L2 error
  double tolerance = 0.0;   // the normalized max error allowed
  // The case ran (not skipped, no error thrown) and its second call on the same runner, after a call
  // of another size, gave the first call's output bit for bit. A report, not part of `passed`: an
  // out-of-tree backend may sum in an order that changes from call to call (atomics) and still pass.
  // The built-in backends are held to it by their tests. Set by verify_case only (verify_sharded
  // leaves it false).
  bool repeatable = false;
  std::string message;      // failure or skip reason, one line
};

struct Tolerance {
  double max_normalized = 0.0;
  double rel_l2 = 0.0;
};

// The tolerances for a spec: by activation dtype, looser with dynamic activation quantization.
Tolerance tolerance_for(const MoeSpec& spec);

// Compares an output with the reference output (host tensors, F32/F16/BF16, same number of elements).
// Where the reference is NaN the output must be NaN, where it is an infinity the same infinity; the
// finite elements are held to the tolerances. Throws Error{kInvalidArgument} for device or null
// tensors and for tolerances that are negative or NaN.
VerifyResult compare_outputs(const TensorView& out, const TensorView& ref, const Tolerance& tolerance);

// A random valid spec from a seed: random sizes (odd ones included, within format constraints),
// activation, routing (grouped, biased, after-top-k), format, act quant, biases, shared experts, LoRA.
// `formats` restricts the weight format when non-empty.
MoeSpec random_spec(uint64_t seed, const std::vector<WeightFormat>& formats = {});

// The standard case list: random specs from `seed`, M in {1, 0, 3, 33, ...} (the first case computes),
// every routing pattern.
std::vector<VerifyCase> standard_cases(uint64_t seed, int count);
// The same, each case's spec drawn until `accept` takes it (up to 1000 draws; then the last one is
// kept, and verify_case skips it): for a backend that supports a narrow part of the specs
// (`moerun verify` passes supports(backend, spec, platform).ok()).
std::vector<VerifyCase> standard_cases(uint64_t seed, int count, const std::function<bool(const MoeSpec&)>& accept);

// Runs one case: random weights and inputs from the case's seed, the backend and the reference. A
// spec the backend does not support (on `platform`) gives skipped = true with the reasons. The
// backend's runner runs the case, then a call of another size, then the case again: both of the
// case's outputs must match the reference, and no call may write into its inputs; `repeatable` says
// whether the two were bitwise equal.
VerifyResult verify_case(const Backend& backend, const Platform& platform, const VerifyCase& c,
                         const RunnerOptions& options = {});

// Runs ranks 0..tp*ep-1 of a sharded spec with `backend` and sums their outputs; compares with the
// unsharded reference (the sharding contract: partial outputs add up to the full layer).
VerifyResult verify_sharded(const Backend& backend, const Platform& platform, const VerifyCase& c,
                            const RunnerOptions& options = {});

}  // namespace moerun
