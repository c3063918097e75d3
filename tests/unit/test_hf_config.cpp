// Hugging Face config.json -> HfModel: published configs of every supported architecture, error
// messages, and the presets built from the same parser.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "moerun/error.hpp"
#include "moerun/hf.hpp"
#include "moerun/presets.hpp"

namespace moerun {
namespace {

std::string config_path(const std::string& model) {
  return std::string(MOERUN_TEST_DATA) + "/configs/" + model + "/config.json";
}

HfModel load(const std::string& model) { return read_hf_config(config_path(model)); }

std::vector<int> range(int begin, int end, int step = 1) {
  std::vector<int> v;
  for (int i = begin; i < end; i += step) v.push_back(i);
  return v;
}

// Runs fn, expects a moerun::Error of `kind`, returns its message.
template <class Fn>
std::string error_of(Fn&& fn, ErrorKind kind) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected moerun::Error, got std::exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected moerun::Error, nothing thrown";
  return {};
}

void expect_contains(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nexpected to contain: " << part;
}

// ---- published configs -------------------------------------------------------------------------

TEST(HfConfig, Mixtral8x7B) {
  HfModel m = load("mixtral-8x7b-instruct-v0.1");
  EXPECT_EQ(m.model_type, "mixtral");
  EXPECT_EQ(m.architecture, "MixtralForCausalLM");
  EXPECT_EQ(m.family, HfFamily::kMixtral);
  const MoeSpec& s = m.spec;
  EXPECT_EQ(s.num_experts, 8);
  EXPECT_EQ(s.top_k, 2);
  EXPECT_EQ(s.hidden, 4096);
  EXPECT_EQ(s.intermediate, 14336);
  EXPECT_EQ(s.activation.kind, ActivationKind::kSiluAndMul);
  EXPECT_FALSE(s.activation.interleaved_gate_up);
  EXPECT_EQ(s.routing.scoring, Scoring::kSoftmax);
  EXPECT_TRUE(s.routing.renormalize);
  EXPECT_FALSE(s.routing.softmax_after_topk);
  EXPECT_EQ(s.routing.n_group, 1);
  EXPECT_FLOAT_EQ(s.routing.routed_scaling_factor, 1.0f);
  EXPECT_EQ(s.weight_format, WeightFormat::kBF16);
  EXPECT_EQ(s.act_dtype, DType::kBF16);
  EXPECT_EQ(s.act_quant, ActQuant::kNone);
  EXPECT_EQ(s.shared.count, 0);
  EXPECT_FALSE(s.expert_bias);
  EXPECT_FALSE(s.router_bias);
  EXPECT_EQ(m.num_layers, 32);
  EXPECT_EQ(m.moe_layers, range(0, 32));
  EXPECT_EQ(s.name, "mixtral");  // no _name_or_path: the model type
}

TEST(HfConfig, Qwen15MoeA27B) {
  HfModel m = load("qwen1.5-moe-a2.7b");
  EXPECT_EQ(m.model_type, "qwen2_moe");
  EXPECT_EQ(m.family, HfFamily::kQwenMoe);
  const MoeSpec& s = m.spec;
  EXPECT_EQ(s.num_experts, 60);
  EXPECT_EQ(s.top_k, 4);
  EXPECT_EQ(s.hidden, 2048);
  EXPECT_EQ(s.intermediate, 1408);
  EXPECT_EQ(s.routing.scoring, Scoring::kSoftmax);
  EXPECT_FALSE(s.routing.renormalize);
  EXPECT_EQ(s.shared.count, 1);
  EXPECT_EQ(s.shared.intermediate, 5632);
  EXPECT_TRUE(s.shared.gated_by_router);
  EXPECT_EQ(m.num_layers, 24);
  EXPECT_EQ(m.moe_layers, range(0, 24));
}

TEST(HfConfig, Qwen3_30B_A3B) {
  HfModel m = load("qwen3-30b-a3b");
  EXPECT_EQ(m.model_type, "qwen3_moe");
  EXPECT_EQ(m.family, HfFamily::kQwenMoe);
  const MoeSpec& s = m.spec;
  EXPECT_EQ(s.num_experts, 128);
  EXPECT_EQ(s.top_k, 8);
  EXPECT_EQ(s.hidden, 2048);
  EXPECT_EQ(s.intermediate, 768);
  EXPECT_EQ(s.activation.kind, ActivationKind::kSiluAndMul);
  EXPECT_TRUE(s.routing.renormalize);
  EXPECT_EQ(s.shared.count, 0);
  EXPECT_EQ(s.weight_format, WeightFormat::kBF16);
  EXPECT_EQ(m.moe_layers, range(0, 48));
}

TEST(HfConfig, DeepseekV2Lite) {
  HfModel m = load("deepseek-v2-lite");
  EXPECT_EQ(m.model_type, "deepseek_v2");
  EXPECT_EQ(m.family, HfFamily::kDeepseek);
  EXPECT_EQ(m.spec.name, "deepseek-ai/DeepSeek-V2-Lite");
  const MoeSpec& s = m.spec;
  EXPECT_EQ(s.num_experts, 64);
  EXPECT_EQ(s.top_k, 6);
  EXPECT_EQ(s.hidden, 2048);
  EXPECT_EQ(s.intermediate, 1408);
  EXPECT_EQ(s.routing.scoring, Scoring::kSoftmax);
  EXPECT_FALSE(s.routing.correction_bias);
  EXPECT_EQ(s.routing.n_group, 1);
  EXPECT_EQ(s.routing.topk_group, 1);
  EXPECT_FALSE(s.routing.renormalize);
  EXPECT_FLOAT_EQ(s.routing.routed_scaling_factor, 1.0f);
  EXPECT_EQ(s.shared.count, 2);
  EXPECT_EQ(s.shared.intermediate, 2 * 1408);
  EXPECT_FALSE(s.shared.gated_by_router);
  EXPECT_EQ(m.num_layers, 27);
  EXPECT_EQ(m.moe_layers, range(1, 27));  // first_k_dense_replace = 1
}

void expect_deepseek_v3_layer(const HfModel& m) {
  EXPECT_EQ(m.family, HfFamily::kDeepseek);
  const MoeSpec& s = m.spec;
  EXPECT_EQ(s.num_experts, 256);
  EXPECT_EQ(s.top_k, 8);
  EXPECT_EQ(s.hidden, 7168);
  EXPECT_EQ(s.intermediate, 2048);
  EXPECT_EQ(s.activation.kind, ActivationKind::kSiluAndMul);
  EXPECT_EQ(s.routing.scoring, Scoring::kSigmoid);
  EXPECT_TRUE(s.routing.correction_bias);
  EXPECT_EQ(s.routing.n_group, 8);
  EXPECT_EQ(s.routing.topk_group, 4);
  EXPECT_TRUE(s.routing.renormalize);
  EXPECT_FLOAT_EQ(s.routing.routed_scaling_factor, 2.5f);
  EXPECT_EQ(s.shared.count, 1);
  EXPECT_EQ(s.shared.intermediate, 2048);
  EXPECT_EQ(s.act_dtype, DType::kBF16);
  EXPECT_EQ(m.num_layers, 61);
  EXPECT_EQ(m.moe_layers, range(3, 61));  // first_k_dense_replace = 3; the MTP layer is not counted
}

TEST(HfConfig, DeepseekV3Bf16) {
  HfModel m = load("deepseek-v3");
  EXPECT_EQ(m.model_type, "deepseek_v3");
  EXPECT_EQ(m.architecture, "DeepseekV3ForCausalLM");
  expect_deepseek_v3_layer(m);
  EXPECT_EQ(m.spec.weight_format, WeightFormat::kBF16);
  EXPECT_EQ(m.spec.act_quant, ActQuant::kNone);
}

TEST(HfConfig, DeepseekR1Fp8Block) {
  HfModel m = load("deepseek-r1-fp8");
  expect_deepseek_v3_layer(m);
  EXPECT_EQ(m.spec.weight_format, WeightFormat::kFp8Block);
  EXPECT_EQ(m.spec.act_quant, ActQuant::kFp8PerTokenGroup);
}

TEST(HfConfig, DeepseekR1Nvfp4FromHfQuantConfig) {
  HfModel m = load("deepseek-r1-fp4");  // hf_quant_config.json lies beside config.json
  expect_deepseek_v3_layer(m);
  EXPECT_EQ(m.spec.name, "nvidia/DeepSeek-R1-FP4");
  EXPECT_EQ(m.spec.weight_format, WeightFormat::kNvfp4);
  EXPECT_EQ(m.spec.act_quant, ActQuant::kNone);
}

TEST(HfConfig, ModelFolderPathReadsConfigJson) {
  HfModel m = read_hf_config(std::string(MOERUN_TEST_DATA) + "/configs/deepseek-r1-fp4");
  EXPECT_EQ(m.spec.weight_format, WeightFormat::kNvfp4);
}

TEST(HfConfig, ModelOptInsideConfigJson) {
  // Newer ModelOpt exports put the block into config.json, flat or nested under "quantization".
  const std::string base = R"({"model_type": "qwen3_moe", "num_experts": 128, "num_experts_per_tok": 8,
      "hidden_size": 2048, "moe_intermediate_size": 768, "num_hidden_layers": 48, )";
  HfModel flat = parse_hf_config(
      base + R"("quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}})",
      "config.json");
  EXPECT_EQ(flat.spec.weight_format, WeightFormat::kNvfp4);
  HfModel nested = parse_hf_config(
      base + R"("quantization_config": {"quant_method": "modelopt",
                                         "quantization": {"quant_algo": "FP8"}}})",
      "config.json");
  EXPECT_EQ(nested.spec.weight_format, WeightFormat::kFp8PerChannel);  // one scale per linear: rows of one value
  ASSERT_EQ(nested.caveats.size(), 1u);
  expect_contains(nested.caveats[0], "static per-tensor input scale");
  // hf_quant_config.json wins over a quantization_config left in config.json.
  HfModel both = parse_hf_config(
      base + R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})",
      "config.json", std::string_view(R"({"quantization": {"quant_algo": "NVFP4", "group_size": 16}})"));
  EXPECT_EQ(both.spec.weight_format, WeightFormat::kNvfp4);
  EXPECT_EQ(both.spec.act_quant, ActQuant::kNone);
}

