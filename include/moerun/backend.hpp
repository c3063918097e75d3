// moerun/backend.hpp — what a backend is: declared capabilities, a support check derived from them,
// and a factory for Runners that execute the layer.
//
// Adding a backend: implement Backend in src/backends/<name>/ (or in a plugin, see plugin.h), fill in
// Capabilities, and register it (registry.hpp). The oracle never asks a backend anything but these.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "moerun/platform.hpp"
#include "moerun/spec.hpp"
#include "moerun/tensor.hpp"
#include "moerun/weights.hpp"

namespace moerun {

struct FormatSupport {
  WeightFormat weights;
  ActQuant act_quant = ActQuant::kNone;
};

// A kernel path a backend may take, chosen per call by tokens per expert (shown by explain and run).
// Among the variants whose token range and CPU level fit, the one needing the highest CPU level wins
// (ties: the first listed).
struct KernelVariant {
  std::string name;                    // "amx-bf16-tiles", "avx512-stream", "sm90-wgmma-grouped"
  double max_tokens_per_expert = 0.0;  // serves calls with M*k/E <= this; 0 = no upper limit
  std::string why;                     // one line: what it is good at
  CpuIsa min_cpu_isa = CpuIsa::kScalar;  // cpu backends: the level this variant needs
  double min_tokens_per_expert = 0.0;  // serves calls with M*k/E > this (0: from zero up)
  std::vector<DType> act_dtypes;       // only for these activation dtypes (empty: any), e.g. a bf16-only path
};

// Everything the oracle may know about a backend, as data. supports() derives from this alone (plus
// Backend::extra_checks for the rare rule a record cannot say).
struct Capabilities {
  DeviceKind device = DeviceKind::kCpu;
  CpuIsa min_cpu_isa = CpuIsa::kScalar;  // cpu backends
  int min_sm = 0;                        // cuda backends: lowest compute capability (90 = sm_90)
  int max_sm = 0;                        // highest compute capability built for; 0 = no upper bound
  bool needs_arch_specific = false;      // needs sm_90a-style features (wgmma)

