// moerun explain | backends | presets | knobs — what the oracle would do and what it knows.
#include <unistd.h>

#include <iostream>

#include "cli.hpp"
#include "fmt/format.h"
#include "oracle/json_io.hpp"

namespace moerun::cli {
namespace {

struct ExplainOptions {
  SpecOptions spec;
  CommonOptions common;
  int64_t tokens = 1;
  bool json = false;
};

void explain(const ExplainOptions& o) {
  const MoeSpec spec = o.spec.resolve();
  const Platform platform = o.common.resolve_platform();
  Registry& registry = o.common.registry();
  SelectOptions so;
  so.tokens = o.tokens;
  const std::optional<HfModel> model = o.spec.model();
  const std::vector<std::string> caveats = model ? model->caveats : std::vector<std::string>{};
  try {
    const Selection s = select(spec, platform, o.common.resolve_policy(), registry, so);
    if (o.json) {
      nlohmann::json j = nlohmann::json::parse(explain_json(spec, platform, s));
      if (!caveats.empty()) j["caveats"] = caveats;
      std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      std::cout << explain_text(spec, platform, s);
      for (const std::string& c : caveats) std::cout << "caveat:    " << c << "\n";
    }
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUnsupported) throw;
    // A refusal is a complete answer to "explain": print it fully and exit 3.
    if (o.json) {
      nlohmann::json j;
      j["spec"] = json_io::to_json(spec);
      j["platform"] = json_io::to_json(platform);
      j["policy"] = o.common.backend;
      j["refused"] = e.what();
      // A candidates array as a plan's (each backend, whether it is capable, and why not: name, origin,
      // capable, reasons, chosen), so a refusal reads as one: the message alone holds the reasons as one
      // multi-line string. A plan's priority and variant are not there: no ranking was made.
      nlohmann::json t = nlohmann::json::array();
      for (const BackendEntry& b : registry.entries()) {
        const Support sup = supports(*b.backend, spec, platform);
        t.push_back({{"name", b.backend->name()}, {"origin", b.origin}, {"capable", sup.ok()}, {"reasons", sup.reasons},
                     {"chosen", false}});
      }
      j["candidates"] = t;
      if (!caveats.empty()) j["caveats"] = caveats;
      std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      std::cout << "spec:      " << spec.name << ": " << spec.summary() << "\nplatform:  " << platform.summary()
                << "\nrefused:   " << e.what() << "\n";
      for (const std::string& c : caveats) std::cout << "caveat:    " << c << "\n";
    }
    throw CLI::RuntimeError(3);
  }
}

struct BackendsOptions {
  CommonOptions common;
  bool json = false;
};

void backends(const BackendsOptions& o) {
  Registry& registry = o.common.registry();
  const Platform platform = o.common.resolve_platform();
  nlohmann::json all = nlohmann::json::array();
  for (const BackendEntry& e : registry.entries()) {
    const Capabilities& c = e.backend->capabilities();
    // The device rules of supports() (a spec that needs nothing else: its device reasons alone).
    const std::vector<std::string> why_not = device_reasons(*e.backend, platform);
    if (o.json) {
      all.push_back({{"name", e.backend->name()}, {"origin", e.origin}, {"description", e.backend->description()},
                     {"capabilities", json_io::to_json(c)},
                     {"platform", platform.description},
                     {"runs_on_platform", why_not.empty()},
                     {"cannot_run_because", why_not}});
      continue;
    }
    std::string formats;
    for (const FormatSupport& f : c.formats)
      formats += (formats.empty() ? "" : " ") + std::string(to_string(f.weights)) + (f.act_quant != ActQuant::kNone ? "+" + std::string(to_string(f.act_quant)) : "");
    std::string shared_formats;
    for (WeightFormat f : c.shared_formats) shared_formats += " " + std::string(to_string(f));
    std::string variants;
    for (const KernelVariant& v : c.variants) variants += (variants.empty() ? "" : ", ") + v.name;
    const bool runs_here = why_not.empty();
    std::cout << fmt::format("{:<12} {} [{}]\n", e.backend->name(), e.backend->description(), e.origin);
    std::cout << fmt::format("             device {}{}; {} on {}\n", c.device == DeviceKind::kCpu ? "cpu" : "cuda",
                             c.device == DeviceKind::kCpu ? " (min isa " + std::string(to_string(c.min_cpu_isa)) + ")"
                             : c.max_sm == 0 || c.max_sm == c.min_sm
                                 ? " (" + std::string(c.max_sm == 0 ? "min " : "") + "sm" + std::to_string(c.min_sm) + ")"
                                 : " (sm" + std::to_string(c.min_sm) + " to sm" + std::to_string(c.max_sm) + ")",
                             runs_here ? "runs" : "cannot run", platform.description);
    std::cout << "             formats: " << formats << "\n";
    std::cout << fmt::format("             graph-safe {}, host sync {}, lora {}, tp {}, ep {}, shared experts {}{}\n", c.cuda_graph_safe,
                             c.host_sync, c.lora, c.tensor_parallel, c.expert_parallel, c.shared_experts,
                             c.shared_experts && !shared_formats.empty() ? " (also in another format:" + shared_formats + ")" : "");
    if (!variants.empty()) std::cout << "             kernels: " << variants << "\n";
  }
  // (plugin paths and descriptions are bytes from outside: replaced where not UTF-8, not an exception)
  if (o.json) std::cout << all.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

struct KnobsOptions {
  bool json = false;
  bool all = false;
};

// The knob table with the values set now. Unlike the other commands it never refuses the environment:
// it is where a user finds out what is wrong with it.
void knobs(const KnobsOptions& o) {
  const std::vector<KnobProblem> problems = knob_problems(environ);
  auto current = [](const Knob& k) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(k.name).c_str());
    return v && *v ? std::optional<std::string>(v) : std::nullopt;
  };
  if (o.json) {
    nlohmann::json all = nlohmann::json::array();
    for (const Knob& k : moerun::knobs()) {
      nlohmann::json j{{"name", k.name},   {"area", k.area},   {"setting", k.setting},
                       {"values", knob_values(k)}, {"unset", k.unset}, {"what", k.what}};
      if (const auto v = current(k)) j["value"] = *v, j["accepted"] = knob_accepts(k, *v);
      all.push_back(j);
    }
    nlohmann::json unknown = nlohmann::json::array();
    for (const KnobProblem& p : problems)
      if (!p.error) unknown.push_back({{"name", p.name}, {"message", p.message}});
    // (the environment's values and names may be any bytes: replaced where not UTF-8)
    std::cout << nlohmann::json{{"knobs", all}, {"unknown", unknown}}.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    std::cout << "MOERUN_* environment variables. Settings first; the rest are measurement knobs for side-by-side\n"
                 "benchmarks (their defaults measured fastest). A malformed value is refused by every command but\n"
                 "this one. "
              << (o.all ? "" : "Without --all, only the settings and the knobs set now are listed.") << "\n\n";
    for (const Knob& k : moerun::knobs()) {
      const auto v = current(k);
      if (!o.all && !k.setting && !v) continue;
      std::cout << fmt::format("{} = {}\n", k.name, knob_values(k));
      std::cout << fmt::format("    {}; unset: {}\n", k.what, k.unset);
      if (v) std::cout << fmt::format("    now: {}{}\n", *v, knob_accepts(k, *v) ? "" : "   <- not a value it takes");
    }
    for (const KnobProblem& p : problems)
      if (!p.error) std::cout << "\nwarning: " << p.message << "\n";
  }
  for (const KnobProblem& p : problems)
    if (p.error) throw CLI::RuntimeError(2);  // printed above; a script sees the failure
}

}  // namespace

