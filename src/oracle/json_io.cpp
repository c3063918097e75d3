#include "oracle/json_io.hpp"

#include <set>
#include <type_traits>

#include "core/json_number.hpp"
#include "moerun/error.hpp"

namespace moerun::json_io {
namespace {

using nlohmann::json;

std::string_view device_name(DeviceKind d) { return d == DeviceKind::kCpu ? "cpu" : "cuda"; }

[[noreturn]] void fail(std::string_view origin, const std::string& what) {
  throw_error(ErrorKind::kParse, std::string(origin) + ": " + what);
}

// A strict reader over one JSON object: each key read is remembered; finish() rejects the rest.
class Reader {
 public:
  Reader(const json& j, std::string_view origin, std::string where) : j_(j), origin_(origin), where_(std::move(where)) {
    if (!j.is_object()) fail(origin_, where_ + " must be an object");
  }
  template <typename T>
  void opt(const char* key, T& out, const char* type) {
    seen_.insert(key);
    if (!j_.contains(key)) return;
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      if (auto v = json_number<T>(j_.at(key))) {
        out = *v;
        return;
      }
    } else {
      try {
        out = j_.at(key).get<T>();
        return;
      } catch (const json::exception&) {
      }
    }
    const json& v = j_.at(key);
    // ("out of range" only where a number was wanted: a string or boolean field holding 5 is the wrong type)
    const bool numeric = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;
    fail(origin_, where_ + "." + key + " must be " + type +
                      (v.is_number() ? ", got " + v.dump() +
                                           (numeric ? (std::is_integral_v<T> ? " (out of range or not whole)" : " (out of range)")
                                                    : " (a number)")
                                     : ""));
  }
  const json* sub(const char* key) {
    seen_.insert(key);
    return j_.contains(key) ? &j_.at(key) : nullptr;
  }
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key())) fail(origin_, "unknown key '" + it.key() + "' in " + where_);
  }

 private:
  const json& j_;
  std::string_view origin_;
  std::string where_;
  std::set<std::string> seen_;
};

template <typename E, typename Parse>
E parse_enum(const std::string& s, Parse parse, std::string_view origin, const std::string& field, const std::string& allowed) {
  auto v = parse(s);
  if (!v) fail(origin, field + " '" + s + "': allowed " + allowed);
  return *v;
}

DType parse_act_dtype(const std::string& s, std::string_view origin, const std::string& field) {
  if (s == "f32" || s == "F32") return DType::kF32;
  if (s == "f16" || s == "F16") return DType::kF16;
  if (s == "bf16" || s == "BF16") return DType::kBF16;
  fail(origin, field + " '" + s + "': allowed f32, f16, bf16");
}

std::string act_dtype_name(DType d) {
  std::string s(dtype_name(d));
  for (char& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}

}  // namespace

json to_json(const MoeSpec& s) {
  json j;
  j["name"] = s.name;
  j["num_experts"] = s.num_experts;
  j["top_k"] = s.top_k;
  j["hidden"] = s.hidden;
  j["intermediate"] = s.intermediate;
  j["activation"] = {{"kind", to_string(s.activation.kind)}, {"swiglu_alpha", s.activation.swiglu_alpha},
                     {"swiglu_limit", s.activation.swiglu_limit}, {"interleaved_gate_up", s.activation.interleaved_gate_up}};
  j["routing"] = {{"scoring", to_string(s.routing.scoring)}, {"softmax_after_topk", s.routing.softmax_after_topk},
                  {"correction_bias", s.routing.correction_bias}, {"n_group", s.routing.n_group},
                  {"topk_group", s.routing.topk_group}, {"renormalize", s.routing.renormalize},
                  {"routed_scaling_factor", s.routing.routed_scaling_factor}};
  j["weight_format"] = to_string(s.weight_format);
  j["act_quant"] = to_string(s.act_quant);
  j["act_dtype"] = act_dtype_name(s.act_dtype);
  j["expert_bias"] = s.expert_bias;
  j["router_bias"] = s.router_bias;
  j["shared"] = {{"count", s.shared.count}, {"intermediate", s.shared.intermediate}, {"gated_by_router", s.shared.gated_by_router}};
  if (s.mixed_formats()) j["shared"]["weight_format"] = to_string(s.shared_weight_format());  // (absent: the routed one)
  j["apply_router_weight_on_input"] = s.apply_router_weight_on_input;
  j["parallel"] = {{"tp", s.parallel.tp}, {"ep", s.parallel.ep}, {"dp", s.parallel.dp}, {"rank", s.parallel.rank}};
  j["lora"] = {{"max_adapters", s.lora.max_adapters}, {"max_rank", s.lora.max_rank}};
  return j;
}

