// moerun verify | check — conformance of one backend, and the whole launch matrix.
#include <iostream>
#include <random>

#include "cli.hpp"
#include "moerun/verify.hpp"
#include "fmt/format.h"
#include "oracle/launch_matrix.hpp"

namespace moerun::cli {
namespace {

struct VerifyOptions {
  CommonOptions common;
  int cases = 60;
  uint64_t seed = 0;
  bool verbose = false;
};

void verify(const VerifyOptions& o) {
  Registry& registry = o.common.registry();
  const Platform platform = o.common.resolve_platform_to_run("verify");
  const BackendEntry* e = registry.find(o.common.backend);
  if (!e) {
    std::string names;
    for (const std::string& n : registry.names()) names += (names.empty() ? "" : ", ") + n;
    throw_error(ErrorKind::kNotFound, "unknown backend '" + o.common.backend + "'; registered: " + names);
  }
  const uint64_t seed = o.seed ? o.seed : static_cast<uint64_t>(std::random_device{}());
  std::cout << fmt::format("verify {} [{}] against reference: {} random cases from seed {} on {}\n", o.common.backend, e->origin,
                           o.cases, seed, platform.summary());
  RunnerOptions ro;
  ro.threads = o.common.threads;
  int passed = 0, failed = 0, skipped = 0, computed = 0;  // computed: passed cases of at least one token
  int repeatable = 0;  // computed cases whose second call gave the first's bits (verify.hpp)
  int computed_f32 = 0;  // of those, the cases with f32 activations
  // Specs are drawn until the backend supports them here: most random specs are outside a narrow
  // backend's capabilities (cuda: about 1 in 60), and a run of skips verifies nothing.
  const auto accept = [&](const MoeSpec& s) { return supports(*e->backend, s, platform).ok(); };
  for (const VerifyCase& c : standard_cases(seed, o.cases, accept)) {
    const VerifyResult r = verify_case(*e->backend, platform, c, ro);
    if (r.skipped) ++skipped;
    else if (r.passed) ++passed;
    else ++failed;
    const bool counted = !r.skipped && r.passed && c.tokens > 0;
    computed += counted;
    repeatable += counted && r.repeatable;
    computed_f32 += counted && c.spec.act_dtype == DType::kF32;
    if (!r.passed || (o.verbose && !r.skipped))
      std::cout << (r.passed ? "  ok   " : "  FAIL ") << c.label() << ": "
                << (r.message.empty() ? fmt::format("error {:.2e}", r.error) : r.message)
                << (counted && !r.repeatable ? " (not bitwise repeatable)" : "") << "\n";
    else if (counted && !r.repeatable)
      std::cout << "  ok   " << c.label() << ": not bitwise repeatable (its second call gave other bits)\n";
    else if (o.verbose)
      std::cout << "  skip " << c.label() << ": " << r.message << "\n";
  }
  std::cout << fmt::format("{}: {} passed, {} failed, {} skipped (not supported)\n", o.common.backend, passed, failed, skipped);
  if (computed > 0)
    std::cout << fmt::format("{}: {} of {} computed cases bitwise repeatable (the same call again on the same runner, "
                             "after a call of another size, gave the same bits)\n",
                             o.common.backend, repeatable, computed);
  // The f16 / bf16 tolerances are wider than what some defects cost: a skipped activation quantization,
  // or tanh-GELU for erf-GELU (2e-4 relative L2), pass there. Only f32 cases see them.
  if (computed > 0 && computed_f32 == 0)
    std::cout << o.common.backend << ": note: no case with f32 activations ran (the backend takes none here), so "
                                     "defects smaller than the f16 / bf16 tolerances (a skipped activation "
                                     "quantization, tanh-GELU for erf-GELU) could not be seen\n";
  if (failed) throw CLI::RuntimeError(1);
  if (computed == 0) {
    std::cout << o.common.backend << (passed == 0 ? ": no case was supported; nothing verified\n"
                                                  : ": only empty (M = 0) calls were supported; nothing computed was verified\n");
    throw CLI::RuntimeError(1);
  }
}

struct CheckOptions {
  std::vector<std::string> plugins, presets, platforms;
  bool no_run = false;
  int64_t tokens = 5;
};

void check(const CheckOptions& o) {
  Registry& registry = registry_with_env_plugins();
  for (const std::string& p : o.plugins) registry.load_plugin(p);
  LaunchMatrixOptions lo;
  lo.presets = o.presets;
  lo.platforms = o.platforms;
  lo.run_here = !o.no_run;
  lo.tokens = o.tokens;
  lo.progress = [](const std::string& s) { std::cerr << s << "\n"; };
  const std::vector<std::string> names = registry.names();
  std::vector<std::string> preset_names = o.presets;
  if (preset_names.empty())
    for (const Preset& p : presets()) preset_names.push_back(p.name);
  const size_t layers = launch_matrix_layers(preset_names).size();
  std::cout << fmt::format("check: {} presets{} x {} platforms x tp,ep in {{1,2,8}} x (auto + {} backends)\n",
                           preset_names.size(),
                           layers > preset_names.size()
                               ? fmt::format(" (+{} with bf16 shared experts)", layers - preset_names.size())
                               : std::string(),
                           o.platforms.empty() ? Platform::known_descriptions().size() + 1 : o.platforms.size(), names.size());
  const LaunchMatrixResult r = run_launch_matrix(registry, lo);
  for (const std::string& f : r.failures) std::cout << "  " << f << "\n";
  if (o.no_run)
    std::cout << "planned only (--no-run): no forward ran\n";
  else
    std::cout << fmt::format("ran {} distinct scaled-down layers on this machine, each compared with reference at M = {}, at M = 1 "
                             "with logits from the router weight and at M = 0{}; {} plans need "
                             "hardware this machine lacks{}\n",
                             r.ran, o.tokens, r.crashed || r.mismatched ? " (the failures are listed above)" : "", r.not_runnable_here,
                             r.matched == 0 ? ""
                             : r.repeatable == r.matched
                                 ? fmt::format(", all {} matched layers bitwise repeatable (the same call again on one runner)", r.matched)
                                 : fmt::format(", {} of {} matched layers bitwise repeatable (the same call again on one runner)",
                                               r.repeatable, r.matched));
  std::cout << r.summary() << "\n";
  if (r.crashed || r.mismatched) throw CLI::RuntimeError(1);
}

}  // namespace

void add_verify(CLI::App& root) {
  auto* app = root.add_subcommand("verify", "run a backend (a plugin too) through the conformance harness against reference");
  auto o = std::make_shared<VerifyOptions>();
  o->common.add_to(*app);
  app->get_option("--backend")->required()->description("the backend to verify: a registered name (see `moerun backends`)");
  app->add_option("--cases", o->cases, "random cases (default 60)")->check(CLI::Range(1, 100000));
  app->add_option("--seed", o->seed, "seed (default or 0: a fresh one, printed)")->check(seed_value());
  app->add_flag("-v,--verbose", o->verbose, "print every case");
  app->callback([o] {
    check_knob_environment();
    verify(*o);
  });
}

void add_check(CLI::App& root) {
  auto* app = root.add_subcommand("check", "the launch matrix: every preset x platform x parallel x backend plans or is refused, never crashes");
  auto o = std::make_shared<CheckOptions>();
  app->add_option("--plugin", o->plugins, "load a backend plugin (.so); repeatable. Also MOERUN_PLUGIN_PATH")
      ->check(non_empty("PATH"));
  app->add_option("--preset", o->presets, "restrict to these presets")->check(non_empty("NAME"));
  app->add_option("--platform", o->platforms, "restrict to these platform descriptions")->check(non_empty("PLATFORM"));
  app->add_option("--tokens", o->tokens, "tokens of each scaled-down layer's first call (then 1 and 0 follow; --no-run plans without any)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app->add_flag("--no-run", o->no_run, "plan only; run no forward");
  app->callback([o] {
    check_knob_environment();
    check(*o);
  });
}

}  // namespace moerun::cli