TEST(HfConfig, KimiK2) {
  HfModel m = load("kimi-k2-instruct");
  EXPECT_EQ(m.model_type, "kimi_k2");
  EXPECT_EQ(m.family, HfFamily::kDeepseek);
  const MoeSpec& s = m.spec;
  EXPECT_EQ(s.num_experts, 384);
  EXPECT_EQ(s.top_k, 8);
  EXPECT_EQ(s.hidden, 7168);
  EXPECT_EQ(s.intermediate, 2048);
  EXPECT_EQ(s.routing.scoring, Scoring::kSigmoid);
  EXPECT_TRUE(s.routing.correction_bias);
  EXPECT_EQ(s.routing.n_group, 1);
  EXPECT_EQ(s.routing.topk_group, 1);
  EXPECT_TRUE(s.routing.renormalize);
  EXPECT_FLOAT_EQ(s.routing.routed_scaling_factor, 2.827f);
  EXPECT_EQ(s.shared.count, 1);
  EXPECT_EQ(s.weight_format, WeightFormat::kFp8Block);
  EXPECT_EQ(s.act_quant, ActQuant::kFp8PerTokenGroup);
  EXPECT_EQ(m.moe_layers, range(1, 61));
}

TEST(HfConfig, KimiNumbersUnderDeepseekV3ModelType) {
  // Kimi-K2 checkpoints re-uploaded with model_type deepseek_v3 read the same.
  HfModel m = parse_hf_config(R"({"model_type": "deepseek_v3", "n_routed_experts": 384, "num_experts_per_tok": 8,
      "hidden_size": 7168, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "n_group": 1,
      "topk_group": 1, "first_k_dense_replace": 1, "routed_scaling_factor": 2.827})",
                              "config.json");
  EXPECT_EQ(m.spec.num_experts, 384);
  EXPECT_EQ(m.spec.routing.n_group, 1);
  EXPECT_TRUE(m.spec.routing.correction_bias);  // V3 defaults: noaux_tc, sigmoid, renormalize
  EXPECT_EQ(m.spec.routing.scoring, Scoring::kSigmoid);
  EXPECT_TRUE(m.spec.routing.renormalize);
  EXPECT_EQ(m.spec.shared.count, 1);
}

// n_shared_experts x moe_intermediate_size is computed in 64 bits: 65537 x 65536 would wrap to 65536 in
// an int and pass as a plausible width.
TEST(HfConfig, SharedExpertWidthThatOverflowsIsRefused) {
  std::string what;
  try {
    parse_hf_config(R"({"model_type": "deepseek_v3", "n_routed_experts": 8, "num_experts_per_tok": 2,
        "hidden_size": 64, "moe_intermediate_size": 65536, "n_shared_experts": 65537, "num_hidden_layers": 4})",
                    "config.json");
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("65537 x 65536 = 4295032832"), std::string::npos) << what;
}

TEST(HfConfig, DeepseekV2GroupLimitedGreedy) {
  // DeepSeek-V2 (full): group_limited_greedy ranks groups by their max; no correction bias.
  HfModel m = parse_hf_config(R"({"model_type": "deepseek_v2", "n_routed_experts": 160, "num_experts_per_tok": 6,
      "hidden_size": 5120, "moe_intermediate_size": 1536, "num_hidden_layers": 60, "n_shared_experts": 2,
      "first_k_dense_replace": 1, "topk_method": "group_limited_greedy", "n_group": 8, "topk_group": 3,
      "norm_topk_prob": false, "routed_scaling_factor": 16.0, "scoring_func": "softmax"})",
                              "config.json");
  EXPECT_EQ(m.spec.routing.n_group, 8);
  EXPECT_EQ(m.spec.routing.topk_group, 3);
  EXPECT_FALSE(m.spec.routing.correction_bias);
  EXPECT_FLOAT_EQ(m.spec.routing.routed_scaling_factor, 16.0f);
  // V2 scales only when it does not renormalize.
  HfModel norm = parse_hf_config(R"({"model_type": "deepseek_v2", "n_routed_experts": 64, "num_experts_per_tok": 6,
      "hidden_size": 2048, "moe_intermediate_size": 1408, "num_hidden_layers": 27, "norm_topk_prob": true,
      "routed_scaling_factor": 16.0})",
                                 "config.json");
  EXPECT_TRUE(norm.spec.routing.renormalize);
  EXPECT_FLOAT_EQ(norm.spec.routing.routed_scaling_factor, 1.0f);
  // group_limited_greedy needs n_group on V2 (no default there).
  std::string msg = error_of(
      [] {
        parse_hf_config(R"({"model_type": "deepseek_v2", "n_routed_experts": 64, "num_experts_per_tok": 6,
            "hidden_size": 2048, "moe_intermediate_size": 1408, "num_hidden_layers": 27,
            "topk_method": "group_limited_greedy", "topk_group": 3})",
                        "config.json");
      },
      ErrorKind::kParse);
  expect_contains(msg, "missing 'n_group' (deepseek_v2 needs it)");
}

void expect_gpt_oss(const HfModel& m, int experts, int layers) {
  EXPECT_EQ(m.model_type, "gpt_oss");
  EXPECT_EQ(m.family, HfFamily::kGptOss);
  const MoeSpec& s = m.spec;
  EXPECT_EQ(s.num_experts, experts);
  EXPECT_EQ(s.top_k, 4);
  EXPECT_EQ(s.hidden, 2880);
  EXPECT_EQ(s.intermediate, 2880);
  EXPECT_EQ(s.activation.kind, ActivationKind::kSwigluOai);
  EXPECT_FLOAT_EQ(s.activation.swiglu_alpha, 1.702f);
  EXPECT_FLOAT_EQ(s.activation.swiglu_limit, 7.0f);
  EXPECT_TRUE(s.activation.interleaved_gate_up);
  EXPECT_EQ(s.routing.scoring, Scoring::kSoftmax);
  EXPECT_TRUE(s.routing.softmax_after_topk);
  EXPECT_FALSE(s.routing.renormalize);
  EXPECT_TRUE(s.expert_bias);
  EXPECT_TRUE(s.router_bias);
  EXPECT_EQ(s.shared.count, 0);
  EXPECT_EQ(s.weight_format, WeightFormat::kMxfp4);
  EXPECT_EQ(s.act_quant, ActQuant::kNone);
  EXPECT_EQ(s.act_dtype, DType::kBF16);  // no torch_dtype in the config: bf16
  EXPECT_EQ(m.num_layers, layers);
  EXPECT_EQ(m.moe_layers, range(0, layers));
}

TEST(HfConfig, GptOss20B) { expect_gpt_oss(load("gpt-oss-20b"), 32, 24); }
TEST(HfConfig, GptOss120B) { expect_gpt_oss(load("gpt-oss-120b"), 128, 36); }

TEST(HfConfig, GptOssSwigluLimitAndBf16) {
  HfModel m = parse_hf_config(R"({"model_type": "gpt_oss", "num_local_experts": 32, "experts_per_token": 4,
      "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 24, "swiglu_limit": 5.5,
      "torch_dtype": "bfloat16"})",
                              "config.json");
  EXPECT_EQ(m.spec.top_k, 4);  // falls back to experts_per_token
  EXPECT_FLOAT_EQ(m.spec.activation.swiglu_limit, 5.5f);
  EXPECT_EQ(m.spec.weight_format, WeightFormat::kBF16);
}

TEST(HfConfig, Llama4ScoutTextConfig) {
  HfModel m = load("llama4-scout-17b-16e");
  EXPECT_EQ(m.model_type, "llama4");
  EXPECT_EQ(m.architecture, "Llama4ForConditionalGeneration");
  EXPECT_EQ(m.family, HfFamily::kLlama4);
  const MoeSpec& s = m.spec;
  EXPECT_EQ(s.num_experts, 16);
  EXPECT_EQ(s.top_k, 1);
  EXPECT_EQ(s.hidden, 5120);
  EXPECT_EQ(s.intermediate, 8192);
  EXPECT_EQ(s.activation.kind, ActivationKind::kSiluAndMul);
  EXPECT_EQ(s.routing.scoring, Scoring::kSigmoid);
  EXPECT_FALSE(s.routing.renormalize);
  EXPECT_FALSE(s.routing.correction_bias);
  EXPECT_TRUE(s.apply_router_weight_on_input);
  EXPECT_EQ(s.shared.count, 1);
  EXPECT_EQ(s.shared.intermediate, 8192);
  EXPECT_FALSE(s.shared.gated_by_router);
  EXPECT_EQ(s.weight_format, WeightFormat::kBF16);
  EXPECT_EQ(m.num_layers, 48);
  EXPECT_EQ(m.moe_layers, range(0, 48));
}

TEST(HfConfig, Llama4InterleaveAndExplicitMoeLayers) {
  const std::string text = R"("num_local_experts": 128, "num_experts_per_tok": 1, "hidden_size": 5120,
      "intermediate_size": 8192, "num_hidden_layers": 48)";
  HfModel mav = parse_hf_config(R"({"model_type": "llama4_text", )" + text + R"(, "interleave_moe_layer_step": 2})",
                                "config.json");
  EXPECT_EQ(mav.moe_layers, range(1, 48, 2));
  HfModel listed = parse_hf_config(R"({"model_type": "llama4_text", )" + text + R"(, "moe_layers": [5, 1, 3]})",
                                   "config.json");
  EXPECT_EQ(listed.moe_layers, (std::vector<int>{1, 3, 5}));
  std::string msg = error_of(
      [&] { parse_hf_config(R"({"model_type": "llama4_text", )" + text + R"(, "moe_layers": [48]})", "config.json"); },
      ErrorKind::kParse);
  expect_contains(msg, "'moe_layers'");
  // Maverick FP8 (fbgemm): per-channel fp8.
  HfModel fp8 = parse_hf_config(R"({"model_type": "llama4", "text_config": {)" + text +
                                    R"(}, "quantization_config": {"quant_method": "fbgemm_fp8"}})",
                                "config.json");
  EXPECT_EQ(fp8.spec.weight_format, WeightFormat::kFp8PerChannel);
}

