// routing/topk.hpp — the gating stage: router logits [M, E] -> top-k expert ids and weights [M, k].
//
// Host implementation (the reference semantics every backend matches). Exact rules:
//   scores  = softmax(logits) | sigmoid(logits)                     (Routing::scoring)
//   choice  = scores + correction bias when Routing::correction_bias; without a bias the logits, whose
//             order the scores keep but where f32 scores would round apart logits into ties (sigmoid
//             from about 17, as Llama-4 ranks; softmax between logits an ulp apart; softmax_after_topk);
//             grouped top-k masks all but the topk_group best
//             groups first (group score: sum of the top-2 biased scores with a correction bias, else
//             the group max); ties go to the lower expert id.
//   weights = scores at the chosen ids (never the biased ones); softmax_after_topk instead takes the
//             top-k logits and softmaxes over those k; renormalize divides by their sum; finally
//             multiply by routed_scaling_factor.
// NaN logits are treated as -inf for choosing (so k distinct in-range ids always come back) and give
// weight 0 unless every candidate is NaN, in which case the k weights are routed_scaling_factor / k. A group with a single
// non-NaN expert ranks below every group with two and above the all-NaN groups.
#pragma once

#include <cstdint>
#include <vector>

#include "moerun/spec.hpp"

namespace moerun::routing {

// logits: [m, E] fp32. correction_bias: [E] or nullptr. ids/weights: [m, k].
void topk_host(const MoeSpec& spec, const float* logits, int64_t m, const float* correction_bias,
               int32_t* ids, float* weights);

// The per-token working rows of topk_host, kept by a caller that routes again and again (a runner's
// forward allocates nothing after its first call).
struct TopkScratch {
  std::vector<float> scores, choice, group_score, top_val;
  std::vector<char> taken, nan_logit, group_taken;
  void reserve(int experts, int groups) {  // what topk_host then needs for that many, without allocating
    for (auto* v : {&scores, &choice, &top_val}) v->reserve(static_cast<size_t>(experts));
    for (auto* v : {&taken, &nan_logit}) v->reserve(static_cast<size_t>(experts));
    group_score.reserve(static_cast<size_t>(groups));
    group_taken.reserve(static_cast<size_t>(groups));
  }
};
void topk_host(const MoeSpec& spec, const float* logits, int64_t m, const float* correction_bias,
               int32_t* ids, float* weights, TopkScratch& scratch);

// Router linear on the host: logits[m, E] = hidden[m, H] (fp32) @ router_weight[E, H]^T (+ bias).
void router_logits_host(const float* hidden, int64_t m, int64_t h, const float* router_weight,
                        const float* router_bias, int64_t e, float* logits);

}  // namespace moerun::routing

#include "moerun/backend.hpp"
#include "moerun/weights.hpp"

namespace moerun::routing {

// The routing stage of a host forward call: uses args.topk_ids/topk_weights when given, else
// args.router_logits, else computes logits from weights.router_weight (+ router_bias) and hidden_f32.
// Fills ids/weights ([m, k]); reuses their capacity.
void route_host(const MoeSpec& spec, const MoeWeights& weights, const ForwardArgs& args, const float* hidden_f32,
                std::vector<int32_t>& ids, std::vector<float>& topk_weights, std::vector<float>& logits_scratch);

}  // namespace moerun::routing
