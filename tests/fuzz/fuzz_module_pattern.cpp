// libFuzzer target: module-name patterns (core/module_pattern.hpp, the "re:" entries of quantization
// configs). The input is a pattern, then after the first NUL byte a name to match it against. Any
// input must compile or throw std::invalid_argument, and a compiled pattern must answer for any name;
// anything else (another exception, a crash, a sanitizer report, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "core/module_pattern.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string_view name = "model.layers.3.mlp.experts.17.gate_proj";
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    name = text.substr(nul + 1);
    text = text.substr(0, nul);
  }
  if (text.size() > 256) return 0;  // the readers refuse longer entries before compiling them
  try {
    const moerun::ModulePattern p(text);
    volatile bool sink = p.match_prefix(name);
    (void)sink;
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
