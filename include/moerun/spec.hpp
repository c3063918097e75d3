// moerun/spec.hpp — MoeSpec: what one Mixture-of-Experts layer is, independent of how it runs.
//
// A spec is a plain value. Build it from a preset (presets.hpp), a Hugging Face config.json
// (hf.hpp) or by hand, then call validate(): it throws Error{kInvalidSpec} naming the first bad
// field, its value and the values allowed. Everything downstream (oracle, backends, layer) assumes a
// validated spec.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moerun/dtype.hpp"

namespace moerun {

// ---- activation -------------------------------------------------------------------------------------

enum class ActivationKind : uint8_t {
  kSiluAndMul,       // silu(gate) * up                         (Mixtral, Qwen, DeepSeek, ...)
  kGeluAndMul,       // gelu_erf(gate) * up
  kGeluTanhAndMul,   // gelu_tanh(gate) * up                    (gemma-style "gelu_pytorch_tanh")
  kSwigluOai,        // gpt-oss: g=min(gate,limit), u=clamp(up,-limit,limit), g*sigmoid(alpha*g)*(u+1)
  kRelu2,            // non-gated: relu(x)^2                    (w13 holds only I rows)
  kSilu,             // non-gated: silu(x)
};

struct Activation {
  ActivationKind kind = ActivationKind::kSiluAndMul;
  float swiglu_alpha = 1.702f;   // kSwigluOai only
  float swiglu_limit = 7.0f;     // kSwigluOai only; <= 0 means no clamp
  // gpt-oss stores gate/up interleaved along the 2*I rows (row 2j = gate j, row 2j+1 = up j). Otherwise
  // gate rows come first, then up rows (w13's convention: docs/formats.md).
  bool interleaved_gate_up = false;

  bool gated() const noexcept { return kind != ActivationKind::kRelu2 && kind != ActivationKind::kSilu; }
};

// ---- routing ----------------------------------------------------------------------------------------

enum class Scoring : uint8_t { kSoftmax, kSigmoid };

struct Routing {
  Scoring scoring = Scoring::kSoftmax;
  // gpt-oss / Mixtral-style "top-k on logits, then softmax over the k chosen" (softmax scoring only).
  bool softmax_after_topk = false;
  // DeepSeek-V3: a per-expert bias added to scores for *choosing* experts only; weights use raw scores.
  bool correction_bias = false;
  // Grouped top-k (DeepSeek): experts split into n_group groups, keep the topk_group best groups (group
  // score = sum of its top-2 (biased) scores when correction_bias, else its max), then top-k inside.
  int n_group = 1;
  int topk_group = 1;
  bool renormalize = true;             // divide the k weights by their sum
  float routed_scaling_factor = 1.0f;  // multiply the k weights after renormalization
};

// ---- weights ----------------------------------------------------------------------------------------

// How expert weights are stored. Layouts: docs/formats.md.
enum class WeightFormat : uint8_t {
  kF32, kF16, kBF16,
  kFp8PerTensor,    // e4m3 + one fp32 scale per expert matrix
  kFp8PerChannel,   // e4m3 + one fp32 scale per output row
  kFp8Block,        // e4m3 + fp32 scale per 128x128 block ("weight_scale_inv")
  kMxfp4,           // e2m1 packed + e8m0 scale per 32 along K
  kNvfp4,           // e2m1 packed + e4m3 scale per 16 along K + fp32 global scale per expert matrix
  kInt8PerChannel,  // int8 + fp32 scale per output row
};

// Dynamic activation quantization applied to the GEMM inputs.
enum class ActQuant : uint8_t {
  kNone,
  kFp8PerTokenGroup,   // e4m3, one fp32 scale per token per 128 columns (DeepSeek block-fp8 recipe)
  kInt8PerTokenGroup,  // int8, one power-of-two scale per token per 32 columns (W4A8: mxfp4 / nvfp4
                       // weights on integer dot products, as llama.cpp's q8 activations; formats.hpp)
};

struct Parallel {
  int tp = 1;    // tensor parallel: I split across tp ranks
  int ep = 1;    // expert parallel: experts split across ep ranks
  int dp = 1;    // data parallel (replicas); does not change a layer's math
  int rank = 0;  // this process's rank in tp*ep
};

struct Lora {
  int max_adapters = 0;  // 0 = no LoRA
  int max_rank = 0;
};

struct SharedExperts {
  int count = 0;          // 0 = none
  int intermediate = 0;   // total intermediate size of the fused shared MLP (count * per-expert I)
  bool gated_by_router = false;  // Qwen2-MoE: output scaled by sigmoid(hidden @ shared_gate)
  // Their own weight format where it differs from the routed experts' (none: the same). Exporters
  // quantize modules by name lists, and several leave the shared experts in the checkpoint dtype beside
  // quantized routed ones. MoeSpec::act_quant reaches them only where their format admits it
  // (MoeSpec::shared_act_quant); a backend runs such a layer only where Capabilities::shared_formats
  // lists the shared format.
  std::optional<WeightFormat> weight_format;
};

struct MoeSpec {
  std::string name;              // free text (preset or model name); not validated
  int num_experts = 0;           // E
  int top_k = 0;
  int hidden = 0;                // H
  int intermediate = 0;          // I (per expert)
  Activation activation;
  Routing routing;
  WeightFormat weight_format = WeightFormat::kBF16;
  ActQuant act_quant = ActQuant::kNone;
  DType act_dtype = DType::kBF16;  // dtype of hidden states in and output out: kF32, kF16 or kBF16
  bool expert_bias = false;        // biases on w13 ([E, 2I]) and w2 ([E, H]) (gpt-oss)
  bool router_bias = false;        // bias on the router linear (gpt-oss)
  SharedExperts shared;
  bool apply_router_weight_on_input = false;  // Llama-4: scale the input, not the output, by the weight
  Parallel parallel;
  Lora lora;