MoeSpec spec_from_json(const json& j, std::string_view origin) {
  MoeSpec s;
  Reader r(j, origin, "spec");
  r.opt("name", s.name, "a string");
  r.opt("num_experts", s.num_experts, "an integer");
  r.opt("top_k", s.top_k, "an integer");
  r.opt("hidden", s.hidden, "an integer");
  r.opt("intermediate", s.intermediate, "an integer");
  if (const json* a = r.sub("activation")) {
    Reader ra(*a, origin, "spec.activation");
    std::string kind = std::string(to_string(s.activation.kind));
    ra.opt("kind", kind, "a string");
    s.activation.kind = parse_enum<ActivationKind>(kind, parse_activation, origin, "activation.kind", allowed_activations());
    ra.opt("swiglu_alpha", s.activation.swiglu_alpha, "a number");
    ra.opt("swiglu_limit", s.activation.swiglu_limit, "a number");
    ra.opt("interleaved_gate_up", s.activation.interleaved_gate_up, "a boolean");
    ra.finish();
  }
  if (const json* g = r.sub("routing")) {
    Reader rr(*g, origin, "spec.routing");
    std::string scoring = std::string(to_string(s.routing.scoring));
    rr.opt("scoring", scoring, "a string");
    s.routing.scoring = parse_enum<Scoring>(scoring, parse_scoring, origin, "routing.scoring", "softmax, sigmoid");
    rr.opt("softmax_after_topk", s.routing.softmax_after_topk, "a boolean");
    rr.opt("correction_bias", s.routing.correction_bias, "a boolean");
    rr.opt("n_group", s.routing.n_group, "an integer");
    rr.opt("topk_group", s.routing.topk_group, "an integer");
    rr.opt("renormalize", s.routing.renormalize, "a boolean");
    rr.opt("routed_scaling_factor", s.routing.routed_scaling_factor, "a number");
    rr.finish();
  }
  std::string fmt = std::string(to_string(s.weight_format)), aq = "none", ad = "bf16";
  r.opt("weight_format", fmt, "a string");
  s.weight_format = parse_enum<WeightFormat>(fmt, parse_weight_format, origin, "weight_format", allowed_weight_formats());
  r.opt("act_quant", aq, "a string");
  s.act_quant = parse_enum<ActQuant>(aq, parse_act_quant, origin, "act_quant", allowed_act_quants());
  r.opt("act_dtype", ad, "a string");
  s.act_dtype = parse_act_dtype(ad, origin, "act_dtype");
  r.opt("expert_bias", s.expert_bias, "a boolean");
  r.opt("router_bias", s.router_bias, "a boolean");
  if (const json* sh = r.sub("shared")) {
    Reader rs(*sh, origin, "spec.shared");
    rs.opt("count", s.shared.count, "an integer");
    rs.opt("intermediate", s.shared.intermediate, "an integer");
    rs.opt("gated_by_router", s.shared.gated_by_router, "a boolean");
    std::string sf;
    rs.opt("weight_format", sf, "a string");
    if (sh->contains("weight_format"))
      s.shared.weight_format =
          parse_enum<WeightFormat>(sf, parse_weight_format, origin, "shared.weight_format", allowed_weight_formats());
    rs.finish();
    if (s.shared.weight_format == s.weight_format) s.shared.weight_format.reset();  // (the routed format named again)
  }
  r.opt("apply_router_weight_on_input", s.apply_router_weight_on_input, "a boolean");
  if (const json* p = r.sub("parallel")) {
    Reader rp(*p, origin, "spec.parallel");
    rp.opt("tp", s.parallel.tp, "an integer");
    rp.opt("ep", s.parallel.ep, "an integer");
    rp.opt("dp", s.parallel.dp, "an integer");
    rp.opt("rank", s.parallel.rank, "an integer");
    rp.finish();
  }
  if (const json* l = r.sub("lora")) {
    Reader rl(*l, origin, "spec.lora");
    rl.opt("max_adapters", s.lora.max_adapters, "an integer");
    rl.opt("max_rank", s.lora.max_rank, "an integer");
    rl.finish();
  }
  r.finish();
  return s;
}

