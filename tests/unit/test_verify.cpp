// The conformance harness itself (verify.hpp): it must fail backends that are wrong in the ways a real
// one can be, not only ones whose first call on fresh inputs is off. Each test wraps the reference
// backend with one defect and runs it through verify_case.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "backends/reference/reference_backend.hpp"
#include "moerun/error.hpp"
#include "moerun/presets.hpp"
#include "moerun/verify.hpp"
#include "oracle/launch_matrix.hpp"

namespace moerun {
namespace {

enum class Defect {
  kNone,
  kStaleAfterAnotherSize,  // correct until a call of another M, then its output is off
  kWritesItsInputs,        // scribbles on the hidden states after computing
  kIgnoresRouterWeight,    // without logits or top-k, routes as if every logit were 0
  kSkipsActQuant,          // computes as if act_quant were none
  kNotRepeatable,          // every call after the first flips the lowest bit of one output element (within tolerance)
  kFirstScaleOnly,         // reads every w13 / w2 scale (and global scale) as the stack's first one
  kThrowsWithoutTokens,    // an M = 0 call throws (as a kernel launched with an empty grid would fail)
};

// A tensor's bytes with every element replaced by its first one (the stack's first scale).
std::shared_ptr<HostTensor> first_everywhere(const TensorView& t) {
  auto out = std::make_shared<HostTensor>(t.dtype, t.shape);
  const size_t es = dtype_size(t.dtype);
  for (int64_t i = 0; i < t.numel(); ++i)
    std::memcpy(static_cast<char*>(out->data()) + static_cast<size_t>(i) * es, t.data, es);
  return out;
}

// weights with the scales of both stacks replaced that way: the expert matrices' views are copied (their
// data shared), the other tensors do not matter to the defect and stay empty where they may.
struct FirstScaleWeights {
  MoeWeights w;
  std::vector<std::shared_ptr<HostTensor>> keep;
};
std::shared_ptr<FirstScaleWeights> first_scale_weights(const MoeWeights& src) {
  auto r = std::make_shared<FirstScaleWeights>();
  const auto clone = [](const HostTensor& t) {
    if (t.empty()) return HostTensor();
    HostTensor c(t.dtype(), t.shape());
    std::memcpy(c.data(), t.data(), t.nbytes());
    return c;
  };
  r->w.w13 = src.w13;
  r->w.w2 = src.w2;
  r->w.shared_w13 = src.shared_w13;
  r->w.shared_w2 = src.shared_w2;
  r->w.w13_bias = clone(src.w13_bias);
  r->w.w2_bias = clone(src.w2_bias);
  r->w.router_weight = clone(src.router_weight);
  r->w.router_bias = clone(src.router_bias);
  r->w.correction_bias = clone(src.correction_bias);
  r->w.shared_gate = clone(src.shared_gate);
  for (ExpertMatrix* m : {&r->w.w13, &r->w.w2})
    for (TensorView* v : {&m->scale, &m->global_scale})
      if (v->data) {
        r->keep.push_back(first_everywhere(*v));
        *v = r->keep.back()->view();
      }
  return r;
}

class DefectiveRunner final : public Runner {
 public:
  DefectiveRunner(std::unique_ptr<Runner> inner, const MoeSpec& spec, Defect d, std::shared_ptr<const void> keep = nullptr)
      : inner_(std::move(inner)), spec_(spec), defect_(d), keep_(std::move(keep)) {}
  void forward(const ForwardArgs& args) override {
    const int64_t m = args.hidden.shape[0];
    if (defect_ == Defect::kThrowsWithoutTokens && m == 0) throw Error(ErrorKind::kDevice, "empty grid");
    if (defect_ == Defect::kIgnoresRouterWeight && args.router_logits.empty() && args.topk_ids.empty()) {
      zeros_.assign(static_cast<size_t>(m * spec_.num_experts), 0.0f);
      ForwardArgs a = args;
      a.router_logits = TensorView{zeros_.data(), DType::kF32, {m, spec_.num_experts}, DeviceKind::kCpu, 0};
      inner_->forward(a);
      return;
    }
    inner_->forward(args);
    if (defect_ == Defect::kStaleAfterAnotherSize) {
      if (first_m_ < 0) first_m_ = m;
      if (m != first_m_) saw_other_ = true;
      if (saw_other_ && m == first_m_ && m > 0) std::memset(args.output.data, 0, static_cast<size_t>(args.output.nbytes()));
    }
    if (defect_ == Defect::kWritesItsInputs && m > 0) std::memset(args.hidden.data, 0, 2);
    if (defect_ == Defect::kNotRepeatable && m > 0 && calls_++ > 0) {
      ASSERT_EQ(args.output.dtype, DType::kF32);  // (small_spec()'s default)
      uint32_t bits;
      std::memcpy(&bits, args.output.data, 4);
      bits ^= 1u;
      std::memcpy(args.output.data, &bits, 4);
    }
  }

