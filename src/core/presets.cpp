// presets.cpp — named MoE layer shapes of published models, and scaled_down() for fast tests.
//
// Every preset is a minimal config.json (+ quantization config) run through parse_hf_config, the same
// code that reads real checkpoints: a preset and its model's config cannot disagree about routing,
// activation or format. The numbers are the published ones of each model's config.json.
#include "moerun/presets.hpp"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "moerun/error.hpp"

namespace moerun {
namespace {

struct PresetSource {
  std::string_view name;
  std::string_view description;
  std::string config;                     // config.json text (only the fields that matter)
  std::optional<std::string> quant = {};  // hf_quant_config.json text (ModelOpt checkpoints)
};

// DeepSeek-V3 / R1 share every layer field; the checkpoints differ only in weight format.
constexpr std::string_view kDeepseekV3Fields =
    R"("model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
       "n_routed_experts": 256, "num_experts_per_tok": 8, "hidden_size": 7168,
       "moe_intermediate_size": 2048, "num_hidden_layers": 61, "n_shared_experts": 1,
       "first_k_dense_replace": 3, "moe_layer_freq": 1, "scoring_func": "sigmoid",
       "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4, "norm_topk_prob": true,
       "routed_scaling_factor": 2.5, "hidden_act": "silu", "torch_dtype": "bfloat16")";

constexpr std::string_view kFp8BlockQuant =
    R"("quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                               "weight_block_size": [128, 128]})";

std::string object(std::initializer_list<std::string_view> parts) {
  std::string s = "{";
  for (std::string_view p : parts) {
    if (s.size() > 1) s += ", ";
    s += p;
  }
  return s + "}";
}

