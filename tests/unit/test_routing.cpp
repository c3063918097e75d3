// Routing and dispatch stages: exact expectations on small hand-checked cases.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

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