TEST(HfConfig, Llama4WithoutTextConfig) {
  std::string msg = error_of([] { parse_hf_config(R"({"model_type": "llama4"})", "config.json"); },
                             ErrorKind::kParse);
  expect_contains(msg, "missing 'text_config' (llama4 needs it)");
  msg = error_of(
      [] { parse_hf_config(R"({"model_type": "llama4", "text_config": {"num_experts_per_tok": 1}})", "cfg.json"); },
      ErrorKind::kParse);
  expect_contains(msg, "cfg.json: missing 'text_config.num_local_experts' (llama4 needs it)");
}

TEST(HfConfig, Glm45Air) {
  HfModel m = load("glm-4.5-air");
  EXPECT_EQ(m.model_type, "glm4_moe");
  EXPECT_EQ(m.family, HfFamily::kDeepseek);
  const MoeSpec& s = m.spec;
  EXPECT_EQ(s.num_experts, 128);
  EXPECT_EQ(s.top_k, 8);
  EXPECT_EQ(s.hidden, 4096);
  EXPECT_EQ(s.intermediate, 1408);
  EXPECT_EQ(s.routing.scoring, Scoring::kSigmoid);
  EXPECT_TRUE(s.routing.correction_bias);
  EXPECT_EQ(s.routing.n_group, 1);
  EXPECT_EQ(s.routing.topk_group, 1);
  EXPECT_TRUE(s.routing.renormalize);
  EXPECT_FLOAT_EQ(s.routing.routed_scaling_factor, 1.0f);
  EXPECT_EQ(s.shared.count, 1);
  EXPECT_EQ(s.shared.intermediate, 1408);
  EXPECT_EQ(m.num_layers, 46);
  EXPECT_EQ(m.moe_layers, range(1, 46));
}

TEST(HfConfig, Olmoe) {
  HfModel m = load("olmoe-1b-7b");
  EXPECT_EQ(m.model_type, "olmoe");
  EXPECT_EQ(m.family, HfFamily::kQwenMoe);
  const MoeSpec& s = m.spec;
  EXPECT_EQ(s.num_experts, 64);
  EXPECT_EQ(s.top_k, 8);
  EXPECT_EQ(s.hidden, 2048);
  EXPECT_EQ(s.intermediate, 1024);
  EXPECT_EQ(s.routing.scoring, Scoring::kSoftmax);
  EXPECT_FALSE(s.routing.renormalize);
  EXPECT_EQ(s.shared.count, 0);
  EXPECT_EQ(m.moe_layers, range(0, 16));
}

TEST(HfConfig, Phi35Moe) {
  HfModel m = load("phi-3.5-moe-instruct");
  EXPECT_EQ(m.model_type, "phimoe");
  EXPECT_EQ(m.family, HfFamily::kMixtral);
  const MoeSpec& s = m.spec;
  EXPECT_EQ(s.num_experts, 16);
  EXPECT_EQ(s.top_k, 2);
  EXPECT_EQ(s.hidden, 4096);
  EXPECT_EQ(s.intermediate, 6400);
  EXPECT_EQ(s.routing.scoring, Scoring::kSoftmax);  // sparsemixer's closest supported routing
  EXPECT_TRUE(s.routing.renormalize);
  EXPECT_EQ(m.moe_layers, range(0, 32));
}

TEST(HfConfig, Granite) {
  for (auto [dir, experts, hidden, layers] :
       {std::tuple{"granite-3.0-1b-a400m", 32, 1024, 24}, std::tuple{"granite-3.1-3b-a800m", 40, 1536, 32}}) {
    SCOPED_TRACE(dir);
    HfModel m = load(dir);
    EXPECT_EQ(m.model_type, "granitemoe");
    EXPECT_EQ(m.family, HfFamily::kGranite);
    const MoeSpec& s = m.spec;
    EXPECT_EQ(s.num_experts, experts);
    EXPECT_EQ(s.top_k, 8);
    EXPECT_EQ(s.hidden, hidden);
    EXPECT_EQ(s.intermediate, 512);
    EXPECT_TRUE(s.routing.softmax_after_topk);
    EXPECT_FALSE(s.routing.renormalize);
    EXPECT_EQ(s.shared.count, 0);
    EXPECT_EQ(m.moe_layers, range(0, layers));
  }
}

TEST(HfConfig, GraniteMoeShared) {
  HfModel m = load("granite-moe-shared");
  EXPECT_EQ(m.model_type, "granitemoeshared");
  EXPECT_EQ(m.family, HfFamily::kGranite);
  EXPECT_EQ(m.spec.shared.count, 1);
  EXPECT_EQ(m.spec.shared.intermediate, 1024);
  EXPECT_FALSE(m.spec.shared.gated_by_router);
}

TEST(HfConfig, EveryDataConfigIsSupported) {
  const std::vector<std::string> types = supported_model_types();
  for (const char* dir : {"mixtral-8x7b-instruct-v0.1", "qwen1.5-moe-a2.7b", "qwen3-30b-a3b", "deepseek-v2-lite",
                          "deepseek-v3", "deepseek-r1-fp8", "deepseek-r1-fp4", "gpt-oss-20b", "gpt-oss-120b",
                          "llama4-scout-17b-16e", "kimi-k2-instruct", "glm-4.5-air", "olmoe-1b-7b",
                          "phi-3.5-moe-instruct", "granite-3.0-1b-a400m", "granite-3.1-3b-a800m",
                          "granite-moe-shared"}) {
    SCOPED_TRACE(dir);
    HfModel m = load(dir);
    EXPECT_NE(std::find(types.begin(), types.end(), m.model_type), types.end());
    EXPECT_FALSE(m.moe_layers.empty());
    EXPECT_TRUE(std::is_sorted(m.moe_layers.begin(), m.moe_layers.end()));
    EXPECT_LT(m.moe_layers.back(), m.num_layers);
  }
}

// ---- field mapping details -----------------------------------------------------------------------

std::string qwen3(const std::string& extra) {
  return R"({"model_type": "qwen3_moe", "num_experts": 128, "num_experts_per_tok": 8, "hidden_size": 2048,
      "moe_intermediate_size": 768, "num_hidden_layers": 48)" +
         (extra.empty() ? std::string() : ", " + extra) + "}";
}

TEST(HfConfig, HiddenActAndDtype) {
  EXPECT_EQ(parse_hf_config(qwen3(R"("hidden_act": "gelu")"), "c").spec.activation.kind, ActivationKind::kGeluAndMul);
  EXPECT_EQ(parse_hf_config(qwen3(R"("hidden_act": "gelu_pytorch_tanh")"), "c").spec.activation.kind,
            ActivationKind::kGeluTanhAndMul);
  EXPECT_EQ(parse_hf_config(qwen3(""), "c").spec.activation.kind, ActivationKind::kSiluAndMul);
  HfModel f16 = parse_hf_config(qwen3(R"("torch_dtype": "float16")"), "c");
  EXPECT_EQ(f16.spec.act_dtype, DType::kF16);
  EXPECT_EQ(f16.spec.weight_format, WeightFormat::kF16);
  HfModel f32 = parse_hf_config(qwen3(R"("dtype": "float32", "torch_dtype": "bfloat16")"), "c");  // dtype wins
  EXPECT_EQ(f32.spec.act_dtype, DType::kF32);
  EXPECT_EQ(f32.spec.weight_format, WeightFormat::kF32);
  std::string msg = error_of([] { parse_hf_config(qwen3(R"("hidden_act": "relu")"), "c"); }, ErrorKind::kUnsupported);
  expect_contains(msg, "'hidden_act' = \"relu\"");
  expect_contains(msg, "gelu_pytorch_tanh");
  msg = error_of([] { parse_hf_config(qwen3(R"("torch_dtype": "int8")"), "c"); }, ErrorKind::kUnsupported);
  expect_contains(msg, "'torch_dtype' = \"int8\"");
}

TEST(HfConfig, QwenSparseStepAndMlpOnlyLayers) {
  HfModel m = parse_hf_config(qwen3(R"("decoder_sparse_step": 2, "mlp_only_layers": [3, 5])"), "c");
  std::vector<int> want;
  for (int i = 0; i < 48; ++i)
    if ((i + 1) % 2 == 0 && i != 3 && i != 5) want.push_back(i);
  EXPECT_EQ(m.moe_layers, want);
  std::string msg = error_of([] { parse_hf_config(qwen3(R"("decoder_sparse_step": 0)"), "c"); }, ErrorKind::kParse);
  expect_contains(msg, "'decoder_sparse_step' = 0: must be >= 1");
}

TEST(HfConfig, NullMeansAbsent) {
  HfModel m = parse_hf_config(qwen3(R"("norm_topk_prob": null, "mlp_only_layers": null)"), "c");
  EXPECT_FALSE(m.spec.routing.renormalize);  // Qwen3MoeConfig's default
  EXPECT_EQ(m.moe_layers.size(), 48u);
}

TEST(HfConfig, IntegralFloatAccepted) {
  EXPECT_EQ(parse_hf_config(qwen3(R"("hidden_size": 2048.0)"), "c").spec.hidden, 2048);
}

