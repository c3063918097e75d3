#include "oracle/launch_matrix.hpp"

#include <algorithm>
#include <map>
#include <numeric>

#include "moerun/error.hpp"
#include "moerun/presets.hpp"
#include "moerun/verify.hpp"
#include "oracle/json_io.hpp"

namespace moerun {

std::string LaunchMatrixResult::summary() const {
  return "planned " + std::to_string(planned) + ", refused " + std::to_string(refused) + ", crashed " + std::to_string(crashed) +
         ", mismatched " + std::to_string(mismatched);
}

MoeSpec scaled_for_check(const MoeSpec& spec) {
  MoeSpec base = spec;
  base.parallel = Parallel{};
  MoeSpec s = scaled_down(base);
  s.parallel = spec.parallel;
  // 128 per rank keeps every format's blocks whole (fp8 128x128, mxfp4 32, nvfp4 16) under any tp.
  s.intermediate = 128 * spec.parallel.tp;
  if (s.shared.count > 0) s.shared.intermediate = 128 * spec.parallel.tp;
  const int l = std::lcm(s.routing.n_group, spec.parallel.ep);
  s.num_experts = (s.num_experts + l - 1) / l * l;
  return s;
}

namespace {

// One scaled-down layer through the harness at the sizes a launch meets: o.tokens tokens with router
// logits given, one token whose logits the backend computes from the router weight (the decode step's
// path), and an empty call. The first failure is the layer's result, its message prefixed with the
// case; a passed layer is repeatable only if every case was.
VerifyResult verify_layer(const Backend& backend, const Platform& here, const MoeSpec& small, int64_t tokens, uint64_t seed) {
  struct Size {
    int64_t tokens;
    RoutingPattern routing;
  };
  const Size sizes[] = {{tokens, RoutingPattern::kRandom}, {1, RoutingPattern::kFromWeights}, {0, RoutingPattern::kRandom}};
  VerifyResult all;
  all.passed = all.repeatable = true;
  for (const Size& size : sizes) {
    VerifyCase c;
    c.spec = small;
    c.tokens = size.tokens;
    c.routing = size.routing;
    c.seed = seed;
    c.with_lora = small.lora.max_adapters > 0;
    VerifyResult v = verify_case(backend, here, c);
    if (!v.passed) {
      const std::string at = "M=" + std::to_string(size.tokens) +
                             (size.routing == RoutingPattern::kFromWeights ? " (logits from the router weight)" : "");
      v.message = v.message.rfind("threw: ", 0) == 0 ? "threw at " + at + ": " + v.message.substr(7) : "at " + at + ": " + v.message;
      v.repeatable = false;
      return v;
    }
    all.repeatable = all.repeatable && v.repeatable;
    all.error = std::max(all.error, v.error);
    all.rel_l2 = std::max(all.rel_l2, v.rel_l2);
    all.tolerance = v.tolerance;
  }
  return all;
}

}  // namespace

std::vector<std::pair<std::string, MoeSpec>> launch_matrix_layers(const std::vector<std::string>& preset_names) {
  std::vector<std::pair<std::string, MoeSpec>> layers;
  for (const std::string& pn : preset_names) {
    const MoeSpec& s = find_preset(pn).model.spec;
    layers.emplace_back(pn, s);
    if (s.shared.count > 0 && !is_unquantized(s.weight_format)) {
      MoeSpec mixed = s;
      mixed.shared.weight_format = WeightFormat::kBF16;
      layers.emplace_back(pn + " (bf16 shared experts)", mixed);
    }
  }
  return layers;
}

LaunchMatrixResult run_launch_matrix(const Registry& registry, const LaunchMatrixOptions& o) {
  LaunchMatrixResult r;
  std::vector<std::string> preset_names = o.presets;
  if (preset_names.empty())
    for (const Preset& p : presets()) preset_names.push_back(p.name);
  std::vector<std::string> platforms = o.platforms;
  if (platforms.empty()) {
    platforms = Platform::known_descriptions();
    platforms.push_back("detected");
  }
  const Platform here = Platform::detect();
  std::vector<Policy> policies{Policy{}};
  for (const std::string& name : registry.names()) policies.push_back(Policy::parse(name));

  const std::vector<std::pair<std::string, MoeSpec>> layers = launch_matrix_layers(preset_names);
  std::map<std::string, VerifyResult> runs;  // (backend, scaled spec) -> result, so each runs once
  int combos = 0;
  for (const auto& [pn, layer] : layers) {
    for (const std::string& pd : platforms) {
      const Platform platform = Platform::describe(pd);
      for (int tp : o.parallel_sizes)
        for (int ep : o.parallel_sizes) {
          // The last rank (a non-zero expert offset and tp slice) and, when sharded, rank 0 too: only
          // rank 0 of a tp group adds the w2 bias, and only ranks with rank % ep == 0 the shared expert.
          for (const int rank : tp * ep > 1 ? std::vector<int>{tp * ep - 1, 0} : std::vector<int>{0}) {
            MoeSpec spec = layer;
            spec.parallel.tp = tp;
            spec.parallel.ep = ep;
            spec.parallel.rank = rank;
            for (const Policy& policy : policies) {
              ++combos;
              const std::string where = pn + " on " + pd + " tp=" + std::to_string(tp) + " ep=" + std::to_string(ep) +
                                        " rank " + std::to_string(rank) + " policy " + policy.str();
              Selection sel;
              try {
                sel = select(spec, platform, policy, registry);
              } catch (const Error& e) {
                if (e.kind() == ErrorKind::kUnsupported || e.kind() == ErrorKind::kInvalidSpec) {
                  ++r.refused;
                  continue;
                }
                ++r.crashed;
                r.failures.push_back("crash planning " + where + ": " + e.what());
                continue;
              } catch (const std::exception& e) {
                ++r.crashed;
                r.failures.push_back("crash planning " + where + ": " + e.what());
                continue;
              }
              ++r.planned;
              if (!o.run_here) continue;
              MoeSpec small;
              try {
                small = scaled_for_check(spec);
                small.validate();
              } catch (const Error& e) {
                ++r.crashed;
                r.failures.push_back("cannot scale down " + where + ": " + e.what());
                continue;
              }
              if (!supports(*sel.chosen, small, here).ok()) {
                ++r.not_runnable_here;
                continue;
              }
              const std::string key = sel.backend + "|" + json_io::to_json(small).dump();
              auto it = runs.find(key);
              if (it == runs.end()) {
                it = runs.emplace(key, verify_layer(*sel.chosen, here, small, o.tokens, o.seed + runs.size())).first;
                if (o.progress && runs.size() % 25 == 0)
                  o.progress("check: " + std::to_string(combos) + " combinations, " + std::to_string(runs.size()) + " layers run");
              }
              const VerifyResult& v = it->second;
              if (v.passed) continue;
              if (v.message.rfind("threw", 0) == 0) {
                ++r.crashed;
                r.failures.push_back("crash running " + where + " with " + sel.backend + ": " + v.message);
              } else {
                ++r.mismatched;
                r.failures.push_back("mismatch running " + where + " with " + sel.backend + ": " + v.message);
              }
            }
          }
        }
    }
  }
  r.ran = static_cast<int>(runs.size());
  for (const auto& [key, v] : runs) {
    r.matched += v.passed;
    r.repeatable += v.passed && v.repeatable;
  }
  return r;
}

}  // namespace moerun
