// supports(): the one capability question, derived from a backend's Capabilities record.
#include <algorithm>
#include <sstream>

#include "moerun/backend.hpp"
#include "moerun/weights.hpp"

namespace moerun {
namespace {

template <typename T>
bool contains(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string sm_name(int sm) { return "sm" + std::to_string(sm); }

}  // namespace

std::string Backend::variant(const MoeSpec& spec, const Platform& platform, int64_t m) const {
  return variant_for_tokens(capabilities(), spec, platform, m);
}

std::vector<FormatSupport> every_format() {
  std::vector<FormatSupport> v;
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kF16, WeightFormat::kBF16, WeightFormat::kFp8PerTensor,
                         WeightFormat::kFp8PerChannel, WeightFormat::kFp8Block, WeightFormat::kMxfp4, WeightFormat::kNvfp4,
                         WeightFormat::kInt8PerChannel})
    v.push_back({f, ActQuant::kNone});
  for (WeightFormat f : {WeightFormat::kFp8PerTensor, WeightFormat::kFp8PerChannel, WeightFormat::kFp8Block})
    v.push_back({f, ActQuant::kFp8PerTokenGroup});
  for (WeightFormat f : {WeightFormat::kMxfp4, WeightFormat::kNvfp4}) v.push_back({f, ActQuant::kInt8PerTokenGroup});
  return v;
}

std::vector<ActivationKind> every_activation() {
  return {ActivationKind::kSiluAndMul, ActivationKind::kGeluAndMul, ActivationKind::kGeluTanhAndMul,
          ActivationKind::kSwigluOai,  ActivationKind::kRelu2,      ActivationKind::kSilu};
}

std::vector<std::string> device_reasons(const Backend& backend, const Platform& platform) {
  const Capabilities& c = backend.capabilities();
  std::vector<std::string> reasons;
  auto no = [&](std::string r) { reasons.push_back(std::move(r)); };
  if (c.device == DeviceKind::kCpu) {
    if (platform.cpu.isa() < c.min_cpu_isa)
      no("needs CPU ISA " + std::string(to_string(c.min_cpu_isa)) + ", platform has " + std::string(to_string(platform.cpu.isa())));
  } else {
    if (!platform.has_gpu()) {
      no("needs a CUDA GPU (" + sm_name(c.min_sm) + "+), platform has none");
    } else {
      const int sm = platform.gpu_sm();
      if (sm < c.min_sm) no("needs " + sm_name(c.min_sm) + " or newer, platform GPU is " + sm_name(sm));
      if (c.max_sm && sm > c.max_sm) no("built for up to " + sm_name(c.max_sm) + ", platform GPU is " + sm_name(sm));
      if (c.needs_arch_specific && sm != c.min_sm)
        no("uses " + sm_name(c.min_sm) + "a-only instructions (e.g. wgmma), which " + sm_name(sm) + " lacks");
      else if (c.needs_arch_specific && !platform.gpus.front().arch_specific)
        no("uses " + sm_name(c.min_sm) + "a-only instructions (e.g. wgmma), and the platform describes its GPU without "
           "arch-specific features (gpus[].arch_specific false)");
    }
  }
  return reasons;
}

