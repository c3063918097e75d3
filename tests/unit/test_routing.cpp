// Routing and dispatch stages: exact expectations on small hand-checked cases.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "dispatch/dispatch.hpp"
#include "routing/topk.hpp"

namespace moerun {
namespace {

MoeSpec spec(int e, int k) {
  MoeSpec s;
  s.num_experts = e;
  s.top_k = k;
  s.hidden = 8;
  s.intermediate = 8;
  return s;
}

TEST(Routing, SoftmaxTopkRenormalize) {
  MoeSpec s = spec(4, 2);
  const float logits[] = {1, 2, 3, 0};
  int32_t ids[2];
  float w[2];
  routing::topk_host(s, logits, 1, nullptr, ids, w);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 1);
  const double a = std::exp(3.0), b = std::exp(2.0);
  EXPECT_NEAR(w[0], a / (a + b), 1e-6);
  EXPECT_NEAR(w[1], b / (a + b), 1e-6);
  s.routing.renormalize = false;
  routing::topk_host(s, logits, 1, nullptr, ids, w);
  const double z = std::exp(1.0) + a + b + 1.0;
  EXPECT_NEAR(w[0], a / z, 1e-6);
}

TEST(Routing, TiesGoToLowerId) {
  MoeSpec s = spec(5, 3);
  const float logits[] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  int32_t ids[3];
  float w[3];
  routing::topk_host(s, logits, 1, nullptr, ids, w);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
  EXPECT_EQ(ids[2], 2);
}

TEST(Routing, NanLogitsStillGiveDistinctInRangeExperts) {
  MoeSpec s = spec(6, 4);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float logits[] = {nan, nan, nan, nan, nan, nan,   // all NaN
                          nan, 1.0f, nan, 2.0f, nan, nan};  // two valid
  int32_t ids[8];
  float w[8];
  routing::topk_host(s, logits, 2, nullptr, ids, w);
  for (int t = 0; t < 2; ++t) {
    std::set<int> seen(ids + 4 * t, ids + 4 * t + 4);
    EXPECT_EQ(seen.size(), 4u);
    for (int j = 0; j < 4; ++j) {
      EXPECT_GE(ids[4 * t + j], 0);
      EXPECT_LT(ids[4 * t + j], 6);
      EXPECT_TRUE(std::isfinite(w[4 * t + j]));
    }
  }
  for (int j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(w[j], 0.25f);
  EXPECT_EQ(ids[4], 3);  // valid ones first, best first
  EXPECT_EQ(ids[5], 1);
  EXPECT_FLOAT_EQ(w[6], 0.0f);  // NaN-logit experts carry no weight
  EXPECT_NEAR(w[4] + w[5], 1.0f, 1e-6);
}

TEST(Routing, InfiniteLogitsAreFinite) {
  MoeSpec s = spec(3, 2);
  const float inf = std::numeric_limits<float>::infinity();
  const float logits[] = {inf, -inf, 0.0f};
  int32_t ids[2];
  float w[2];
  routing::topk_host(s, logits, 1, nullptr, ids, w);
  EXPECT_EQ(ids[0], 0);
  EXPECT_NE(ids[1], 0);  // experts 1 and 2 both score 0 after softmax: a tie, either is right
  EXPECT_TRUE(std::isfinite(w[0]) && std::isfinite(w[1]));
  EXPECT_NEAR(w[0], 1.0f, 1e-6);
}

TEST(Routing, SigmoidWithCorrectionBiasWeighsUnbiased) {
  MoeSpec s = spec(4, 1);
  s.routing.scoring = Scoring::kSigmoid;
  s.routing.correction_bias = true;
  s.routing.renormalize = false;
  s.routing.routed_scaling_factor = 2.0f;
  const float logits[] = {1.0f, 0.0f, 0.0f, 0.0f};
  const float bias[] = {0.0f, 0.0f, 5.0f, 0.0f};  // the bias picks expert 2
  int32_t id;
  float w;
  routing::topk_host(s, logits, 1, bias, &id, &w);
  EXPECT_EQ(id, 2);
  EXPECT_NEAR(w, 2.0f * 0.5f, 1e-6);  // sigmoid(0) = 0.5, times the scaling factor
}

TEST(Routing, GroupedTopkKeepsBestGroups) {
  MoeSpec s = spec(8, 2);
  s.routing.scoring = Scoring::kSigmoid;
  s.routing.correction_bias = true;
  s.routing.n_group = 4;
  s.routing.topk_group = 1;
  // Group 0 has the single best expert, group 2 the best top-2 sum: group 2 must win.
  const float logits[] = {4.0f, -4.0f, 0.0f, 0.0f, 2.0f, 2.0f, -1.0f, -1.0f};
  const float bias[8] = {};
  int32_t ids[2];
  float w[2];
  routing::topk_host(s, logits, 1, bias, ids, w);
  EXPECT_EQ(ids[0], 4);
  EXPECT_EQ(ids[1], 5);
  // Without a bias the group score is the max: group 0 wins.
  s.routing.correction_bias = false;
  routing::topk_host(s, logits, 1, nullptr, ids, w);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
}

// Sigmoid scoring without a bias ranks the logits, as Llama-4 does (top-k of the logits, then the
// sigmoid): 18 and 20 both give an f32 sigmoid of 1, and the larger logit must still win.
TEST(Routing, SigmoidWithoutBiasRanksTheLogits) {
  MoeSpec s = spec(3, 1);
  s.routing.scoring = Scoring::kSigmoid;
  s.routing.renormalize = false;
  const float logits[] = {18.0f, 20.0f, -3.0f,  //
                          10.0f, 10.0005f, 9.0f};
  int32_t ids[2];
  float w[2];
  routing::topk_host(s, logits, 2, nullptr, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_FLOAT_EQ(w[0], 1.0f);
  EXPECT_EQ(ids[1], 1);
}

// Softmax ranks as its logits do too: probabilities of logits an ulp apart round to the same f32, which
// would hand the choice to the lower id.
TEST(Routing, SoftmaxRanksTheLogits) {
  MoeSpec s = spec(2, 1);
  const float logits[] = {0.1f, std::nextafter(0.1f, 1.0f)};
  int32_t id = -1;
  float w = 0.0f;
  routing::topk_host(s, logits, 1, nullptr, &id, &w);
  EXPECT_EQ(id, 1);
  EXPECT_FLOAT_EQ(w, 1.0f);
}

// A group with one non-NaN expert beats the all-NaN groups (which tie with it at -inf on the top-2
// sum): the valid expert is chosen and carries the weight.
TEST(Routing, GroupedTopkKeepsAGroupWithOneValidExpert) {
  MoeSpec s = spec(4, 1);
  s.routing.scoring = Scoring::kSigmoid;
  s.routing.correction_bias = true;
  s.routing.n_group = 2;
  s.routing.topk_group = 1;
  s.routing.renormalize = false;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float logits[] = {nan, nan, 5.0f, nan};
  const float bias[4] = {};
  int32_t id;
  float w;
  routing::topk_host(s, logits, 1, bias, &id, &w);
  EXPECT_EQ(id, 2);
  EXPECT_NEAR(w, 1.0f / (1.0f + std::exp(-5.0f)), 1e-6);
}

TEST(Routing, SoftmaxAfterTopk) {
  MoeSpec s = spec(4, 2);
  s.routing.softmax_after_topk = true;
  const float logits[] = {0.0f, 3.0f, 1.0f, 2.0f};
  int32_t ids[2];
  float w[2];
  routing::topk_host(s, logits, 1, nullptr, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  EXPECT_NEAR(w[0], std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
}

// The chosen experts are, in order, what k rounds of "argmax over the experts not taken yet" give (NaN as
// -inf, ties to the lower id, +-inf clamped to +-FLT_MAX, so inf and FLT_MAX tie): checked on random
// logits drawn from a few values (many ties), with NaN, +-inf and -FLT_MAX among them, for E = 1..160
// and k up to E. Without a correction bias every routing ranks by the (clamped) logits: plain softmax,
// softmax_after_topk, and grouped sigmoid (n_group 4, the best 2 groups kept by their max); the rounds
// are replayed on those values.
TEST(Routing, TopkIsRepeatedArgmaxOnRandomTies) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float pool[] = {0.0f, 1.0f, -1.0f, 0.5f, 2.0f, nan, inf, -inf, FLT_MAX, -FLT_MAX};
  uint64_t seed = 12345;
  auto next = [&seed] {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(seed >> 33);
  };
  auto clamp = [](float x) { return std::isinf(x) ? std::copysign(FLT_MAX, x) : x; };
  auto rank = [&](float x) { return std::isnan(x) ? -inf : clamp(x); };
  for (int trial = 0; trial < 400; ++trial) {
    const bool grouped = trial % 2 == 1;
    const int e = grouped ? 4 * (1 + static_cast<int>(next() % 40)) : 1 + static_cast<int>(next() % 160);
    const int kmax = grouped ? e / 2 : e;
    const int k = 1 + static_cast<int>(next() % static_cast<uint32_t>(std::min(kmax, 12)));
    MoeSpec s = spec(e, k);
    if (grouped) {
      s.routing.scoring = Scoring::kSigmoid;
      s.routing.n_group = 4;
      s.routing.topk_group = 2;
    } else {
      s.routing.softmax_after_topk = trial % 4 == 0;  // else plain softmax over all experts
    }
    s.validate();
    std::vector<float> logits(static_cast<size_t>(e));
    const int kinds = 2 + static_cast<int>(next() % 9);  // how many pool values appear: fewer, more ties
    for (float& x : logits) x = pool[next() % static_cast<uint32_t>(kinds)];
    std::vector<char> taken(static_cast<size_t>(e), 0);
    if (grouped) {  // the two best groups by their max (ties to the lower group); the rest taken
      const int gs = e / 4;
      std::vector<float> best(4, -inf);
      for (int g = 0; g < 4; ++g)
        for (int i = 0; i < gs; ++i) best[static_cast<size_t>(g)] = std::max(best[static_cast<size_t>(g)], rank(logits[static_cast<size_t>(g * gs + i)]));
      std::vector<char> kept(4, 0);
      for (int r = 0; r < 2; ++r) {
        int b = -1;
        for (int g = 0; g < 4; ++g)
          if (!kept[static_cast<size_t>(g)] && (b < 0 || best[static_cast<size_t>(g)] > best[static_cast<size_t>(b)])) b = g;
        kept[static_cast<size_t>(b)] = 1;
      }
      for (int i = 0; i < e; ++i) taken[static_cast<size_t>(i)] = !kept[static_cast<size_t>(i / gs)];
    }
    std::vector<int32_t> want(static_cast<size_t>(k)), got(static_cast<size_t>(k));
    for (int r = 0; r < k; ++r) {
      int b = -1;
      for (int i = 0; i < e; ++i)
        if (!taken[static_cast<size_t>(i)] && (b < 0 || rank(logits[static_cast<size_t>(i)]) > rank(logits[static_cast<size_t>(b)]))) b = i;
      taken[static_cast<size_t>(b)] = 1;
      want[static_cast<size_t>(r)] = b;
    }
    std::vector<float> w(static_cast<size_t>(k));
    routing::topk_host(s, logits.data(), 1, nullptr, got.data(), w.data());
    ASSERT_EQ(got, want) << "trial " << trial << " e " << e << " k " << k << (grouped ? " grouped" : "");
  }
}

TEST(Dispatch, GroupsByExpertStablyAndMasksOtherRanks) {
  MoeSpec s = spec(4, 2);
  const int32_t ids[] = {3, 0, 0, 1, 3, 2};
  const float w[] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  dispatch::Dispatch d;
  dispatch::build_dispatch(s, ids, w, 3, d);
  EXPECT_EQ(d.offsets, (std::vector<int32_t>{0, 2, 3, 4, 6}));
  EXPECT_EQ(d.token, (std::vector<int32_t>{0, 1, 1, 2, 0, 2}));
  EXPECT_EQ(d.slot, (std::vector<int32_t>{1, 0, 1, 1, 0, 0}));
  EXPECT_FLOAT_EQ(d.weight[4], 0.1f);
  // EP rank 1 of 2 owns experts 2 and 3 only.
  s.parallel.ep = 2;
  s.parallel.rank = 1;
  dispatch::build_dispatch(s, ids, w, 3, d);
  EXPECT_EQ(d.first_expert, 2);
  EXPECT_EQ(d.offsets, (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(d.token, (std::vector<int32_t>{2, 0, 2}));
  // M = 0.
  dispatch::build_dispatch(s, ids, w, 0, d);
  EXPECT_EQ(d.rows(), 0);
}

}  // namespace
}  // namespace moerun
