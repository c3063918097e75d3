// Host top-k gating: the semantics every backend's routing must reproduce (see topk.hpp).
#include "routing/topk.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

namespace moerun::routing {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Infinite logits are clamped so that softmax's max-subtraction never computes inf - inf.
inline float finite_or_clamp(float x) noexcept { return std::isinf(x) ? std::copysign(FLT_MAX, x) : x; }

// Index of the largest value among the not-yet-taken entries; NaN counts as -inf; ties -> lower index.
inline int argmax_untaken(const float* v, const std::vector<char>& taken, int n) noexcept {
  int best = -1;
  float best_v = kNegInf;
  for (int i = 0; i < n; ++i) {
    if (taken[static_cast<size_t>(i)]) continue;
    const float x = std::isnan(v[i]) ? kNegInf : v[i];
    if (best < 0 || x > best_v) {
      best = i;
      best_v = x;
    }
  }
  return best;
}

// The k entries k rounds of argmax_untaken would pick, in their order (value descending, ties by lower
// index, NaN as -inf, so -inf entries fill up from the lowest index), in one pass: a sorted list of the
// best so far, which a later entry enters only when strictly greater than its last (an equal value's
// lower index wins). vals: scratch of k. At least k entries must be untaken (MoeSpec::validate).
inline void topk_untaken(const float* v, const std::vector<char>& taken, int n, int k, int32_t* out,
                         float* vals) noexcept {
  int cnt = 0;
  for (int i = 0; i < n; ++i) {
    if (taken[static_cast<size_t>(i)]) continue;
    const float x = std::isnan(v[i]) ? kNegInf : v[i];
    if (cnt == k && !(x > vals[k - 1])) continue;
    int j = cnt < k ? cnt++ : k - 1;
    for (; j > 0 && vals[j - 1] < x; --j) {
      vals[j] = vals[j - 1];
      out[j] = out[j - 1];
    }
    vals[j] = x;
    out[j] = i;
  }
}

}  // namespace

void topk_host(const MoeSpec& spec, const float* logits, int64_t m, const float* correction_bias,
               int32_t* ids, float* weights) {
  TopkScratch scratch;
  topk_host(spec, logits, m, correction_bias, ids, weights, scratch);
}

void topk_host(const MoeSpec& spec, const float* logits, int64_t m, const float* correction_bias,
               int32_t* ids, float* weights, TopkScratch& sc) {
  const int e = spec.num_experts, k = spec.top_k;
  const Routing& r = spec.routing;
  // (resize keeps the capacity: no allocation once a scratch has seen this many experts and groups)
  sc.scores.resize(static_cast<size_t>(e));
  sc.choice.resize(static_cast<size_t>(e));
  sc.taken.resize(static_cast<size_t>(e));
  sc.nan_logit.resize(static_cast<size_t>(e));
  sc.group_score.resize(static_cast<size_t>(r.n_group));
  sc.group_taken.resize(static_cast<size_t>(r.n_group));
  sc.top_val.resize(static_cast<size_t>(k));
  std::vector<float>& scores = sc.scores;
  std::vector<float>& choice = sc.choice;
  std::vector<char>& taken = sc.taken;
  std::vector<char>& nan_logit = sc.nan_logit;
  std::vector<float>& group_score = sc.group_score;
  std::vector<char>& group_taken = sc.group_taken;
  const int group_size = e / r.n_group;

  for (int64_t t = 0; t < m; ++t) {
    const float* x = logits + t * e;
    int32_t* out_ids = ids + t * k;
    float* out_w = weights + t * k;
    bool any_valid = false;
    float max_logit = kNegInf;
    for (int i = 0; i < e; ++i) {
      nan_logit[static_cast<size_t>(i)] = std::isnan(x[i]);
      if (!std::isnan(x[i])) {
        any_valid = true;
        max_logit = std::max(max_logit, finite_or_clamp(x[i]));
      }
    }

    // 1. Scores (the weights' source) and choice values (what top-k ranks). NaN logits: score 0,
    //    choice -inf, so they are chosen only when nothing else is left.
    if (r.softmax_after_topk || r.scoring == Scoring::kSoftmax) {
      double sum = 0.0;
      for (int i = 0; i < e; ++i) {
        const float s = nan_logit[static_cast<size_t>(i)] ? 0.0f : std::exp(finite_or_clamp(x[i]) - max_logit);
        scores[static_cast<size_t>(i)] = s;
        sum += s;
      }
      for (int i = 0; i < e; ++i) scores[static_cast<size_t>(i)] = sum > 0 ? static_cast<float>(scores[static_cast<size_t>(i)] / sum) : 0.0f;
    } else {
      for (int i = 0; i < e; ++i)
        scores[static_cast<size_t>(i)] =
            nan_logit[static_cast<size_t>(i)] ? 0.0f : 1.0f / (1.0f + std::exp(-finite_or_clamp(x[i])));
    }
    // Scores without a bias rank as their logits do (Llama-4 takes the top-k of the logits, then the
    // sigmoid): the f32 sigmoid rounds to 1 from a logit of about 17 and to one value for logits 1e-3
    // apart near 10, and f32 softmax probabilities of logits an ulp apart can round equal, which would
    // turn different logits into ties the lower id wins.
    const bool rank_logits = r.softmax_after_topk || !r.correction_bias;
    for (int i = 0; i < e; ++i) {
      float c = rank_logits ? finite_or_clamp(x[i]) : scores[static_cast<size_t>(i)];
      if (r.correction_bias && correction_bias) c += correction_bias[i];
      choice[static_cast<size_t>(i)] = nan_logit[static_cast<size_t>(i)] ? kNegInf : c;
    }

    // 2. Grouped top-k: keep the topk_group best groups, mask the rest.
    if (r.n_group > 1) {
      for (int g = 0; g < r.n_group; ++g) {
        const float* c = choice.data() + g * group_size;
        float best = kNegInf, second = kNegInf;
        for (int i = 0; i < group_size; ++i) {
          if (c[i] > best) {
            second = best;
            best = c[i];
          } else if (c[i] > second) {
            second = c[i];
          }
        }
        // With the bias a group scores its top-2 sum. A group with one non-NaN expert has no second
        // (-inf): it ranks below every group with two and above the all-NaN ones (-inf), so that a
        // valid expert is kept wherever one exists.
        float gs = r.correction_bias ? best + second : best;
        if (r.correction_bias && best > kNegInf && second == kNegInf) gs = -FLT_MAX;
        group_score[static_cast<size_t>(g)] = std::isnan(gs) ? kNegInf : gs;
      }
      std::fill(group_taken.begin(), group_taken.end(), 0);
      for (int j = 0; j < r.topk_group; ++j)
        group_taken[static_cast<size_t>(argmax_untaken(group_score.data(), group_taken, r.n_group))] = 1;
      // Experts of dropped groups are marked taken so top-k never picks them.
      for (int g = 0; g < r.n_group; ++g)
        for (int i = 0; i < group_size; ++i) taken[static_cast<size_t>(g * group_size + i)] = !group_taken[static_cast<size_t>(g)];
    } else {
      std::fill(taken.begin(), taken.end(), 0);
    }

    // 3. Top-k of the choice values.
    topk_untaken(choice.data(), taken, e, k, out_ids, sc.top_val.data());

    // 4. Weights from unbiased scores.
    if (!any_valid) {
      for (int j = 0; j < k; ++j) out_w[j] = r.routed_scaling_factor / static_cast<float>(k);
      continue;
    }
    if (r.softmax_after_topk) {
      float mx = kNegInf;
      for (int j = 0; j < k; ++j)
        if (!nan_logit[static_cast<size_t>(out_ids[j])]) mx = std::max(mx, finite_or_clamp(x[out_ids[j]]));
      double sum = 0.0;
      for (int j = 0; j < k; ++j) {
        out_w[j] = nan_logit[static_cast<size_t>(out_ids[j])] ? 0.0f : std::exp(finite_or_clamp(x[out_ids[j]]) - mx);
        sum += out_w[j];
      }
      for (int j = 0; j < k; ++j) out_w[j] = static_cast<float>(out_w[j] / sum);
    } else {
      double sum = 0.0;
      for (int j = 0; j < k; ++j) {
        out_w[j] = scores[static_cast<size_t>(out_ids[j])];
        sum += out_w[j];
      }
      if (r.renormalize) {
        for (int j = 0; j < k; ++j) out_w[j] = sum > 0 ? static_cast<float>(out_w[j] / sum) : 1.0f / static_cast<float>(k);
      }
    }
    for (int j = 0; j < k; ++j) out_w[j] *= r.routed_scaling_factor;
  }
}

