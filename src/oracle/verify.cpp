// The conformance harness: a backend against the reference on random cases (verify.hpp).
#include "moerun/verify.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "backends/reference/reference_backend.hpp"
#include "core/convert.hpp"
#include "core/random.hpp"
#include "moerun/error.hpp"
#include "moerun/formats.hpp"
#include "moerun/layer.hpp"

namespace moerun {

// ---- tolerances: the one place they are stated ------------------------------------------------------
// A backend may round the intermediate activation and the output to the activation dtype and
// accumulate in fp32 in any order (bf16: up to 2^-8 relative per rounding, f16: 2^-11); the bounds
// below are about 4x the error of one such rounding at the harness's sizes.
//
// Dynamic activation quantization adds flips: where two orders of summation put an intermediate
// element on either side of a rounding step of its code, the two results differ by a whole step, up
// to 1/8 of the element for e4m3 and 1/127 of the group's absmax for int8. How often depends on the
// activation dtype:
// - f32: the two values agree to f32's precision, so flips are rare and a backend is held close to
//   the reference: int8 to 3e-3 relative L2, fp8 to 3e-2. What skipping the quantization costs
//   (fp8-token-group 4.2-4.4%, int8 1.7-1.8% on docs/formats.md's layer, about 1.4% on the harness's
//   small int8 layers) is above both, so a backend that ignores act_quant fails the f32 cases.
// - bf16 / f16: the intermediate is rounded to the dtype first, and that rounding moves a value
//   across a code step often. One e4m3 flip of a large element at one token, top-1, moves the
//   relative L2 error by up to ~3% even with the 145-200 intermediate columns random_spec gives these
//   layers (3.2-4.5% on 5 of 9000 cases with the former I = 17-72; 3.15% on 1 of 6000 cases in
//   session 43, seed 13). That is as much as skipping the quantization costs, so no bound can tell
//   the two apart at these dtypes: fp8 is held to 5e-2 and int8 to the dtype's own bound (bf16
//   1.5e-2, f16 1e-2), and the f32 cases of the same specs are the ones that catch a backend that
//   skips the quantization. The normalized max error of one output element can move by a whole step
//   of the intermediate element that dominates it, up to 1/8 of that term for e4m3: fp8's is held to
//   1.25e-1 (at 6e-2 it failed 1 case in over 10^5: session 54, seed 14923874746823924602, relu2
//   squaring the dominant term, 6.2% of max|ref|, the relative L2 at 1.5%).
// Routing is exact only where a backend computes the same logits: with logits from the router weight
// (RoutingPattern::kFromWeights) a backend that sums them in another order (the GPU's router linear
// sums in float, the host's in double) can flip two experts whose logits differ by about 1e-6, and
// then fail the case. A rough estimate is a few in 10^4 from-weights cases.
Tolerance tolerance_for(const MoeSpec& spec) {
  Tolerance t;
  switch (spec.act_dtype) {
    case DType::kF32: t = {1e-4, 2e-5}; break;
    case DType::kF16: t = {4e-3, 2e-3}; break;
    default: t = {2.5e-2, 1.5e-2}; break;  // BF16
  }
  const bool f32 = spec.act_dtype == DType::kF32;
  if (spec.act_quant == ActQuant::kFp8PerTokenGroup) t = f32 ? Tolerance{4e-2, 3e-2} : Tolerance{1.25e-1, 5e-2};
  if (spec.act_quant == ActQuant::kInt8PerTokenGroup)
    t = f32 ? Tolerance{1e-2, 3e-3} : Tolerance{std::max(t.max_normalized, 2.5e-2), std::max(t.rel_l2, 1e-2)};
  return t;
}

std::string VerifyCase::label() const {
  static const char* names[] = {"random", "one-hot", "sparse", "nan-rows", "given-topk", "from-weights"};
  std::ostringstream os;
  os << "[" << spec.summary() << "] M=" << tokens << " routing=" << names[static_cast<int>(routing)]
     << " seed=" << seed << (with_lora ? " lora" : "");
  return os.str();
}

MoeSpec random_spec(uint64_t seed, const std::vector<WeightFormat>& formats) {
  SplitMix64 g(seed);
  MoeSpec s;
  s.name = "random-" + std::to_string(seed);
  static const WeightFormat all[] = {WeightFormat::kF32, WeightFormat::kF16, WeightFormat::kBF16,
                                     WeightFormat::kFp8PerTensor, WeightFormat::kFp8PerChannel, WeightFormat::kFp8Block,
                                     WeightFormat::kMxfp4, WeightFormat::kNvfp4, WeightFormat::kInt8PerChannel};
  s.weight_format = formats.empty() ? all[g.below(9)] : formats[g.below(static_cast<uint32_t>(formats.size()))];
  const bool fp4 = s.weight_format == WeightFormat::kMxfp4 || s.weight_format == WeightFormat::kNvfp4;
  // Odd sizes where the format allows them; fp4 needs multiples of its group (32 covers both).
  static const int odd_h[] = {33, 64, 100, 136, 200}, odd_i[] = {17, 32, 48, 72};
  static const int grp_h[] = {64, 96, 160, 256}, grp_i[] = {32, 64, 96};
  s.hidden = fp4 ? grp_h[g.below(4)] : odd_h[g.below(5)];
  s.intermediate = fp4 ? grp_i[g.below(3)] : odd_i[g.below(4)];
  // (64 experts and top-8: the presets' routing widths; deepseek-v3 and qwen3 take 8)
  static const int experts[] = {1, 2, 5, 8, 12, 16, 33, 64};
  s.num_experts = experts[g.below(8)];
  s.top_k = 1 + static_cast<int>(g.below(static_cast<uint32_t>(std::min(s.num_experts, 8))));
  static const ActivationKind acts[] = {ActivationKind::kSiluAndMul, ActivationKind::kGeluAndMul, ActivationKind::kGeluTanhAndMul,
                                        ActivationKind::kSwigluOai, ActivationKind::kRelu2, ActivationKind::kSilu};
  s.activation.kind = acts[g.below(6)];
  s.activation.interleaved_gate_up = s.activation.kind == ActivationKind::kSwigluOai && g.below(2);
  static const DType dts[] = {DType::kF32, DType::kF16, DType::kBF16};
  s.act_dtype = dts[g.below(3)];
  s.routing.scoring = g.below(2) ? Scoring::kSigmoid : Scoring::kSoftmax;
  s.routing.renormalize = g.below(2);
  if (s.routing.scoring == Scoring::kSoftmax && g.below(3) == 0) s.routing.softmax_after_topk = true;
  if (!s.routing.softmax_after_topk) {
    s.routing.correction_bias = g.below(2);
    if (s.num_experts % 4 == 0 && g.below(2)) {
      s.routing.n_group = 4;
      s.routing.topk_group = 1 + static_cast<int>(g.below(3));  // (1-3 of 4: 4 would keep every group)
      s.top_k = std::min(s.top_k, s.routing.topk_group * s.num_experts / 4);
    }
  }
  if (g.below(3) == 0) s.routing.routed_scaling_factor = 2.5f;
  const bool fp8 = s.weight_format == WeightFormat::kFp8Block || s.weight_format == WeightFormat::kFp8PerChannel ||
                   s.weight_format == WeightFormat::kFp8PerTensor;
  if (fp8 && g.below(2)) s.act_quant = ActQuant::kFp8PerTokenGroup;
  // (tolerances above: enough intermediate columns for the e4m3 flips to average out; 145-200, none a
  // multiple of the 128-column quantization group. No random draw, so later fields keep their values;
  // a shared expert drawn below sizes itself from this, so it grows by 128 a shared expert too.)
  if (s.act_quant == ActQuant::kFp8PerTokenGroup) s.intermediate += 128;
  s.expert_bias = g.below(3) == 0;
  s.router_bias = g.below(4) == 0;
  if (s.activation.gated() && g.below(3) == 0) {
    s.shared.count = 1 + static_cast<int>(g.below(2));
    s.shared.intermediate = s.intermediate * s.shared.count;
    s.shared.gated_by_router = g.below(2);
  }
  if (s.top_k == 1 && g.below(4) == 0) {
    s.apply_router_weight_on_input = true;
    // A top-1 weight of exactly 1 (renormalized, softmax after the top-k, or softmax over one expert)
    // scales the input and the output alike, and a backend that ignored the flag would pass: the
    // weight must be a score below 1.
    s.routing.renormalize = false;
    s.routing.softmax_after_topk = false;
    if (s.num_experts == 1) s.routing.scoring = Scoring::kSigmoid;
  }
  if (g.below(4) == 0) {
    s.lora.max_adapters = 1 + static_cast<int>(g.below(3));
    s.lora.max_rank = 1 + static_cast<int>(g.below(8));
  }
  // Drawn last, so that the specs of earlier seeds keep every other field.
  if (fp4 && g.below(2)) s.act_quant = ActQuant::kInt8PerTokenGroup;
  // gpt-oss's alpha and limit: the harness's pre-activations stay within about 3, so only a limit
  // below that reaches the clamps; a backend with 1.702 / 7 built in fails the others.
  if (s.activation.kind == ActivationKind::kSwigluOai) {
    static const float limits[] = {7.0f, 2.0f, 0.5f}, alphas[] = {1.702f, 1.0f};
    s.activation.swiglu_limit = limits[g.below(3)];
    s.activation.swiglu_alpha = alphas[g.below(2)];
  }
  // Shared experts in a format of their own, unquantized (what exporters' exclusion lists make beside
  // quantized routed experts; beside dense ones, another dense dtype): half of the layers with shared
  // experts, drawn after every other field so that earlier seeds keep their specs.
  if (s.shared.count > 0 && g.below(2)) {
    static const WeightFormat dense[] = {WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kF32};
    uint32_t i = g.below(3);
    if (dense[i] == s.weight_format) i = (i + 1 + g.below(2)) % 3;  // (one of the other two)
    s.shared.weight_format = dense[i];
  }
  s.validate();
  return s;
}

std::vector<VerifyCase> standard_cases(uint64_t seed, int count) { return standard_cases(seed, count, nullptr); }

std::vector<VerifyCase> standard_cases(uint64_t seed, int count, const std::function<bool(const MoeSpec&)>& accept) {
  // The first case computes something (a --cases 1 run must not verify an empty call alone); M = 0
  // comes second.
  static const int64_t tokens[] = {1, 0, 3, 33, 64, 130};
  // Draws per case before an unaccepted spec is kept (and reported as skipped): a backend that takes
  // about 1 spec in 60 (cuda: bf16 / f16 weights and activations alike) gets one within 1000 draws
  // but for about 1 case in 10^7.
  constexpr int kDraws = 1000;
  std::vector<VerifyCase> cases;
  SplitMix64 g(seed);
  for (int i = 0; i < count; ++i) {
    VerifyCase c;
    for (int d = 0; d < kDraws; ++d) {
      c.seed = g.next();
      c.spec = random_spec(c.seed);
      if (!accept || accept(c.spec)) break;
    }
    c.tokens = tokens[static_cast<size_t>(i) % 6];
    c.routing = static_cast<RoutingPattern>(g.below(6));
    c.nan_prefill = true;
    c.with_lora = c.spec.lora.max_adapters > 0;
    cases.push_back(c);
  }
  return cases;
}

namespace {

struct Inputs {
  HostTensor hidden, logits, ids, weights, adapter;
  LoraWeights lora;
  LoraBatch batch;
};

Inputs make_inputs(const MoeSpec& spec, const VerifyCase& c) {
  Inputs in;
  const int64_t m = c.tokens, h = spec.hidden, e = spec.num_experts, k = spec.top_k;
  SplitMix64 g(derive_seed(c.seed, 100));
  std::vector<float> x(static_cast<size_t>(m * h));
  for (float& v : x) v = g.uniform_pm1();
  in.hidden = HostTensor(spec.act_dtype, {m, h});
  convert_from_f32(x.data(), in.hidden.view());

  in.logits = HostTensor(DType::kF32, {m, e});
  float* lg = in.logits.as<float>();
  for (int64_t i = 0; i < m * e; ++i) lg[i] = 2.0f * g.uniform_pm1();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  switch (c.routing) {
    case RoutingPattern::kOneHot:
      for (int64_t t = 0; t < m; ++t)
        for (int64_t j = 0; j < k; ++j) lg[t * e + j] = 8.0f + 0.1f * g.uniform_pm1();
      break;
    case RoutingPattern::kSparse: {
      const int64_t keep = std::max<int64_t>(k, e / 4);
      for (int64_t t = 0; t < m; ++t)
        for (int64_t j = keep; j < e; ++j) lg[t * e + j] = -30.0f;
      break;
    }
    case RoutingPattern::kNanRows:
      for (int64_t t = 0; t < m; ++t) {
        if (t % 3 == 0) for (int64_t j = 0; j < e; ++j) lg[t * e + j] = nan;
        if (t % 3 == 1) for (int64_t j = 0; j < e; j += 2) lg[t * e + j] = nan;
        if (t % 5 == 2 && e > 1) { lg[t * e + 1] = inf; lg[t * e] = -inf; }
      }
      break;
    default:
      break;
  }
  if (c.routing == RoutingPattern::kGivenTopk) {
    in.ids = HostTensor(DType::kI32, {m, k});
    in.weights = HostTensor(DType::kF32, {m, k});
    std::vector<int32_t> perm(static_cast<size_t>(e));
    for (int64_t t = 0; t < m; ++t) {
      for (int64_t j = 0; j < e; ++j) perm[static_cast<size_t>(j)] = static_cast<int32_t>(j);
      for (int64_t j = 0; j < k; ++j) {  // partial Fisher-Yates: k distinct ids
        const int64_t r = j + g.below(static_cast<uint32_t>(e - j));
        std::swap(perm[static_cast<size_t>(j)], perm[static_cast<size_t>(r)]);
        in.ids.as<int32_t>()[t * k + j] = perm[static_cast<size_t>(j)];
        in.weights.as<float>()[t * k + j] = 0.1f + 0.9f * std::fabs(g.uniform_pm1());
      }
    }
  }
  if (c.with_lora && spec.lora.max_adapters > 0) {
    in.lora = random_lora(spec, derive_seed(c.seed, 101));
    in.adapter = random_token_adapters(m, spec.lora.max_adapters, derive_seed(c.seed, 102));
    in.batch.weights = &in.lora;
    in.batch.token_adapter = in.adapter.view();
  }
  return in;
}

ForwardArgs args_for(const Inputs& in, const VerifyCase& c, TensorView out) {
  ForwardArgs a;
  a.hidden = in.hidden.view();
  if (c.routing == RoutingPattern::kGivenTopk) {
    a.topk_ids = in.ids.view();
    a.topk_weights = in.weights.view();
  } else if (c.routing != RoutingPattern::kFromWeights) {  // from-weights: the router linear makes the logits
    a.router_logits = in.logits.view();
  }
  a.output = out;
  if (in.batch.weights) a.lora = &in.batch;
  return a;
}

HostTensor output_buffer(const MoeSpec& spec, int64_t m, bool nan_prefill) {
  HostTensor out(spec.act_dtype, {m, spec.hidden});
  if (nan_prefill) {
    std::vector<float> nan(static_cast<size_t>(m * spec.hidden), std::numeric_limits<float>::quiet_NaN());
    convert_from_f32(nan.data(), out.view());
  }
  return out;
}

std::vector<float> as_f32(const HostTensor& t) {
  std::vector<float> v(static_cast<size_t>(t.shape().numel()));
  convert_to_f32(t.view(), v.data());
  return v;
}

VerifyResult compare(const std::vector<float>& out, const std::vector<float>& ref, const Tolerance& tol) {
  VerifyResult r;
  r.tolerance = tol.max_normalized;
  double max_ref = 0.0, max_err = 0.0, num = 0.0, den = 0.0;
  int64_t worst = -1;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(ref[i])) {  // NaN must come out NaN, an infinity the same infinity
      if (std::isnan(ref[i]) ? std::isnan(out[i]) : out[i] == ref[i]) continue;
      r.message = "output " + std::to_string(out[i]) + " at element " + std::to_string(i) + " where the reference is " +
                  std::to_string(ref[i]);
      return r;
    }
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(ref[i])));
    if (!std::isfinite(out[i])) {
      r.message = "non-finite output " + std::to_string(out[i]) + " at element " + std::to_string(i) +
                  " where the reference is " + std::to_string(ref[i]);
      return r;
    }
    const double err = std::fabs(static_cast<double>(out[i]) - ref[i]);
    num += err * err;
    den += static_cast<double>(ref[i]) * ref[i];
    if (err > max_err) { max_err = err; worst = static_cast<int64_t>(i); }
  }
  r.error = max_err / std::max(max_ref, 1e-6);
  r.rel_l2 = std::sqrt(num / std::max(den, 1e-30));
  r.passed = r.error <= tol.max_normalized && r.rel_l2 <= tol.rel_l2;
  if (!r.passed) {
    std::ostringstream os;
    os << "normalized max error " << r.error << " (tolerance " << tol.max_normalized << "), relative L2 " << r.rel_l2
       << " (tolerance " << tol.rel_l2 << "); worst element " << worst << ": got " << out[static_cast<size_t>(worst)]
       << ", reference " << ref[static_cast<size_t>(worst)] << ", max|ref| " << max_ref;
    r.message = os.str();
  }
  return r;
}

