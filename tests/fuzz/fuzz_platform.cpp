// Fuzzes platform descriptions (JSON): any input either parses or throws moerun::Error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "moerun/error.hpp"
#include "moerun/platform.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const moerun::Platform p =
        moerun::Platform::from_json_text(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    (void)p.summary();
  } catch (const moerun::Error&) {
  }
  return 0;
}