TEST(HfConfig, QuantizationConfigVariants) {
  HfModel pt = parse_hf_config(qwen3(R"("quantization_config": {"quant_method": "fp8", "activation_scheme": "static"})"),
                               "c");
  // One scale per linear: gate and up differ in real checkpoints, which per-channel rows hold exactly.
  EXPECT_EQ(pt.spec.weight_format, WeightFormat::kFp8PerChannel);
  EXPECT_EQ(pt.spec.act_quant, ActQuant::kNone);
  ASSERT_EQ(pt.caveats.size(), 1u);
  expect_contains(pt.caveats[0], "fp8, one static scale per tensor");
  expect_contains(pt.caveats[0], "weight-only");
  HfModel fb = parse_hf_config(qwen3(R"("quantization_config": {"quant_method": "fbgemm_fp8"})"), "c");
  EXPECT_EQ(fb.spec.weight_format, WeightFormat::kFp8PerChannel);
  ASSERT_EQ(fb.caveats.size(), 1u);
  expect_contains(fb.caveats[0], "one dynamic scale per token");
  HfModel block = load("deepseek-r1-fp8");  // DeepSeek's recipe is run as published: no caveat
  EXPECT_EQ(block.spec.act_quant, ActQuant::kFp8PerTokenGroup);
  EXPECT_TRUE(block.caveats.empty());
  std::string msg = error_of(
      [] { parse_hf_config(qwen3(R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [64, 64]})"), "c"); },
      ErrorKind::kUnsupported);
  expect_contains(msg, "weight_block_size");
  expect_contains(msg, "[128, 128]");
  msg = error_of([] { parse_hf_config(qwen3(R"("quantization_config": {"quant_method": "gptq", "bits": 4})"), "c"); },
                 ErrorKind::kUnsupported);
  expect_contains(msg, "'quantization_config.quant_method' = \"gptq\"");
  expect_contains(msg, "mxfp4");
  msg = error_of([] { parse_hf_config(qwen3(R"("quantization_config": {"bits": 4})"), "c"); }, ErrorKind::kParse);
  expect_contains(msg, "missing 'quantization_config.quant_method'");
  msg = error_of([] { parse_hf_config(qwen3(R"("quantization_config": {"quant_method": "fp8", "activation_scheme": "bogus"})"), "c"); },
                 ErrorKind::kParse);
  expect_contains(msg, "'quantization_config.activation_scheme' = \"bogus\"");
  msg = error_of(
      [] { parse_hf_config(qwen3(""), "c", std::string_view(R"({"quantization": {"quant_algo": "W4A8_AWQ"}})")); },
      ErrorKind::kUnsupported);
  expect_contains(msg, "W4A8_AWQ");
  msg = error_of(
      [] { parse_hf_config(qwen3(""), "c", std::string_view(R"({"quantization": {"quant_algo": "NVFP4", "group_size": 32}})")); },
      ErrorKind::kParse);
  expect_contains(msg, "'quantization.group_size' = 32");
}

// ---- which experts a quantization config covers ----------------------------------------------------

// A compressed-tensors quantization_config around one group (and an ignore list).
std::string ct(const std::string& weights, const std::string& inputs = "null",
               const std::string& ignore = R"(["lm_head", "re:.*mlp.gate$"])", const std::string& targets = R"(["Linear"])",
               const std::string& format = "float-quantized") {
  return R"("quantization_config": {"quant_method": "compressed-tensors", "format": ")" + format +
         R"(", "ignore": )" + ignore + R"(, "config_groups": {"group_0": {"targets": )" + targets +
         R"(, "weights": )" + weights + R"(, "input_activations": )" + inputs + "}}}";
}
const char* kFp8Channel = R"({"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false})";