std::vector<float> forward_once(Runner& runner, const MoeSpec& spec, const Inputs& in, const VerifyCase& c) {
  HostTensor out = output_buffer(spec, c.tokens, c.nan_prefill);
  ForwardArgs a = args_for(in, c, out.view());
  check_forward_args(spec, a, DeviceKind::kCpu);
  runner.forward(a);
  return as_f32(out);
}

std::vector<float> run_backend(const Backend& b, const Platform& p, const MoeSpec& spec, const MoeWeights& w,
                               const Inputs& in, const VerifyCase& c, const RunnerOptions& o) {
  auto runner = b.create_runner(spec, w, p, o);
  return forward_once(*runner, spec, in, c);
}

// The bytes a forward may only read.
std::vector<std::vector<char>> input_bytes(const Inputs& in) {
  std::vector<std::vector<char>> v;
  for (const HostTensor* t : {&in.hidden, &in.logits, &in.ids, &in.weights, &in.adapter}) {
    const char* d = static_cast<const char*>(t->data());
    v.emplace_back(d, d + t->nbytes());
  }
  return v;
}

// The backend's side of a case, as callers use a runner: the case's call, then a call of another
// size on other inputs, then the case's call again (state kept from call to call, workspaces sized
// for another M, must not change a result). Returns both outputs of the case's call; throws when a
// call wrote into its inputs.
std::pair<std::vector<float>, std::vector<float>> run_backend_twice(const Backend& b, const Platform& p,
                                                                    const MoeSpec& spec, const MoeWeights& w,
                                                                    const Inputs& in, const VerifyCase& c,
                                                                    const RunnerOptions& o) {
  auto runner = b.create_runner(spec, w, p, o);
  const auto before = input_bytes(in);
  std::vector<float> first = forward_once(*runner, spec, in, c);
  VerifyCase other = c;
  other.tokens = c.tokens == 0 ? 5 : 2 * c.tokens + 3;
  other.seed = derive_seed(c.seed, 300);
  const Inputs other_in = make_inputs(spec, other);
  forward_once(*runner, spec, other_in, other);
  std::vector<float> again = forward_once(*runner, spec, in, c);
  if (input_bytes(in) != before)
    throw_error(ErrorKind::kInternal, "backend " + std::string(b.name()) +
                                          ": forward wrote into its inputs (hidden, logits, top-k or adapter ids)");
  return {std::move(first), std::move(again)};
}

