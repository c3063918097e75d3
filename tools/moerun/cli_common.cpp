#include <charconv>
#include <cstdint>
#include <iostream>
#include <new>
#include <stdexcept>

#include "cli.hpp"

namespace moerun::cli {

void SpecOptions::add_to(CLI::App& app, bool allow_config) {
  app.add_option("--preset", preset, "a named layer shape (see `moerun presets`)")->check(non_empty("NAME"));
  if (allow_config)
    app.add_option("--config", config, "a Hugging Face config.json (+ hf_quant_config.json beside it)")->check(non_empty("PATH"));
  app.add_option("--act-quant", act_quant,
                 "dynamic activation quantization: " + allowed_act_quants() +
                     " (default none; with --preset/--config it replaces the model's own)")
      ->check(non_empty("MODE"));
  auto* g = app.add_option_group("layer flags", "describe a layer by hand (not with --preset/--config)");
  layer_flags_ = {
      g->add_option("--experts", experts, "number of routed experts E"),
      g->add_option("--top-k", top_k, "experts per token"),
      g->add_option("--hidden", hidden, "hidden size H"),
      g->add_option("--intermediate", intermediate, "expert intermediate size I"),
      g->add_option("--activation", activation, "silu-and-mul | gelu-and-mul | gelu-tanh-and-mul | swiglu-oai | relu2 | silu"),
      g->add_option("--scoring", scoring, "softmax | sigmoid"),
      g->add_option("--format", format, "weight format: " + allowed_weight_formats()),
      g->add_option("--act-dtype", act_dtype, "f32 | f16 | bf16"),
      g->add_option("--n-group", n_group, "expert groups for grouped top-k"),
      g->add_option("--topk-group", topk_group, "groups kept by grouped top-k"),
      g->add_flag("--no-renormalize", no_renormalize, "do not renormalize the top-k weights"),
      g->add_flag("--correction-bias", correction_bias, "DeepSeek-V3 score correction bias"),
      g->add_flag("--softmax-after-topk", softmax_after_topk, "top-k on logits, then softmax (gpt-oss)"),
      g->add_option("--scale", scale, "routed scaling factor"),
      g->add_option("--shared", shared, "shared experts"),
      g->add_option("--shared-intermediate", shared_intermediate, "total shared-expert intermediate size"),
      g->add_option("--shared-format", shared_format,
                    "the shared experts' weight format where it differs from --format (e.g. bf16 beside fp8-block)"),
      g->add_flag("--expert-bias", expert_bias, "biases on the expert GEMMs"),
      g->add_flag("--router-bias", router_bias, "bias on the router"),
      g->add_option("--lora-adapters", lora_adapters, "max LoRA adapters (`run`: that many random ones, on random tokens)"),
      g->add_option("--lora-rank", lora_rank, "max LoRA rank"),
  };
  auto* p = app.add_option_group("parallel", "this process's shard");
  p->add_option("--tp", tp, "tensor-parallel size");
  p->add_option("--ep", ep, "expert-parallel size");
  p->add_option("--rank", rank, "rank in tp*ep");
}

std::optional<HfModel> SpecOptions::model() const {
  if (!preset.empty()) return find_preset(preset).model;
  if (!config.empty()) return read_hf_config(config);
  return std::nullopt;
}

namespace {
// The flags that set the spec field a validate() message starts with, as " (set by --ep)", or "".
std::string flag_hint(std::string_view message) {
  static const std::pair<const char*, const char*> kFlags[] = {
      {"spec.parallel.tp", "--tp"},
      {"spec.parallel.ep", "--ep"},
      {"spec.parallel.rank", "--rank"},
      {"spec.parallel", "--tp, --ep, --rank"},
      {"spec.num_experts", "--experts"},
      {"spec.top_k", "--top-k"},
      {"spec.hidden", "--hidden"},
      {"spec.intermediate", "--intermediate"},
      {"spec.weight_format", "--format"},
      {"spec.act_quant", "--act-quant"},
      {"spec.act_dtype", "--act-dtype"},
      {"spec.activation.swiglu_alpha", nullptr},  // (no flag: a preset's or config's value)
      {"spec.activation.swiglu_limit", nullptr},
      {"spec.activation.interleaved_gate_up", nullptr},
      {"spec.activation", "--activation"},
      {"spec.routing.scoring", "--scoring"},
      {"spec.routing.softmax_after_topk", "--softmax-after-topk"},
      {"spec.routing.n_group", "--n-group"},
      {"spec.routing.topk_group", "--topk-group"},
      {"spec.routing.routed_scaling_factor", "--scale"},
      {"spec.shared.gated_by_router", nullptr},
      {"spec.shared.count", "--shared"},
      {"spec.shared.intermediate", "--shared-intermediate"},
      {"spec.shared.weight_format", "--shared-format"},
      {"spec.lora.max_adapters", "--lora-adapters"},
      {"spec.lora.max_rank", "--lora-rank"},
      {"spec.apply_router_weight_on_input", nullptr},
  };
  for (const auto& [field, flags] : kFlags) {
    const std::string_view f(field);
    if (message.substr(0, f.size()) == f && (message.size() == f.size() || message[f.size()] == ' ' ||
                                             message[f.size()] == ':'))
      return flags ? std::string(" (set by ") + flags + ", or the preset / config)" : std::string(" (set by the preset / config)");
  }
  return "";
}
}  // namespace

MoeSpec SpecOptions::resolve() const {
  if (!preset.empty() && !config.empty()) throw_error(ErrorKind::kInvalidArgument, "give --preset or --config, not both");
  // Which layer flags were given (a flag left at its default is indistinguishable from one not given).
  std::string given;
  for (const CLI::Option* o : layer_flags_)
    if (o->count() > 0) given += (given.empty() ? "" : ", ") + o->get_name();
  MoeSpec s;
  const std::optional<HfModel> m = model();
  if (m) {
    // The preset or config fixes the whole layer: a flag beside it would be dropped without a word.
    if (!given.empty())
      throw_error(ErrorKind::kInvalidArgument,
                  given + ": the layer comes from " + (preset.empty() ? "--config " + config : "--preset " + preset) +
                      "; layer flags describe one by hand instead (give one or the other; --act-quant and the parallel "
                      "flags apply to both)");
    s = m->spec;
  } else {
    if (given.empty())
      throw_error(ErrorKind::kInvalidArgument, "describe the layer: --preset NAME, --config config.json, or --experts/--top-k/--hidden/--intermediate");
    std::string missing;
    for (const char* need : {"--experts", "--top-k", "--hidden", "--intermediate"})
      for (const CLI::Option* o : layer_flags_)
        if (o->get_name() == need && o->count() == 0) missing += (missing.empty() ? "" : ", ") + std::string(need);
    if (!missing.empty())
      throw_error(ErrorKind::kInvalidArgument, "a layer described by hand needs --experts, --top-k, --hidden and "
                                               "--intermediate; missing " + missing);
    s.name = "custom";
    s.num_experts = experts;
    s.top_k = top_k;
    s.hidden = hidden;
    s.intermediate = intermediate;
    auto act = parse_activation(activation);
    if (!act) throw_error(ErrorKind::kInvalidArgument, "--activation '" + activation + "': allowed " + allowed_activations());
    s.activation.kind = *act;
    s.activation.interleaved_gate_up = false;
    auto sc = parse_scoring(scoring);
    if (!sc) throw_error(ErrorKind::kInvalidArgument, "--scoring '" + scoring + "': allowed softmax, sigmoid");
    s.routing.scoring = *sc;
    auto f = parse_weight_format(format);
    if (!f) throw_error(ErrorKind::kInvalidArgument, "--format '" + format + "': allowed " + allowed_weight_formats());
    s.weight_format = *f;
    if (act_dtype == "f32") s.act_dtype = DType::kF32;
    else if (act_dtype == "f16") s.act_dtype = DType::kF16;
    else if (act_dtype == "bf16") s.act_dtype = DType::kBF16;
    else throw_error(ErrorKind::kInvalidArgument, "--act-dtype '" + act_dtype + "': allowed f32, f16, bf16");
    s.routing.n_group = n_group;
    s.routing.topk_group = topk_group;
    s.routing.renormalize = !no_renormalize;
    s.routing.correction_bias = correction_bias;
    s.routing.softmax_after_topk = softmax_after_topk;
    s.routing.routed_scaling_factor = scale;
    s.shared.count = shared;
    s.shared.intermediate = shared_intermediate;
    s.expert_bias = expert_bias;
    s.router_bias = router_bias;
    s.lora.max_adapters = lora_adapters;
    s.lora.max_rank = lora_rank;
    // A size for a part the layer does not have would be dropped without a word.
    const auto was_given = [&](const char* name) {
      for (const CLI::Option* o : layer_flags_)
        if (o->get_name() == name && o->count() > 0) return true;
      return false;
    };
    if (was_given("--shared-intermediate") && shared == 0)
      throw_error(ErrorKind::kInvalidArgument, "--shared-intermediate: the layer has no shared experts (give --shared N)");
    if (was_given("--shared-format")) {
      if (shared == 0) throw_error(ErrorKind::kInvalidArgument, "--shared-format: the layer has no shared experts (give --shared N)");
      auto sf = parse_weight_format(shared_format);
      if (!sf)
        throw_error(ErrorKind::kInvalidArgument, "--shared-format '" + shared_format + "': allowed " + allowed_weight_formats());
      if (*sf != s.weight_format) s.shared.weight_format = *sf;
    }
    if (was_given("--lora-rank") && lora_adapters == 0)
      throw_error(ErrorKind::kInvalidArgument, "--lora-rank: the layer takes no LoRA adapters (give --lora-adapters N)");
  }
  if (!act_quant.empty() || !m) {
    auto q = parse_act_quant(act_quant.empty() ? "none" : act_quant);
    if (!q) throw_error(ErrorKind::kInvalidArgument, "--act-quant '" + act_quant + "': allowed " + allowed_act_quants());
    s.act_quant = *q;
  }
  s.parallel.tp = tp;
  s.parallel.ep = ep;
  s.parallel.rank = rank;
  try {
    s.validate();
  } catch (const Error& e) {
    // validate() names the spec's field ("spec.parallel.ep = 3: ..."); a command-line user set a flag.
    throw_error(e.kind(), std::string(e.what()) + flag_hint(e.what()));
  }
  return s;
}

void CommonOptions::add_to(CLI::App& app, bool with_backend, bool with_threads) {
  app.add_option("--platform", platform, "detected, or a description: " +
                                             [] { std::string s; for (auto& n : Platform::known_descriptions()) s += (s.empty() ? "" : ", ") + n; return s; }() +
                                             ", or a .json file (docs/platform-json.md)")
      ->check(non_empty("PLATFORM"));
  if (with_backend) app.add_option("--backend", backend, "auto, a backend name, or order:a,b,c")->check(non_empty("POLICY"));
  app.add_option("--plugin", plugins, "load a backend plugin (.so); repeatable. Also MOERUN_PLUGIN_PATH")->check(non_empty("PATH"));
  if (with_threads) app.add_option("--threads", threads, "CPU threads (0 = all)")->check(CLI::Range(0, 4096));
}

Platform CommonOptions::resolve_platform() const { return Platform::describe(platform); }

namespace {
// What a described platform claims beyond this machine, or "". A command that executes here may only
// narrow the machine: one that claims more would plan kernels or a device that cannot run.
std::string beyond_this_machine(const Platform& described, const Platform& here) {
  if (described.has_gpu() && (!here.has_gpu() || here.gpu_sm() < described.gpu_sm()))
    return "a GPU of sm" + std::to_string(described.gpu_sm());
  // Arch-specific code (sm_90a's wgmma and TMA) runs only on that very architecture, not on a newer one.
  if (described.has_gpu() && described.gpus.front().arch_specific &&
      !(here.gpus.front().arch_specific && here.gpu_sm() == described.gpu_sm()))
    return "arch-specific sm" + std::to_string(described.gpu_sm()) + "a features (this GPU is sm" +
           std::to_string(here.gpu_sm()) + ")";
  if (described.cpu.isa() > here.cpu.isa()) return "the CPU level " + std::string(to_string(described.cpu.isa()));
  return "";
}
}  // namespace

Platform CommonOptions::resolve_platform_to_run(std::string_view command) const {
  const Platform p = resolve_platform();
  if (platform == "detected") return p;
  const Platform here = Platform::detect();
  const std::string more = beyond_this_machine(p, here);
  if (more.empty()) return p;
  // A CPU level above MOERUN_CPU_ISA's cap may be one the machine has: then the cap is the reason (not
  // where the machine lacks the level anyway: its uncapped level decides).
  CpuInfo uncapped = here.cpu;
  uncapped.vendor = "described";  // (isa() applies MOERUN_CPU_ISA to a detected CPU only)
  const bool capped = !(p.has_gpu() && more.rfind("the CPU level", 0) != 0) && p.cpu.isa() > cpu_isa_cap() &&
                      p.cpu.isa() <= uncapped.isa();
  throw_error(ErrorKind::kInvalidArgument,
              "--platform " + platform + " has " + more + ", which " +
                  (capped ? "MOERUN_CPU_ISA=" + std::string(to_string(cpu_isa_cap())) + " keeps this machine from"
                          : "this machine (" + here.summary() + ") lacks") +
                  "; `" + std::string(command) + "` executes here. Plan for that hardware with `moerun explain --platform " +
                  platform + "`");
}
Policy CommonOptions::resolve_policy() const { return Policy::parse(backend); }

Registry& registry_with_env_plugins() {
  Registry& r = Registry::global();
  const std::vector<std::string> errors = r.env_plugin_errors();
  // Registry::global() has printed each failure on its own line already.
  if (!errors.empty())
    throw_error(ErrorKind::kPlugin, std::to_string(errors.size()) + " of the MOERUN_PLUGIN_PATH plugins could not be "
                                    "loaded (above); fix the path or unset it");
  return r;
}

Registry& CommonOptions::registry() const {
  Registry& r = registry_with_env_plugins();
  for (const std::string& p : plugins) r.load_plugin(p);
  return r;
}

CLI::Validator non_empty(std::string what) {
  return CLI::Validator([](std::string& v) { return v.empty() ? std::string("must not be empty") : std::string(); },
                        std::move(what));
}

CLI::Validator seed_value() {
  return CLI::Validator(
      [](std::string& v) {
        uint64_t x = 0;
        const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
        const bool ok = !v.empty() && v.front() != '-' && ec == std::errc() && end == v.data() + v.size();
        return ok ? std::string() : "'" + v + "' is not a seed (an integer 0 .. 2^64 - 1)";
      },
      "SEED");
}

int report(const std::exception& e) {
  std::string msg = e.what();
  if (const auto* me = dynamic_cast<const Error*>(&e)) {
    std::cerr << "moerun: " << msg << "\n";
    switch (me->kind()) {
      case ErrorKind::kUnsupported: return 3;
      case ErrorKind::kNotFound: return 4;
      case ErrorKind::kInternal: return 70;
      default: return 2;
    }
  }
  if (dynamic_cast<const std::bad_alloc*>(&e) || dynamic_cast<const std::length_error*>(&e)) {
    std::cerr << "moerun: out of memory (" << msg << "): the layer or its inputs do not fit this machine\n";
    return 2;
  }
  std::cerr << "moerun: unexpected error: " << msg << "\n";
  return 70;
}

// Integer options read as decimal. CLI11 2.1 converts with base 0, so "--hidden 0256" was octal 174
// and "--seed 09" failed after seed_value had accepted it; leading zeros are dropped before the
// conversion (and before the options' own checks), and a 0x or 0 prefix's other digits are refused.
void decimal_integers(CLI::App& app) {
  const CLI::Validator decimal(
      [](std::string& v) {
        const size_t i = !v.empty() && (v[0] == '-' || v[0] == '+') ? 1 : 0;
        if (i == v.size() || v.find_first_not_of("0123456789", i) != std::string::npos)
          return "'" + v + "' is not a decimal integer";
        const size_t nz = v.find_first_not_of('0', i);
        v = v.substr(0, i) + (nz == std::string::npos ? "0" : v.substr(nz));
        return std::string();
      },
      "");
  for (CLI::Option* o : app.get_options()) {
    const std::string t = o->get_type_name();
    if (t.rfind("INT", 0) == 0 || t.rfind("UINT", 0) == 0) o->transform(decimal);  // ("INT:INT in [0 - 64]" with a check)
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) decimal_integers(*sub);
}

}  // namespace moerun::cli

int main(int argc, char** argv) {
  CLI::App app{"moerun — Mixture-of-Experts layers on CPUs and GPUs, with backends chosen and explained"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "moerun 0.1.0");
  moerun::cli::add_run(app);
  moerun::cli::add_explain(app);
  moerun::cli::add_backends(app);
  moerun::cli::add_presets(app);
  moerun::cli::add_knobs(app);
  moerun::cli::add_verify(app);
  moerun::cli::add_check(app);
  moerun::cli::decimal_integers(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    return moerun::cli::report(e);
  }
  return 0;
}
