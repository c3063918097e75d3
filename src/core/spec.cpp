// MoeSpec validation and the names of its enums.
#include "moerun/spec.hpp"

#include <array>
#include <cmath>
#include <sstream>
#include <utility>

#include "moerun/error.hpp"

namespace moerun {
namespace {

template <typename E>
struct Named {
  E value;
  std::string_view name;
};

constexpr std::array<Named<ActivationKind>, 6> kActivations{{
    {ActivationKind::kSiluAndMul, "silu-and-mul"},
    {ActivationKind::kGeluAndMul, "gelu-and-mul"},
    {ActivationKind::kGeluTanhAndMul, "gelu-tanh-and-mul"},
    {ActivationKind::kSwigluOai, "swiglu-oai"},
    {ActivationKind::kRelu2, "relu2"},
    {ActivationKind::kSilu, "silu"},
}};
constexpr std::array<Named<Scoring>, 2> kScorings{{{Scoring::kSoftmax, "softmax"}, {Scoring::kSigmoid, "sigmoid"}}};
constexpr std::array<Named<WeightFormat>, 9> kFormats{{
    {WeightFormat::kF32, "f32"},
    {WeightFormat::kF16, "f16"},
    {WeightFormat::kBF16, "bf16"},
    {WeightFormat::kFp8PerTensor, "fp8-tensor"},
    {WeightFormat::kFp8PerChannel, "fp8-channel"},
    {WeightFormat::kFp8Block, "fp8-block"},
    {WeightFormat::kMxfp4, "mxfp4"},
    {WeightFormat::kNvfp4, "nvfp4"},
    {WeightFormat::kInt8PerChannel, "int8-channel"},
}};
constexpr std::array<Named<ActQuant>, 3> kActQuants{
    {{ActQuant::kNone, "none"}, {ActQuant::kFp8PerTokenGroup, "fp8-token-group"}, {ActQuant::kInt8PerTokenGroup, "int8-token-group"}}};

template <typename E, size_t N>
std::string_view name_of(const std::array<Named<E>, N>& table, E v) noexcept {
  for (const auto& n : table)
    if (n.value == v) return n.name;
  return "?";
}
template <typename E, size_t N>
std::optional<E> parse_in(const std::array<Named<E>, N>& table, std::string_view s) noexcept {
  for (const auto& n : table)
    if (n.name == s) return n.value;
  return std::nullopt;
}
template <typename E, size_t N>
std::string join_names(const std::array<Named<E>, N>& table) {
  std::string out;
  for (const auto& n : table) {
    if (!out.empty()) out += ", ";
    out += n.name;
  }
  return out;
}

[[noreturn]] void bad(const std::string& field, const std::string& value, const std::string& rule) {
  throw_error(ErrorKind::kInvalidSpec, "spec." + field + " = " + value + ": " + rule);
}
std::string str(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

std::string_view to_string(ActivationKind k) noexcept { return name_of(kActivations, k); }
std::string_view to_string(Scoring s) noexcept { return name_of(kScorings, s); }
std::string_view to_string(WeightFormat f) noexcept { return name_of(kFormats, f); }
std::string_view to_string(ActQuant q) noexcept { return name_of(kActQuants, q); }
std::optional<ActivationKind> parse_activation(std::string_view s) noexcept { return parse_in(kActivations, s); }
std::optional<Scoring> parse_scoring(std::string_view s) noexcept { return parse_in(kScorings, s); }
std::optional<WeightFormat> parse_weight_format(std::string_view s) noexcept { return parse_in(kFormats, s); }
std::optional<ActQuant> parse_act_quant(std::string_view s) noexcept { return parse_in(kActQuants, s); }
std::string allowed_activations() { return join_names(kActivations); }
std::string allowed_weight_formats() { return join_names(kFormats); }
std::string allowed_act_quants() { return join_names(kActQuants); }

bool is_unquantized(WeightFormat f) noexcept {
  return f == WeightFormat::kF32 || f == WeightFormat::kF16 || f == WeightFormat::kBF16;
}

bool act_quant_admits(ActQuant q, WeightFormat f) noexcept {
  switch (q) {
    case ActQuant::kNone: return true;
    case ActQuant::kFp8PerTokenGroup:
      return f == WeightFormat::kFp8Block || f == WeightFormat::kFp8PerChannel || f == WeightFormat::kFp8PerTensor;
    case ActQuant::kInt8PerTokenGroup: return f == WeightFormat::kMxfp4 || f == WeightFormat::kNvfp4;
  }
  return false;
}

ActQuant MoeSpec::shared_act_quant() const noexcept {
  return act_quant_admits(act_quant, shared_weight_format()) ? act_quant : ActQuant::kNone;
}

void MoeSpec::validate() const {
  // Caps keep every size product far from overflow (E*2I*H < 2^49) and reject typos like hidden=7168000.
  constexpr int kMaxExperts = 4096, kMaxDim = 1 << 18;
  if (num_experts < 1 || num_experts > kMaxExperts)
    bad("num_experts", std::to_string(num_experts), "must be in [1, " + std::to_string(kMaxExperts) + "]");
  if (top_k < 1 || top_k > num_experts)
    bad("top_k", std::to_string(top_k), "must be in [1, num_experts=" + std::to_string(num_experts) + "]");
  if (hidden < 1 || hidden > kMaxDim) bad("hidden", std::to_string(hidden), "must be in [1, 262144]");
  if (intermediate < 1 || intermediate > kMaxDim)
    bad("intermediate", std::to_string(intermediate), "must be in [1, 262144]");

  if (static_cast<size_t>(activation.kind) >= kActivations.size())
    bad("activation", std::to_string(static_cast<int>(activation.kind)), "allowed: " + allowed_activations());
  if (activation.kind == ActivationKind::kSwigluOai) {
    if (!std::isfinite(activation.swiglu_alpha) || activation.swiglu_alpha <= 0)
      bad("activation.swiglu_alpha", str(activation.swiglu_alpha), "must be a finite number > 0");
    if (!std::isfinite(activation.swiglu_limit))
      bad("activation.swiglu_limit", str(activation.swiglu_limit), "must be finite (<= 0 means no clamp)");
  }
  if (activation.interleaved_gate_up && !activation.gated())
    bad("activation.interleaved_gate_up", "true", "needs a gated activation, not " + std::string(to_string(activation.kind)));

  const Routing& r = routing;
  if (static_cast<size_t>(r.scoring) >= kScorings.size())
    bad("routing.scoring", std::to_string(static_cast<int>(r.scoring)), "allowed: softmax, sigmoid");
  if (r.softmax_after_topk && r.scoring != Scoring::kSoftmax)
    bad("routing.softmax_after_topk", "true", "needs routing.scoring = softmax");
  if (r.softmax_after_topk && (r.n_group != 1 || r.correction_bias))
    bad("routing.softmax_after_topk", "true", "cannot be combined with grouped top-k or a correction bias");
  if (r.n_group < 1 || r.n_group > num_experts || num_experts % r.n_group != 0)
    bad("routing.n_group", std::to_string(r.n_group),
        "must be >= 1 and divide num_experts=" + std::to_string(num_experts));
  if (r.topk_group < 1 || r.topk_group > r.n_group)
    bad("routing.topk_group", std::to_string(r.topk_group), "must be in [1, n_group=" + std::to_string(r.n_group) + "]");
  if (r.n_group > 1 && top_k > r.topk_group * (num_experts / r.n_group))
    bad("top_k", std::to_string(top_k), "exceeds the experts in the kept groups (topk_group * num_experts / n_group = " +
                                            std::to_string(r.topk_group * (num_experts / r.n_group)) + ")");
  if (r.n_group > 1 && r.correction_bias && num_experts / r.n_group < 2)
    bad("routing.n_group", std::to_string(r.n_group), "with a correction bias each group needs >= 2 experts (group score = top-2 sum)");
  if (!std::isfinite(r.routed_scaling_factor) || r.routed_scaling_factor <= 0)
    bad("routing.routed_scaling_factor", str(r.routed_scaling_factor), "must be a finite number > 0");

  if (static_cast<size_t>(weight_format) >= kFormats.size())
    bad("weight_format", std::to_string(static_cast<int>(weight_format)), "allowed: " + allowed_weight_formats());
  if (weight_format == WeightFormat::kMxfp4 && (hidden % 32 || intermediate % 32))
    bad("weight_format", "mxfp4", "needs hidden and intermediate multiples of 32 (got " + std::to_string(hidden) + ", " +
                                      std::to_string(intermediate) + ")");
  if (weight_format == WeightFormat::kNvfp4 && (hidden % 16 || intermediate % 16))
    bad("weight_format", "nvfp4", "needs hidden and intermediate multiples of 16 (got " + std::to_string(hidden) + ", " +
                                      std::to_string(intermediate) + ")");
  if (static_cast<size_t>(act_quant) >= kActQuants.size())
    bad("act_quant", std::to_string(static_cast<int>(act_quant)), "allowed: " + allowed_act_quants());
  if (act_quant == ActQuant::kFp8PerTokenGroup && !act_quant_admits(act_quant, weight_format))
    bad("act_quant", "fp8-token-group", "needs an fp8 weight format, not " + std::string(to_string(weight_format)));
  if (act_quant == ActQuant::kInt8PerTokenGroup && !act_quant_admits(act_quant, weight_format))
    bad("act_quant", "int8-token-group", "needs a 4-bit weight format (mxfp4, nvfp4), not " + std::string(to_string(weight_format)));
  if (act_dtype != DType::kF32 && act_dtype != DType::kF16 && act_dtype != DType::kBF16)
    bad("act_dtype", std::string(dtype_name(act_dtype)), "allowed: F32, F16, BF16");

  if (shared.count < 0 || shared.count > kMaxExperts)
    bad("shared.count", std::to_string(shared.count), "must be in [0, 4096]");
  if (shared.count > 0 && (shared.intermediate < 1 || shared.intermediate > kMaxDim))
    bad("shared.intermediate", std::to_string(shared.intermediate), "must be in [1, 262144] when shared.count > 0");
  if (shared.count > 0 && !activation.gated())
    bad("shared.count", std::to_string(shared.count), "shared experts need a gated activation (they are gate/up/down MLPs)");
  if (shared.count == 0 && shared.gated_by_router) bad("shared.gated_by_router", "true", "needs shared.count > 0");
  if (shared.weight_format) {
    const WeightFormat sf = *shared.weight_format;
    if (static_cast<size_t>(sf) >= kFormats.size())
      bad("shared.weight_format", std::to_string(static_cast<int>(sf)), "allowed: " + allowed_weight_formats());
    if (shared.count == 0) bad("shared.weight_format", std::string(to_string(sf)), "needs shared.count > 0");
    if (sf == WeightFormat::kMxfp4 && hidden % 32)
      bad("shared.weight_format", "mxfp4", "needs hidden a multiple of 32 (got " + std::to_string(hidden) + ")");
    if (sf == WeightFormat::kNvfp4 && hidden % 16)
      bad("shared.weight_format", "nvfp4", "needs hidden a multiple of 16 (got " + std::to_string(hidden) + ")");
  }
  if (apply_router_weight_on_input && top_k != 1)
    bad("apply_router_weight_on_input", "true", "needs top_k = 1 (got " + std::to_string(top_k) + ")");

  const Parallel& p = parallel;
  if (p.tp < 1 || p.ep < 1 || p.dp < 1)
    bad("parallel", "tp=" + std::to_string(p.tp) + " ep=" + std::to_string(p.ep) + " dp=" + std::to_string(p.dp),
        "each must be >= 1");
  if (num_experts % p.ep) bad("parallel.ep", std::to_string(p.ep), "must divide num_experts=" + std::to_string(num_experts));
  if (intermediate % p.tp) bad("parallel.tp", std::to_string(p.tp), "must divide intermediate=" + std::to_string(intermediate));
  if (shared.count > 0 && shared.intermediate % p.tp)
    bad("parallel.tp", std::to_string(p.tp), "must divide shared.intermediate=" + std::to_string(shared.intermediate));
  if (p.rank < 0 || p.rank >= p.tp * p.ep)
    bad("parallel.rank", std::to_string(p.rank), "must be in [0, tp*ep=" + std::to_string(p.tp * p.ep) + ")");
  const int il = intermediate / p.tp;
  if (weight_format == WeightFormat::kMxfp4 && il % 32)
    bad("parallel.tp", std::to_string(p.tp), "leaves intermediate/tp = " + std::to_string(il) + ", not a multiple of 32 (mxfp4)");
  if (weight_format == WeightFormat::kNvfp4 && il % 16)
    bad("parallel.tp", std::to_string(p.tp), "leaves intermediate/tp = " + std::to_string(il) + ", not a multiple of 16 (nvfp4)");
  // The shared expert's down projection has K = shared.intermediate / tp: the 4-bit groups need it whole.
  const WeightFormat sf = shared_weight_format();
  const int fp4_group = sf == WeightFormat::kMxfp4 ? 32 : sf == WeightFormat::kNvfp4 ? 16 : 0;
  if (fp4_group && shared.count > 0 && shared.intermediate % p.tp == 0 && (shared.intermediate / p.tp) % fp4_group)
    bad("shared.intermediate", std::to_string(shared.intermediate),
        (p.tp > 1 ? "/ tp = " + std::to_string(shared.intermediate / p.tp) + " " : std::string()) + "is not a multiple of " +
            std::to_string(fp4_group) + " (" + std::string(to_string(sf)) + ")");

  if (lora.max_adapters < 0 || lora.max_adapters > 1024)
    bad("lora.max_adapters", std::to_string(lora.max_adapters), "must be in [0, 1024]");
  if (lora.max_adapters > 0 && (lora.max_rank < 1 || lora.max_rank > 512))
    bad("lora.max_rank", std::to_string(lora.max_rank), "must be in [1, 512] when lora.max_adapters > 0");
}

std::string MoeSpec::summary() const {
  std::ostringstream os;
  os << "E=" << num_experts << " top" << top_k << " H=" << hidden << " I=" << intermediate << " "
     << to_string(weight_format);
  if (act_quant != ActQuant::kNone) os << "+" << to_string(act_quant);
  os << " act=" << dtype_name(act_dtype) << " " << to_string(activation.kind);
  if (activation.interleaved_gate_up) os << "(interleaved)";
  os << " " << to_string(routing.scoring);
  if (routing.softmax_after_topk) os << "-after-topk";
  if (routing.correction_bias) os << "+bias";
  if (routing.n_group > 1) os << " groups=" << routing.n_group << "/" << routing.topk_group;
  if (routing.renormalize) os << " renorm";
  if (routing.routed_scaling_factor != 1.0f) os << " scale=" << routing.routed_scaling_factor;
  if (shared.count) {
    os << " shared=" << shared.count << "x" << shared.intermediate << (shared.gated_by_router ? "(gated)" : "");
    if (mixed_formats()) os << ":" << to_string(shared_weight_format());
  }
  if (router_bias) os << " router-bias";
  if (expert_bias) os << " expert-bias";
  if (apply_router_weight_on_input) os << " weight-on-input";
  if (parallel.tp > 1 || parallel.ep > 1) os << " tp=" << parallel.tp << " ep=" << parallel.ep << " rank=" << parallel.rank;
  if (lora.max_adapters) os << " lora=" << lora.max_adapters << "x r" << lora.max_rank;
  return os.str();
}

}  // namespace moerun