TEST(HfConfigQuantScope, CompressedTensorsFp8AndInt8) {
  // RedHatAI's FP8-dynamic recipe: per-channel weights, activations per token at run time (a caveat).
  HfModel dyn = parse_hf_config(
      qwen3(ct(kFp8Channel, R"({"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true})")), "c");
  EXPECT_EQ(dyn.spec.weight_format, WeightFormat::kFp8PerChannel);
  EXPECT_EQ(dyn.spec.act_quant, ActQuant::kNone);
  ASSERT_EQ(dyn.caveats.size(), 1u);
  expect_contains(dyn.caveats[0], "float 8-bit, token, dynamic");
  // Per-tensor weights with static inputs: held as rows of one value.
  HfModel pt = parse_hf_config(
      qwen3(ct(R"({"num_bits": 8, "type": "float", "strategy": "tensor"})",
               R"({"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false})")),
      "c");
  EXPECT_EQ(pt.spec.weight_format, WeightFormat::kFp8PerChannel);
  ASSERT_EQ(pt.caveats.size(), 1u);
  expect_contains(pt.caveats[0], "tensor, static");
  // FP8 block with dynamic inputs per 128 columns is DeepSeek's recipe: run as is.
  HfModel blk = parse_hf_config(
      qwen3(ct(R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]})",
               R"({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128, "dynamic": true})")),
      "c");
  EXPECT_EQ(blk.spec.weight_format, WeightFormat::kFp8Block);
  EXPECT_EQ(blk.spec.act_quant, ActQuant::kFp8PerTokenGroup);
  EXPECT_TRUE(blk.caveats.empty());
  // W8A8 int8.
  HfModel i8 = parse_hf_config(
      qwen3(ct(R"({"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": true})",
               R"({"num_bits": 8, "type": "int", "strategy": "token", "dynamic": true})", R"(["lm_head"])", R"(["Linear"])",
               "int-quantized")),
      "c");
  EXPECT_EQ(i8.spec.weight_format, WeightFormat::kInt8PerChannel);
  ASSERT_EQ(i8.caveats.size(), 1u);
  // Weight-only: no caveat.
  EXPECT_TRUE(parse_hf_config(qwen3(ct(kFp8Channel)), "c").caveats.empty());
  // NVFP4 (llm-compressor's W4A4 recipe; NVFP4A16 has no input_activations).
  const std::string nv = R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": true})";
  HfModel w4a4 = parse_hf_config(
      qwen3(ct(nv, R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "dynamic": "local"})",
               "[]", R"(["Linear"])", "nvfp4-pack-quantized")),
      "c");
  EXPECT_EQ(w4a4.spec.weight_format, WeightFormat::kNvfp4);
  ASSERT_EQ(w4a4.caveats.size(), 1u);
  expect_contains(w4a4.caveats[0], "float 4-bit, tensor_group of 16, \"local\"");
  EXPECT_TRUE(parse_hf_config(qwen3(ct(nv, "null", "[]", R"(["Linear"])", "nvfp4-pack-quantized")), "c").caveats.empty());

  // What moerun does not read is refused, naming the group and why.
  std::string msg = error_of(
      [] { parse_hf_config(qwen3(ct(R"({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128})", "null",
                                    "[]", R"(["Linear"])", "pack-quantized")), "c"); },
      ErrorKind::kUnsupported);
  expect_contains(msg, "'quantization_config.config_groups.group_0.weights' = int 4-bit, group of 128, static");
  expect_contains(msg, "4-bit weights of this kind are not a moerun format");
  msg = error_of([] { parse_hf_config(qwen3(ct(R"({"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": false})")), "c"); },
                 ErrorKind::kUnsupported);
  expect_contains(msg, "zero points");
  msg = error_of([] { parse_hf_config(qwen3(ct(R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [64, 64]})")), "c"); },
                 ErrorKind::kUnsupported);
  expect_contains(msg, "[128, 128]");
  msg = error_of([] { parse_hf_config(qwen3(ct(kFp8Channel, "null", "[]", R"(["Linear"])", "pack-quantized")), "c"); },
                 ErrorKind::kUnsupported);
  expect_contains(msg, "the format of 'quantization_config.config_groups.group_0' = \"pack-quantized\" is not read for these weights");
  msg = error_of([&] { parse_hf_config(qwen3(ct(nv, "null", "[]", R"(["Linear"])", "float-quantized")), "c"); },
                 ErrorKind::kUnsupported);
  expect_contains(msg, "supported: nvfp4-pack-quantized");
  msg = error_of([] { parse_hf_config(qwen3(R"("quantization_config": {"quant_method": "compressed-tensors"})"), "c"); },
                 ErrorKind::kParse);
  expect_contains(msg, "missing 'quantization_config.config_groups'");
}

TEST(HfConfigQuantScope, CompressedTensorsTargetsAndIgnore) {
  // Experts ignored (or never targeted) in every layer: the checkpoint dtype, no caveat.
  for (const auto& [ignore, targets] : {std::pair<std::string, std::string>{R"(["re:.*mlp.experts.*"])", R"(["Linear"])"},
                                        {R"([])", R"(["re:.*self_attn.*"])"},
                                        {R"(["re:.*"])", R"(["Linear"])"}}) {
    HfModel m = parse_hf_config(qwen3(ct(kFp8Channel, "null", ignore, targets)), "c");
    EXPECT_EQ(m.spec.weight_format, WeightFormat::kBF16) << ignore << " " << targets;
    EXPECT_TRUE(m.caveats.empty());
  }
  // Targets by name: the expert linears by regex, or exactly.
  EXPECT_EQ(parse_hf_config(qwen3(ct(kFp8Channel, "null", "[]", R"(["re:.*experts\\.[0-9]+\\.(gate|up|down)_proj$"])")), "c")
                .spec.weight_format,
            WeightFormat::kFp8PerChannel);
  // Some layers quantized and some not: one format per layer spec, refused naming a module of each.
  std::string msg = error_of(
      [] { parse_hf_config(qwen3(ct(kFp8Channel, "null", R"(["re:model\\.layers\\.0\\.mlp\\.experts"])")), "c"); },
      ErrorKind::kUnsupported);
  expect_contains(msg, "model.layers.0.mlp.experts.0.gate_proj stays unquantized");
  expect_contains(msg, "model.layers.1.mlp.experts.0.gate_proj is quantized by 'group_0'");
  expect_contains(msg, "'quantization_config.config_groups' and 'quantization_config.ignore'");
  // A qwen2-moe shared expert kept in bf16 beside quantized routed experts: a format of its own.
  const std::string qwen2 = R"({"model_type": "qwen2_moe", "num_experts": 60, "num_experts_per_tok": 4,
      "hidden_size": 2048, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
      "num_hidden_layers": 2, )";
  {
    const MoeSpec mixed = parse_hf_config(qwen2 + ct(kFp8Channel, "null", R"(["re:.*shared_expert\\."])") + "}", "c").spec;
    EXPECT_EQ(mixed.weight_format, WeightFormat::kFp8PerChannel);
    EXPECT_EQ(mixed.shared.weight_format, std::optional<WeightFormat>(WeightFormat::kBF16));
    EXPECT_TRUE(mixed.mixed_formats());
  }
  {
    const MoeSpec same = parse_hf_config(qwen2 + ct(kFp8Channel, "null", R"(["re:.*shared_expert_gate$"])") + "}", "c").spec;
    EXPECT_EQ(same.weight_format, WeightFormat::kFp8PerChannel);
    EXPECT_FALSE(same.shared.weight_format.has_value());
  }
  // Within a part the formats must still agree: one of the shared expert's linears left in bf16 is refused.
  msg = error_of([&] { parse_hf_config(qwen2 + ct(kFp8Channel, "null", R"(["re:.*shared_expert\\.down_proj$"])") + "}", "c"); },
                 ErrorKind::kUnsupported);
  expect_contains(msg, "give the shared experts of this model two formats");
  expect_contains(msg, "model.layers.0.mlp.shared_expert.gate_proj is quantized by 'group_0'");
  expect_contains(msg, "model.layers.0.mlp.shared_expert.down_proj stays unquantized");

  // Groups that quantize alike are one scheme: gate/up in one group and down in another load.
  const std::string split = R"("quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
      "a": {"targets": ["re:.*(gate|up)_proj$"], "weights": )" + std::string(kFp8Channel) + R"(},
      "b": {"targets": ["re:.*down_proj$"], "weights": WB}}})";
  auto with = [&](const std::string& wb) { return qwen3(split.substr(0, split.find("WB")) + wb + split.substr(split.find("WB") + 2)); };
  EXPECT_EQ(parse_hf_config(with(kFp8Channel), "c").spec.weight_format, WeightFormat::kFp8PerChannel);
  msg = error_of([&] { parse_hf_config(with(R"({"num_bits": 8, "type": "float", "strategy": "tensor"})"), "c"); },
                 ErrorKind::kUnsupported);
  expect_contains(msg, "model.layers.0.mlp.experts.0.gate_proj is quantized by 'a'; model.layers.0.mlp.experts.0.down_proj "
                       "is quantized by 'b'");
  // The most specific target wins (exact name > pattern > class): a "Linear" default with a pattern
  // override for the experts takes the override; two patterns that tie and differ are refused.
  const std::string over = R"("quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
      "default": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int", "strategy": "channel"}},
      "experts": {"targets": ["re:.*mlp\\.experts\\."], "weights": )" + std::string(kFp8Channel) + R"(}}})";
  EXPECT_EQ(parse_hf_config(qwen3(over), "c").spec.weight_format, WeightFormat::kFp8PerChannel);
  std::string tie = over;
  tie.replace(tie.find(R"(["Linear"])"), 10, R"(["re:.*proj$"])");
  msg = error_of([&] { parse_hf_config(qwen3(tie), "c"); }, ErrorKind::kUnsupported);
  expect_contains(msg, "model.layers.0.mlp.experts.0.gate_proj matches the targets of 'quantization_config.config_groups.default' "
                       "and of 'quantization_config.config_groups.experts' alike");
  // A mixed-precision export names each group's own format.
  std::string mixed = over;
  mixed.replace(mixed.find(R"("config_groups")"), 15, R"("format": "mixed-precision", "config_groups")");
  mixed.replace(mixed.find(R"("targets": ["re:)"), 10, R"("format": "float-quantized", "targets":)");
  EXPECT_EQ(parse_hf_config(qwen3(mixed), "c").spec.weight_format, WeightFormat::kFp8PerChannel);
  // gpt-oss keeps its routed experts in fused 3-D tensors, not Linear modules: "Linear" leaves them alone.
  const std::string gpt = R"({"model_type": "gpt_oss", "num_local_experts": 32, "num_experts_per_tok": 4,
      "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 24, )";
  EXPECT_EQ(parse_hf_config(gpt + ct(kFp8Channel) + "}", "c").spec.weight_format, WeightFormat::kBF16);
  // A strategy left out follows from group_size, as in compressed-tensors: int8 groups of 128 are refused.
  msg = error_of([] { parse_hf_config(qwen3(ct(R"({"num_bits": 8, "type": "int", "strategy": null, "group_size": 128})")), "c"); },
                 ErrorKind::kUnsupported);
  expect_contains(msg, "int 8-bit, group of 128, static");
  EXPECT_EQ(parse_hf_config(qwen3(ct(R"({"num_bits": 8, "type": "int", "group_size": -1})")), "c").spec.weight_format,
            WeightFormat::kInt8PerChannel);
  EXPECT_EQ(parse_hf_config(qwen3(ct(R"({"num_bits": 8, "type": "float", "group_size": -1})")), "c").spec.weight_format,
            WeightFormat::kFp8PerChannel);
  // A group that quantizes only the experts' inputs leaves the weights alone, with a caveat.
  HfModel act_only = parse_hf_config(qwen3(ct("null", R"({"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true})")), "c");
  EXPECT_EQ(act_only.spec.weight_format, WeightFormat::kBF16);
  ASSERT_EQ(act_only.caveats.size(), 1u);
  expect_contains(act_only.caveats[0], "float 8-bit, token, dynamic");

  // Patterns moerun does not run: named, never a crash, a long match or a silent misreading.
  msg = error_of([] { parse_hf_config(qwen3(ct(kFp8Channel, "null", R"(["re:(unclosed"])")), "c"); }, ErrorKind::kUnsupported);
  expect_contains(msg, "'quantization_config.ignore' entry \"re:(unclosed\" is not a pattern moerun reads: a missing ')'");
  msg = error_of([] { parse_hf_config(qwen3(ct(kFp8Channel, "null", R"(["re:(a{1000}){1000}"])")), "c"); },
                 ErrorKind::kUnsupported);
  expect_contains(msg, "a program over 4096 instructions");
  // Python's syntax as Python reads it (\A, \Z, a leading ']' in a class), or refused: an unknown
  // escape, a lookahead (whose nesting costs exponential time in std::regex's automaton mode).
  EXPECT_EQ(parse_hf_config(qwen3(ct(kFp8Channel, "null", R"(["re:\\A.*experts.*\\Z"])")), "c").spec.weight_format,
            WeightFormat::kBF16);
  msg = error_of([] { parse_hf_config(qwen3(ct(kFp8Channel, "null", R"(["re:.*\\Lproj"])")), "c"); }, ErrorKind::kUnsupported);
  expect_contains(msg, "the escape \\L");
  EXPECT_EQ(parse_hf_config(qwen3(ct(kFp8Channel, "null", R"(["re:[]m]odel\\.layers\\.[0-9]+\\.mlp\\.experts"])")), "c")
                .spec.weight_format,
            WeightFormat::kBF16);
  msg = error_of([] { parse_hf_config(qwen3(ct(kFp8Channel, "null", R"x(["re:.*(?=.*(?=.*(?=z)))"])x")), "c"); },
                 ErrorKind::kUnsupported);
  expect_contains(msg, "a '(?' construct");
  EXPECT_EQ(parse_hf_config(qwen3(ct(kFp8Channel, "null", R"(["re:model\\.layers\\.[0-9]{1,2}\\.mlp\\.experts"])")), "c")
                .spec.weight_format,
            WeightFormat::kBF16);
  // A backtracking matcher would take exponential time on this one; moerun's runs as an automaton.
  EXPECT_EQ(parse_hf_config(qwen3(ct(kFp8Channel, "null", R"(["re:(.*)*(.*)*(.*)*(.*)*(.*)*x$"])")), "c").spec.weight_format,
            WeightFormat::kFp8PerChannel);
  msg = error_of([] { parse_hf_config(qwen3(ct(kFp8Channel, "null", "[\"lm_head\"]", R"("Linear")")), "c"); }, ErrorKind::kParse);
  expect_contains(msg, "'quantization_config.config_groups.group_0.targets' must be an array of strings");
  // Matching work is bounded by program sizes x expert names x name length, checked entry by entry as
  // they compile, before anything is matched.
  msg = error_of(
      [] {
        std::string many = "[";
        for (int i = 0; i < 100; ++i) many += (i ? ", " : "") + std::string("\"re:") + std::string(200, 'x') + "\"";
        parse_hf_config(qwen3(ct(kFp8Channel, "null", many + "]")), "c");
      },
      ErrorKind::kUnsupported);
  expect_contains(msg, "hold patterns (21 so far) whose matching against 288 expert module names would take more than");
  // ... and so is a pattern that emits nothing however often it repeats (it compiles to nothing).
  EXPECT_EQ(parse_hf_config(qwen3(ct(kFp8Channel, "null", R"(["re:(((){99999}){99999}){99999}x"])")), "c").spec.weight_format,
            WeightFormat::kFp8PerChannel);
  // A null group counts as absent.
  EXPECT_EQ(parse_hf_config(qwen3(R"("quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"a": null}})"),
                            "c").spec.weight_format,
            WeightFormat::kBF16);
}

