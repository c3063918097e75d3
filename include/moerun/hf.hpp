// moerun/hf.hpp — Hugging Face models: config.json -> MoeSpec, and one MoE layer's tensors <-> MoeWeights.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moerun/safetensors.hpp"
#include "moerun/spec.hpp"
#include "moerun/weights.hpp"

namespace moerun {

// The tensor-naming families of the architectures moerun reads.
enum class HfFamily {
  kMixtral,    // block_sparse_moe.gate, block_sparse_moe.experts.N.{w1,w3,w2}   (Mixtral, Phi-3.5-MoE)
  kQwenMoe,    // mlp.gate, mlp.experts.N.{gate,up,down}_proj, mlp.shared_expert(+_gate)  (Qwen2/3, OLMoE)
  kDeepseek,   // mlp.gate(+.e_score_correction_bias), mlp.experts.N.*, mlp.shared_experts.*  (DeepSeek, Kimi, GLM-4.5)
  kGptOss,     // mlp.router, mlp.experts.{gate_up_proj,down_proj}(_blocks/_scales/_bias) fused 3-D
  kLlama4,     // feed_forward.router, feed_forward.experts.{gate_up_proj,down_proj} fused 3-D (fbgemm fp8 adds
               // *_scale), or experts.N.{gate,up,down}_proj when another quantizer split them; shared_expert
  kGranite,    // block_sparse_moe.router.layer, block_sparse_moe.input_linear / output_linear fused 3-D
};

std::string_view to_string(HfFamily f) noexcept;

struct HfModel {
  MoeSpec spec;
  std::string model_type;        // config.json "model_type"
  std::string architecture;      // first of "architectures", if any
  HfFamily family = HfFamily::kQwenMoe;
  int num_layers = 0;
  std::vector<int> moe_layers;   // indices of layers that have a MoE block
  // Where moerun's layer is not exactly the model's own (one line each; the CLI prints them), e.g. a
  // routing it approximates. Empty for the models it runs as published.
  std::vector<std::string> caveats;
};

// Reads config.json (+ its quantization_config, or hf_quant_config.json beside it). Quantization
// configs map onto moerun's weight formats as docs/formats.md tables them: per-tensor fp8/int8 scales
// become per-channel rows of one value (gate and up differ), a recipe that quantizes the experts'
// inputs where moerun does not adds a caveat, and exclusion lists must leave the experts of every MoE
// layer in one format (else Error{kUnsupported}). Unknown fields are ignored; a missing required one throws Error{kParse} naming it ("config.json: missing
// 'num_local_experts' (mixtral needs it)"); a model_type, activation, routing or quantization moerun does
// not run is Error{kUnsupported} (the model types listing the supported ones). The
// spec that comes back is validated (Error{kInvalidSpec} otherwise), for tp = ep = 1; a config with no
// MoE layer is Error{kParse}.
HfModel read_hf_config(const std::string& config_path);
// The same from text; quant_json is the text of an hf_quant_config.json when there is one.
HfModel parse_hf_config(std::string_view config_json, std::string_view origin,
                        std::optional<std::string_view> quant_json = std::nullopt);

std::vector<std::string> supported_model_types();

// The checkpoint files a path names: a file itself; a model folder's shards, those the weight_map of its
// model.safetensors.index.json lists (each must exist), else every *.safetensors in it; the shards an
// index file (*.safetensors.index.json) given itself lists; sorted. Throws
// Error{kIo} for a path that is neither, a folder with no shard, or a listed shard that is missing, and
// Error{kParse} for an index that is not a JSON object with a "weight_map" object of strings, or lists no shard.
std::vector<std::string> checkpoint_files(const std::string& path);

// Loads one MoE layer's tensors from checkpoint files under the model's own names, whatever the layer
// prefix ("model.layers.N." or "language_model.model.layers.N.", ...). With several MoE layers
// present, `layer` picks one (else Error{kInvalidArgument} lists those present). Checks names,
// dtypes and shapes ("expected BF16 [768, 2048], got F16 [768, 2048] for ...experts.3.up_proj.weight").
MoeWeights load_hf_layer(const HfModel& model, const std::vector<std::shared_ptr<SafetensorsFile>>& files,
                         std::optional<int> layer = std::nullopt);

// Writes weights under the family's Hugging Face names for layer `layer` (for tests, demos, and
// exporting random layers that real loaders can read).
void write_hf_layer(const HfModel& model, const MoeWeights& weights, int layer, const std::string& path);

}  // namespace moerun