json to_json(const Capabilities& c) {
  json j;
  j["device"] = device_name(c.device);
  j["min_cpu_isa"] = to_string(c.min_cpu_isa);
  j["min_sm"] = c.min_sm;
  j["max_sm"] = c.max_sm;
  j["needs_arch_specific"] = c.needs_arch_specific;
  json f = json::array();
  for (const FormatSupport& fs : c.formats) f.push_back({{"weights", to_string(fs.weights)}, {"act_quant", to_string(fs.act_quant)}});
  j["formats"] = f;
  json ad = json::array();
  for (DType d : c.act_dtypes) ad.push_back(act_dtype_name(d));
  j["act_dtypes"] = ad;
  json acts = json::array();
  for (ActivationKind a : c.activations) acts.push_back(to_string(a));
  j["activations"] = acts;
  json sc = json::array();
  for (Scoring s : c.scorings) sc.push_back(to_string(s));
  j["scorings"] = sc;
  j["interleaved_gate_up"] = c.interleaved_gate_up;
  j["softmax_after_topk"] = c.softmax_after_topk;
  j["correction_bias"] = c.correction_bias;
  j["grouped_topk"] = c.grouped_topk;
  j["max_top_k"] = c.max_top_k;
  j["max_experts"] = c.max_experts;
  j["hidden_multiple"] = c.hidden_multiple;
  j["intermediate_multiple"] = c.intermediate_multiple;
  j["expert_bias"] = c.expert_bias;
  j["router_bias"] = c.router_bias;
  j["shared_experts"] = c.shared_experts;
  j["shared_gate"] = c.shared_gate;
  json sf = json::array();
  for (WeightFormat w : c.shared_formats) sf.push_back(to_string(w));
  j["shared_formats"] = sf;
  j["apply_router_weight_on_input"] = c.apply_router_weight_on_input;
  j["tensor_parallel"] = c.tensor_parallel;
  j["expert_parallel"] = c.expert_parallel;
  j["lora"] = c.lora;
  j["max_lora_rank"] = c.max_lora_rank;
  j["cuda_graph_safe"] = c.cuda_graph_safe;
  j["host_sync"] = c.host_sync;
  j["owns_dispatch"] = c.owns_dispatch;
  json v = json::array();
  for (const KernelVariant& kv : c.variants) {
    json vd = json::array();
    for (DType d : kv.act_dtypes) vd.push_back(act_dtype_name(d));
    v.push_back({{"name", kv.name},
                 {"max_tokens_per_expert", kv.max_tokens_per_expert},
                 {"min_tokens_per_expert", kv.min_tokens_per_expert},
                 {"min_cpu_isa", to_string(kv.min_cpu_isa)},
                 {"act_dtypes", vd},
                 {"why", kv.why}});
  }
  j["variants"] = v;
  return j;
}