Support supports(const Backend& backend, const MoeSpec& spec, const Platform& platform) {
  const Capabilities& c = backend.capabilities();
  Support s;
  auto no = [&](std::string r) { s.reasons.push_back(std::move(r)); };

  // Device.
  s.reasons = device_reasons(backend, platform);

  // Formats and dtypes.
  bool fmt_ok = false;
  for (const FormatSupport& f : c.formats) fmt_ok |= f.weights == spec.weight_format && f.act_quant == spec.act_quant;
  if (!fmt_ok) {
    std::ostringstream os;
    os << "weight format " << to_string(spec.weight_format) << " with act quant " << to_string(spec.act_quant)
       << " not supported (supports:";
    for (const FormatSupport& f : c.formats) os << " " << to_string(f.weights) << (f.act_quant != ActQuant::kNone ? "+" + std::string(to_string(f.act_quant)) : "");
    os << ")";
    no(os.str());
  }
  if (!contains(c.act_dtypes, spec.act_dtype)) no("activation dtype " + std::string(dtype_name(spec.act_dtype)) + " not supported");
  if (!contains(c.activations, spec.activation.kind)) no("activation " + std::string(to_string(spec.activation.kind)) + " not supported");
  if (spec.activation.interleaved_gate_up && !c.interleaved_gate_up) no("interleaved gate/up rows not supported");

  // Routing.
  if (!contains(c.scorings, spec.routing.scoring)) no("scoring " + std::string(to_string(spec.routing.scoring)) + " not supported");
  if (spec.routing.softmax_after_topk && !c.softmax_after_topk) no("softmax after top-k not supported");
  if (spec.routing.correction_bias && !c.correction_bias) no("routing correction bias not supported");
  if (spec.routing.n_group > 1 && !c.grouped_topk) no("grouped top-k (n_group=" + std::to_string(spec.routing.n_group) + ") not supported");
  if (c.max_top_k && spec.top_k > c.max_top_k) no("top_k " + std::to_string(spec.top_k) + " > max " + std::to_string(c.max_top_k));
  if (c.max_experts && spec.num_experts > c.max_experts)
    no("num_experts " + std::to_string(spec.num_experts) + " > max " + std::to_string(c.max_experts));

  // Shapes.
  if (spec.hidden % c.hidden_multiple)
    no("hidden " + std::to_string(spec.hidden) + " is not a multiple of " + std::to_string(c.hidden_multiple));
  if (local_intermediate(spec) % c.intermediate_multiple)
    no("intermediate per rank " + std::to_string(local_intermediate(spec)) + " is not a multiple of " + std::to_string(c.intermediate_multiple));

  // Features.
  if (spec.expert_bias && !c.expert_bias) no("expert biases not supported");
  if (spec.router_bias && !c.router_bias) no("router bias not supported");
  if (spec.shared.count > 0 && !c.shared_experts) no("shared experts not supported");
  if (spec.shared.gated_by_router && !c.shared_gate) no("gated shared expert not supported");
  if (spec.mixed_formats() && c.shared_experts && !contains(c.shared_formats, spec.shared_weight_format())) {
    std::string listed;
    for (WeightFormat f : c.shared_formats)
      if (f != spec.weight_format) listed += " " + std::string(to_string(f));
    no("shared experts in " + std::string(to_string(spec.shared_weight_format())) + " beside " +
       std::string(to_string(spec.weight_format)) + " routed experts not supported (shared experts in the routed " +
       "experts' format" + (listed.empty() ? std::string(" only") : ", or in:" + listed) + ")");
  }
  if (spec.apply_router_weight_on_input && !c.apply_router_weight_on_input) no("router weight on input not supported");
  if (spec.parallel.tp > 1 && !c.tensor_parallel) no("tensor parallel (tp=" + std::to_string(spec.parallel.tp) + ") not supported");
  if (spec.parallel.ep > 1 && !c.expert_parallel) no("expert parallel (ep=" + std::to_string(spec.parallel.ep) + ") not supported");
  if (spec.lora.max_adapters > 0 && !c.lora) no("LoRA not supported");
  if (spec.lora.max_adapters > 0 && c.lora && c.max_lora_rank && spec.lora.max_rank > c.max_lora_rank)
    no("LoRA rank " + std::to_string(spec.lora.max_rank) + " > max " + std::to_string(c.max_lora_rank));

  backend.extra_checks(spec, platform, s);
  return s;
}

std::string variant_for_tokens(const Capabilities& caps, const MoeSpec& spec, const Platform& platform, int64_t m) {
  const double per_expert = static_cast<double>(m) * spec.top_k / spec.num_experts;
  const KernelVariant* best = nullptr;
  for (const KernelVariant& v : caps.variants) {
    if (v.max_tokens_per_expert != 0.0 && per_expert > v.max_tokens_per_expert) continue;
    if (v.min_tokens_per_expert != 0.0 && per_expert <= v.min_tokens_per_expert) continue;
    if (caps.device == DeviceKind::kCpu && platform.cpu.isa() < v.min_cpu_isa) continue;
    if (!v.act_dtypes.empty() && std::find(v.act_dtypes.begin(), v.act_dtypes.end(), spec.act_dtype) == v.act_dtypes.end()) continue;
    if (!best || v.min_cpu_isa > best->min_cpu_isa) best = &v;
  }
  return best ? best->name : "";
}

}  // namespace moerun
