// MoeSpec validation: every rule names its field and the allowed values.
#include <gtest/gtest.h>

#include "moerun/error.hpp"
#include "moerun/spec.hpp"

namespace moerun {
namespace {

MoeSpec small() {
  MoeSpec s;
  s.num_experts = 8;
  s.top_k = 2;
  s.hidden = 64;
  s.intermediate = 32;
  return s;
}

std::string error_of(const MoeSpec& s) {
  try {
    s.validate();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidSpec);
    return e.what();
  }
  return "";
}

TEST(Spec, ValidSpecPasses) { EXPECT_EQ(error_of(small()), ""); }

TEST(Spec, TopKOutOfRangeNamesField) {
  MoeSpec s = small();
  s.top_k = 9;
  EXPECT_EQ(error_of(s), "spec.top_k = 9: must be in [1, num_experts=8]");
  s.top_k = 0;
  EXPECT_NE(error_of(s).find("spec.top_k = 0"), std::string::npos);
}

TEST(Spec, GroupRules) {
  MoeSpec s = small();
  s.routing.n_group = 3;
  EXPECT_NE(error_of(s).find("spec.routing.n_group = 3"), std::string::npos);
  s.routing.n_group = 4;
  s.routing.topk_group = 5;
  EXPECT_NE(error_of(s).find("spec.routing.topk_group = 5"), std::string::npos);
  s.routing.topk_group = 1;
  s.top_k = 3;  // one group of 2 experts kept: at most 2
  EXPECT_NE(error_of(s).find("spec.top_k = 3"), std::string::npos);
}

TEST(Spec, FormatAlignment) {
  MoeSpec s = small();
  s.weight_format = WeightFormat::kMxfp4;
  s.hidden = 48;
  EXPECT_NE(error_of(s).find("multiples of 32"), std::string::npos);
  s.hidden = 64;
  s.parallel.tp = 2;  // I/tp = 16, not a multiple of 32
  EXPECT_NE(error_of(s).find("spec.parallel.tp = 2"), std::string::npos);
}

TEST(Spec, ActQuantNeedsFp8) {
  MoeSpec s = small();
  s.act_quant = ActQuant::kFp8PerTokenGroup;
  EXPECT_NE(error_of(s).find("needs an fp8 weight format"), std::string::npos);
  s.weight_format = WeightFormat::kFp8Block;
  EXPECT_EQ(error_of(s), "");
}

TEST(Spec, Int8ActQuantNeeds4BitWeights) {
  MoeSpec s = small();
  s.hidden = s.intermediate = 64;
  s.act_quant = ActQuant::kInt8PerTokenGroup;
  EXPECT_NE(error_of(s).find("needs a 4-bit weight format (mxfp4, nvfp4), not bf16"), std::string::npos) << error_of(s);
  for (WeightFormat f : {WeightFormat::kMxfp4, WeightFormat::kNvfp4}) {
    s.weight_format = f;
    EXPECT_EQ(error_of(s), "") << to_string(f);
  }
  EXPECT_EQ(parse_act_quant("int8-token-group"), ActQuant::kInt8PerTokenGroup);
  EXPECT_EQ(to_string(ActQuant::kInt8PerTokenGroup), "int8-token-group");
  EXPECT_EQ(allowed_act_quants(), "none, fp8-token-group, int8-token-group");
  EXPECT_NE(s.summary().find("+int8-token-group"), std::string::npos) << s.summary();
}

// The one-line summary names every routing and shared-expert feature, so that `verify -v` case labels
// and `explain`'s spec line tell apart layers that differ only in them (a router bias and a
// router-gated shared expert were left out).
TEST(Spec, SummaryNamesRouterBiasAndAGatedSharedExpert) {
  MoeSpec s = small();
  const std::string plain = s.summary();
  s.router_bias = true;
  EXPECT_NE(s.summary().find(" router-bias"), std::string::npos) << s.summary();
  s.shared.count = 1;
  s.shared.intermediate = 64;
  const std::string ungated = s.summary();
  s.shared.gated_by_router = true;
  EXPECT_NE(s.summary().find("shared=1x64(gated)"), std::string::npos) << s.summary();
  EXPECT_NE(s.summary(), ungated);
  EXPECT_EQ(plain.find("router-bias"), std::string::npos);
}

TEST(Spec, ParallelRules) {
  MoeSpec s = small();
  s.parallel.ep = 3;
  EXPECT_NE(error_of(s).find("spec.parallel.ep = 3: must divide num_experts=8"), std::string::npos);
  s.parallel.ep = 2;
  s.parallel.rank = 2;
  EXPECT_NE(error_of(s).find("spec.parallel.rank = 2"), std::string::npos);
}

TEST(Spec, MiscRules) {
  MoeSpec s = small();
  s.apply_router_weight_on_input = true;
  EXPECT_NE(error_of(s).find("needs top_k = 1"), std::string::npos);
  s = small();
  s.activation.kind = ActivationKind::kRelu2;
  s.activation.interleaved_gate_up = true;
  EXPECT_NE(error_of(s).find("interleaved_gate_up"), std::string::npos);
  s = small();
  s.routing.routed_scaling_factor = 0.0f;
  EXPECT_NE(error_of(s).find("routed_scaling_factor"), std::string::npos);
  s = small();
  s.act_dtype = DType::kI8;
  EXPECT_NE(error_of(s).find("allowed: F32, F16, BF16"), std::string::npos);
  s = small();
  s.shared.count = 1;
  EXPECT_NE(error_of(s).find("spec.shared.intermediate = 0"), std::string::npos);
  s = small();
  s.lora.max_adapters = 2;
  EXPECT_NE(error_of(s).find("spec.lora.max_rank = 0"), std::string::npos);
  s = small();
  s.shared.count = 5000;
  s.shared.intermediate = 32;
  EXPECT_NE(error_of(s).find("spec.shared.count = 5000"), std::string::npos);
}

// A 4-bit spec's shared expert needs its down projection's K (shared.intermediate / tp) whole in groups,
// like the routed experts' intermediate: refused when the spec is made, not when its weights are.
TEST(Spec, Fp4SharedExpertWidthInWholeGroups) {
  MoeSpec s = small();
  s.weight_format = WeightFormat::kMxfp4;
  s.shared.count = 1;
  s.shared.intermediate = 48;
  EXPECT_NE(error_of(s).find("spec.shared.intermediate = 48"), std::string::npos);
  EXPECT_NE(error_of(s).find("not a multiple of 32 (mxfp4)"), std::string::npos);
  s.shared.intermediate = 64;
  EXPECT_EQ(error_of(s), "");
  s.weight_format = WeightFormat::kNvfp4;
  s.shared.intermediate = 24;
  EXPECT_NE(error_of(s).find("not a multiple of 16 (nvfp4)"), std::string::npos);
  s.shared.intermediate = 64;
  s.parallel.tp = 2;
  s.parallel.rank = 0;
  EXPECT_EQ(error_of(s), "");  // 32 per rank
  s.parallel.tp = 8;
  EXPECT_NE(error_of(s), "");  // (intermediate 32 / 8 = 4 is refused first; the shared 64 / 8 = 8 too)
}

// The shared experts' own format (exporters leave them in bf16 beside quantized routed experts): its
// rules name shared.weight_format, the 4-bit group rules follow it, and the routed experts' activation
// quantization reaches them only where their format admits it.
TEST(Spec, SharedExpertsInAFormatOfTheirOwn) {
  MoeSpec s = small();
  s.weight_format = WeightFormat::kFp8Block;
  s.act_quant = ActQuant::kFp8PerTokenGroup;
  s.shared.weight_format = WeightFormat::kBF16;
  EXPECT_NE(error_of(s).find("spec.shared.weight_format = bf16: needs shared.count > 0"), std::string::npos) << error_of(s);
  s.shared.count = 1;
  s.shared.intermediate = 48;
  EXPECT_EQ(error_of(s), "");
  EXPECT_TRUE(s.mixed_formats());
  EXPECT_EQ(s.shared_weight_format(), WeightFormat::kBF16);
  EXPECT_EQ(s.shared_act_quant(), ActQuant::kNone);
  EXPECT_NE(s.summary().find("shared=1x48:bf16"), std::string::npos) << s.summary();
  s.shared.weight_format = WeightFormat::kFp8PerChannel;  // an fp8 format: the fp8 inputs reach it
  EXPECT_EQ(s.shared_act_quant(), ActQuant::kFp8PerTokenGroup);
  s.shared.weight_format = WeightFormat::kFp8Block;  // the routed format named again: one format
  EXPECT_FALSE(s.mixed_formats());
  EXPECT_EQ(s.summary().find(":fp8"), std::string::npos) << s.summary();
  // 4-bit shared experts need whole groups along H and their intermediate, whatever the routed format.
  s.shared.weight_format = WeightFormat::kMxfp4;
  EXPECT_NE(error_of(s).find("not a multiple of 32 (mxfp4)"), std::string::npos) << error_of(s);
  s.shared.intermediate = 64;
  EXPECT_EQ(error_of(s), "");
  s.hidden = 48;
  EXPECT_NE(error_of(s).find("spec.shared.weight_format = mxfp4: needs hidden a multiple of 32"), std::string::npos)
      << error_of(s);
  // ... and a 4-bit routed format's group rule no longer binds bf16 shared experts.
  s = small();
  s.weight_format = WeightFormat::kNvfp4;
  s.shared.count = 1;
  s.shared.intermediate = 24;
  EXPECT_NE(error_of(s).find("not a multiple of 16 (nvfp4)"), std::string::npos);
  s.shared.weight_format = WeightFormat::kBF16;
  EXPECT_EQ(error_of(s), "");
  EXPECT_TRUE(act_quant_admits(ActQuant::kInt8PerTokenGroup, WeightFormat::kNvfp4));
  EXPECT_FALSE(act_quant_admits(ActQuant::kInt8PerTokenGroup, WeightFormat::kBF16));
  EXPECT_TRUE(act_quant_admits(ActQuant::kNone, WeightFormat::kBF16));
}

TEST(Spec, NamesRoundTrip) {
  for (int i = 0; i < 6; ++i) {
    const auto k = static_cast<ActivationKind>(i);
    EXPECT_EQ(parse_activation(to_string(k)), k);
  }
  for (int i = 0; i < 9; ++i) {
    const auto f = static_cast<WeightFormat>(i);
    EXPECT_EQ(parse_weight_format(to_string(f)), f);
  }
  EXPECT_FALSE(parse_weight_format("fp5").has_value());
  EXPECT_NE(allowed_weight_formats().find("nvfp4"), std::string::npos);
}

}  // namespace
}  // namespace moerun
