// moerun explain | backends | presets — what the oracle would do and what it knows.
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
  try {
    const Selection s = select(spec, platform, o.common.resolve_policy(), registry, so);
    std::cout << (o.json ? explain_json(spec, platform, s) + "\n" : explain_text(spec, platform, s));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUnsupported) throw;
    // A refusal is a complete answer to "explain": print it fully and exit 3.
    if (o.json) {
      nlohmann::json j;
      j["spec"] = json_io::to_json(spec);
      j["platform"] = json_io::to_json(platform);
      j["policy"] = o.common.backend;
      j["refused"] = e.what();
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << "spec:      " << spec.name << ": " << spec.summary() << "\nplatform:  " << platform.summary()
                << "\nrefused:   " << e.what() << "\n";
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
    if (o.json) {
      all.push_back({{"name", e.backend->name()}, {"origin", e.origin}, {"description", e.backend->description()},
                     {"capabilities", json_io::to_json(c)}});
      continue;
    }
    std::string formats;
    for (const FormatSupport& f : c.formats)
      formats += (formats.empty() ? "" : " ") + std::string(to_string(f.weights)) + (f.act_quant != ActQuant::kNone ? "+" + std::string(to_string(f.act_quant)) : "");
    std::string variants;
    for (const KernelVariant& v : c.variants) variants += (variants.empty() ? "" : ", ") + v.name;
    const bool runs_here = c.device == DeviceKind::kCpu ? platform.cpu.isa() >= c.min_cpu_isa
                                                        : platform.has_gpu() && platform.gpu_sm() >= c.min_sm;
    std::cout << fmt::format("{:<12} {} [{}]\n", e.backend->name(), e.backend->description(), e.origin);
    std::cout << fmt::format("             device {}{}; {} on {}\n", c.device == DeviceKind::kCpu ? "cpu" : "cuda",
                             c.device == DeviceKind::kCpu ? " (min isa " + std::string(to_string(c.min_cpu_isa)) + ")"
                                                          : " (min sm" + std::to_string(c.min_sm) + ")",
                             runs_here ? "runs" : "cannot run", platform.description);
    std::cout << "             formats: " << formats << "\n";
    std::cout << fmt::format("             graph-safe {}, host sync {}, lora {}, tp {}, ep {}, shared experts {}\n", c.cuda_graph_safe,
                             c.host_sync, c.lora, c.tensor_parallel, c.expert_parallel, c.shared_experts);
    if (!variants.empty()) std::cout << "             kernels: " << variants << "\n";
  }
  if (o.json) std::cout << all.dump(2) << "\n";
}

}  // namespace

void add_explain(CLI::App& root) {
  auto* app = root.add_subcommand("explain", "which backend would run a layer on a platform, and why every other one would not");
  auto o = std::make_shared<ExplainOptions>();
  o->spec.add_to(*app);
  o->common.add_to(*app);
  app->add_option("--tokens", o->tokens, "tokens per call (picks the kernel variant shown)");
  app->add_flag("--json", o->json, "print JSON");
  app->callback([o] { explain(*o); });
}

void add_backends(CLI::App& root) {
  auto* app = root.add_subcommand("backends", "list registered backends: where they came from and what they support");
  auto o = std::make_shared<BackendsOptions>();
  o->common.add_to(*app, false);
  app->add_flag("--json", o->json, "print JSON");
  app->callback([o] { backends(*o); });
}

void add_presets(CLI::App& root) {
  auto* app = root.add_subcommand("presets", "list the named layer shapes");
  app->callback([] {
    for (const Preset& p : presets()) {
      std::cout << fmt::format("{:<22} {}\n", p.name, p.description);
      std::cout << fmt::format("{:<22} {}\n", "", p.model.spec.summary());
    }
  });
}

}  // namespace moerun::cli
