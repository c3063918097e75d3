// moerun run — one MoE layer: plan, weights (random or a checkpoint), inputs, forward, timing, verify.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>

#include "backends/reference/reference_backend.hpp"
#include "cli.hpp"
#include "moerun/verify.hpp"
#include "core/convert.hpp"
#include "core/random.hpp"
#include "fmt/format.h"

namespace moerun::cli {
namespace {

struct RunOptions {
  SpecOptions spec;
  CommonOptions common;
  std::vector<std::string> weights;
  int layer = -1;
  std::string input, output;
  int64_t tokens = 64;
  uint64_t seed = 1234;
  int iters = 10;
  bool verify = false;
};

// Converts a host tensor of any float dtype into a new tensor of `dtype`; `what` ("file: tensor") prefixes
// the error for another dtype.
HostTensor converted(const TensorView& t, DType dtype, const std::string& what) {
  std::vector<float> f(static_cast<size_t>(t.numel()));
  try {
    convert_to_f32(t, f.data());
  } catch (const Error& e) {
    throw_error(ErrorKind::kFormat, what + ": " + e.what());
  }
  HostTensor out(dtype, t.shape);
  convert_from_f32(f.data(), out.view());
  return out;
}

// MemAvailable of /proc/meminfo in bytes, or 0 where it cannot be read.
double available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024.0;
  return 0;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void run(const RunOptions& o) {
  if (!o.output.empty()) {  // before the weights and the forwards, not after them
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::absolute(o.output, ec).parent_path();
    if (ec || !std::filesystem::is_directory(dir, ec) || ::access(dir.c_str(), W_OK) != 0)
      throw_error(ErrorKind::kIo, "--output " + o.output + ": cannot write in " + dir.string());
    if (std::filesystem::is_directory(o.output, ec) || o.output.back() == '/')
      throw_error(ErrorKind::kIo, "--output " + o.output + ": is a directory (name the file to write)");
  }
  const MoeSpec spec = o.spec.resolve();
  if (!o.weights.empty() && !o.spec.model())
    throw_error(ErrorKind::kInvalidArgument, "--weights needs --config (or --preset) to know the tensor names");
  const Platform platform = o.common.resolve_platform_to_run("run");
  Registry& registry = o.common.registry();
  const Policy policy = o.common.resolve_policy();

  // Inputs first: their token count decides the plan's kernel variant.
  HostTensor hidden, logits;
  std::shared_ptr<SafetensorsFile> in_file;
  if (!o.input.empty()) {
    in_file = SafetensorsFile::open(o.input);
    const TensorView h = in_file->get("hidden_states");
    if (h.shape.rank != 2 || h.shape[1] != spec.hidden)
      throw_error(ErrorKind::kFormat, o.input + ": hidden_states: expected [M, " + std::to_string(spec.hidden) + "], got " + h.shape.str());
    hidden = converted(h, spec.act_dtype, o.input + ": hidden_states");
    if (in_file->contains("router_logits")) {
      const TensorView l = in_file->get("router_logits");
      if (!(l.shape == Shape{h.shape[0], spec.num_experts}))
        throw_error(ErrorKind::kFormat, o.input + ": router_logits: expected [" + std::to_string(h.shape[0]) + ", " +
                                            std::to_string(spec.num_experts) + "], got " + l.shape.str());
      logits = converted(l, DType::kF32, o.input + ": router_logits");
    }
  } else {
    // (--tokens is range-checked when parsed; this bounds what the random inputs and the outputs take,
    // by the memory available now: past it the process would be killed while filling them, not refused.
    // The backend's own workspace comes on top, and a single allocation too large for it fails cleanly.)
    const double gib = 1ull << 30;
    const double bytes = static_cast<double>(o.tokens) *
                         ((spec.hidden + spec.num_experts) * (4.0 + 4.0) + spec.hidden * 2.0 * dtype_size(spec.act_dtype));
    const double avail = available_memory_bytes();
    const double limit = avail > 0 ? std::min(avail, 64.0 * gib) : 64.0 * gib;
    if (bytes > limit)
      throw_error(ErrorKind::kInvalidArgument,
                  fmt::format("--tokens {}: the random inputs and outputs alone would take {:.1f} GiB, more than {}", o.tokens,
                              bytes / gib, avail > 0 && avail < 64.0 * gib ? fmt::format("the {:.1f} GiB available", avail / gib)
                                                                          : std::string("the 64 GiB this command allows")));
    SplitMix64 g(o.seed ^ 0x5eed);
    std::vector<float> x(static_cast<size_t>(o.tokens * spec.hidden)), l(static_cast<size_t>(o.tokens * spec.num_experts));
    for (float& v : x) v = g.uniform_pm1();
    for (float& v : l) v = 2.0f * g.uniform_pm1();
    hidden = HostTensor(spec.act_dtype, {o.tokens, spec.hidden});
    convert_from_f32(x.data(), hidden.view());
    logits = HostTensor(DType::kF32, {o.tokens, spec.num_experts});
    std::memcpy(logits.data(), l.data(), l.size() * 4);
  }
  const int64_t m = hidden.shape()[0];

  // Plan before loading weights, so an impossible request fails in milliseconds.
  SelectOptions so;
  so.tokens = m;
  const Selection plan = select(spec, platform, policy, registry, so);
  std::cout << explain_text(spec, platform, plan);
  if (const std::optional<HfModel> model = o.spec.model())
    for (const std::string& c : model->caveats) std::cout << "caveat:    " << c << "\n";

  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<MoeWeights> weights;
  if (!o.weights.empty()) {
    HfModel mm = *o.spec.model();  // (checked above)
    mm.spec = spec;
    std::vector<std::shared_ptr<SafetensorsFile>> files;
    for (const std::string& p : o.weights)  // a file, or a model folder's shards
      for (const std::string& f : checkpoint_files(p)) files.push_back(SafetensorsFile::open(f));
    std::cerr << "loading layer weights from " << files.size() << " file(s)...\n";
    weights = std::make_shared<MoeWeights>(load_hf_layer(mm, files, o.layer >= 0 ? std::optional<int>(o.layer) : std::nullopt));
  } else {
    const double gib = static_cast<double>(estimate_weight_bytes(spec)) / (1ull << 30);
    std::cerr << fmt::format("generating random weights (seed {}, {:.2f} GiB)...\n", o.seed, gib);
    weights = std::make_shared<MoeWeights>(random_weights(spec, o.seed));
  }
  std::cerr << fmt::format("weights ready in {:.1f} s; preparing backend '{}'...\n", seconds_since(t0), plan.backend);
  // A checkpoint's router routes its random hidden states (the layer computes the logits from the
  // router weight, as the model does), not the uniform random logits drawn above for random weights.
  if (!o.weights.empty() && o.input.empty() && m > 0 && !weights->router_weight.empty()) {
    logits = HostTensor();
    std::cout << "routing:   logits from the checkpoint's router weight (random hidden states, seed " << o.seed << ")\n";
  }

  RunnerOptions ro;
  ro.threads = o.common.threads;
  Policy chosen;
  chosen.kind = Policy::Kind::kExplicit;
  chosen.name = plan.backend;
  MoeLayer layer(spec, weights, platform, chosen, registry, ro);

  HostTensor out(spec.act_dtype, {m, spec.hidden});
  ForwardArgs args;
  args.hidden = hidden.view();
  if (!logits.empty() || m == 0) args.router_logits = logits.view();
  args.output = out.view();
  // A layer with LoRA slots (--lora-adapters) runs with random adapters, each token using one of them
  // or none (-1), drawn from --seed: checkpoints hold no adapters, and a layer that takes them should
  // be timed and verified with them applied. The reference gets the same batch (ra below).
  LoraWeights lora;
  HostTensor token_adapter;
  LoraBatch lora_batch;
  if (spec.lora.max_adapters > 0) {
    lora = random_lora(spec, o.seed ^ 0x10aa);
    token_adapter = random_token_adapters(m, lora.adapters, o.seed ^ 0xada);
    const int64_t with = std::count_if(token_adapter.as<int32_t>(), token_adapter.as<int32_t>() + m, [](int32_t a) { return a >= 0; });
    lora_batch.weights = &lora;
    lora_batch.token_adapter = token_adapter.view();
    args.lora = &lora_batch;
    std::cout << fmt::format("lora:      {} random adapters of rank {} (seed {}); {} of {} tokens use one, the rest none\n",
                             lora.adapters, lora.rank, o.seed, with, m);
  }

  // Warm-up, then the median of --iters timed calls.
  layer.forward(args);
  std::vector<double> times;
  for (int i = 0; i < o.iters; ++i) {
    auto t = std::chrono::steady_clock::now();
    layer.forward(args);
    times.push_back(seconds_since(t));
  }
  std::sort(times.begin(), times.end());
  const double med = times[times.size() / 2];
  std::cout << fmt::format("forward:   M={} tokens, kernel {}, median {:.3f} ms over {} runs, {:.1f} tokens/s\n", m,
                           m == 0 || layer.variant_for(m).empty() ? "-" : layer.variant_for(m), med * 1e3, times.size(),
                           med > 0 ? static_cast<double>(m) / med : 0.0);

  bool mismatch = false;
  if (o.verify) {
    if (plan.backend == "reference") {
      std::cout << "verify:    skipped (the plan is the reference itself)\n";
    } else {
      std::cerr << "running the reference backend to verify (slow)...\n";
      Policy ref;
      ref.kind = Policy::Kind::kExplicit;
      ref.name = "reference";
      MoeLayer reference(spec, weights, platform, ref, registry, ro);
      HostTensor expect(spec.act_dtype, {m, spec.hidden});
      ForwardArgs ra = args;
      ra.output = expect.view();
      // One reference forward, timed alone (not the layer's planning and checks), so the ratio compares
      // forwards. With no tokens both are a few microseconds of bookkeeping: no ratio.
      auto t1 = std::chrono::steady_clock::now();
      reference.forward(ra);
      const double ref_time = seconds_since(t1);
      const VerifyResult v = compare_outputs(out.view(), expect.view(), tolerance_for(spec));
      const double ratio = m > 0 && med > 0 && ref_time > 0 ? ref_time / med : 0.0;
      const std::string speed = ratio >= 1.0   ? fmt::format(", {:.1f}x the {} median", ratio, plan.backend)
                                : ratio > 0.0 ? fmt::format(", {:.1f}x faster than the {} median", 1.0 / ratio, plan.backend)
                                              : std::string();
      std::cout << fmt::format("verify:    {} vs reference: normalized max error {:.2e}, relative L2 {:.2e} {}; one reference forward "
                               "took {:.3f} s{}\n",
                               plan.backend, v.error, v.rel_l2, v.passed ? "OK" : "MISMATCH: " + v.message, ref_time, speed);
      mismatch = !v.passed;
    }
  }
  // Written on a mismatch too: that is when the output is wanted most.
  if (!o.output.empty()) {
    write_safetensors(o.output, {{"output", out.view()}}, {{"producer", "moerun run"}, {"backend", plan.backend}});
    std::cout << "output:    wrote 'output' " << out.shape().str() << " to " << o.output
              << (mismatch ? " (the mismatching output)" : "") << "\n";
  }
  if (mismatch) throw CLI::RuntimeError(5);
}

}  // namespace

void add_run(CLI::App& root) {
  auto* app = root.add_subcommand("run", "run one MoE layer: plan, weights, forward, timing (and --verify against reference)");
  auto o = std::make_shared<RunOptions>();
  o->spec.add_to(*app);
  o->common.add_to(*app);
  auto* weights = app->add_option("--weights", o->weights,
                                  "safetensors file(s) holding the layer under its Hugging Face names, or a model "
                                  "folder (its shards, by model.safetensors.index.json when present)")
                      ->check(CLI::ExistingPath);
  app->add_option("--layer", o->layer, "which layer when the file holds several")->check(CLI::Range(0, 1 << 20))->needs(weights);
  auto* input = app->add_option("--input", o->input, "safetensors with hidden_states [M, H] (+ router_logits [M, E])")
                    ->check(CLI::ExistingFile);
  app->add_option("--output", o->output, "write tensor 'output' [M, H] here (also when --verify finds a mismatch)")
      ->check(non_empty("PATH"));
  app->add_option("--tokens", o->tokens, "tokens M for random inputs (default 64)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24))
      ->excludes(input);
  app->add_option("--seed", o->seed, "seed for random weights and inputs")->check(seed_value());
  app->add_option("--iters", o->iters, "timed forward calls after one warm-up (median reported)")->check(CLI::Range(1, 1000000));
  app->add_flag("--verify", o->verify, "compare with the reference backend");
  app->callback([o] {
    check_knob_environment();
    run(*o);
  });
}

}  // namespace moerun::cli