  // Rows of w13 per expert: 2*I when gated, I otherwise.
  int w13_rows() const noexcept { return activation.gated() ? 2 * intermediate : intermediate; }

  // The shared experts' weight format: shared.weight_format, else the routed experts' weight_format.
  WeightFormat shared_weight_format() const noexcept { return shared.weight_format.value_or(weight_format); }
  // Whether the shared experts are stored in another format than the routed ones.
  bool mixed_formats() const noexcept { return shared.count > 0 && shared_weight_format() != weight_format; }
  // The dynamic quantization of the shared experts' GEMM inputs: act_quant where their format admits it
  // (the fp8 formats for fp8-token-group, mxfp4 / nvfp4 for int8-token-group), else none: an engine
  // runs shared experts left in bf16 as a plain bf16 MLP.
  ActQuant shared_act_quant() const noexcept;

  // Throws Error{kInvalidSpec} naming the first bad field ("spec.top_k = 9: must be in [1, num_experts=8]").
  void validate() const;

  // A one-line human summary: "E=128 top8 H=2048 I=768 bf16 act=BF16 silu-and-mul softmax renorm".
  std::string summary() const;
};

// Names used by the CLI, JSON and error messages; parse_* return nullopt for an unknown name.
std::string_view to_string(ActivationKind k) noexcept;
std::string_view to_string(Scoring s) noexcept;
std::string_view to_string(WeightFormat f) noexcept;
std::string_view to_string(ActQuant q) noexcept;
std::optional<ActivationKind> parse_activation(std::string_view s) noexcept;
std::optional<Scoring> parse_scoring(std::string_view s) noexcept;
std::optional<WeightFormat> parse_weight_format(std::string_view s) noexcept;
std::optional<ActQuant> parse_act_quant(std::string_view s) noexcept;
// "silu-and-mul, gelu-and-mul, ..." — for "allowed values" in messages.
std::string allowed_activations();
std::string allowed_weight_formats();
std::string allowed_act_quants();
// Whether f stores plain values (f32, f16, bf16) rather than codes with scales.
bool is_unquantized(WeightFormat f) noexcept;
// Whether act_quant q may feed GEMMs on weights of format f (kNone always may).
bool act_quant_admits(ActQuant q, WeightFormat f) noexcept;

}  // namespace moerun
