// hf_config.cpp — Hugging Face config.json (+ quantization config) -> HfModel {MoeSpec, family, layers}.
//
// Each supported model_type has one builder below that reads the fields its transformers
// configuration/modeling code reads, with the same defaults, and maps them onto MoeSpec. The field
// names, defaults and routing semantics follow the published configuration_*.py / modeling_*.py of
// each architecture (DeepSeek's from its own repository code, the others from transformers).
//
// Policy:
//   - Shape fields (experts, top-k, hidden, intermediate, layer count) are required even where the
//     transformers config class has a default: a config without them is not a checkpoint we can trust.
//     Missing -> Error{kParse} "<origin>: missing 'x' (<model_type> needs it)".
//   - Semantic fields (norm_topk_prob, scoring_func, ...) default as in the model's config class.
//   - A field of the wrong JSON type -> Error{kParse} naming the field, the expected and the found type.
//   - JSON null counts as absent (configs write "n_group": null for "not used").
//   - Values moerun understands but cannot run (model_type, hidden_act, quant method) -> Error
//     {kUnsupported} listing what is supported. Range checks of spec fields are MoeSpec::validate's job;
//     only values that size allocations or divide here (layer counts, strides) are checked here.
//   - Unknown fields are ignored.
#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json_number.hpp"
#include "core/module_pattern.hpp"
#include "moerun/error.hpp"
#include "moerun/hf.hpp"

namespace moerun {
namespace {

using json = nlohmann::json;

constexpr int kMaxLayers = 1 << 16;  // bounds the moe_layers vector a (hostile) config can ask for

const char* json_type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::binary: return "binary";
    case json::value_t::discarded: return "discarded";
  }
  return "value";
}

// The found value, short enough for a one-line message. An array or object that holds another is named
// by its size instead: a dump recurses once per level of nesting.
std::string short_dump(const json& v) {
  const bool nested = v.is_structured() && std::any_of(v.begin(), v.end(), [](const json& e) { return e.is_structured(); });
  if (nested) return fmt::format("of {} {}{}", v.size(), v.is_array() ? "element" : "key", v.size() == 1 ? "" : "s");
  std::string s = v.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

// One line: nlohmann messages carry no newline, but a token echo might; never let one through.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// Parses JSON text; a syntax error becomes Error{kParse} "<origin>: malformed JSON: parse error at
// line L, column C: ...". Callers check the top-level type.
// Deeper than any config (2-3 levels): a file nested deeper is refused while it is parsed, before any
// recursive walk of it (a dump, a comparison) could exhaust the stack.
constexpr int kMaxConfigDepth = 64;

json parse_json_text(std::string_view text, std::string_view origin) {
  const auto depth_guard = [&](int depth, json::parse_event_t, json&) {
    if (depth > kMaxConfigDepth)
      throw_error(ErrorKind::kParse, fmt::format("{}: nests deeper than {} levels", origin, kMaxConfigDepth));
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), depth_guard);
  } catch (const json::exception& e) {
    std::string what = e.what();
    // Drop the "[json.exception.parse_error.101] " tag: it means nothing to a user.
    if (!what.empty() && what.front() == '[') {
      auto close = what.find("] ");
      if (close != std::string::npos) what = what.substr(close + 2);
    }
    throw_error(ErrorKind::kParse, one_line(fmt::format("{}: malformed JSON: {}", origin, what)));
  }
}

// Reads typed fields of one JSON object with messages that name the field, the model type and the
// file. `prefix` is the path of the object inside the file ("" or "text_config.").
class Fields {
 public:
  Fields(const json& obj, std::string_view origin, std::string_view model_type, std::string prefix)
      : obj_(obj), origin_(origin), model_type_(model_type), prefix_(std::move(prefix)) {}

  std::string_view origin() const { return origin_; }
  std::string_view model_type() const { return model_type_; }

  // The value under `key`, or nullptr when absent or null.
  const json* find(std::string_view key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool has(std::string_view key) const { return find(key) != nullptr; }

  [[noreturn]] void missing(std::string_view key) const {
    throw_error(ErrorKind::kParse,
                fmt::format("{}: missing '{}{}' ({} needs it)", origin_, prefix_, key, model_type_));
  }
  [[noreturn]] void wrong_type(std::string_view key, std::string_view expected, const json& v) const {
    throw_error(ErrorKind::kParse, one_line(fmt::format("{}: '{}{}' must be {}, got {} {}", origin_, prefix_,
                                                        key, expected, json_type_name(v), short_dump(v))));
  }
  [[noreturn]] void bad_value(std::string_view key, const std::string& why) const {
    throw_error(ErrorKind::kParse, one_line(fmt::format("{}: '{}{}' {}", origin_, prefix_, key, why)));
  }

  int as_int(std::string_view key, const json& v) const {
    if (auto i = json_number<int>(v)) return *i;
    const bool whole = v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                                 std::floor(v.get<double>()) == v.get<double>());
    if (whole) bad_value(key, fmt::format("= {}: out of range for an integer", v.dump()));
    wrong_type(key, "an integer", v);  // 2048.5, 1e300, a string, ...
  }

  int req_int(std::string_view key) const {
    const json* v = find(key);
    if (!v) missing(key);
    return as_int(key, *v);
  }
  std::optional<int> opt_int(std::string_view key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    return as_int(key, *v);
  }
  int int_or(std::string_view key, int def) const { return opt_int(key).value_or(def); }

  float float_or(std::string_view key, float def) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_number()) wrong_type(key, "a number", *v);
    if (auto f = json_number<float>(*v)) return *f;
    bad_value(key, fmt::format("= {}: out of range for a float", v->dump()));
  }

  bool bool_or(std::string_view key, bool def) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_boolean()) wrong_type(key, "a boolean", *v);
    return v->get<bool>();
  }

  std::optional<std::string> opt_string(std::string_view key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) wrong_type(key, "a string", *v);
    return v->get<std::string>();
  }
  std::string string_or(std::string_view key, std::string_view def) const {
    return opt_string(key).value_or(std::string(def));
  }

  std::optional<std::vector<int>> opt_int_list(std::string_view key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_array()) wrong_type(key, "an array of integers", *v);
    std::vector<int> out;
    out.reserve(v->size());
    for (const json& e : *v) {
      if (!e.is_number()) wrong_type(key, "an array of integers", *v);
      out.push_back(as_int(key, e));
    }
    return out;
  }

  // A sub-object (nullptr when absent); anything else but an object is a type error.
  const json* opt_object(std::string_view key) const {
    const json* v = find(key);
    if (v && !v->is_object()) wrong_type(key, "an object", *v);
    return v;
  }

  const std::string& prefix() const { return prefix_; }

 private:
  const json& obj_;
  std::string_view origin_;
  std::string_view model_type_;
  std::string prefix_;
};

// ---- shared pieces ------------------------------------------------------------------------------

// hidden_act -> gated activation of the expert MLP (ACT2FN names of transformers).
Activation activation_from(const Fields& f, std::string_view key = "hidden_act") {
  std::string act = f.string_or(key, "silu");
  Activation a;
  if (act == "silu" || act == "swish") {
    a.kind = ActivationKind::kSiluAndMul;
  } else if (act == "gelu") {
    a.kind = ActivationKind::kGeluAndMul;
  } else if (act == "gelu_pytorch_tanh" || act == "gelu_new" || act == "gelu_fast") {
    a.kind = ActivationKind::kGeluTanhAndMul;  // all three are the tanh approximation
  } else {
    throw_error(ErrorKind::kUnsupported,
                one_line(fmt::format("{}: '{}{}' = \"{}\" is not supported for {} experts; supported: silu, "
                                     "swish, gelu, gelu_pytorch_tanh, gelu_new, gelu_fast",
                                     f.origin(), f.prefix(), key, act, f.model_type())));
  }
  return a;
}

