// moerun/presets.hpp — named layer shapes of models in use (`moerun presets` lists them).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "moerun/hf.hpp"

namespace moerun {

struct Preset {
  std::string name;         // "qwen3-30b-a3b", "deepseek-r1-fp4", ...
  std::string description;  // one line: model, what is special
  HfModel model;            // spec + naming family
};

const std::vector<Preset>& presets();
// Throws Error{kNotFound} "unknown preset 'x'; known: a, b, c".
const Preset& find_preset(std::string_view name);

// A copy of the spec shrunk for fast tests (fewer experts, smaller H and I, same structure and
// format constraints), unsharded (parallel 1/1); used by `moerun check` and the conformance suite.
MoeSpec scaled_down(const MoeSpec& spec);

}  // namespace moerun
