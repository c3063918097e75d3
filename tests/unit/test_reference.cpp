// The reference backend on cases small enough to check by hand, and its sharding contract.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backends/reference/reference_backend.hpp"
#include "moerun/verify.hpp"

namespace moerun {
namespace {

std::shared_ptr<HostTensor> f32(Shape s, std::initializer_list<float> v) {
  auto t = std::make_shared<HostTensor>(DType::kF32, s);
  std::copy(v.begin(), v.end(), t->as<float>());
  return t;
}

ExpertMatrix dense(std::shared_ptr<HostTensor> t) {
  ExpertMatrix m;
  m.format = WeightFormat::kF32;
  m.experts = t->shape()[0];
  m.rows = t->shape()[1];
  m.cols = t->shape()[2];
  m.data = t->view();
  m.keepalive.push_back(t);
  return m;
}

TEST(Reference, HandComputedSiluAndMul) {
  MoeSpec s;
  s.num_experts = 2;
  s.top_k = 1;
  s.hidden = 2;
  s.intermediate = 1;
  s.act_dtype = DType::kF32;
  s.weight_format = WeightFormat::kF32;
  MoeWeights w;
  // expert 0: gate = [1, 0], up = [0, 2], down = [[1], [3]]; expert 1: gate = [0, 1], up = [1, 1], down = [[2], [0]]
  w.w13 = dense(f32({2, 2, 2}, {1, 0, 0, 2, 0, 1, 1, 1}));
  w.w2 = dense(f32({2, 2, 1}, {1, 3, 2, 0}));
  auto backend = make_reference_backend();
  auto runner = backend->create_runner(s, w, Platform::describe("cpu-avx2"), {});
  HostTensor x(DType::kF32, {2, 2}), ids(DType::kI32, {2, 1}), wt(DType::kF32, {2, 1}), out(DType::kF32, {2, 2});
  const float xs[] = {1.0f, 0.5f, -1.0f, 2.0f};
  std::memcpy(x.data(), xs, sizeof xs);
  ids.as<int32_t>()[0] = 0;
  ids.as<int32_t>()[1] = 1;
  wt.as<float>()[0] = 0.5f;
  wt.as<float>()[1] = 1.0f;
  ForwardArgs a;
  a.hidden = x.view();
  a.topk_ids = ids.view();
  a.topk_weights = wt.view();
  a.output = out.view();
  runner->forward(a);
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  const double h0 = silu(1.0) * (2 * 0.5), h1 = silu(2.0) * (-1.0 + 2.0);
  EXPECT_NEAR(out.as<float>()[0], 0.5 * 1 * h0, 1e-6);
  EXPECT_NEAR(out.as<float>()[1], 0.5 * 3 * h0, 1e-6);
  EXPECT_NEAR(out.as<float>()[2], 2 * h1, 1e-6);
  EXPECT_NEAR(out.as<float>()[3], 0.0, 1e-6);
}

// Ranks' partial outputs must add up to the full layer: exercises EP masking, TP slicing of w13/w2
// for every format, biases on one rank, shared experts sliced by TP.
TEST(Reference, ShardsAddUpToTheFullLayer) {
  auto backend = make_reference_backend();
  const Platform p = Platform::describe("cpu-avx2");
  const uint64_t seed = ::testing::UnitTest::GetInstance()->random_seed();
  for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kFp8PerChannel, WeightFormat::kFp8Block, WeightFormat::kMxfp4,
                         WeightFormat::kNvfp4, WeightFormat::kInt8PerChannel}) {
    VerifyCase c;
    c.seed = seed * 31 + static_cast<uint64_t>(f);
    c.spec.num_experts = 8;
    c.spec.top_k = 3;
    c.spec.hidden = 128;
    c.spec.intermediate = 256;
    c.spec.weight_format = f;
    c.spec.act_dtype = DType::kF32;
    c.spec.expert_bias = true;
    c.spec.shared = {1, 256, true};
    c.spec.parallel.tp = 2;
    c.spec.parallel.ep = 2;
    c.tokens = 17;
    const VerifyResult r = verify_sharded(*backend, p, c);
    EXPECT_TRUE(r.passed && !r.skipped) << to_string(f) << ": " << r.message << " (" << c.label() << ")";
  }
}