void add_knobs(CLI::App& root) {
  auto* app = root.add_subcommand("knobs", "the MOERUN_* environment variables: values, defaults, and what is set now");
  auto o = std::make_shared<KnobsOptions>();
  app->add_flag("--all", o->all, "also the measurement knobs that are not set");
  app->add_flag("--json", o->json, "print JSON (every knob)");
  app->callback([o] { knobs(*o); });
}

void add_explain(CLI::App& root) {
  auto* app = root.add_subcommand("explain", "which backend would run a layer on a platform, and why every other one would not");
  auto o = std::make_shared<ExplainOptions>();
  o->spec.add_to(*app);
  o->common.add_to(*app, true, false);
  app->add_option("--tokens", o->tokens, "tokens per call, which picks the kernel variant shown (default 1; run's is 64)")->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  app->add_flag("--json", o->json, "print JSON");
  app->callback([o] {
    check_knob_environment();
    explain(*o);
  });
}

void add_backends(CLI::App& root) {
  auto* app = root.add_subcommand("backends", "list registered backends: where they came from and what they support");
  auto o = std::make_shared<BackendsOptions>();
  o->common.add_to(*app, false, false);
  app->add_flag("--json", o->json, "print JSON");
  app->callback([o] {
    check_knob_environment();
    backends(*o);
  });
}

void add_presets(CLI::App& root) {
  auto* app = root.add_subcommand("presets", "list the named layer shapes");
  app->callback([] {
    check_knob_environment();
    for (const Preset& p : presets()) {
      std::cout << fmt::format("{:<22} {}\n", p.name, p.description);
      std::cout << fmt::format("{:<22} {}\n", "", p.model.spec.summary());
    }
  });
}

}  // namespace moerun::cli