std::vector<PresetSource> sources() {
  return {
    {"qwen3-30b-a3b", "Qwen3-30B-A3B: 128 experts top-8, softmax + renormalize, bf16 (the default demo)",
     R"({"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 128,
         "num_experts_per_tok": 8, "hidden_size": 2048, "moe_intermediate_size": 768,
         "num_hidden_layers": 48, "norm_topk_prob": true, "hidden_act": "silu",
         "torch_dtype": "bfloat16"})"},
    {"qwen3-235b-a22b", "Qwen3-235B-A22B: 128 experts top-8, H=4096, softmax + renormalize, bf16",
     R"({"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 128,
         "num_experts_per_tok": 8, "hidden_size": 4096, "moe_intermediate_size": 1536,
         "num_hidden_layers": 94, "norm_topk_prob": true, "hidden_act": "silu",
         "torch_dtype": "bfloat16"})"},
    {"qwen2-moe-a2.7b", "Qwen1.5-MoE-A2.7B: 60 experts top-4, no renormalize, sigmoid-gated shared expert",
     R"({"model_type": "qwen2_moe", "architectures": ["Qwen2MoeForCausalLM"], "num_experts": 60,
         "num_experts_per_tok": 4, "hidden_size": 2048, "moe_intermediate_size": 1408,
         "shared_expert_intermediate_size": 5632, "num_hidden_layers": 24, "norm_topk_prob": false,
         "decoder_sparse_step": 1, "hidden_act": "silu", "torch_dtype": "bfloat16"})"},
    {"deepseek-v2-lite", "DeepSeek-V2-Lite: 64 experts top-6, softmax, no renormalize, 2 shared experts",
     R"({"model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"], "n_routed_experts": 64,
         "num_experts_per_tok": 6, "hidden_size": 2048, "moe_intermediate_size": 1408,
         "num_hidden_layers": 27, "n_shared_experts": 2, "first_k_dense_replace": 1,
         "moe_layer_freq": 1, "scoring_func": "softmax", "topk_method": "greedy", "n_group": 1,
         "topk_group": 1, "norm_topk_prob": false, "routed_scaling_factor": 1.0,
         "hidden_act": "silu", "torch_dtype": "bfloat16"})"},
    {"deepseek-v3", "DeepSeek-V3 in bf16: 256 experts top-8, sigmoid + bias, 8 groups keep 4, x2.5, 1 shared",
     object({kDeepseekV3Fields})},
    {"deepseek-r1-fp8", "DeepSeek-R1 as published: V3 routing, fp8 128x128 block weights, fp8 per-token-group acts",
     object({kDeepseekV3Fields, kFp8BlockQuant})},
    {"deepseek-r1-fp4", "nvidia/DeepSeek-R1-FP4 (ModelOpt): V3 routing, nvfp4 weights (e2m1, e4m3 scale per 16)",
     object({kDeepseekV3Fields}),
     R"({"producer": {"name": "modelopt"},
         "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": null, "group_size": 16}})"},
    {"kimi-k2", "Kimi-K2-Instruct: 384 experts top-8, sigmoid + bias, one group, x2.827, fp8 block weights",
     object({R"("model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"], "n_routed_experts": 384,
               "num_experts_per_tok": 8, "hidden_size": 7168, "moe_intermediate_size": 2048,
               "num_hidden_layers": 61, "n_shared_experts": 1, "first_k_dense_replace": 1,
               "moe_layer_freq": 1, "scoring_func": "sigmoid", "topk_method": "noaux_tc", "n_group": 1,
               "topk_group": 1, "norm_topk_prob": true, "routed_scaling_factor": 2.827,
               "hidden_act": "silu", "torch_dtype": "bfloat16")",
             kFp8BlockQuant})},
    {"glm-4.5-air", "GLM-4.5-Air: 128 experts top-8, sigmoid + bias, renormalize, 1 shared expert, bf16",
     R"({"model_type": "glm4_moe", "architectures": ["Glm4MoeForCausalLM"], "n_routed_experts": 128,
         "num_experts_per_tok": 8, "hidden_size": 4096, "moe_intermediate_size": 1408,
         "num_hidden_layers": 46, "n_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 1,
         "topk_group": 1, "norm_topk_prob": true, "routed_scaling_factor": 1.0, "hidden_act": "silu",
         "torch_dtype": "bfloat16"})"},
    {"glm-4.5", "GLM-4.5: 160 experts top-8, sigmoid + bias, renormalize, x2.5, 1 shared expert, bf16",
     R"({"model_type": "glm4_moe", "architectures": ["Glm4MoeForCausalLM"], "n_routed_experts": 160,
         "num_experts_per_tok": 8, "hidden_size": 5120, "moe_intermediate_size": 1536,
         "num_hidden_layers": 92, "n_shared_experts": 1, "first_k_dense_replace": 3, "n_group": 1,
         "topk_group": 1, "norm_topk_prob": true, "routed_scaling_factor": 2.5, "hidden_act": "silu",
         "torch_dtype": "bfloat16"})"},
    {"gpt-oss-20b", "gpt-oss-20b: 32 experts top-4, softmax over the top-4 logits, clamped SwiGLU, biases, mxfp4",
     R"({"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "num_local_experts": 32,
         "num_experts_per_tok": 4, "hidden_size": 2880, "intermediate_size": 2880,
         "num_hidden_layers": 24, "swiglu_limit": 7.0, "torch_dtype": "bfloat16",
         "quantization_config": {"quant_method": "mxfp4"}})"},
    {"gpt-oss-120b", "gpt-oss-120b: 128 experts top-4, softmax over the top-4 logits, clamped SwiGLU, biases, mxfp4",
     R"({"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "num_local_experts": 128,
         "num_experts_per_tok": 4, "hidden_size": 2880, "intermediate_size": 2880,
         "num_hidden_layers": 36, "swiglu_limit": 7.0, "torch_dtype": "bfloat16",
         "quantization_config": {"quant_method": "mxfp4"}})"},
    {"mixtral-8x7b", "Mixtral-8x7B: 8 experts top-2, softmax + renormalize, bf16",
     R"({"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "num_local_experts": 8,
         "num_experts_per_tok": 2, "hidden_size": 4096, "intermediate_size": 14336,
         "num_hidden_layers": 32, "hidden_act": "silu", "torch_dtype": "bfloat16"})"},
    {"mixtral-8x22b", "Mixtral-8x22B: 8 experts top-2, H=6144 I=16384, softmax + renormalize, bf16",
     R"({"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "num_local_experts": 8,
         "num_experts_per_tok": 2, "hidden_size": 6144, "intermediate_size": 16384,
         "num_hidden_layers": 56, "hidden_act": "silu", "torch_dtype": "bfloat16"})"},
    {"llama4-scout", "Llama-4-Scout-17B-16E: 16 experts top-1, sigmoid weight on the input, 1 shared expert, bf16",
     R"({"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"],
         "text_config": {"model_type": "llama4_text", "num_local_experts": 16, "num_experts_per_tok": 1,
                         "hidden_size": 5120, "intermediate_size": 8192, "num_hidden_layers": 48,
                         "interleave_moe_layer_step": 1, "hidden_act": "silu",
                         "torch_dtype": "bfloat16"}})"},
    {"llama4-maverick", "Llama-4-Maverick-17B-128E: 128 experts top-1, MoE every 2nd layer, 1 shared expert, bf16",
     R"({"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"],
         "text_config": {"model_type": "llama4_text", "num_local_experts": 128, "num_experts_per_tok": 1,
                         "hidden_size": 5120, "intermediate_size": 8192, "num_hidden_layers": 48,
                         "interleave_moe_layer_step": 2, "hidden_act": "silu",
                         "torch_dtype": "bfloat16"}})"},
    {"olmoe-1b-7b", "OLMoE-1B-7B: 64 experts top-8, softmax, no renormalize, bf16",
     R"({"model_type": "olmoe", "architectures": ["OlmoeForCausalLM"], "num_experts": 64,
         "num_experts_per_tok": 8, "hidden_size": 2048, "intermediate_size": 1024,
         "num_hidden_layers": 16, "norm_topk_prob": false, "hidden_act": "silu",
         "torch_dtype": "bfloat16"})"},
    {"phi-3.5-moe", "Phi-3.5-MoE: 16 experts top-2; sparsemixer approximated by softmax + renormalize, bf16",
     R"({"model_type": "phimoe", "architectures": ["PhiMoEForCausalLM"], "num_local_experts": 16,
         "num_experts_per_tok": 2, "hidden_size": 4096, "intermediate_size": 6400,
         "num_hidden_layers": 32, "hidden_act": "silu", "torch_dtype": "bfloat16"})"},
    {"granite-3.0-1b-a400m", "granite-3.0-1b-a400m: 32 experts top-8, softmax over the top-8 logits, bf16",
     R"({"model_type": "granitemoe", "architectures": ["GraniteMoeForCausalLM"], "num_local_experts": 32,
         "num_experts_per_tok": 8, "hidden_size": 1024, "intermediate_size": 512,
         "num_hidden_layers": 24, "hidden_act": "silu", "torch_dtype": "bfloat16"})"},
    {"granite-3.1-3b-a800m", "granite-3.1-3b-a800m: 40 experts top-8, softmax over the top-8 logits, bf16",
     R"({"model_type": "granitemoe", "architectures": ["GraniteMoeForCausalLM"], "num_local_experts": 40,
         "num_experts_per_tok": 8, "hidden_size": 1536, "intermediate_size": 512,
         "num_hidden_layers": 32, "hidden_act": "silu", "torch_dtype": "bfloat16"})"},
  };
}

