// libFuzzer target: config.json text -> parse_hf_config. Any input must either parse or throw
// moerun::Error; anything else (another exception, a crash, a sanitizer report) is a bug.
//
// The input is the config.json text; when it holds a NUL byte, the bytes after the first one are
// passed as the hf_quant_config.json text, so both parsers are covered from one corpus.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "moerun/error.hpp"
#include "moerun/hf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<std::string_view> quant;
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    quant = text.substr(nul + 1);
    text = text.substr(0, nul);
  }
  try {
    moerun::HfModel m = moerun::parse_hf_config(text, "config.json", quant);
    // Touch the result so the whole model is built and read.
    volatile size_t sink = m.moe_layers.size() + static_cast<size_t>(m.spec.num_experts);
    (void)sink;
  } catch (const moerun::Error&) {
  }
  return 0;
}