  std::vector<FormatSupport> formats;
  std::vector<DType> act_dtypes;                 // hidden-state dtypes
  std::vector<ActivationKind> activations;
  bool interleaved_gate_up = false;
  std::vector<Scoring> scorings;
  bool softmax_after_topk = false;
  bool correction_bias = false;
  bool grouped_topk = false;
  int max_top_k = 0;          // 0 = no limit
  int max_experts = 0;        // 0 = no limit
  int hidden_multiple = 1;    // H must be a multiple of this
  int intermediate_multiple = 1;  // this rank's I must be a multiple of this
  bool expert_bias = false;
  bool router_bias = false;
  bool shared_experts = false;
  bool shared_gate = false;
  // Formats the shared experts may take where they differ from the routed experts' (spec.shared.weight_format);
  // empty: only the routed experts' format.
  std::vector<WeightFormat> shared_formats;
  bool apply_router_weight_on_input = false;
  bool tensor_parallel = false;   // accepts tp > 1 (runs its shard; caller reduces)
  bool expert_parallel = false;   // accepts ep > 1 (runs its local experts; others masked)
  bool lora = false;
  int max_lora_rank = 0;          // 0 = no limit
  bool cuda_graph_safe = false;   // forward never synchronises with the host nor allocates
  bool host_sync = false;         // forward synchronises with the host (stated, so the oracle knows)
  bool owns_dispatch = false;     // does its own token permutation (cannot take a Dispatch from us)
  std::vector<KernelVariant> variants;
};

// Shorthands for capability records of backends that cover everything: every weight format (and the
// fp8 formats with fp8-token-group activations, mxfp4 and nvfp4 with int8-token-group ones), every
// activation kind. A backend that lists a pair must compute with the quantized activations: the
// conformance tolerances of f32 activations are tighter than what skipping the quantization costs
// (verify.cpp says why bf16 and f16 ones cannot be).
std::vector<FormatSupport> every_format();
std::vector<ActivationKind> every_activation();

// Outcome of a support check: ok, or every reason it fails (one line each).
struct Support {
  std::vector<std::string> reasons;
  bool ok() const noexcept { return reasons.empty(); }
};

// Options a caller passes through to a backend's runner.
struct RunnerOptions {
  int threads = 0;      // cpu: 0 = all available
  int device_index = 0; // cuda
  uint64_t seed = 0;    // for backends that need randomness (none today)
};

// One call of the layer. hidden [M, H] and output [M, H] in spec.act_dtype; router_logits [M, E] F32.
// When topk_ids/topk_weights ([M, k], I32/F32) are given the routing stage is skipped and they are
// used as they are (ids must be in [0, E); MoeLayer checks host ids, device ids are the caller's
// promise). M = 0 is valid and does nothing. All tensors of a call are host tensors, or all device
// tensors (CUDA backends only; `stream` orders them). NaN router logits count as -inf when experts are
// chosen and get weight 0; a row whose logits are all NaN routes to experts 0..k-1 with weight 1/k
// each, times the routed scaling factor (a finite output: check the logits upstream if NaN can reach
// them).
struct ForwardArgs {
  TensorView hidden;
  TensorView router_logits;
  TensorView topk_ids;
  TensorView topk_weights;
  TensorView output;
  const LoraBatch* lora = nullptr;
  void* stream = nullptr;  // cudaStream_t for cuda backends
};

class Runner {
 public:
  virtual ~Runner() = default;
  // Computes output = this rank's share of the MoE layer. Inputs were validated by the caller
  // (MoeLayer::forward); a runner may still throw Error for states it detects itself.
  // One forward at a time per runner. The cpu runner serializes calls made from several threads (its
  // workspaces are borrowed from a pool the process shares, so different runners may run at once).
  // A CUDA runner's calls must not overlap, on the host (its workspace growth is not locked) or on
  // the GPU: device-tensor calls on one stream, or on streams ordered with events; a host-tensor call
  // runs on the runner's own stream and returns synchronized, so a device-tensor call still in flight
  // must be finished (synchronized) before one. Different CUDA runners may run on different threads,
  // but a forward that grows its workspaces allocates and synchronizes the device, which a capture in
  // cudaStreamCaptureModeGlobal on another thread forbids (the capture is invalidated): capture in
  // cudaStreamCaptureModeThreadLocal there, or warm every runner up before any capture starts. A
  // CUDA runner's forward starts by clearing the calling thread's last CUDA error (cudaGetLastError):
  // check your own kernel launches before calling it.
  // The built-in backends are bitwise reproducible: with the same MOERUN_* settings, the same inputs
  // give the same output bits on every call of a runner, whatever calls of other sizes ran between
  // (cpu also across thread counts). cublas as far as cuBLAS promises it: one GPU and toolkit, and no
  // other stream running cuBLAS work at the same time (cuBLAS may then pick other algorithms).
  // Different backends, CPU levels and GPUs agree within tolerance_for (verify.hpp), not bit for bit.
  // `moerun verify` checks it on its cases for any backend (VerifyResult::repeatable: each case twice
  // on one runner, a call of another size between).
  virtual void forward(const ForwardArgs& args) = 0;
  // The kernel variant a call with m tokens takes ("" when the backend has one path).
  virtual std::string variant_for(int64_t m) const { (void)m; return ""; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view description() const = 0;
  virtual const Capabilities& capabilities() const = 0;
  // Rules a Capabilities record cannot express; appends reasons. Default: none.
  virtual void extra_checks(const MoeSpec& spec, const Platform& platform, Support& out) const {
    (void)spec; (void)platform; (void)out;
  }
  // The kernel variant a call with m tokens would take on this platform. Default: the rule of
  // Capabilities::variants (variant_for_tokens); a backend whose rule depends on more (the weight
  // format, say) answers itself, with the same code its runner uses.
  virtual std::string variant(const MoeSpec& spec, const Platform& platform, int64_t m) const;
  // Prepares the weights (re-layout, packing) and returns a runner. Called only for a spec that
  // supports() accepted on this platform; must not fail for such a spec except for device errors.
  // The runner may keep references into `weights`: the caller keeps them alive as long as the runner.
  virtual std::unique_ptr<Runner> create_runner(const MoeSpec& spec, const MoeWeights& weights,
                                                const Platform& platform,
                                                const RunnerOptions& options) const = 0;
};

// The single capability question: derived from backend.capabilities() and backend.extra_checks().
Support supports(const Backend& backend, const MoeSpec& spec, const Platform& platform);
// The device part of supports(): why the backend cannot run on the platform at all, whatever the spec
// (empty: it can).
std::vector<std::string> device_reasons(const Backend& backend, const Platform& platform);

// The variant a backend would take for m tokens of this spec on this platform (Capabilities::variants).
std::string variant_for_tokens(const Capabilities& caps, const MoeSpec& spec, const Platform& platform, int64_t m);

}  // namespace moerun