// Shared experts in a format of their own, quantized too (the reference takes any: the built-in cpu
// backend only unquantized ones, so the conformance suite draws only those): a mixed layer's output is
// its routed part's plus its shared part's, each computed as a layer of one format, the shared part with
// the activation quantization its format admits (MoeSpec::shared_act_quant).
TEST(Reference, MixedFormatLayerIsItsRoutedPartPlusItsSharedPart) {
  struct Mix {
    WeightFormat routed;
    ActQuant act_quant;
    WeightFormat shared;
  };
  const Mix mixes[] = {{WeightFormat::kBF16, ActQuant::kNone, WeightFormat::kFp8Block},
                       {WeightFormat::kFp8PerChannel, ActQuant::kFp8PerTokenGroup, WeightFormat::kFp8Block},
                       {WeightFormat::kFp8Block, ActQuant::kFp8PerTokenGroup, WeightFormat::kMxfp4},
                       {WeightFormat::kMxfp4, ActQuant::kInt8PerTokenGroup, WeightFormat::kNvfp4},
                       {WeightFormat::kNvfp4, ActQuant::kInt8PerTokenGroup, WeightFormat::kInt8PerChannel}};
  auto backend = make_reference_backend();
  const Platform p = Platform::describe("cpu-avx2");
  for (const Mix& mix : mixes) {
    MoeSpec a;
    a.num_experts = 8;
    a.top_k = 2;
    a.hidden = 128;
    a.intermediate = 128;
    a.act_dtype = DType::kF32;
    a.weight_format = mix.routed;
    a.act_quant = mix.act_quant;
    a.shared = {1, 128, true, mix.shared};
    a.validate();
    MoeSpec routed_only = a;
    routed_only.shared = {};
    MoeSpec shared_only = a;  // a layer of the shared format whose routed experts get weight 0
    shared_only.weight_format = mix.shared;
    shared_only.act_quant = a.shared_act_quant();
    shared_only.shared.weight_format.reset();
    MoeWeights wa = random_weights(a, 3), wr = random_weights(routed_only, 4), ws = random_weights(shared_only, 5);
    wr.w13 = wa.w13;
    wr.w2 = wa.w2;
    wr.router_weight = HostTensor();
    ws.shared_w13 = wa.shared_w13;
    ws.shared_w2 = wa.shared_w2;
    std::memcpy(ws.shared_gate.data(), wa.shared_gate.data(), wa.shared_gate.nbytes());
    const int64_t m = 13;
    HostTensor x(DType::kF32, {m, a.hidden}), ids(DType::kI32, {m, 2}), wt(DType::kF32, {m, 2}), zero(DType::kF32, {m, 2});
    for (int64_t i = 0; i < m * a.hidden; ++i) x.as<float>()[i] = std::sin(0.37f * static_cast<float>(i));
    for (int64_t i = 0; i < m * 2; ++i) {
      ids.as<int32_t>()[i] = static_cast<int32_t>((3 * i + i / 2) % 8);
      wt.as<float>()[i] = 0.25f + 0.5f * static_cast<float>(i % 2);
      zero.as<float>()[i] = 0.0f;
    }
    const auto run = [&](const MoeSpec& s, const MoeWeights& w, const HostTensor& weights) {
      HostTensor out(DType::kF32, {m, a.hidden});
      ForwardArgs f;
      f.hidden = x.view();
      f.topk_ids = ids.view();
      f.topk_weights = weights.view();
      f.output = out.view();
      backend->create_runner(s, w, p, {})->forward(f);
      return out;
    };
    const HostTensor whole = run(a, wa, wt), routed = run(routed_only, wr, wt), shared = run(shared_only, ws, zero);
    double err = 0, mag = 0, shared_mag = 0;
    for (int64_t i = 0; i < m * a.hidden; ++i) {
      const double want = static_cast<double>(routed.as<float>()[i]) + shared.as<float>()[i];
      err = std::max(err, std::fabs(whole.as<float>()[i] - want));
      mag = std::max(mag, std::fabs(want));
      shared_mag = std::max(shared_mag, std::fabs(static_cast<double>(shared.as<float>()[i])));
    }
    EXPECT_GT(shared_mag, 0.05 * mag) << a.summary();  // (the shared part is there to be checked)
    EXPECT_LE(err, 1e-5 * mag) << a.summary();
  }
}

}  // namespace
}  // namespace moerun