 private:
  std::unique_ptr<Runner> inner_;
  MoeSpec spec_;
  Defect defect_;
  std::shared_ptr<const void> keep_;  // (kFirstScaleOnly: the weights the inner runner reads)
  int64_t first_m_ = -1;
  bool saw_other_ = false;
  int64_t calls_ = 0;
  std::vector<float> zeros_;
};

class DefectiveBackend final : public Backend {
 public:
  explicit DefectiveBackend(Defect d) : inner_(make_reference_backend()), defect_(d) {}
  std::string_view name() const override { return "defective"; }
  std::string_view description() const override { return "the reference with one defect"; }
  const Capabilities& capabilities() const override { return inner_->capabilities(); }
  std::unique_ptr<Runner> create_runner(const MoeSpec& spec, const MoeWeights& w, const Platform& p,
                                        const RunnerOptions& o) const override {
    MoeSpec s = spec;
    if (defect_ == Defect::kSkipsActQuant) s.act_quant = ActQuant::kNone;
    if (defect_ == Defect::kFirstScaleOnly) {
      auto fw = first_scale_weights(w);
      auto inner = inner_->create_runner(s, fw->w, p, o);
      return std::make_unique<DefectiveRunner>(std::move(inner), spec, defect_, fw);
    }
    return std::make_unique<DefectiveRunner>(inner_->create_runner(s, w, p, o), spec, defect_);
  }

 private:
  std::shared_ptr<const Backend> inner_;
  Defect defect_;
};

VerifyCase case_of(const MoeSpec& spec, int64_t m, RoutingPattern routing, uint64_t seed = 7) {
  VerifyCase c;
  c.spec = spec;
  c.tokens = m;
  c.seed = seed;
  c.routing = routing;
  return c;
}

MoeSpec small_spec(DType act = DType::kF32) {
  MoeSpec s = scaled_down(find_preset("qwen3-30b-a3b").model.spec);
  s.act_dtype = act;
  s.weight_format = WeightFormat::kBF16;
  return s;
}

const Platform& here() {
  static const Platform p = Platform::detect();
  return p;
}

TEST(VerifyHarness, TheReferenceItselfPasses) {
  const DefectiveBackend b(Defect::kNone);
  for (RoutingPattern r : {RoutingPattern::kRandom, RoutingPattern::kGivenTopk, RoutingPattern::kFromWeights}) {
    const VerifyResult res = verify_case(b, here(), case_of(small_spec(), 9, r));
    EXPECT_TRUE(res.passed && !res.skipped) << res.message;
    EXPECT_TRUE(res.repeatable);
  }
}

// A backend whose repeated call differs by one ulp still passes (within tolerance), and the harness
// reports that it is not bitwise repeatable (the case's calls are the runner's first and third).
TEST(VerifyHarness, ReportsABackendThatIsNotBitwiseRepeatable) {
  const VerifyResult r = verify_case(DefectiveBackend(Defect::kNotRepeatable), here(),
                                     case_of(small_spec(), 9, RoutingPattern::kRandom));
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_FALSE(r.repeatable);
  EXPECT_FALSE(verify_case(DefectiveBackend(Defect::kNotRepeatable), here(),
                           case_of(small_spec(), 9, RoutingPattern::kRandom, 3))
                   .repeatable);
}

TEST(VerifyHarness, StateKeptFromAnotherCallFails) {
  const VerifyResult r = verify_case(DefectiveBackend(Defect::kStaleAfterAnotherSize), here(),
                                     case_of(small_spec(), 9, RoutingPattern::kRandom));
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("after a call of another size"), std::string::npos) << r.message;
}

TEST(VerifyHarness, WritingIntoTheInputsFails) {
  const VerifyResult r = verify_case(DefectiveBackend(Defect::kWritesItsInputs), here(),
                                     case_of(small_spec(), 9, RoutingPattern::kRandom));
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.message.find("wrote into its inputs"), std::string::npos) << r.message;
}