int num_layers_from(const Fields& f) {
  int n = f.req_int("num_hidden_layers");
  if (n < 1 || n > kMaxLayers) f.bad_value("num_hidden_layers", fmt::format("= {}: must be in [1, {}]", n, kMaxLayers));
  return n;
}

int positive_stride(const Fields& f, std::string_view key, int def) {
  int v = f.int_or(key, def);
  if (v < 1) f.bad_value(key, fmt::format("= {}: must be >= 1", v));
  return v;
}

std::vector<int> all_layers(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

// Everything a builder needs: the top-level object, the object holding the text-model fields (the
// same one, or Llama-4's text_config), and the output.
struct Ctx {
  const json& root;
  const Fields& top;   // fields of root
  const Fields& text;  // fields of the text model
  HfModel& out;
};

// ---- builders, one per architecture ---------------------------------------------------------------

// What every builder reads, under its model's names for the expert count and width: the experts,
// top-k (num_experts_per_tok), hidden_size, and the activation.
void read_experts(MoeSpec& s, const Fields& f, const char* experts_key, const char* intermediate_key) {
  s.num_experts = f.req_int(experts_key);
  s.top_k = f.req_int("num_experts_per_tok");
  s.hidden = f.req_int("hidden_size");
  s.intermediate = f.req_int(intermediate_key);
  s.activation = activation_from(f);
}

// Mixtral (modeling_mixtral.py): softmax over all experts, top-k, divide by the sum of the k.
// Phi-3.5-MoE shares its naming and shape fields; see build_phimoe.
void build_mixtral(Ctx& c) {
  MoeSpec& s = c.out.spec;
  const Fields& f = c.text;
  read_experts(s, f, "num_local_experts", "intermediate_size");
  s.routing.scoring = Scoring::kSoftmax;
  s.routing.renormalize = true;
  c.out.num_layers = num_layers_from(f);
  c.out.moe_layers = all_layers(c.out.num_layers);
}

// Phi-3.5-MoE (modeling_phimoe.py) routes with "sparsemixer": a masked softmax around each chosen
// expert's logit (jitter-eps threshold), not a plain softmax over the k. moerun has no sparsemixer;
// the closest supported routing is Mixtral's softmax top-k with renormalization, used here. Expert
// choice is the same (top-2 logits); the weights differ, so outputs are near, not equal, to Phi's.
void build_phimoe(Ctx& c) {
  build_mixtral(c);
  c.out.caveats.push_back(
      "phimoe routes with sparsemixer, which moerun approximates by softmax top-k + renormalize: the same experts, "
      "other weights, so outputs are near, not equal, to the model's");
}

// Qwen2-MoE / Qwen3-MoE (modeling_qwen2_moe.py, modeling_qwen3_moe.py): softmax over all experts,
// top-k, renormalize iff norm_topk_prob (default false). A layer is sparse when it is not in
// mlp_only_layers and (idx + 1) % decoder_sparse_step == 0. Qwen2-MoE adds one shared expert of
// shared_expert_intermediate_size whose output is scaled by sigmoid(shared_expert_gate(x)).
void build_qwen_moe(Ctx& c, bool qwen2) {
  MoeSpec& s = c.out.spec;
  const Fields& f = c.text;
  read_experts(s, f, "num_experts", "moe_intermediate_size");
  s.routing.scoring = Scoring::kSoftmax;
  s.routing.renormalize = f.bool_or("norm_topk_prob", false);
  if (qwen2) {
    int shared = f.req_int("shared_expert_intermediate_size");
    if (shared > 0) {
      s.shared.count = 1;
      s.shared.intermediate = shared;
      s.shared.gated_by_router = true;
    }
  }
  int n = c.out.num_layers = num_layers_from(f);
  int step = positive_stride(f, "decoder_sparse_step", 1);
  std::vector<int> dense = f.opt_int_list("mlp_only_layers").value_or(std::vector<int>{});
  std::sort(dense.begin(), dense.end());  // binary search below: a long list must not cost n * m
  c.out.moe_layers.clear();
  if (s.num_experts > 0)
    for (int i = 0; i < n; ++i)
      if ((i + 1) % step == 0 && !std::binary_search(dense.begin(), dense.end(), i))
        c.out.moe_layers.push_back(i);
}
void build_qwen2_moe(Ctx& c) { build_qwen_moe(c, true); }
void build_qwen3_moe(Ctx& c) { build_qwen_moe(c, false); }

// OLMoE (modeling_olmoe.py): Qwen-style gate, experts of intermediate_size, every layer sparse.
void build_olmoe(Ctx& c) {
  MoeSpec& s = c.out.spec;
  const Fields& f = c.text;
  read_experts(s, f, "num_experts", "intermediate_size");
  s.routing.scoring = Scoring::kSoftmax;
  s.routing.renormalize = f.bool_or("norm_topk_prob", false);
  c.out.num_layers = num_layers_from(f);
  c.out.moe_layers = all_layers(c.out.num_layers);
}

// n_shared_experts x moe_intermediate_size: the fused shared expert's width, in 64 bits (a product
// past int's range would wrap into a plausible size).
int shared_intermediate(const Fields& f, int shared, int intermediate) {
  const int64_t w = static_cast<int64_t>(shared) * intermediate;
  if (w > (int64_t{1} << 18))
    f.bad_value("n_shared_experts", fmt::format("x moe_intermediate_size = {} x {} = {}: the shared expert's width must be at most 262144",
                                               shared, intermediate, w));
  return static_cast<int>(w);
}

// DeepSeek-V2 / V3 / R1 and Kimi-K2 (DeepSeek's modeling_deepseek.py, MoEGate):
//   scores = softmax (V2 default) | sigmoid (V3 default) of the logits;
//   topk_method "greedy": plain top-k; "group_limited_greedy" (V2): keep the topk_group of n_group
//   groups by group max, then top-k; "noaux_tc" (V3): choose on scores + e_score_correction_bias,
//   groups ranked by the sum of their top-2 biased scores, weights from the unbiased scores.
//   Renormalize when top_k > 1 and norm_topk_prob. V3 then always multiplies by routed_scaling_factor;
//   V2 multiplies only when it did not renormalize.
// Layer i is sparse when i >= first_k_dense_replace and i % moe_layer_freq == 0. Shared experts are
// one MLP of n_shared_experts * moe_intermediate_size.
void build_deepseek(Ctx& c, bool v3) {
  MoeSpec& s = c.out.spec;
  const Fields& f = c.text;
  read_experts(s, f, "n_routed_experts", "moe_intermediate_size");

  std::string scoring = f.string_or("scoring_func", v3 ? "sigmoid" : "softmax");
  if (scoring == "softmax") {
    s.routing.scoring = Scoring::kSoftmax;
  } else if (scoring == "sigmoid") {
    s.routing.scoring = Scoring::kSigmoid;
  } else {
    throw_error(ErrorKind::kUnsupported,
                one_line(fmt::format("{}: '{}scoring_func' = \"{}\" is not supported; supported: softmax, sigmoid",
                                     f.origin(), f.prefix(), scoring)));
  }

  std::string method = f.string_or("topk_method", v3 ? "noaux_tc" : "greedy");
  if (method == "greedy") {
    s.routing.n_group = 1;
    s.routing.topk_group = 1;
  } else if (method == "group_limited_greedy" || method == "noaux_tc") {
    // DeepseekV3Config defaults to 8 groups / 4 kept; V2's config has no default (None).
    s.routing.n_group = v3 ? f.int_or("n_group", 8) : f.req_int("n_group");
    s.routing.topk_group = v3 ? f.int_or("topk_group", 4) : f.req_int("topk_group");
    s.routing.correction_bias = method == "noaux_tc";
  } else {
    throw_error(ErrorKind::kUnsupported,
                one_line(fmt::format("{}: '{}topk_method' = \"{}\" is not supported; supported: greedy, "
                                     "group_limited_greedy, noaux_tc",
                                     f.origin(), f.prefix(), method)));
  }

  bool norm = f.bool_or("norm_topk_prob", v3);
  s.routing.renormalize = norm && s.top_k > 1;
  s.routing.routed_scaling_factor = f.float_or("routed_scaling_factor", v3 ? 2.5f : 1.0f);
  if (!v3 && s.routing.renormalize) s.routing.routed_scaling_factor = 1.0f;

  int shared = f.int_or("n_shared_experts", v3 ? 1 : 0);
  if (shared > 0) {
    s.shared.count = shared;
    s.shared.intermediate = shared_intermediate(f, shared, s.intermediate);
  }

  int n = c.out.num_layers = num_layers_from(f);
  int first_dense = f.int_or("first_k_dense_replace", v3 ? 3 : 0);
  int freq = positive_stride(f, "moe_layer_freq", 1);
  c.out.moe_layers.clear();
  for (int i = std::max(first_dense, 0); i < n; ++i)
    if (i % freq == 0) c.out.moe_layers.push_back(i);
}
void build_deepseek_v2(Ctx& c) { build_deepseek(c, false); }
void build_deepseek_v3(Ctx& c) { build_deepseek(c, true); }

// GLM-4.5 (modeling_glm4_moe.py): DeepSeek-V3's noaux_tc router (sigmoid + e_score_correction_bias,
// grouped top-k, norm_topk_prob, routed_scaling_factor) with its own defaults; no topk_method or
// moe_layer_freq fields: every layer from first_k_dense_replace on is sparse.
void build_glm4_moe(Ctx& c) {
  MoeSpec& s = c.out.spec;
  const Fields& f = c.text;
  read_experts(s, f, "n_routed_experts", "moe_intermediate_size");
  s.routing.scoring = Scoring::kSigmoid;
  s.routing.correction_bias = true;
  s.routing.n_group = f.int_or("n_group", 1);
  s.routing.topk_group = f.int_or("topk_group", 1);
  s.routing.renormalize = f.bool_or("norm_topk_prob", true);
  s.routing.routed_scaling_factor = f.float_or("routed_scaling_factor", 1.0f);
  int shared = f.int_or("n_shared_experts", 1);
  if (shared > 0) {
    s.shared.count = shared;
    s.shared.intermediate = shared_intermediate(f, shared, s.intermediate);
  }
  int n = c.out.num_layers = num_layers_from(f);
  int first_dense = f.int_or("first_k_dense_replace", 1);
  c.out.moe_layers.clear();
  for (int i = std::max(first_dense, 0); i < n; ++i) c.out.moe_layers.push_back(i);
}

// gpt-oss (modeling_gpt_oss.py): router = linear with bias; top-k of the logits, then softmax over
// the k (so the k weights already sum to 1: no further renormalization). Experts: fused gate_up with
// bias, gate/up interleaved along 2I, activation (up + 1) * g * sigmoid(1.702 g) with
// g = min(gate, swiglu_limit), up clamped to +-swiglu_limit; alpha 1.702 is a constant of the code,
// not a config field. hidden_act in the config is not used by the experts. Every layer is sparse.
void build_gpt_oss(Ctx& c) {
  MoeSpec& s = c.out.spec;
  const Fields& f = c.text;
  s.num_experts = f.req_int("num_local_experts");
  // GptOssConfig reads num_experts_per_tok; the original release also wrote experts_per_token.
  if (f.has("num_experts_per_tok") || !f.has("experts_per_token"))
    s.top_k = f.req_int("num_experts_per_tok");
  else
    s.top_k = f.req_int("experts_per_token");
  s.hidden = f.req_int("hidden_size");
  s.intermediate = f.req_int("intermediate_size");
  s.activation.kind = ActivationKind::kSwigluOai;
  s.activation.swiglu_alpha = 1.702f;
  s.activation.swiglu_limit = f.float_or("swiglu_limit", 7.0f);
  s.activation.interleaved_gate_up = true;
  s.routing.scoring = Scoring::kSoftmax;
  s.routing.softmax_after_topk = true;
  s.routing.renormalize = false;
  s.expert_bias = true;
  s.router_bias = true;
  c.out.num_layers = num_layers_from(f);
  c.out.moe_layers = all_layers(c.out.num_layers);
}

// Llama-4 (modeling_llama4.py, Llama4Router / Llama4TextMoe): top-k of the logits, weight =
// sigmoid(logit) of each chosen expert (no renormalization, no scaling), applied to the expert's
// *input*. One shared expert of intermediate_size (the same size as a routed one; dense layers use
// intermediate_size_mlp). Sparse layers: "moe_layers" when given, else every
// interleave_moe_layer_step-th layer starting at step - 1.
void build_llama4(Ctx& c) {
  MoeSpec& s = c.out.spec;
  const Fields& f = c.text;
  read_experts(s, f, "num_local_experts", "intermediate_size");
  s.routing.scoring = Scoring::kSigmoid;
  s.routing.renormalize = false;
  s.apply_router_weight_on_input = true;
  s.shared.count = 1;
  s.shared.intermediate = s.intermediate;
  int n = c.out.num_layers = num_layers_from(f);
  if (auto listed = f.opt_int_list("moe_layers")) {
    std::vector<int> v = *listed;
    for (int i : v)
      if (i < 0 || i >= n)
        f.bad_value("moe_layers", fmt::format("contains {}: layers are [0, {})", i, n));
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    c.out.moe_layers = std::move(v);
  } else {
    int step = positive_stride(f, "interleave_moe_layer_step", 1);
    c.out.moe_layers.clear();
    for (int i = step - 1; i < n; i += step) c.out.moe_layers.push_back(i);
  }
}

// Granite-MoE (modeling_granitemoe.py, GraniteMoeTopKGating): top-k of the logits, softmax over the
// k. granitemoeshared adds one shared MLP of shared_intermediate_size (0 = none), gated like the
// experts (its input_linear's output is chunked into gate and up).
void build_granite(Ctx& c, bool shared) {
  MoeSpec& s = c.out.spec;
  const Fields& f = c.text;
  read_experts(s, f, "num_local_experts", "intermediate_size");
  s.routing.scoring = Scoring::kSoftmax;
  s.routing.softmax_after_topk = true;
  s.routing.renormalize = false;
  if (shared) {
    int is = f.int_or("shared_intermediate_size", 0);
    if (is > 0) {
      s.shared.count = 1;
      s.shared.intermediate = is;
    }
  }
  c.out.num_layers = num_layers_from(f);
  c.out.moe_layers = all_layers(c.out.num_layers);
}
void build_granitemoe(Ctx& c) { build_granite(c, false); }
void build_granitemoeshared(Ctx& c) { build_granite(c, true); }

struct Arch {
  std::string_view model_type;
  HfFamily family;
  void (*build)(Ctx&);
  bool text_config;  // the text-model fields live under "text_config"
};

// Sorted by model_type (supported_model_types() and messages list them in this order).
constexpr Arch kArchs[] = {
    {"deepseek_v2", HfFamily::kDeepseek, build_deepseek_v2, false},
    {"deepseek_v3", HfFamily::kDeepseek, build_deepseek_v3, false},
    {"glm4_moe", HfFamily::kDeepseek, build_glm4_moe, false},
    {"gpt_oss", HfFamily::kGptOss, build_gpt_oss, false},
    {"granitemoe", HfFamily::kGranite, build_granitemoe, false},
    {"granitemoeshared", HfFamily::kGranite, build_granitemoeshared, false},
    {"kimi_k2", HfFamily::kDeepseek, build_deepseek_v3, false},  // DeepSeek-V3 architecture
    {"llama4", HfFamily::kLlama4, build_llama4, true},
    {"llama4_text", HfFamily::kLlama4, build_llama4, false},
    {"mixtral", HfFamily::kMixtral, build_mixtral, false},
    {"olmoe", HfFamily::kQwenMoe, build_olmoe, false},
    {"phimoe", HfFamily::kMixtral, build_phimoe, false},
    {"qwen2_moe", HfFamily::kQwenMoe, build_qwen2_moe, false},
    {"qwen3_moe", HfFamily::kQwenMoe, build_qwen3_moe, false},
};

std::string supported_list() {
  std::string s;
  for (const Arch& a : kArchs) {
    if (!s.empty()) s += ", ";
    s += a.model_type;
  }
  return s;
}

// ---- dtype and quantization -----------------------------------------------------------------------

// "dtype" (transformers >= 4.56) or "torch_dtype": the dtype of hidden states, and of the expert
// weights when the checkpoint is not quantized. Absent: bfloat16 (what every supported model ships).
void apply_dtype(const Fields& f, MoeSpec& s) {
  std::string key = f.has("dtype") ? "dtype" : "torch_dtype";
  std::string name = f.string_or(key, "bfloat16");
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  if (name == "bfloat16") {
    s.act_dtype = DType::kBF16;
    s.weight_format = WeightFormat::kBF16;
  } else if (name == "float16" || name == "half") {
    s.act_dtype = DType::kF16;
    s.weight_format = WeightFormat::kF16;
  } else if (name == "float32" || name == "float") {
    s.act_dtype = DType::kF32;
    s.weight_format = WeightFormat::kF32;
  } else {
    throw_error(ErrorKind::kUnsupported,
                one_line(fmt::format("{}: '{}{}' = \"{}\" is not supported; supported: bfloat16, float16, float32",
                                     f.origin(), f.prefix(), key, name)));
  }
}

// ---- which expert weights a quantization config covers ----------------------------------------------
//
// Quantization configs name the modules they leave alone (HF "modules_to_not_convert", ModelOpt
// "exclude_modules", compressed-tensors "ignore") or those they quantize (compressed-tensors
// "targets"). A layer spec holds one weight format for the routed experts and one for the shared experts
// (MoeSpec::shared_weight_format), so each part must come out the same in every MoE layer: all its
// modules quantized by one scheme, or none (the checkpoint dtype's). Exporters often leave the shared
// experts unquantized beside quantized routed ones, which reads as two formats; a part quantized in some
// layers or modules and not in others is refused by name. The loader's dtype checks catch what the
// names miss.

// A module holding expert weights, under transformers' module name; `linear` when it is an nn.Linear
// (what a compressed-tensors "Linear" target means): per-expert linears are, fused 3-D experts not;
// `shared` for the shared experts' modules.
struct ExpertModule {
  std::string name;
  bool linear;
  bool shared = false;
};

// The expert modules of MoE layer `layer`: routed experts 0 and E-1 (gate, up, down) and the shared
// experts' linears, as the model's quantizers name them. Quantizers save Llama-4's routed experts one
// linear per expert, but transformers' fbgemm_fp8 keeps them in one fused module (`llama4_fused`).
std::vector<ExpertModule> expert_modules(const HfModel& m, int layer, bool llama4_fused = false) {
  const std::string L = (m.model_type == "llama4" ? "language_model.model.layers." : "model.layers.") +
                        std::to_string(layer) + ".";
  std::vector<ExpertModule> out;
  auto per_expert = [&](const std::string& experts, std::initializer_list<const char*> linears) {
    std::vector<int> ids{0};
    if (m.spec.num_experts > 1) ids.push_back(m.spec.num_experts - 1);
    for (int e : ids)
      for (const char* l : linears) out.push_back({L + experts + "." + std::to_string(e) + "." + l, true});
  };
  auto shared = [&](const std::string& module, std::initializer_list<const char*> linears) {
    if (m.spec.shared.count > 0)
      for (const char* l : linears) out.push_back({L + module + "." + l, true, true});
  };
  const auto gate_up_down = {"gate_proj", "up_proj", "down_proj"};
  switch (m.family) {
    case HfFamily::kMixtral: per_expert("block_sparse_moe.experts", {"w1", "w3", "w2"}); break;
    case HfFamily::kQwenMoe:
      per_expert("mlp.experts", gate_up_down);
      shared("mlp.shared_expert", gate_up_down);
      break;
    case HfFamily::kDeepseek:
      per_expert("mlp.experts", gate_up_down);
      shared("mlp.shared_experts", gate_up_down);
      break;
    case HfFamily::kLlama4:
      if (llama4_fused) out.push_back({L + "feed_forward.experts", false});  // transformers' fbgemm experts
      else per_expert("feed_forward.experts", gate_up_down);
      shared("feed_forward.shared_expert", gate_up_down);
      break;
    case HfFamily::kGptOss: out.push_back({L + "mlp.experts", false}); break;
    case HfFamily::kGranite:
      out.push_back({L + "block_sparse_moe.input_linear", false});
      out.push_back({L + "block_sparse_moe.output_linear", false});
      shared("shared_mlp", {"input_linear", "output_linear"});  // (nn.Linear modules too)
      break;
  }
  return out;
}

// Glob match of the whole of `name` ('*' matches any run of characters), in O(|p| |name|).
bool glob_match(std::string_view p, std::string_view name) {
  size_t i = 0, j = 0, star = std::string_view::npos, mark = 0;
  while (j < name.size()) {
    if (i < p.size() && p[i] == '*') {
      star = i++;
      mark = j;
    } else if (i < p.size() && p[i] == name[j]) {
      ++i;
      ++j;
    } else if (star != std::string_view::npos) {
      i = star + 1;
      j = ++mark;
    } else {
      return false;
    }
  }
  while (i < p.size() && p[i] == '*') ++i;
  return i == p.size();
}

// An exclusion-list entry (HF modules_to_not_convert, ModelOpt exclude_modules) names a module when it
// matches, as a glob, a run of whole dot-separated components of the module's name: a parent
// ("model.layers.3.mlp", "model.layers.*.mlp*"), a tail ("experts.0.w1") or a run between ("mlp.experts").
// That is transformers' substring test held to component boundaries ("model.layers.1" is not layer 10's).
bool excludes(std::string_view pattern, std::string_view name) {
  std::vector<size_t> starts{0}, ends;
  for (size_t dot = name.find('.'); dot != std::string_view::npos; dot = name.find('.', dot + 1)) {
    ends.push_back(dot);
    starts.push_back(dot + 1);
  }
  ends.push_back(name.size());
  for (size_t b : starts)
    for (size_t e : ends)
      if (e > b && glob_match(pattern, name.substr(b, e - b))) return true;
  return false;
}

// A list of module-name patterns, read from a JSON array of strings.
constexpr size_t kMaxPatterns = 1024, kMaxPatternLength = 256;
std::vector<std::string> string_list(const Fields& f, std::string_view key) {
  std::vector<std::string> out;
  const json* v = f.find(key);
  if (!v) return out;
  if (!v->is_array()) f.wrong_type(key, "an array of strings", *v);
  if (v->size() > kMaxPatterns) f.bad_value(key, fmt::format("has {} entries: at most {} are read", v->size(), kMaxPatterns));
  for (const json& e : *v) {
    if (!e.is_string()) f.wrong_type(key, "an array of strings", *v);
    out.push_back(e.get<std::string>());
    if (out.back().size() > kMaxPatternLength)
      f.bad_value(key, fmt::format("has an entry of {} characters: at most {} are read", out.back().size(), kMaxPatternLength));
  }
  return out;
}

// Every entry of a list is matched against every expert module name of every MoE layer: a hostile
// config (thousands of layers, long patterns) must not buy seconds of matching. The work is counted in
// steps over all names: a pattern visits each of its instructions at most once per name character; a
// glob costs about its length (it fails within a few characters on all but a handful of names); an
// exact name is one comparison. Real configs stay far below the bound (qwen3's ".*mlp.gate$" over its
// 288 expert names: about 3e5 steps; a 94-layer Qwen3-235B whose modules_to_not_convert names each
// layer's router gate, 95 globs over 564 names: about 1.3e6).
struct MatchWork {
  double names = 0, per_char = 0, steps = 0;
  explicit MatchWork(const HfModel& m) {
    if (m.moe_layers.empty()) return;
    const auto mods = expert_modules(m, m.moe_layers.back());  // the longest layer index
    size_t longest = 0;
    for (const ExpertModule& e : mods) longest = std::max(longest, e.name.size());
    names = static_cast<double>(m.moe_layers.size()) * static_cast<double>(mods.size());
    per_char = static_cast<double>(longest + 1);
  }
  // Adds an entry costing `per_name` steps on each name; refuses once the total passes the bound.
  void add(std::string_view origin, const std::string& what, size_t entries, double per_name) {
    constexpr double kMaxSteps = 5e7;
    steps += names * std::max(per_name, 1.0);
    if (steps > kMaxSteps)
      throw_error(ErrorKind::kUnsupported,
                  one_line(fmt::format("{}: {} hold patterns ({} so far) whose matching against {} expert module names "
                                       "would take more than {} steps",
                                       origin, what, entries, names, kMaxSteps)));
  }
};

// The scheme each part of the experts gets (-1: none, its modules stay unquantized).
struct PartSchemes {
  int routed = -1;
  int shared = -1;
};

// Which scheme each expert module of every MoE layer gets (-1: none), as one scheme for the routed
// experts' modules and one for the shared experts'; two different ones within a part, or some of its
// modules quantized and some not, is Error{kUnsupported} naming a module of each. `what` names the
// deciding fields for that message, `scheme_name` a scheme.
PartSchemes schemes_for_experts(const HfModel& m, std::string_view origin, std::string_view what,
                                const std::function<int(const ExpertModule&)>& scheme_of,
                                const std::function<std::string(int)>& scheme_name, bool llama4_fused = false) {
  std::optional<std::pair<int, std::string>> first[2];  // [routed, shared]
  for (int layer : m.moe_layers)
    for (const ExpertModule& mod : expert_modules(m, layer, llama4_fused)) {
      const int s = scheme_of(mod);
      auto& f = first[mod.shared ? 1 : 0];
      if (!f) {
        f.emplace(s, mod.name);
        continue;
      }
      if (s == f->first) continue;
      auto describe = [&](int scheme, const std::string& name) {
        return scheme < 0 ? name + " stays unquantized" : name + " is quantized by " + scheme_name(scheme);
      };
      throw_error(ErrorKind::kUnsupported,
                  fmt::format("{}: {} give the {} experts of this model two formats ({}; {}): moerun reads one weight "
                              "format for the routed experts of every MoE layer and one for the shared experts",
                              origin, what, mod.shared ? "shared" : "routed", describe(f->first, f->second),
                              describe(s, mod.name)));
    }
  return {first[0] ? first[0]->first : -1, first[1] ? first[1]->first : -1};
}

// Which parts of the experts an exclusion list (modules_to_not_convert, exclude_modules, ignore) leaves
// unquantized in every MoE layer; a part it leaves in some layers or modules only is Error
// (schemes_for_experts).
struct Excluded {
  bool routed = false;
  bool shared = false;
};
Excluded experts_excluded(const HfModel& m, const Fields& q, std::initializer_list<std::string_view> keys,
                          bool llama4_fused = false) {
  std::vector<std::string> patterns;
  std::string what;
  for (std::string_view k : keys) {
    if (!q.has(k)) continue;
    for (std::string& p : string_list(q, k)) patterns.push_back(std::move(p));
    what += (what.empty() ? "'" : " and '") + q.prefix() + std::string(k) + "'";
  }
  if (patterns.empty()) return {};
  MatchWork work(m);
  for (size_t i = 0; i < patterns.size(); ++i) work.add(q.origin(), what, i + 1, static_cast<double>(patterns[i].size()));
  const PartSchemes p = schemes_for_experts(
      m, q.origin(), what,
      [&](const ExpertModule& mod) {
        for (const std::string& pat : patterns)
          if (excludes(pat, mod.name)) return -1;
        return 0;
      },
      [](int) { return std::string("the config"); }, llama4_fused);
  return {p.routed < 0, p.shared < 0};
}

// The spec's formats where a quantization config stores its quantized parts in format f with inputs
// quantized by aq, and leaves the `excluded` parts in the checkpoint dtype (the spec's weight_format as
// torch_dtype set it). False where it quantizes no part (nothing changes). Routed experts left
// unquantized beside quantized shared ones keep the checkpoint dtype, and aq (which a dense format does
// not admit) then reaches neither part: a caveat says so.
bool apply_to_parts(HfModel& m, Excluded excluded, WeightFormat f, ActQuant aq) {
  MoeSpec& s = m.spec;
  const bool has_shared = s.shared.count > 0;
  if (excluded.routed && (excluded.shared || !has_shared)) return false;
  const WeightFormat dense = s.weight_format;
  if (excluded.routed) {
    s.shared.weight_format = f;
    s.act_quant = ActQuant::kNone;
    if (aq != ActQuant::kNone)
      m.caveats.push_back(one_line(fmt::format(
          "the checkpoint quantizes the shared experts' inputs ({}), and moerun runs them on unquantized inputs: "
          "its layer spec holds one activation quantization, for the routed experts, which this checkpoint keeps in {}",
          to_string(aq), to_string(dense))));
    return true;
  }
  s.weight_format = f;
  s.act_quant = aq;
  if (has_shared && excluded.shared && dense != f) s.shared.weight_format = dense;
  return true;
}

// What an engine does to the experts' inputs that moerun's weight-only emulation does not, as a caveat.
std::string act_caveat(std::string_view recipe) {
  return one_line(fmt::format("the checkpoint's recipe quantizes the experts' inputs ({}); moerun runs the layer weight-only "
                     "(inputs in the activation dtype; --act-quant picks a quantization of its own), so outputs are "
                     "near, not equal, to an engine's that quantizes them",
                     recipe));
}

// A ModelOpt quantization block ({"quant_algo": "NVFP4", "group_size": 16, ...}), from
// hf_quant_config.json's "quantization" or config.json's quantization_config. Its FP8 keeps one scale
// per linear; gate and up then differ, which fp8-per-channel holds exactly (rows of one value).
void apply_modelopt(const Fields& q, HfModel& m) {
  std::optional<std::string> algo = q.opt_string("quant_algo");
  if (!algo) return;  // only the KV cache is quantized: weights keep the checkpoint dtype
  if (*algo == "NVFP4") {
    int group = q.int_or("group_size", 16);
    if (group != 16) q.bad_value("group_size", fmt::format("= {}: NVFP4 uses groups of 16", group));
    // ModelOpt NVFP4 also quantizes GEMM inputs to fp4 (W4A4); moerun has no fp4 activation
    // quantization, so activations stay in act_dtype (weight-only emulation of the recipe).
    if (!apply_to_parts(m, experts_excluded(m, q, {"exclude_modules", "ignore"}), WeightFormat::kNvfp4, ActQuant::kNone))
      return;
    m.caveats.push_back(act_caveat("NVFP4 W4A4: fp4 codes, a static global scale and e4m3 scales per 16 columns"));
  } else if (*algo == "FP8") {
    if (!apply_to_parts(m, experts_excluded(m, q, {"exclude_modules", "ignore"}), WeightFormat::kFp8PerChannel,
                        ActQuant::kNone))
      return;
    m.caveats.push_back(act_caveat("FP8 with a static per-tensor input scale"));
  } else {
    throw_error(ErrorKind::kUnsupported,
                one_line(fmt::format("{}: '{}quant_algo' = \"{}\" is not supported; supported: NVFP4, FP8",
                                     q.origin(), q.prefix(), *algo)));
  }
}

// ---- compressed-tensors (llm-compressor exports: RedHatAI's FP8-dynamic, W8A8, FP8-block, NVFP4) -------

// A compressed-tensors target or ignore entry: "re:<pattern>" matches a module whose name the pattern
// matches from its start (Python's re.match, core/module_pattern.hpp), a class name ("Linear") the
// modules of that class, any other string the module of that exact name. Where several targets match
// one module, compressed-tensors takes the most specific: an exact name, then a pattern, then a class.
class CtMatcher {
 public:
  enum Rank { kNone = 0, kClass = 1, kPattern = 2, kName = 3 };

  CtMatcher(const Fields& q, std::string_view key, const std::string& entry) : entry_(entry) {
    if (entry.rfind("re:", 0) != 0) return;
    try {
      pattern_.emplace(std::string_view(entry).substr(3));
    } catch (const std::invalid_argument& e) {
      throw_error(ErrorKind::kUnsupported,
                  one_line(fmt::format("{}: '{}{}' entry \"{}\" is not a pattern moerun reads: {}", q.origin(), q.prefix(), key,
                                       entry.substr(0, 60), e.what())));
    }
  }

  Rank match(const ExpertModule& mod) const {
    if (pattern_) return pattern_->match_prefix(mod.name) ? kPattern : kNone;
    if (entry_ == mod.name) return kName;
    return entry_ == "Linear" && mod.linear ? kClass : kNone;
  }
  // The program's size (each instruction visited at most once per name character); 0 for a plain string.
  size_t instructions() const { return pattern_ ? pattern_->size() : 0; }

 private:
  std::string entry_;
  std::optional<ModulePattern> pattern_;
};

// compressed-tensors' QuantizationArgs.strategy; absent, it follows from group_size (> 0: group, -1:
// channel), else tensor.
std::string strategy_of(const Fields& a) {
  if (auto st = a.opt_string("strategy")) return *st;
  if (auto gs = a.opt_int("group_size")) {
    if (*gs > 0) return "group";
    if (*gs == -1) return "channel";
    a.bad_value("group_size", fmt::format("= {}: without a strategy it must be > 0 or -1", *gs));
  }
  return "tensor";
}

// One quantization args block ("weights" or "input_activations") in words, for messages and caveats.
std::string describe_args(const Fields& a) {
  const json* dyn = a.find("dynamic");
  std::string how = !dyn ? "static" : dyn->is_boolean() ? (dyn->get<bool>() ? "dynamic" : "static") : short_dump(*dyn);
  const std::string strategy = strategy_of(a);
  std::string gs = strategy.find("group") != std::string::npos && a.has("group_size")
                       ? fmt::format(" of {}", a.int_or("group_size", 0)) : "";
  return fmt::format("{} {}-bit, {}{}{}, {}", a.string_or("type", "int"), a.int_or("num_bits", 8), strategy, gs,
                     a.bool_or("symmetric", true) ? "" : ", asymmetric", how);
}

// quant_method "compressed-tensors": config_groups of {targets, weights, input_activations, format},
// an ignore list, and a storage format. The group that covers the expert linears decides the layer's
// format; groups that quantize alike count as one.
void apply_compressed_tensors(const Fields& q, HfModel& m) {
  MoeSpec& s = m.spec;
  const json* groups = q.opt_object("config_groups");
  if (!groups) q.missing("config_groups");
  if (groups->size() > 256) q.bad_value("config_groups", fmt::format("has {} groups: at most 256 are read", groups->size()));
  struct Group {
    std::string name;
    std::vector<CtMatcher> targets;
    const json* weights;
    const json* inputs;
    std::string format;
    int scheme;  // the first group that quantizes alike
  };
  const std::string top_format = q.string_or("format", "");
  // Entries are compiled before anything is matched; their number and the programs' total size are
  // bounded first (a pattern compiles to at most ModulePattern::kMaxProgram instructions).
  constexpr size_t kMaxEntries = 4096;
  size_t entry_count = 0;
  const std::string lists = q.has("ignore") ? fmt::format("'{}config_groups' and '{}ignore'", q.prefix(), q.prefix())
                                            : fmt::format("'{}config_groups'", q.prefix());
  MatchWork work(m);
  auto compile = [&](const Fields& f, std::string_view key) {
    std::vector<CtMatcher> out;
    for (const std::string& e : string_list(f, key)) {
      if (++entry_count > kMaxEntries)
        throw_error(ErrorKind::kUnsupported, fmt::format("{}: {} hold more than {} entries", q.origin(), lists, kMaxEntries));
      out.emplace_back(f, key, e);
      work.add(q.origin(), lists, entry_count, static_cast<double>(out.back().instructions()) * work.per_char);
    }
    return out;
  };
  const std::vector<CtMatcher> ignore = compile(q, "ignore");
  std::vector<Group> gs;
  for (const auto& [name, g] : groups->items()) {
    if (g.is_null()) continue;  // null counts as absent
    if (!g.is_object()) q.wrong_type("config_groups." + one_line(name), "an object", g);
    Fields gf(g, q.origin(), q.model_type(), q.prefix() + "config_groups." + one_line(name) + ".");
    if (!gf.has("targets")) gf.missing("targets");
    gs.push_back({one_line(name), compile(gf, "targets"), gf.opt_object("weights"), gf.opt_object("input_activations"),
                  top_format == "mixed-precision" ? gf.string_or("format", "") : top_format, 0});
  }
  for (size_t g = 0; g < gs.size(); ++g) {
    const auto same = [](const json* x, const json* y) { return x == y || (x && y && *x == *y); };
    gs[g].scheme = static_cast<int>(g);
    for (size_t h = 0; h < g; ++h)
      if (same(gs[h].weights, gs[g].weights) && same(gs[h].inputs, gs[g].inputs) && gs[h].format == gs[g].format) {
        gs[g].scheme = gs[h].scheme;
        break;
      }
  }
  int act_only[2] = {-1, -1};  // per part (routed, shared): a group that quantizes its inputs but not its weights
  const PartSchemes chosen = schemes_for_experts(
      m, q.origin(), lists,
      [&](const ExpertModule& mod) {
        for (const CtMatcher& i : ignore)
          if (i.match(mod) != CtMatcher::kNone) return -1;
        // The most specific target wins; groups tied at that rank must quantize alike.
        int best = CtMatcher::kNone, found = -1;
        for (size_t g = 0; g < gs.size(); ++g) {
          int rank = CtMatcher::kNone;
          for (const CtMatcher& t : gs[g].targets) rank = std::max(rank, static_cast<int>(t.match(mod)));
          if (rank == CtMatcher::kNone || rank < best) continue;
          if (rank > best || found < 0) {
            best = rank;
            found = static_cast<int>(g);
          } else if (gs[g].scheme != gs[static_cast<size_t>(found)].scheme) {
            throw_error(ErrorKind::kUnsupported,
                        one_line(fmt::format("{}: {} matches the targets of '{}config_groups.{}' and of "
                                             "'{}config_groups.{}' alike, which quantize differently",
                                             q.origin(), mod.name, q.prefix(), gs[static_cast<size_t>(found)].name,
                                             q.prefix(), gs[g].name)));
          }
        }
        if (found >= 0 && !gs[static_cast<size_t>(found)].weights && gs[static_cast<size_t>(found)].inputs)
          act_only[mod.shared ? 1 : 0] = found;
        return found >= 0 && gs[static_cast<size_t>(found)].weights ? gs[static_cast<size_t>(found)].scheme : -1;
      },
      [&](int scheme) { return "'" + gs[static_cast<size_t>(scheme)].name + "'"; });
  const auto add_caveat = [&](const std::string& c) {
    if (!c.empty() && std::find(m.caveats.begin(), m.caveats.end(), c) == m.caveats.end()) m.caveats.push_back(c);
  };
  // What a part's group does in moerun's terms: a weight format; the recipe's input quantization as
  // the config describes it ("" where the inputs stay as they are), and moerun's act_quant for it where
  // moerun has one (none otherwise: those inputs run unquantized, with a caveat).
  struct Scheme {
    WeightFormat format;
    ActQuant act_quant = ActQuant::kNone;
    std::string inputs;
  };
  const auto inputs_of = [&](const Group& g) {
    return describe_args(
        Fields(*g.inputs, q.origin(), q.model_type(), q.prefix() + "config_groups." + g.name + ".input_activations."));
  };
  const auto read_group = [&](const Group& g) {
    Scheme out;
    const std::string gp = q.prefix() + "config_groups." + g.name + ".";
    Fields w(*g.weights, q.origin(), q.model_type(), gp + "weights.");
    const std::string type = w.string_or("type", "int"), strategy = strategy_of(w);
    const int bits = w.int_or("num_bits", 8);
    const bool symmetric = w.bool_or("symmetric", true);
    auto unsupported = [&](std::string_view why) {
      throw_error(ErrorKind::kUnsupported,
                  one_line(fmt::format("{}: '{}weights' = {} ({}): {}; moerun reads 8-bit float weights (tensor, channel "
                                       "or 128x128 block scales), 8-bit symmetric int weights (tensor or channel) and "
                                       "NVFP4 (4-bit float, tensor_group of 16)",
                                       q.origin(), gp, describe_args(w), g.name, why)));
    };
    const bool nvfp4 = type == "float" && bits == 4 && strategy == "tensor_group" && w.int_or("group_size", 0) == 16;
    if (bits != 8 && !nvfp4) unsupported(fmt::format("{}-bit weights of this kind are not a moerun format", bits));
    if (!symmetric) unsupported("zero points are not read");
    if (nvfp4) {
      out.format = WeightFormat::kNvfp4;  // weight_packed, e4m3 weight_scale, weight_global_scale (a divisor)
    } else if (type == "float") {
      if (strategy == "tensor" || strategy == "channel") {
        out.format = WeightFormat::kFp8PerChannel;  // a per-tensor scale is held as rows of one value
      } else if (strategy == "block") {
        const std::vector<int> block = w.opt_int_list("block_structure").value_or(std::vector<int>{});
        if (block != std::vector<int>{128, 128}) unsupported("block_structure must be [128, 128]");
        out.format = WeightFormat::kFp8Block;
      } else {
        unsupported("strategy '" + strategy + "' is not read for float weights");
      }
    } else if (type == "int") {
      if (strategy != "tensor" && strategy != "channel") unsupported("strategy '" + strategy + "' is not read for int weights");
      out.format = WeightFormat::kInt8PerChannel;
    } else {
      unsupported("type '" + type + "' is not read");
    }
    const bool format_ok = nvfp4 ? g.format == "nvfp4-pack-quantized"
                                 : g.format == "float-quantized" || g.format == "int-quantized" || g.format == "naive-quantized";
    if (!g.format.empty() && !format_ok)
      throw_error(ErrorKind::kUnsupported,
                  one_line(fmt::format("{}: the format of '{}' = \"{}\" is not read for these weights; supported: {}",
                                       q.origin(), gp.substr(0, gp.size() - 1), g.format,
                                       nvfp4 ? "nvfp4-pack-quantized" : "float-quantized, int-quantized, naive-quantized")));
    if (!g.inputs) return out;
    Fields a(*g.inputs, q.origin(), q.model_type(), gp + "input_activations.");
    out.inputs = inputs_of(g);
    const json* dyn = a.find("dynamic");
    const bool dynamic = dyn && dyn->is_boolean() && dyn->get<bool>();
    // DeepSeek's recipe exactly: fp8 per token per 128 columns, computed at run time.
    if (out.format == WeightFormat::kFp8Block && a.string_or("type", "int") == "float" && a.int_or("num_bits", 8) == 8 &&
        strategy_of(a) == "group" && a.int_or("group_size", 0) == 128 && dynamic && a.bool_or("symmetric", true))
      out.act_quant = ActQuant::kFp8PerTokenGroup;
    return out;
  };
  // Each part's scheme: its group's, or (left in the checkpoint dtype) its inputs as an inputs-only
  // group quantizes them.
  const WeightFormat dense = s.weight_format;  // (torch_dtype's)
  const auto scheme_of_part = [&](int chosen_group, int part) {
    if (chosen_group >= 0) return read_group(gs[static_cast<size_t>(chosen_group)]);
    Scheme d{dense, ActQuant::kNone, {}};
    if (act_only[part] >= 0) d.inputs = inputs_of(gs[static_cast<size_t>(act_only[part])]);
    return d;
  };
  const Scheme routed = scheme_of_part(chosen.routed, 0);
  s.weight_format = routed.format;
  s.act_quant = routed.act_quant;
  if (!routed.inputs.empty() && routed.act_quant == ActQuant::kNone) add_caveat(act_caveat(routed.inputs));
  if (s.shared.count == 0) return;
  const Scheme shared = scheme_of_part(chosen.shared, 1);
  s.shared.weight_format.reset();
  if (shared.format != s.weight_format) s.shared.weight_format = shared.format;
  // The shared experts take the spec's one activation quantization (the routed experts') where their
  // format admits it (MoeSpec::shared_act_quant), and no other: a caveat where the recipe differs. A
  // part that shares the routed part's scheme is the routed part's caveat's.
  if (shared.format == routed.format && shared.act_quant == routed.act_quant && shared.inputs == routed.inputs) return;
  const ActQuant runs = s.shared_act_quant();
  if (shared.act_quant == runs && (shared.inputs.empty() || runs != ActQuant::kNone)) return;
  add_caveat(one_line(fmt::format(
      "the checkpoint {} the shared experts' inputs{}; moerun runs them {} (its layer spec holds one activation "
      "quantization, the routed experts', which reaches the shared experts where their format admits it), so "
      "outputs are near, not equal, to an engine's that follows the recipe",
      shared.inputs.empty() ? "leaves" : "quantizes", shared.inputs.empty() ? " unquantized" : " (" + shared.inputs + ")",
      runs == ActQuant::kNone ? std::string("unquantized") : "with " + std::string(to_string(runs)))));
}

// config.json "quantization_config".
void apply_quantization_config(const json& qc, std::string_view origin, HfModel& m) {
  Fields q(qc, origin, m.model_type, "quantization_config.");
  std::optional<std::string> method = q.opt_string("quant_method");
  if (!method) q.missing("quant_method");
  if (*method == "fp8") {
    // DeepSeek-V3/R1, Kimi-K2, Qwen3-FP8: e4m3 weights with one scale per 128x128 block, activations
    // quantized per token per 128 columns at run time. Without weight_block_size it is the per-tensor
    // recipe (as vLLM reads it): one scale per linear, so gate and up differ, which fp8-per-channel
    // holds exactly (rows of one value).
    std::string fmt_name = q.string_or("fmt", "e4m3");
    if (fmt_name != "e4m3")
      throw_error(ErrorKind::kUnsupported,
                  fmt::format("{}: 'quantization_config.fmt' = \"{}\" is not supported; supported: e4m3", origin,
                              fmt_name));
    std::string scheme = q.string_or("activation_scheme", "dynamic");
    if (scheme != "dynamic" && scheme != "static")
      q.bad_value("activation_scheme", "= \"" + scheme + "\": expected \"dynamic\" or \"static\"");
    if (auto block = q.opt_int_list("weight_block_size")) {
      if (block->size() != 2 || (*block)[0] != 128 || (*block)[1] != 128)
        throw_error(ErrorKind::kUnsupported,
                    one_line(fmt::format("{}: 'quantization_config.weight_block_size' = {}: only [128, 128] is "
                                         "supported",
                                         origin, short_dump(*q.find("weight_block_size")))));
      if (scheme != "dynamic")
        throw_error(ErrorKind::kUnsupported,
                    one_line(fmt::format("{}: 'quantization_config.activation_scheme' = \"{}\" with block fp8: "
                                         "only \"dynamic\" is supported",
                                         origin, scheme)));
      apply_to_parts(m, experts_excluded(m, q, {"modules_to_not_convert"}), WeightFormat::kFp8Block,
                     ActQuant::kFp8PerTokenGroup);
    } else {
      if (!apply_to_parts(m, experts_excluded(m, q, {"modules_to_not_convert"}), WeightFormat::kFp8PerChannel,
                          ActQuant::kNone))
        return;
      m.caveats.push_back(act_caveat("fp8, one " + std::string(scheme == "static" ? "static" : "dynamic") +
                                     " scale per tensor"));
    }
  } else if (*method == "mxfp4") {
    // gpt-oss: experts only; the router stays bf16
    apply_to_parts(m, experts_excluded(m, q, {"modules_to_not_convert"}), WeightFormat::kMxfp4, ActQuant::kNone);
  } else if (*method == "modelopt") {
    // Newer ModelOpt exports nest the block under "quantization"; older ones are flat.
    if (const json* inner = q.opt_object("quantization")) {
      Fields qi(*inner, origin, m.model_type, "quantization_config.quantization.");
      apply_modelopt(qi, m);
    } else {
      apply_modelopt(q, m);
    }
  } else if (*method == "fbgemm_fp8") {
    // transformers' fbgemm FP8 (Llama-4 experts fused, FbgemmFp8Llama4TextExperts): e4m3 weights with one
    // scale per output row.
    if (!apply_to_parts(m, experts_excluded(m, q, {"modules_to_not_convert"}, /*llama4_fused=*/true),
                        WeightFormat::kFp8PerChannel, ActQuant::kNone))
      return;
    m.caveats.push_back(act_caveat("fp8, one dynamic scale per token"));
  } else if (*method == "compressed-tensors") {
    apply_compressed_tensors(q, m);
  } else {
    throw_error(ErrorKind::kUnsupported,
                one_line(fmt::format("{}: 'quantization_config.quant_method' = \"{}\" is not supported; supported: "
                                     "fp8 (block 128x128 or per-tensor), mxfp4, modelopt (NVFP4, FP8), fbgemm_fp8, "
                                     "compressed-tensors (8-bit float or int weights, NVFP4)",
                                     origin, *method)));
  }
}

// hf_quant_config.json sits beside config.json; its origin in messages is that file's name.
std::string sibling_origin(std::string_view origin, std::string_view name) {
  std::filesystem::path p{std::string(origin)};
  if (p.filename() == "config.json") return (p.parent_path() / std::string(name)).string();
  return std::string(name);
}

}  // namespace