std::vector<Preset> build_presets() {
  std::vector<Preset> out;
  for (const PresetSource& src : sources()) {
    Preset p;
    p.name = src.name;
    p.description = src.description;
    std::optional<std::string_view> quant;
    if (src.quant) quant = *src.quant;
    p.model = parse_hf_config(src.config, fmt::format("preset '{}'", src.name), quant);
    p.model.spec.name = p.name;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

// The table is built once, on first use (thread-safe static initialization). A preset that does not
// parse is a bug in this file; the presets unit test parses every one.
const std::vector<Preset>& presets() {
  static const std::vector<Preset> table = build_presets();
  return table;
}

const Preset& find_preset(std::string_view name) {
  for (const Preset& p : presets())
    if (p.name == name) return p;
  std::string known;
  for (const Preset& p : presets()) {
    if (!known.empty()) known += ", ";
    known += p.name;
  }
  throw_error(ErrorKind::kNotFound, fmt::format("unknown preset '{}'; known: {}", name, known));
}

// Shrinks the sizes and keeps everything else. Experts: at most 16, and with grouped routing a
// multiple of n_group with enough experts per group for top_k to fit inside the topk_group kept
// groups (and >= 2 per group when groups are ranked by their top-2 sum). H = 256 and I = 128 are
// multiples of 128, so fp8 128x128 blocks, mxfp4 groups of 32 and nvfp4 groups of 16 tile exactly.
// The shared MLP keeps its width ratio to a routed expert (rounded, at least 1, at most 8 experts'
// worth). LoRA is kept as given; the parallel split is reset to 1/1 (see below).
MoeSpec scaled_down(const MoeSpec& spec) {
  constexpr int kMaxExperts = 16, kHidden = 256, kIntermediate = 128;
  MoeSpec s = spec;
  s.name = spec.name + "-small";
  // The shrunk layer is unsharded: a split of the full layer's experts (ep = 32 of 256) would not
  // divide its 16, and the caller that shards it again chooses sizes that split (scaled_for_check).
  s.parallel = Parallel{};
  s.hidden = kHidden;
  s.intermediate = kIntermediate;

  const Routing& r = spec.routing;
  if (r.n_group > 1) {
    int per_group = std::max(1, kMaxExperts / r.n_group);
    if (spec.num_experts >= r.n_group) per_group = std::min(per_group, spec.num_experts / r.n_group);
    int kept = std::max(1, std::min(r.topk_group, r.n_group));
    per_group = std::max(per_group, (spec.top_k + kept - 1) / kept);  // top_k fits in the kept groups
    if (r.correction_bias) per_group = std::max(per_group, 2);         // groups ranked by top-2 sum
    s.num_experts = r.n_group * per_group;
  } else {
    s.num_experts = std::min(spec.num_experts, kMaxExperts);
  }
  s.top_k = std::min(spec.top_k, s.num_experts);

  if (spec.shared.count > 0) {
    int ratio = 1;
    if (spec.intermediate > 0)
      ratio = (spec.shared.intermediate + spec.intermediate / 2) / spec.intermediate;
    ratio = std::clamp(ratio, 1, 8);
    s.shared.intermediate = ratio * kIntermediate;
  }
  return s;
}

}  // namespace moerun