TEST(VerifyHarness, RoutingWithoutTheRouterWeightFails) {
  const DefectiveBackend b(Defect::kIgnoresRouterWeight);
  EXPECT_TRUE(verify_case(b, here(), case_of(small_spec(), 9, RoutingPattern::kRandom)).passed);
  EXPECT_FALSE(verify_case(b, here(), case_of(small_spec(), 9, RoutingPattern::kFromWeights)).passed);
}

// With f32 activations the tolerance is below what skipping int8 or fp8 activation quantization costs
// (verify.cpp); with bf16 it cannot be, and the f32 cases are the ones that catch it.
TEST(VerifyHarness, SkippingActivationQuantizationFailsAtF32) {
  const DefectiveBackend b(Defect::kSkipsActQuant);
  MoeSpec s = small_spec();
  for (auto [format, quant] : {std::pair{WeightFormat::kMxfp4, ActQuant::kInt8PerTokenGroup},
                               std::pair{WeightFormat::kFp8Block, ActQuant::kFp8PerTokenGroup}}) {
    s.weight_format = format;
    s.act_quant = quant;
    int failed = 0;
    for (uint64_t seed = 1; seed <= 4; ++seed)
      failed += !verify_case(b, here(), case_of(s, 16, RoutingPattern::kRandom, seed)).passed;
    EXPECT_EQ(failed, 4) << to_string(format);
  }
}

// A kernel that reads the wrong quantization scale (here: the stack's first, for every group, block,
// channel or expert) fails for every scaled format, at bf16 activations too: the random weights' amplitude
// varies per expert, row, 128 x 128 block and 16 columns (weights.hpp). With one amplitude everywhere,
// mxfp4's group scales were 99% the same and this defect passed.
TEST(VerifyHarness, ReadingTheWrongScaleFails) {
  const DefectiveBackend b(Defect::kFirstScaleOnly);
  MoeSpec s = small_spec(DType::kBF16);
  s.hidden = 256;  // two 128 x 128 blocks along K, and (w2's rows) along N
  s.intermediate = 192;
  for (WeightFormat f : {WeightFormat::kFp8PerTensor, WeightFormat::kFp8PerChannel, WeightFormat::kFp8Block,
                         WeightFormat::kMxfp4, WeightFormat::kNvfp4, WeightFormat::kInt8PerChannel}) {
    s.weight_format = f;
    int failed = 0;
    for (uint64_t seed = 1; seed <= 3; ++seed)
      failed += !verify_case(b, here(), case_of(s, 16, RoutingPattern::kRandom, seed)).passed;
    EXPECT_EQ(failed, 3) << to_string(f);
  }
}

TEST(VerifyHarness, CasesAreDrawnFromWhatTheBackendAccepts) {
  int calls = 0;
  const auto only_f16 = [&](const MoeSpec& s) {
    ++calls;
    return s.act_dtype == DType::kF16 && s.weight_format == WeightFormat::kF16;
  };
  const std::vector<VerifyCase> cases = standard_cases(5, 40, only_f16);
  ASSERT_EQ(cases.size(), 40u);
  for (const VerifyCase& c : cases) EXPECT_TRUE(c.spec.act_dtype == DType::kF16 && c.spec.weight_format == WeightFormat::kF16);
  EXPECT_GT(calls, 40);
  // Every routing pattern comes up, the router weight's too.
  bool from_weights = false;
  for (const VerifyCase& c : standard_cases(5, 60)) from_weights |= c.routing == RoutingPattern::kFromWeights;
  EXPECT_TRUE(from_weights);
  // Shared experts in a format of their own beside quantized routed ones come up, some where the routed
  // experts' inputs are quantized (which the shared rows must skip) at f32 activations (whose tolerances tell).
  int mixed = 0, mixed_act_quant_f32 = 0;
  for (const VerifyCase& c : standard_cases(5, 300)) {
    mixed += c.spec.mixed_formats();
    mixed_act_quant_f32 += c.spec.mixed_formats() && c.spec.act_quant != ActQuant::kNone && c.spec.act_dtype == DType::kF32;
  }
  EXPECT_GE(mixed, 10);
  EXPECT_GE(mixed_act_quant_f32, 1);
}