// ---- public API ---------------------------------------------------------------------------------

std::vector<std::string> supported_model_types() {
  std::vector<std::string> v;
  for (const Arch& a : kArchs) v.emplace_back(a.model_type);
  return v;
}

HfModel parse_hf_config(std::string_view config_json, std::string_view origin,
                        std::optional<std::string_view> quant_json) {
  json root = parse_json_text(config_json, origin);
  if (!root.is_object())
    throw_error(ErrorKind::kParse, fmt::format("{}: expected a JSON object at the top level, got {}", origin,
                                               json_type_name(root)));

  Fields top(root, origin, "every config", "");
  std::optional<std::string> model_type = top.opt_string("model_type");  // type errors name the field
  if (!model_type)
    throw_error(ErrorKind::kParse,
                fmt::format("{}: missing 'model_type' (supported: {})", origin, supported_list()));
  const Arch* arch = nullptr;
  for (const Arch& a : kArchs)
    if (a.model_type == *model_type) arch = &a;
  if (!arch)
    throw_error(ErrorKind::kUnsupported,
                one_line(fmt::format("{}: model_type \"{}\" is not a supported MoE model; supported: {}", origin,
                                     *model_type, supported_list())));

  HfModel m;
  m.model_type = *model_type;
  m.family = arch->family;
  Fields topf(root, origin, m.model_type, "");
  if (const json* archs = topf.find("architectures")) {
    if (!archs->is_array()) topf.wrong_type("architectures", "an array of strings", *archs);
    if (!archs->empty()) {
      if (!(*archs)[0].is_string()) topf.wrong_type("architectures", "an array of strings", *archs);
      m.architecture = (*archs)[0].get<std::string>();
    }
  }

  const json* text_obj = &root;
  std::string text_prefix;
  if (arch->text_config) {
    text_obj = topf.opt_object("text_config");
    if (!text_obj) topf.missing("text_config");
    text_prefix = "text_config.";
  }
  Fields text(*text_obj, origin, m.model_type, text_prefix);

  Ctx ctx{root, topf, text, m};
  arch->build(ctx);

  // Name: the checkpoint's own name when the config records it, else the model type.
  std::string name = topf.string_or("_name_or_path", "");
  m.spec.name = name.empty() ? m.model_type : name;

  // dtype: the text model's own entry wins over the wrapper's (Llama-4 has both).
  if (text.has("dtype") || text.has("torch_dtype"))
    apply_dtype(text, m.spec);
  else
    apply_dtype(topf, m.spec);

  // Quantization: an hf_quant_config.json (ModelOpt) describes the weights actually stored, so it
  // wins over a quantization_config left in config.json.
  if (quant_json) {
    std::string qorigin = sibling_origin(origin, "hf_quant_config.json");
    json qroot = parse_json_text(*quant_json, qorigin);
    if (!qroot.is_object())
      throw_error(ErrorKind::kParse, fmt::format("{}: expected a JSON object at the top level, got {}", qorigin,
                                                 json_type_name(qroot)));
    Fields qf(qroot, qorigin, "hf_quant_config.json", "");
    const json* q = qf.opt_object("quantization");
    if (!q) qf.missing("quantization");
    Fields qq(*q, qorigin, "hf_quant_config.json", "quantization.");
    apply_modelopt(qq, m);
  } else if (const json* qc = topf.opt_object("quantization_config")) {
    apply_quantization_config(*qc, origin, m);
  }
  // Granite's fused experts are no nn.Linear, so a "Linear" target quantizes its shared_mlp alone, which
  // the checkpoint reader takes only unquantized (hf_weights.cpp): refused here, before a plan is made.
  const WeightFormat sf = m.spec.shared_weight_format();
  if (m.family == HfFamily::kGranite && m.spec.shared.count > 0 && !is_unquantized(sf))
    throw_error(ErrorKind::kUnsupported,
                fmt::format("{}: the quantization config stores granite's shared_mlp as {}; moerun reads it only "
                            "unquantized (bf16, f16, f32)",
                            origin, to_string(sf)));
  // What comes back is a layer moerun can plan: a config with no MoE layer, or one whose sizes no
  // spec takes (num_local_experts = 1e9, top-k above the experts), is refused here, by name.
  if (m.moe_layers.empty())
    throw_error(ErrorKind::kParse, fmt::format("{}: none of this {} config's {} layers has a MoE block", origin,
                                               m.model_type, m.num_layers));
  try {
    m.spec.validate();
  } catch (const Error& e) {
    throw_error(e.kind(), fmt::format("{}: {}", origin, e.what()));
  }
  return m;
}

namespace {
std::string read_text_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in)
    throw_error(ErrorKind::kIo, fmt::format("cannot open {}: {}", p.string(), std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw_error(ErrorKind::kIo, fmt::format("cannot read {}", p.string()));
  return ss.str();
}
}  // namespace

HfModel read_hf_config(const std::string& config_path) {
  std::filesystem::path p(config_path);
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec)) p /= "config.json";  // a model folder works too
  std::string text = read_text_file(p);
  std::filesystem::path qp = p.parent_path() / "hf_quant_config.json";
  if (std::filesystem::is_regular_file(qp, ec)) {
    std::string qtext = read_text_file(qp);
    return parse_hf_config(text, p.string(), std::string_view(qtext));
  }
  return parse_hf_config(text, p.string());
}

}  // namespace moerun