TEST(HfConfigQuantScope, ExclusionListsOfHfAndModelOpt) {
  // gpt-oss's own list names attention and the router, not the experts.
  EXPECT_EQ(load("gpt-oss-120b").spec.weight_format, WeightFormat::kMxfp4);
  // DeepSeek-R1-FP4 excludes attention only: the experts are NVFP4 (W4A4 in the recipe: a caveat).
  HfModel r1 = load("deepseek-r1-fp4");
  EXPECT_EQ(r1.spec.weight_format, WeightFormat::kNvfp4);
  ASSERT_EQ(r1.caveats.size(), 1u);
  expect_contains(r1.caveats[0], "NVFP4 W4A4");
  // Experts excluded in every layer, by a parent's name, a glob or a suffix: the checkpoint dtype.
  for (const char* list : {R"(["model.layers.*.mlp.experts"])", R"(["*experts*"])", R"(["mlp.experts"])"}) {
    HfModel m = parse_hf_config(
        qwen3(std::string(R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128],
                              "modules_to_not_convert": )") + list + "}"),
        "c");
    EXPECT_EQ(m.spec.weight_format, WeightFormat::kBF16) << list;
    EXPECT_EQ(m.spec.act_quant, ActQuant::kNone) << list;
    HfModel mo = parse_hf_config(qwen3(""), "c",
                                 std::string_view(std::string(R"({"quantization": {"quant_algo": "NVFP4", "exclude_modules": )") +
                                                  list + "}}"));
    EXPECT_EQ(mo.spec.weight_format, WeightFormat::kBF16) << list;
    EXPECT_TRUE(mo.caveats.empty());
  }
  // A long list of the shape FP8 exports write (each layer's router gate by name; a 94-layer
  // Qwen3-235B: 95 entries) is read.
  {
    std::string gates = R"(["lm_head")";
    for (int l = 0; l < 94; ++l) gates += ", \"model.layers." + std::to_string(l) + ".mlp.gate\"";
    HfModel big = parse_hf_config(R"({"model_type": "qwen3_moe", "num_experts": 128, "num_experts_per_tok": 8,
        "hidden_size": 4096, "moe_intermediate_size": 1536, "num_hidden_layers": 94, "quantization_config": {
        "quant_method": "fp8", "weight_block_size": [128, 128], "modules_to_not_convert": )" + gates + "]}}",
                                  "c");
    EXPECT_EQ(big.spec.weight_format, WeightFormat::kFp8Block);
  }
  // Names that share only part of a component with an expert module do not exclude it.
  EXPECT_EQ(parse_hf_config(qwen3(R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128],
                                    "modules_to_not_convert": ["model.layers.1x", "mlp.gate", "lm_head", "experts.0.gate"]})"),
                            "c")
                .spec.weight_format,
            WeightFormat::kFp8Block);
  // One layer excluded, the others not: refused.
  std::string msg = error_of(
      [] {
        parse_hf_config(qwen3(R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128],
                                 "modules_to_not_convert": ["model.layers.1.mlp"]})"),
                        "c");
      },
      ErrorKind::kUnsupported);
  expect_contains(msg, "'quantization_config.modules_to_not_convert' give the routed experts of this model two formats");
  expect_contains(msg, "model.layers.1.mlp.experts.0.gate_proj stays unquantized");
}

// ---- errors --------------------------------------------------------------------------------------

// Exporters leave the shared experts in the checkpoint dtype by name (the routed experts quantized):
// the spec takes a shared format of its own, and the routed experts' activation quantization does
// not reach them.
TEST(HfConfigQuantScope, SharedExpertsInAFormatOfTheirOwn) {
  const std::string v3 = R"({"model_type": "deepseek_v3", "n_routed_experts": 256, "num_experts_per_tok": 8,
      "hidden_size": 7168, "moe_intermediate_size": 2048, "n_shared_experts": 1, "num_hidden_layers": 5,
      "first_k_dense_replace": 3, "n_group": 8, "topk_group": 4, "torch_dtype": "bfloat16", )";
  // HF fp8 block: modules_to_not_convert naming the shared experts of every layer.
  for (const char* list : {R"(["mlp.shared_experts"])", R"(["*shared_experts*"])", R"(["model.layers.3.mlp.shared_experts", "model.layers.4.mlp.shared_experts"])"}) {
    const MoeSpec s = parse_hf_config(v3 + R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128],
        "modules_to_not_convert": )" + list + "}}",
                                      "c")
                          .spec;
    EXPECT_EQ(s.weight_format, WeightFormat::kFp8Block) << list;
    EXPECT_EQ(s.act_quant, ActQuant::kFp8PerTokenGroup) << list;
    EXPECT_EQ(s.shared_weight_format(), WeightFormat::kBF16) << list;
    EXPECT_EQ(s.shared_act_quant(), ActQuant::kNone) << list;
    EXPECT_NE(s.summary().find("shared=1x2048:bf16"), std::string::npos) << s.summary();
  }
  // ... the shared experts of one layer only: refused, naming a shared module of each kind.
  std::string msg = error_of(
      [&] {
        parse_hf_config(v3 + R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128],
            "modules_to_not_convert": ["model.layers.4.mlp.shared_experts"]}})",
                        "c");
      },
      ErrorKind::kUnsupported);
  expect_contains(msg, "give the shared experts of this model two formats");
  expect_contains(msg, "model.layers.3.mlp.shared_experts.gate_proj is quantized by the config");
  expect_contains(msg, "model.layers.4.mlp.shared_experts.gate_proj stays unquantized");
  // ModelOpt NVFP4 (hf_quant_config.json) excluding them by glob.
  {
    const HfModel m = parse_hf_config(v3 + R"("vocab_size": 129280})", "c",
                                      std::string_view(R"({"quantization": {"quant_algo": "NVFP4", "group_size": 16,
                                          "exclude_modules": ["lm_head", "*self_attn*", "*shared_experts*"]}})"));
    EXPECT_EQ(m.spec.weight_format, WeightFormat::kNvfp4);
    EXPECT_EQ(m.spec.shared_weight_format(), WeightFormat::kBF16);
    ASSERT_EQ(m.caveats.size(), 1u);
    expect_contains(m.caveats[0], "NVFP4 W4A4");
  }
  // The routed experts excluded and the shared ones quantized: the routed take the checkpoint dtype, and
  // the fp8 block recipe's input quantization reaches neither part (a caveat says so).
  {
    const HfModel m = parse_hf_config(v3 + R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128],
        "modules_to_not_convert": ["mlp.experts"]}})",
                                      "c");
    EXPECT_EQ(m.spec.weight_format, WeightFormat::kBF16);
    EXPECT_EQ(m.spec.shared_weight_format(), WeightFormat::kFp8Block);
    EXPECT_EQ(m.spec.act_quant, ActQuant::kNone);
    ASSERT_EQ(m.caveats.size(), 1u);
    expect_contains(m.caveats[0], "quantizes the shared experts' inputs (fp8-token-group)");
  }
  // Both parts excluded: the checkpoint dtype for both, no caveat.
  {
    const HfModel m = parse_hf_config(v3 + R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128],
        "modules_to_not_convert": ["mlp.experts", "mlp.shared_experts"]}})",
                                      "c");
    EXPECT_EQ(m.spec.weight_format, WeightFormat::kBF16);
    EXPECT_FALSE(m.spec.mixed_formats());
    EXPECT_TRUE(m.caveats.empty());
  }
  // compressed-tensors: a group of its own for the shared experts (NVFP4 routed, FP8 channel shared).
  {
    const std::string cfg = v3 + R"("quantization_config": {"quant_method": "compressed-tensors", "format": "mixed-precision",
        "config_groups": {
          "routed": {"targets": ["re:.*mlp\\.experts\\..*"], "format": "nvfp4-pack-quantized",
                     "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": true}},
          "shared": {"targets": ["re:.*shared_experts.*"], "format": "float-quantized",
                     "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true},
                     "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}}}}})";
    const HfModel m = parse_hf_config(cfg, "c");
    EXPECT_EQ(m.spec.weight_format, WeightFormat::kNvfp4);
    EXPECT_EQ(m.spec.shared_weight_format(), WeightFormat::kFp8PerChannel);
    EXPECT_EQ(m.spec.act_quant, ActQuant::kNone);
    ASSERT_EQ(m.caveats.size(), 1u);  // the shared group's per-token fp8 inputs, run weight-only
    expect_contains(m.caveats[0], "quantizes the shared experts' inputs (float 8-bit, token, dynamic); moerun runs them "
                                  "unquantized");
  }
  // The routed experts on DeepSeek's recipe (fp8-token-group), the shared ones fp8-channel with per-token
  // inputs: moerun quantizes the shared experts' inputs as the routed ones' (their format admits it),
  // which is not the recipe's per-token scale: one caveat, about the shared experts.
  const std::string deepseek_recipe = R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128], "symmetric": true},
                     "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128, "dynamic": true})";
  const std::string per_token = R"({"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true},
                     "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true})";
  const auto two_groups = [&](const std::string& routed, const std::string& shared) {
    return v3 + R"("quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized",
        "config_groups": {"routed": {"targets": ["re:.*mlp\\.experts\\..*"], "weights": )" + routed + R"(},
                          "shared": {"targets": ["re:.*shared_experts.*"], "weights": )" + shared + "}}}}";
  };
  {
    const HfModel m = parse_hf_config(two_groups(deepseek_recipe, per_token), "c");
    EXPECT_EQ(m.spec.weight_format, WeightFormat::kFp8Block);
    EXPECT_EQ(m.spec.act_quant, ActQuant::kFp8PerTokenGroup);
    EXPECT_EQ(m.spec.shared_weight_format(), WeightFormat::kFp8PerChannel);
    EXPECT_EQ(m.spec.shared_act_quant(), ActQuant::kFp8PerTokenGroup);
    ASSERT_EQ(m.caveats.size(), 1u);
    expect_contains(m.caveats[0], "quantizes the shared experts' inputs (float 8-bit, token, dynamic); moerun runs them "
                                  "with fp8-token-group");
  }
  // ... and the reverse: the routed experts' per-token inputs run weight-only (the layer's caveat), and
  // the shared experts' DeepSeek recipe has no activation quantization to take (the spec's is none).
  {
    const HfModel m = parse_hf_config(two_groups(per_token, deepseek_recipe), "c");
    EXPECT_EQ(m.spec.weight_format, WeightFormat::kFp8PerChannel);
    EXPECT_EQ(m.spec.act_quant, ActQuant::kNone);
    EXPECT_EQ(m.spec.shared_weight_format(), WeightFormat::kFp8Block);
    ASSERT_EQ(m.caveats.size(), 2u);
    expect_contains(m.caveats[0], "the checkpoint's recipe quantizes the experts' inputs (float 8-bit, token, dynamic)");
    expect_contains(m.caveats[1], "quantizes the shared experts' inputs (float 8-bit, group of 128, dynamic); moerun runs "
                                  "them unquantized");
  }
  // ... or a group that quantizes the shared experts' inputs only, their weights left in bf16: the
  // routed experts quantized, the shared ones bf16, and a caveat for the inputs moerun leaves alone.
  {
    const std::string cfg = v3 + R"("quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized",
        "config_groups": {
          "routed": {"targets": ["re:.*mlp\\.experts\\..*"],
                     "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true}},
          "inputs": {"targets": ["re:.*shared_experts.*"],
                     "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}}}}})";
    const HfModel m = parse_hf_config(cfg, "c");
    EXPECT_EQ(m.spec.weight_format, WeightFormat::kFp8PerChannel);
    EXPECT_EQ(m.spec.shared_weight_format(), WeightFormat::kBF16);
    ASSERT_EQ(m.caveats.size(), 1u);
    expect_contains(m.caveats[0], "quantizes the shared experts' inputs (float 8-bit, token, dynamic); moerun runs them "
                                  "unquantized");
  }
  // Granite's fused experts are no nn.Linear: a "Linear" target would quantize its shared_mlp alone,
  // which the reader takes only unquantized.
  msg = error_of(
      [] {
        parse_hf_config(R"({"model_type": "granitemoeshared", "num_local_experts": 8, "num_experts_per_tok": 2,
            "hidden_size": 256, "intermediate_size": 512, "shared_intermediate_size": 1024, "num_hidden_layers": 2,
            "quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"],
              "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true}}}}})",
                        "c");
      },
      ErrorKind::kUnsupported);
  expect_contains(msg, "stores granite's shared_mlp as fp8-channel");
}

TEST(HfConfigErrors, MissingFieldNamesItAndTheModelType) {
  std::string msg = error_of(
      [] {
        parse_hf_config(R"({"model_type": "mixtral", "num_experts_per_tok": 2, "hidden_size": 4096,
                           "intermediate_size": 14336, "num_hidden_layers": 32})",
                        "config.json");
      },
      ErrorKind::kParse);
  EXPECT_EQ(msg, "config.json: missing 'num_local_experts' (mixtral needs it)");
  msg = error_of([] { parse_hf_config(R"({"model_type": "qwen2_moe", "num_experts": 60, "num_experts_per_tok": 4,
                                          "hidden_size": 2048, "moe_intermediate_size": 1408,
                                          "num_hidden_layers": 24})",
                                      "/m/config.json"); },
                 ErrorKind::kParse);
  EXPECT_EQ(msg, "/m/config.json: missing 'shared_expert_intermediate_size' (qwen2_moe needs it)");
  msg = error_of([] { parse_hf_config(R"({"model_type": "glm4_moe", "n_routed_experts": 128})", "c"); },
                 ErrorKind::kParse);
  expect_contains(msg, "missing 'num_experts_per_tok' (glm4_moe needs it)");
  msg = error_of([] { parse_hf_config(R"({"num_experts": 8})", "c"); }, ErrorKind::kParse);
  expect_contains(msg, "missing 'model_type'");
  expect_contains(msg, "qwen3_moe");
}