// `moerun check` runs each layer it plans at one token with logits from the router weight and at M = 0
// besides its --tokens call with logits given: a backend wrong only on the decode step's routing path,
// or one that fails an empty call, is a failure of the launch matrix, with the size named.
// The matrix runs each preset with shared experts beside quantized routed ones twice: as published and
// with the shared experts in bf16 (as exporters leave them). The built-in backends that take such a
// layer run it against the reference (cpu, here), the GPU ones refuse it: nothing crashes or mismatches.
TEST(LaunchMatrix, PresetsWithQuantizedRoutedExpertsAlsoRunWithBf16SharedExperts) {
  const auto layers = launch_matrix_layers({"deepseek-r1-fp8", "qwen3-30b-a3b", "qwen2-moe-a2.7b"});
  ASSERT_EQ(layers.size(), 4u);
  EXPECT_EQ(layers[1].first, "deepseek-r1-fp8 (bf16 shared experts)");
  EXPECT_TRUE(layers[1].second.mixed_formats());
  EXPECT_EQ(layers[1].second.shared_weight_format(), WeightFormat::kBF16);
  EXPECT_FALSE(layers[3].second.mixed_formats());  // (qwen2-moe: bf16 routed, no variant)
  Registry r;
  register_builtin_backends(r);
  LaunchMatrixOptions o;
  o.presets = {"deepseek-r1-fp8"};
  o.platforms = {"detected", "sm90"};
  o.parallel_sizes = {1, 2};
  const LaunchMatrixResult m = run_launch_matrix(r, o);
  EXPECT_EQ(m.crashed + m.mismatched, 0) << (m.failures.empty() ? "" : m.failures[0]);
  EXPECT_GT(m.ran, 0);
  EXPECT_EQ(m.matched, m.ran);
}

TEST(LaunchMatrix, RunsTheRouterWeightPathAndTheEmptyCall) {
  const auto run = [](Defect d) {
    Registry r;
    r.add(std::make_shared<DefectiveBackend>(d), "test");
    LaunchMatrixOptions o;
    o.presets = {"qwen3-30b-a3b"};
    o.platforms = {"detected"};
    o.parallel_sizes = {1};
    return run_launch_matrix(r, o);
  };
  const LaunchMatrixResult fine = run(Defect::kNone);
  EXPECT_GT(fine.ran, 0);
  EXPECT_EQ(fine.matched, fine.ran);
  EXPECT_EQ(fine.crashed + fine.mismatched, 0) << (fine.failures.empty() ? "" : fine.failures[0]);

  const LaunchMatrixResult router = run(Defect::kIgnoresRouterWeight);
  EXPECT_GT(router.mismatched, 0);
  EXPECT_EQ(router.matched, 0);
  ASSERT_FALSE(router.failures.empty());
  EXPECT_NE(router.failures[0].find("at M=1 (logits from the router weight)"), std::string::npos) << router.failures[0];

  const LaunchMatrixResult empty = run(Defect::kThrowsWithoutTokens);
  EXPECT_GT(empty.crashed, 0);
  ASSERT_FALSE(empty.failures.empty());
  EXPECT_NE(empty.failures[0].find("threw at M=0: "), std::string::npos) << empty.failures[0];
  EXPECT_NE(empty.failures[0].find("empty grid"), std::string::npos) << empty.failures[0];
}

}  // namespace
}  // namespace moerun