Capabilities capabilities_from_json(const json& j, std::string_view origin) {
  Capabilities c;
  Reader r(j, origin, "capabilities");
  std::string device = "cpu", isa = "scalar";
  r.opt("device", device, "a string");
  if (device == "cpu") c.device = DeviceKind::kCpu;
  else if (device == "cuda") c.device = DeviceKind::kCuda;
  else fail(origin, "capabilities.device '" + device + "': allowed cpu, cuda");
  r.opt("min_cpu_isa", isa, "a string");
  bool isa_ok = false;
  for (CpuIsa i : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx})
    if (isa == to_string(i)) { c.min_cpu_isa = i; isa_ok = true; }
  if (!isa_ok) fail(origin, "capabilities.min_cpu_isa '" + isa + "': allowed scalar, avx2, avx512, avx512-bf16, amx");
  r.opt("min_sm", c.min_sm, "an integer");
  r.opt("max_sm", c.max_sm, "an integer");
  r.opt("needs_arch_specific", c.needs_arch_specific, "a boolean");
  if (const json* f = r.sub("formats")) {
    if (!f->is_array()) fail(origin, "capabilities.formats must be an array");
    for (const json& e : *f) {
      Reader rf(e, origin, "capabilities.formats[]");
      std::string w, aq = "none";
      rf.opt("weights", w, "a string");
      rf.opt("act_quant", aq, "a string");
      rf.finish();
      c.formats.push_back({parse_enum<WeightFormat>(w, parse_weight_format, origin, "formats[].weights", allowed_weight_formats()),
                           parse_enum<ActQuant>(aq, parse_act_quant, origin, "formats[].act_quant", allowed_act_quants())});
    }
  }
  auto strings = [&](const char* key) {
    std::vector<std::string> v;
    r.opt(key, v, "an array of strings");
    return v;
  };
  for (const std::string& s : strings("act_dtypes")) c.act_dtypes.push_back(parse_act_dtype(s, origin, "act_dtypes[]"));
  for (const std::string& s : strings("activations"))
    c.activations.push_back(parse_enum<ActivationKind>(s, parse_activation, origin, "activations[]", allowed_activations()));
  for (const std::string& s : strings("scorings"))
    c.scorings.push_back(parse_enum<Scoring>(s, parse_scoring, origin, "scorings[]", "softmax, sigmoid"));
  r.opt("interleaved_gate_up", c.interleaved_gate_up, "a boolean");
  r.opt("softmax_after_topk", c.softmax_after_topk, "a boolean");
  r.opt("correction_bias", c.correction_bias, "a boolean");
  r.opt("grouped_topk", c.grouped_topk, "a boolean");
  r.opt("max_top_k", c.max_top_k, "an integer");
  r.opt("max_experts", c.max_experts, "an integer");
  r.opt("hidden_multiple", c.hidden_multiple, "an integer");
  r.opt("intermediate_multiple", c.intermediate_multiple, "an integer");
  if (c.hidden_multiple < 1 || c.intermediate_multiple < 1) fail(origin, "capabilities.*_multiple must be >= 1");
  r.opt("expert_bias", c.expert_bias, "a boolean");
  r.opt("router_bias", c.router_bias, "a boolean");
  r.opt("shared_experts", c.shared_experts, "a boolean");
  r.opt("shared_gate", c.shared_gate, "a boolean");
  for (const std::string& s : strings("shared_formats"))
    c.shared_formats.push_back(parse_enum<WeightFormat>(s, parse_weight_format, origin, "shared_formats[]", allowed_weight_formats()));
  r.opt("apply_router_weight_on_input", c.apply_router_weight_on_input, "a boolean");
  r.opt("tensor_parallel", c.tensor_parallel, "a boolean");
  r.opt("expert_parallel", c.expert_parallel, "a boolean");
  r.opt("lora", c.lora, "a boolean");
  r.opt("max_lora_rank", c.max_lora_rank, "an integer");
  r.opt("cuda_graph_safe", c.cuda_graph_safe, "a boolean");
  r.opt("host_sync", c.host_sync, "a boolean");
  r.opt("owns_dispatch", c.owns_dispatch, "a boolean");
  if (const json* v = r.sub("variants")) {
    if (!v->is_array()) fail(origin, "capabilities.variants must be an array");
    for (const json& e : *v) {
      Reader rv(e, origin, "capabilities.variants[]");
      KernelVariant kv;
      rv.opt("name", kv.name, "a string");
      rv.opt("max_tokens_per_expert", kv.max_tokens_per_expert, "a number");
      rv.opt("min_tokens_per_expert", kv.min_tokens_per_expert, "a number");
      rv.opt("why", kv.why, "a string");
      std::string visa = "scalar";
      rv.opt("min_cpu_isa", visa, "a string");
      bool visa_ok = false;
      for (CpuIsa i : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx})
        if (visa == to_string(i)) { kv.min_cpu_isa = i; visa_ok = true; }
      if (!visa_ok) fail(origin, "capabilities.variants[].min_cpu_isa '" + visa + "': allowed scalar, avx2, avx512, avx512-bf16, amx");
      std::vector<std::string> vd;
      rv.opt("act_dtypes", vd, "an array of strings");
      for (const std::string& d : vd) kv.act_dtypes.push_back(parse_act_dtype(d, origin, "variants[].act_dtypes[]"));
      rv.finish();
      c.variants.push_back(kv);
    }
  }
  r.finish();
  if (c.formats.empty()) fail(origin, "capabilities.formats is empty: the backend would support nothing");
  // Limits a record can state but no spec could meet: refused here, where the plugin's author reads
  // them, rather than as a misleading reason on every spec later ("top_k 8 > max -1").
  for (const auto& [key, empty] : {std::pair{"act_dtypes", c.act_dtypes.empty()},
                                   std::pair{"activations", c.activations.empty()},
                                   std::pair{"scorings", c.scorings.empty()}})
    if (empty) fail(origin, std::string("capabilities.") + key + " is empty or missing: the backend would support nothing");
  for (const auto& [key, v] : {std::pair{"min_sm", c.min_sm}, std::pair{"max_sm", c.max_sm},
                               std::pair{"max_top_k", c.max_top_k}, std::pair{"max_experts", c.max_experts},
                               std::pair{"max_lora_rank", c.max_lora_rank}})
    if (v < 0) fail(origin, std::string("capabilities.") + key + " " + std::to_string(v) + ": must be >= 0 (0: no limit)");
  if (c.max_sm != 0 && c.max_sm < c.min_sm)
    fail(origin, "capabilities.max_sm " + std::to_string(c.max_sm) + " < min_sm " + std::to_string(c.min_sm) +
                     ": no GPU would do");
  for (const KernelVariant& kv : c.variants)
    if (kv.min_tokens_per_expert < 0 || kv.max_tokens_per_expert < 0 ||
        (kv.max_tokens_per_expert > 0 && kv.max_tokens_per_expert <= kv.min_tokens_per_expert))  // (min exclusive)
      fail(origin, "capabilities.variants[] '" + kv.name + "': tokens per expert from " +
                       json(kv.min_tokens_per_expert).dump() + " to " + json(kv.max_tokens_per_expert).dump() +
                       " is an empty range");
  return c;
}

json to_json(const Platform& p) {
  json j;
  j["name"] = p.description;  // the platform file's key, so that this object reads back as one (platform-json.md)
  j["cpu"] = {{"vendor", p.cpu.vendor}, {"model", p.cpu.model}, {"cores", p.cpu.cores}, {"isa", to_string(p.cpu.isa())}};
  json g = json::array();
  for (const GpuInfo& gi : p.gpus)
    g.push_back({{"name", gi.name}, {"sm", gi.sm}, {"arch_specific", gi.arch_specific}, {"multiprocessors", gi.multiprocessors},
                 {"memory_gib", static_cast<double>(gi.memory_bytes) / (1ll << 30)}});
  j["gpus"] = g;
  return j;
}

}  // namespace moerun::json_io