TEST(HfConfigErrors, MissingFieldInRealConfig) {
  // Each required shape field in turn is absent: the message names exactly that field.
  for (const char* field : {"num_local_experts", "num_experts_per_tok", "hidden_size", "intermediate_size",
                            "num_hidden_layers"}) {
    SCOPED_TRACE(field);
    std::string text = R"({"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2,
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32})";
    std::string key = std::string("\"") + field + "\": ";
    size_t at = text.find(key);
    text.replace(at, key.size(), "\"renamed_" + std::string(field) + "\": ");
    std::string msg = error_of([&] { parse_hf_config(text, "config.json"); }, ErrorKind::kParse);
    EXPECT_EQ(msg, "config.json: missing '" + std::string(field) + "' (mixtral needs it)");
  }
}

TEST(HfConfigErrors, WrongTypeNamesFieldAndExpectedType) {
  std::string msg;
  msg = error_of([] {
    parse_hf_config(R"({"model_type": "olmoe", "num_experts": "64", "num_experts_per_tok": 8, "hidden_size": 2048,
                       "intermediate_size": 1024, "num_hidden_layers": 16})", "config.json");
  }, ErrorKind::kParse);
  EXPECT_EQ(msg, "config.json: 'num_experts' must be an integer, got string \"64\"");
  msg = error_of([] { parse_hf_config(qwen3(R"("norm_topk_prob": "yes")"), "c"); }, ErrorKind::kParse);
  EXPECT_EQ(msg, "c: 'norm_topk_prob' must be a boolean, got string \"yes\"");
  msg = error_of([] { parse_hf_config(qwen3(R"("hidden_act": 3)"), "c"); }, ErrorKind::kParse);
  EXPECT_EQ(msg, "c: 'hidden_act' must be a string, got integer 3");
  msg = error_of([] { parse_hf_config(qwen3(R"("mlp_only_layers": [1, "2"])"), "c"); }, ErrorKind::kParse);
  expect_contains(msg, "'mlp_only_layers' must be an array of integers");
  msg = error_of([] { parse_hf_config(qwen3(R"("quantization_config": "fp8")"), "c"); }, ErrorKind::kParse);
  EXPECT_EQ(msg, "c: 'quantization_config' must be an object, got string \"fp8\"");
  msg = error_of([] { parse_hf_config(R"({"model_type": 7})", "c"); }, ErrorKind::kParse);
  EXPECT_EQ(msg, "c: 'model_type' must be a string, got integer 7");
  msg = error_of([] { parse_hf_config(qwen3(R"("hidden_size": 2048.5)"), "c"); }, ErrorKind::kParse);
  expect_contains(msg, "'hidden_size' must be an integer, got number 2048.5");
  msg = error_of([] { parse_hf_config(qwen3(R"("hidden_size": 99999999999)"), "c"); }, ErrorKind::kParse);
  expect_contains(msg, "'hidden_size' = 99999999999: out of range");
  msg = error_of([] { parse_hf_config(R"({"model_type": "llama4", "text_config": [1]})", "c"); }, ErrorKind::kParse);
  expect_contains(msg, "'text_config' must be an object, got array");
  msg = error_of([] {
    parse_hf_config(R"({"model_type": "llama4", "text_config": {"num_local_experts": 16, "num_experts_per_tok": true}})", "c");
  }, ErrorKind::kParse);
  EXPECT_EQ(msg, "c: 'text_config.num_experts_per_tok' must be an integer, got boolean true");
}

// A value of the wrong type that nests deeply is named by its size (dumping it recursed once per
// level: 100000 levels overflowed the stack), and a file nested past 64 levels is refused as it is read.
TEST(HfConfigErrors, DeeplyNestedValuesAreRefusedNotDumped) {
  const auto nested = [](int depth) { return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']'); };
  std::string msg = error_of([&] { parse_hf_config(qwen3(R"("hidden_size": )" + nested(3)), "c"); }, ErrorKind::kParse);
  EXPECT_EQ(msg, "c: 'hidden_size' must be an integer, got array of 1 element");
  msg = error_of([&] { parse_hf_config(qwen3(R"("quantization_config": )" + nested(100000)), "c"); }, ErrorKind::kParse);
  EXPECT_EQ(msg, "c: nests deeper than 64 levels");
  msg = error_of([&] { parse_hf_config(qwen3(R"("hidden_size": )" + nested(100000)), "c"); }, ErrorKind::kParse);
  EXPECT_EQ(msg, "c: nests deeper than 64 levels");
}

TEST(HfConfigErrors, UnsupportedModelTypeListsSupported) {
  std::string msg = error_of([] { parse_hf_config(R"({"model_type": "llama", "hidden_size": 4096})", "config.json"); },
                             ErrorKind::kUnsupported);
  expect_contains(msg, "config.json: model_type \"llama\" is not a supported MoE model; supported: ");
  for (const std::string& t : supported_model_types()) expect_contains(msg, t);
}

TEST(HfConfigErrors, SupportedTypesCoverTheBrief) {
  std::vector<std::string> want = {"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss",
                                   "llama4", "llama4_text", "kimi_k2", "glm4_moe", "olmoe", "phimoe", "granitemoe",
                                   "granitemoeshared"};
  std::vector<std::string> got = supported_model_types();
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
}

TEST(HfConfigErrors, MalformedJsonIsOneLineWithPosition) {
  std::string msg = error_of([] { parse_hf_config("{\n  \"model_type\": \"mixtral\",\n  \"x\": \n}\n", "config.json"); },
                             ErrorKind::kParse);
  expect_contains(msg, "config.json: malformed JSON: ");
  expect_contains(msg, "line 4, column 1");
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  EXPECT_EQ(msg.find("[json.exception"), std::string::npos);
  msg = error_of([] { parse_hf_config("", "config.json"); }, ErrorKind::kParse);
  expect_contains(msg, "malformed JSON");
  msg = error_of([] { parse_hf_config("[1, 2]", "config.json"); }, ErrorKind::kParse);
  EXPECT_EQ(msg, "config.json: expected a JSON object at the top level, got array");
  msg = error_of([] { parse_hf_config(qwen3(""), "/m/config.json", std::string_view("{oops")); }, ErrorKind::kParse);
  expect_contains(msg, "/m/hf_quant_config.json: malformed JSON");
  msg = error_of([] { parse_hf_config(qwen3(""), "c", std::string_view("{}")); }, ErrorKind::kParse);
  expect_contains(msg, "missing 'quantization'");
}

TEST(HfConfigErrors, LayerCountsAreBounded) {
  std::string msg = error_of([] { parse_hf_config(qwen3(R"("num_hidden_layers": 2000000000)"), "c"); },
                             ErrorKind::kParse);
  expect_contains(msg, "'num_hidden_layers' = 2000000000: must be in [1, 65536]");
  msg = error_of([] { parse_hf_config(qwen3(R"("num_hidden_layers": 0)"), "c"); }, ErrorKind::kParse);
  expect_contains(msg, "'num_hidden_layers' = 0");
}

TEST(HfConfigErrors, MissingFileIsIo) {
  std::string msg = error_of([] { read_hf_config("/nonexistent/dir/config.json"); }, ErrorKind::kIo);
  expect_contains(msg, "/nonexistent/dir/config.json");
}

// ---- presets -------------------------------------------------------------------------------------

