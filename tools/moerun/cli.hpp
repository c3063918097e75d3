// tools/moerun/cli.hpp — what the subcommands share: spec options (preset | --config | flags), the
// platform, the backend policy and plugins.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/knobs.hpp"
#include "moerun/moerun.hpp"

namespace moerun::cli {

// Options that describe a layer. Exactly one source: --preset, --config, or --experts/... flags.
struct SpecOptions {
  std::string preset, config;
  // flags (used when neither preset nor config is given; parallel ones apply to any source)
  int experts = 0, top_k = 0, hidden = 0, intermediate = 0;
  std::string activation = "silu-and-mul", scoring = "softmax", format = "bf16", act_dtype = "bf16";
  std::string act_quant;  // empty: not given (none for a hand-described layer, the model's own otherwise)
  std::string shared_format;  // empty: not given (the shared experts take --format)
  int n_group = 1, topk_group = 1, shared = 0, shared_intermediate = 0;
  bool no_renormalize = false, correction_bias = false, softmax_after_topk = false, expert_bias = false, router_bias = false;
  float scale = 1.0f;
  int tp = 1, ep = 1, rank = 0, lora_adapters = 0, lora_rank = 0;

  void add_to(CLI::App& app, bool allow_config = true);
  // The spec, validated. Throws moerun::Error naming the problem: a layer flag given beside --preset or
  // --config (it would change nothing), a hand-described layer missing one of its four sizes, or what
  // MoeSpec::validate refuses.
  MoeSpec resolve() const;
  // The model (family) when from a preset or config; nullopt for flags.
  std::optional<HfModel> model() const;

 private:
  std::vector<const CLI::Option*> layer_flags_;  // the "layer flags" group, to tell which were given
};

struct CommonOptions {
  std::string platform = "detected";
  std::string backend = "auto";
  std::vector<std::string> plugins;
  int threads = 0;
  // with_threads: only for the commands that run forwards (run, verify).
  void add_to(CLI::App& app, bool with_backend = true, bool with_threads = true);
  Platform resolve_platform() const;
  // For the commands that execute here (run, verify): the platform, refused (kInvalidArgument) when a
  // described one claims hardware this machine lacks. A lower CPU level only narrows it, and is honoured.
  Platform resolve_platform_to_run(std::string_view command) const;
  Policy resolve_policy() const;
  // Loads --plugin libraries into the global registry (MOERUN_PLUGIN_PATH ones load by themselves).
  // Throws Error{kPlugin} when one of either cannot be loaded: the command would run without it.
  Registry& registry() const;
};

int run_command(CLI::App& app);  // moerun run
void add_run(CLI::App& root);
void add_explain(CLI::App& root);
void add_backends(CLI::App& root);
void add_presets(CLI::App& root);
void add_knobs(CLI::App& root);
void add_verify(CLI::App& root);
void add_check(CLI::App& root);

// A --seed: digits only (CLI11 would wrap "-1" round to 2^64 - 1).
CLI::Validator seed_value();
// A value that must not be empty: `--preset ""` would read as no --preset at all (the layer flags'
// error, or for --act-quant the model's own setting kept without a word).
CLI::Validator non_empty(std::string what = "VALUE");

// Prints "moerun: <message>" to stderr (one line) and returns the exit code for the error kind
// (README: exit codes).
int report(const std::exception& e);

// The global registry with the MOERUN_PLUGIN_PATH plugins loaded; throws Error{kPlugin} naming the
// ones that failed.
Registry& registry_with_env_plugins();

}  // namespace moerun::cli