void router_logits_host(const float* hidden, int64_t m, int64_t h, const float* router_weight,
                        const float* router_bias, int64_t e, float* logits) {
  for (int64_t t = 0; t < m; ++t)
    for (int64_t i = 0; i < e; ++i) {
      double acc = router_bias ? router_bias[i] : 0.0;
      const float* w = router_weight + i * h;
      const float* x = hidden + t * h;
      for (int64_t c = 0; c < h; ++c) acc += static_cast<double>(x[c]) * w[c];
      logits[t * e + i] = static_cast<float>(acc);
    }
}

}  // namespace moerun::routing

#include <cstring>

#include "moerun/error.hpp"

namespace moerun::routing {

void route_host(const MoeSpec& spec, const MoeWeights& weights, const ForwardArgs& args, const float* hidden_f32,
                std::vector<int32_t>& ids, std::vector<float>& topk_weights, std::vector<float>& logits_scratch) {
  const int64_t m = args.hidden.shape[0];
  const size_t mk = static_cast<size_t>(m * spec.top_k);
  ids.resize(mk);
  topk_weights.resize(mk);
  if (m == 0) return;
  if (!args.topk_ids.empty()) {
    if (mk) {
      std::memcpy(ids.data(), args.topk_ids.data, mk * sizeof(int32_t));
      std::memcpy(topk_weights.data(), args.topk_weights.data, mk * sizeof(float));
    }
    return;
  }
  const float* logits = nullptr;
  if (!args.router_logits.empty()) {
    logits = args.router_logits.as<const float>();
  } else {
    if (weights.router_weight.empty())
      throw_error(ErrorKind::kInvalidArgument, "forward needs router_logits, topk ids/weights, or a router weight");
    logits_scratch.resize(static_cast<size_t>(m * spec.num_experts));
    router_logits_host(hidden_f32, m, spec.hidden, weights.router_weight.as<const float>(),
                       weights.router_bias.empty() ? nullptr : weights.router_bias.as<const float>(), spec.num_experts,
                       logits_scratch.data());
    logits = logits_scratch.data();
  }
  topk_host(spec, logits, m, weights.correction_bias.empty() ? nullptr : weights.correction_bias.as<const float>(),
            ids.data(), topk_weights.data());
}

}  // namespace moerun::routing