TEST(Presets, TheListedOnesExist) {
  for (const char* name : {"qwen3-30b-a3b", "qwen2-moe-a2.7b", "qwen3-235b-a22b", "deepseek-v2-lite", "deepseek-v3",
                           "deepseek-r1-fp8", "deepseek-r1-fp4", "gpt-oss-20b", "gpt-oss-120b", "mixtral-8x7b",
                           "mixtral-8x22b", "llama4-scout", "kimi-k2", "glm-4.5-air", "olmoe-1b-7b", "phi-3.5-moe",
                           "granite-3.1-3b-a800m"}) {
    SCOPED_TRACE(name);
    const Preset& p = find_preset(name);
    EXPECT_EQ(p.name, name);
    EXPECT_EQ(p.model.spec.name, name);
  }
}

TEST(Presets, NamesUniqueDescriptionsOneLineTypesSupported) {
  const std::vector<std::string> types = supported_model_types();
  std::set<std::string> names;
  for (const Preset& p : presets()) {
    SCOPED_TRACE(p.name);
    EXPECT_TRUE(names.insert(p.name).second) << "duplicate preset " << p.name;
    EXPECT_FALSE(p.description.empty());
    EXPECT_EQ(p.description.find('\n'), std::string::npos);
    EXPECT_NE(std::find(types.begin(), types.end(), p.model.model_type), types.end());
    const MoeSpec& s = p.model.spec;
    EXPECT_GT(s.num_experts, 0);
    EXPECT_GE(s.top_k, 1);
    EXPECT_LE(s.top_k, s.num_experts);
    EXPECT_GT(s.hidden, 0);
    EXPECT_GT(s.intermediate, 0);
    EXPECT_FALSE(p.model.moe_layers.empty());
  }
  EXPECT_GE(presets().size(), 17u);
}

// A preset and the published config of the same model agree on everything but the name.
void expect_same_layer(const HfModel& a, const HfModel& b) {
  const MoeSpec &x = a.spec, &y = b.spec;
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.family, b.family);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.moe_layers, b.moe_layers);
  EXPECT_EQ(x.num_experts, y.num_experts);
  EXPECT_EQ(x.top_k, y.top_k);
  EXPECT_EQ(x.hidden, y.hidden);
  EXPECT_EQ(x.intermediate, y.intermediate);
  EXPECT_EQ(x.activation.kind, y.activation.kind);
  EXPECT_EQ(x.activation.interleaved_gate_up, y.activation.interleaved_gate_up);
  EXPECT_FLOAT_EQ(x.activation.swiglu_limit, y.activation.swiglu_limit);
  EXPECT_EQ(x.routing.scoring, y.routing.scoring);
  EXPECT_EQ(x.routing.softmax_after_topk, y.routing.softmax_after_topk);
  EXPECT_EQ(x.routing.correction_bias, y.routing.correction_bias);
  EXPECT_EQ(x.routing.n_group, y.routing.n_group);
  EXPECT_EQ(x.routing.topk_group, y.routing.topk_group);
  EXPECT_EQ(x.routing.renormalize, y.routing.renormalize);
  EXPECT_FLOAT_EQ(x.routing.routed_scaling_factor, y.routing.routed_scaling_factor);
  EXPECT_EQ(x.weight_format, y.weight_format);
  EXPECT_EQ(x.act_quant, y.act_quant);
  EXPECT_EQ(x.act_dtype, y.act_dtype);
  EXPECT_EQ(x.expert_bias, y.expert_bias);
  EXPECT_EQ(x.router_bias, y.router_bias);
  EXPECT_EQ(x.shared.count, y.shared.count);
  EXPECT_EQ(x.shared.intermediate, y.shared.intermediate);
  EXPECT_EQ(x.shared.gated_by_router, y.shared.gated_by_router);
  EXPECT_EQ(x.apply_router_weight_on_input, y.apply_router_weight_on_input);
}

TEST(Presets, MatchPublishedConfigs) {
  for (auto [preset, dir] : {std::pair{"qwen3-30b-a3b", "qwen3-30b-a3b"}, std::pair{"qwen2-moe-a2.7b", "qwen1.5-moe-a2.7b"},
                             std::pair{"deepseek-v2-lite", "deepseek-v2-lite"}, std::pair{"deepseek-v3", "deepseek-v3"},
                             std::pair{"deepseek-r1-fp8", "deepseek-r1-fp8"}, std::pair{"deepseek-r1-fp4", "deepseek-r1-fp4"},
                             std::pair{"gpt-oss-20b", "gpt-oss-20b"}, std::pair{"gpt-oss-120b", "gpt-oss-120b"},
                             std::pair{"mixtral-8x7b", "mixtral-8x7b-instruct-v0.1"},
                             std::pair{"llama4-scout", "llama4-scout-17b-16e"}, std::pair{"kimi-k2", "kimi-k2-instruct"},
                             std::pair{"glm-4.5-air", "glm-4.5-air"}, std::pair{"olmoe-1b-7b", "olmoe-1b-7b"},
                             std::pair{"phi-3.5-moe", "phi-3.5-moe-instruct"},
                             std::pair{"granite-3.1-3b-a800m", "granite-3.1-3b-a800m"}}) {
    SCOPED_TRACE(preset);
    expect_same_layer(find_preset(preset).model, load(dir));
  }
}

TEST(Presets, FindUnknownListsNames) {
  std::string msg = error_of([] { find_preset("qwen4"); }, ErrorKind::kNotFound);
  expect_contains(msg, "unknown preset 'qwen4'; known: ");
  for (const Preset& p : presets()) expect_contains(msg, p.name);
}

TEST(Presets, ScaledDownKeepsStructure) {
  for (const Preset& p : presets()) {
    SCOPED_TRACE(p.name);
    const MoeSpec& big = p.model.spec;
    MoeSpec s = scaled_down(big);
    EXPECT_EQ(s.name, p.name + "-small");
    EXPECT_EQ(s.hidden, 256);
    EXPECT_EQ(s.intermediate, 128);
    EXPECT_LE(s.num_experts, std::max(16, big.routing.n_group * 2));
    EXPECT_LE(s.num_experts, big.num_experts);
    EXPECT_GE(s.top_k, 1);
    EXPECT_LE(s.top_k, s.num_experts);
    EXPECT_EQ(s.top_k, std::min(big.top_k, s.num_experts));
    // Routing: groups kept and consistent.
    EXPECT_EQ(s.routing.n_group, big.routing.n_group);
    EXPECT_EQ(s.routing.topk_group, big.routing.topk_group);
    EXPECT_EQ(s.num_experts % s.routing.n_group, 0);
    int per_group = s.num_experts / s.routing.n_group;
    EXPECT_LE(s.top_k, s.routing.topk_group * per_group);
    if (s.routing.correction_bias && s.routing.n_group > 1) EXPECT_GE(per_group, 2);
    EXPECT_EQ(s.routing.scoring, big.routing.scoring);
    EXPECT_EQ(s.routing.softmax_after_topk, big.routing.softmax_after_topk);
    EXPECT_EQ(s.routing.correction_bias, big.routing.correction_bias);
    EXPECT_EQ(s.routing.renormalize, big.routing.renormalize);
    EXPECT_FLOAT_EQ(s.routing.routed_scaling_factor, big.routing.routed_scaling_factor);
    // Everything else unchanged.
    EXPECT_EQ(s.activation.kind, big.activation.kind);
    EXPECT_EQ(s.activation.interleaved_gate_up, big.activation.interleaved_gate_up);
    EXPECT_FLOAT_EQ(s.activation.swiglu_limit, big.activation.swiglu_limit);
    EXPECT_EQ(s.weight_format, big.weight_format);
    EXPECT_EQ(s.act_quant, big.act_quant);
    EXPECT_EQ(s.act_dtype, big.act_dtype);
    EXPECT_EQ(s.expert_bias, big.expert_bias);
    EXPECT_EQ(s.router_bias, big.router_bias);
    EXPECT_EQ(s.apply_router_weight_on_input, big.apply_router_weight_on_input);
    EXPECT_EQ(s.shared.count, big.shared.count);
    EXPECT_EQ(s.shared.gated_by_router, big.shared.gated_by_router);
    if (s.shared.count > 0) {
      EXPECT_GT(s.shared.intermediate, 0);
      EXPECT_EQ(s.shared.intermediate % 128, 0);
    }
    EXPECT_EQ(s.lora.max_adapters, big.lora.max_adapters);
    EXPECT_EQ(s.parallel.ep, big.parallel.ep);
  }
  EXPECT_EQ(scaled_down(find_preset("deepseek-v3").model.spec).num_experts, 16);
  EXPECT_EQ(scaled_down(find_preset("mixtral-8x7b").model.spec).num_experts, 8);
  EXPECT_EQ(scaled_down(find_preset("qwen2-moe-a2.7b").model.spec).shared.intermediate, 4 * 128);
  EXPECT_EQ(scaled_down(find_preset("deepseek-v2-lite").model.spec).shared.intermediate, 2 * 128);
}

TEST(Presets, ScaledDownGroupEdgeCases) {
  MoeSpec s;
  s.name = "g";
  s.num_experts = 160;
  s.top_k = 6;
  s.hidden = 5120;
  s.intermediate = 1536;
  s.routing.n_group = 8;
  s.routing.topk_group = 3;  // DeepSeek-V2: 2 experts per group x 3 groups = 6 slots for top-6
  MoeSpec small = scaled_down(s);
  EXPECT_EQ(small.num_experts, 16);
  EXPECT_EQ(small.top_k, 6);
  s.routing.topk_group = 1;  // top-6 must fit in one group: 6 per group
  small = scaled_down(s);
  EXPECT_EQ(small.num_experts, 48);
  EXPECT_EQ(small.top_k, 6);
  s.parallel.ep = 32;  // 160 experts split 32 ways; the 48 of the small layer would not split
  s.parallel.rank = 5;
  small = scaled_down(s);
  EXPECT_EQ(small.parallel.ep, 1);
  EXPECT_EQ(small.parallel.rank, 0);
  EXPECT_NO_THROW(small.validate());
}

}  // namespace
}  // namespace moerun
