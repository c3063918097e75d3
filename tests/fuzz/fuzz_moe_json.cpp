// libFuzzer target: JSON text -> a layer spec and a backend's capabilities (the two documents
// json_io reads: `moerun` spec files and a plug-in's capability block), and every spec that parses
// and validates -> the oracle on two described platforms. Any input must either go through or throw
// moerun::Error; another exception, a crash or a sanitizer report is a bug. The oracle half is the
// point: select() must refuse with reasons, never trip over a spec validate() accepted.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "moerun/error.hpp"
#include "moerun/oracle.hpp"
#include "moerun/registry.hpp"
#include "oracle/json_io.hpp"

namespace {

const moerun::Registry& builtins() {
  static moerun::Registry* r = [] {
    auto* reg = new moerun::Registry();
    moerun::register_builtin_backends(*reg);
    return reg;
  }();
  return *r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;  // not JSON: nlohmann's parser is not under test
  try {
    const moerun::MoeSpec spec = moerun::json_io::spec_from_json(j, "fuzz.json");
    spec.validate();
    for (const char* platform : {"cpu-amx", "sm90"}) {
      try {
        const moerun::Platform p = moerun::Platform::describe(platform);
        const moerun::Selection s = moerun::select(spec, p, moerun::Policy{}, builtins());
        volatile size_t sink = moerun::explain_json(spec, p, s).size() + moerun::explain_text(spec, p, s).size();
        (void)sink;
      } catch (const moerun::Error&) {
      }
    }
  } catch (const moerun::Error&) {
  }
  try {
    const moerun::Capabilities c = moerun::json_io::capabilities_from_json(j, "fuzz caps");
    volatile size_t sink = moerun::json_io::to_json(c).dump().size();
    (void)sink;
  } catch (const moerun::Error&) {
  }
  return 0;
}