// compare() of both outputs of run_backend_twice; the second names itself. Both are the act dtype's
// values widened to f32 (exact), so equal bits here are equal bits in the output.
VerifyResult compare_both(const std::pair<std::vector<float>, std::vector<float>>& outs, const std::vector<float>& ref,
                          const Tolerance& tol) {
  const bool repeatable = outs.first.size() == outs.second.size() &&
                          (outs.first.empty() ||
                           std::memcmp(outs.first.data(), outs.second.data(), outs.first.size() * sizeof(float)) == 0);
  VerifyResult r = compare(outs.first, ref, tol);
  r.repeatable = repeatable;
  if (!r.passed) return r;
  VerifyResult again = compare(outs.second, ref, tol);
  again.repeatable = repeatable;
  if (!again.passed) {
    again.message = "on the same runner, after a call of another size: " + again.message;
    return again;
  }
  r.error = std::max(r.error, again.error);
  r.rel_l2 = std::max(r.rel_l2, again.rel_l2);
  return r;
}

}  // namespace

VerifyResult compare_outputs(const TensorView& out, const TensorView& ref, const Tolerance& tolerance) {
  if (out.numel() != ref.numel() || out.numel() < 0)
    throw_error(ErrorKind::kInvalidArgument, "compare_outputs: " + out.shape.str() + " vs " + ref.shape.str());
  for (const auto& [v, name] : {std::pair{&out, "out"}, std::pair{&ref, "ref"}}) {
    if (v->device != DeviceKind::kCpu) throw_error(ErrorKind::kInvalidArgument, std::string("compare_outputs: ") + name + " is not a host tensor");
    if (!v->data && v->numel() > 0) throw_error(ErrorKind::kInvalidArgument, std::string("compare_outputs: ") + name + ": null data");
  }
  if (!(tolerance.max_normalized >= 0.0) || !(tolerance.rel_l2 >= 0.0))
    throw_error(ErrorKind::kInvalidArgument, "compare_outputs: tolerances must be numbers >= 0");
  std::vector<float> a(static_cast<size_t>(out.numel())), b(a.size());
  convert_to_f32(out, a.data());
  convert_to_f32(ref, b.data());
  return compare(a, b, tolerance);
}

