// moerun/weights.hpp — the weights of one MoE layer (this rank's shard), and LoRA adapters.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "moerun/formats.hpp"
#include "moerun/spec.hpp"
#include "moerun/tensor.hpp"

namespace moerun {

// Shapes below use this rank's sizes: El = local_experts(spec), Il = local_intermediate(spec),
// R = spec.w13_rows() / tp. Biases and router tensors are fp32 whatever the checkpoint stored.
struct MoeWeights {
  ExpertMatrix w13;              // [El, R, H]   gate rows then up rows (or interleaved, see Activation)
  ExpertMatrix w2;               // [El, H, Il]
  HostTensor w13_bias;           // F32 [El, R]  when spec.expert_bias
  HostTensor w2_bias;            // F32 [El, H]  when spec.expert_bias (added once, on the tp rank 0)
  HostTensor router_weight;      // F32 [E, H]   optional: used when forward gets no router logits
  HostTensor router_bias;        // F32 [E]      when spec.router_bias
  HostTensor correction_bias;    // F32 [E]      when spec.routing.correction_bias
  // Shared experts: every rank holds its tp slice; only ranks with rank % ep == 0 add it, since rank
  // outputs are summed and each EP rank sees every token.
  ExpertMatrix shared_w13;       // [1, 2*Is/tp, H] when spec.shared.count > 0, in spec.shared_weight_format()
  ExpertMatrix shared_w2;        // [1, H, Is/tp]
  HostTensor shared_gate;        // F32 [1, H]   when spec.shared.gated_by_router
};

// LoRA adapters on the expert GEMMs, fp32: delta(x) = B @ (A @ x) for the token's adapter.
struct LoraWeights {
  int adapters = 0, rank = 0;
  HostTensor gate_up_a;  // [L, El, r, H]
  HostTensor gate_up_b;  // [L, El, R, r]
  HostTensor down_a;     // [L, El, r, Il]
  HostTensor down_b;     // [L, El, H, r]
};

// Which adapter each token uses: int32 [M], -1 = none. Valid ids are in [0, adapters).
// A call's adapters: weights null means no LoRA for the call (token_adapter is then not read).
struct LoraBatch {
  const LoraWeights* weights = nullptr;
  TensorView token_adapter;
};

// This rank's share (validated specs; 0 where ep or tp is not positive).
int local_experts(const MoeSpec& spec) noexcept;       // E / ep
int first_local_expert(const MoeSpec& spec) noexcept;  // (rank % ep) * E / ep
int local_intermediate(const MoeSpec& spec) noexcept;  // I / tp
int tp_rank(const MoeSpec& spec) noexcept;             // rank / ep

// Random weights for a validated spec from a fixed seed: values uniform with variance about 1/K, their
// amplitude varying by up to 1.41x either way per expert, per row, per 128 x 128 block and per 16
// columns (so that every quantization scale differs from its neighbours), quantized into the spec's
// format; biases and router tensors where the spec has them. Deterministic across machines.
MoeWeights random_weights(const MoeSpec& spec, uint64_t seed);

// Approximate bytes of this rank's expert + shared weights in the spec's format (for progress and
// bandwidth accounting; scales included to within a few percent).
int64_t estimate_weight_bytes(const MoeSpec& spec) noexcept;

// Random LoRA adapters (spec.lora.max_adapters, spec.lora.max_rank) from a seed.
LoraWeights random_lora(const MoeSpec& spec, uint64_t seed);
// Which of `adapters` adapters each of `tokens` tokens uses, I32 [tokens], uniform over -1 (none) and
// 0 .. adapters - 1, from a seed: the token_adapter of a LoraBatch.
HostTensor random_token_adapters(int64_t tokens, int adapters, uint64_t seed);

// This rank's shard of full-layer weights (spec.parallel = 1/1 in `full`, in host memory: else
// Error{kInvalidArgument}), cut exactly from the stored bytes (no requantization): experts of rank % ep, intermediate slice of rank / ep. Both specs
// are validated, must describe the same layer but for `parallel`, and `weights` must pass
// check_weights(full, ...): else Error{kInvalidSpec} / Error{kFormat}. Throws Error{kUnsupported}
// when a slice would split a scale block (fp8-block needs I/tp % 128 == 0).
MoeWeights shard_weights(const MoeSpec& full, const MoeWeights& weights, const MoeSpec& rank_spec);

// Checks every tensor against the spec: shapes, dtypes, presence of optional tensors. Throws
// Error{kFormat} "expected F32 [128, 2048], got F32 [64, 2048] for router_weight".
void check_weights(const MoeSpec& spec, const MoeWeights& w);
// The part of check_weights that is not the four expert stacks (biases, router tensors, shared gate):
// for a backend given stacks it prepared itself, whose layout check_weights does not know.
void check_weight_tensors(const MoeSpec& spec, const MoeWeights& w);
// For backends that read the weights on the CPU: throws Error{kInvalidArgument} naming the first expert
// stack part that is not in host memory ("cpu backend reads weights on the CPU: w13.data is on cuda:0").
void check_weights_on_host(const MoeWeights& w, std::string_view backend);
void check_lora(const MoeSpec& spec, const LoraWeights& l);

}  // namespace moerun