VerifyResult verify_case(const Backend& backend, const Platform& platform, const VerifyCase& c, const RunnerOptions& o) {
  if (c.tokens < 0) throw_error(ErrorKind::kInvalidArgument, "verify_case: tokens " + std::to_string(c.tokens) + " < 0");
  const Support sup = supports(backend, c.spec, platform);
  if (!sup.ok()) {
    VerifyResult r;
    r.skipped = true;
    r.passed = true;
    r.message = "not supported: " + sup.reasons.front();
    return r;
  }
  try {
    const MoeWeights w = random_weights(c.spec, derive_seed(c.seed, 200));
    const Inputs in = make_inputs(c.spec, c);
    static const auto reference = make_reference_backend();
    const std::vector<float> ref = run_backend(*reference, platform, c.spec, w, in, c, o);
    return compare_both(run_backend_twice(backend, platform, c.spec, w, in, c, o), ref, tolerance_for(c.spec));
  } catch (const std::exception& e) {
    VerifyResult r;
    r.message = std::string("threw: ") + e.what();
    return r;
  }
}

VerifyResult verify_sharded(const Backend& backend, const Platform& platform, const VerifyCase& c, const RunnerOptions& o) {
  MoeSpec full = c.spec;
  full.parallel = Parallel{};
  const int ranks = c.spec.parallel.tp * c.spec.parallel.ep;
  try {
    const MoeWeights w = random_weights(full, derive_seed(c.seed, 200));
    VerifyCase fc = c;
    fc.spec = full;
    fc.with_lora = false;  // adapters are per-shard tensors; sharded LoRA is covered per rank
    const Inputs in = make_inputs(full, fc);
    static const auto reference = make_reference_backend();
    const std::vector<float> ref = run_backend(*reference, platform, full, w, in, fc, o);
    std::vector<float> sum(ref.size(), 0.0f);
    for (int rank = 0; rank < ranks; ++rank) {
      MoeSpec rs = c.spec;
      rs.parallel.rank = rank;
      const Support sup = supports(backend, rs, platform);
      if (!sup.ok()) {
        VerifyResult r;
        r.skipped = r.passed = true;
        r.message = "not supported: " + sup.reasons.front();
        return r;
      }
      const MoeWeights sw = shard_weights(full, w, rs);
      const std::vector<float> part = run_backend(backend, platform, rs, sw, in, fc, o);
      // Partial outputs are rounded to the act dtype by each rank; the sum tolerates that.
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    }
    // Each rank rounds its partial output to the act dtype: twice the error budget.
    const Tolerance t = tolerance_for(c.spec);
    return compare(sum, ref, {2 * t.max_normalized, 2 * t.rel_l2});
  } catch (const std::exception& e) {
    VerifyResult r;
    r.message = std::string("threw: ") + e.what();
    return r;
  }
}

}  // namespace moerun
