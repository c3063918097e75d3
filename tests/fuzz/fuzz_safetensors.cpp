// libFuzzer target: SafetensorsFile::from_bytes must either accept an image or throw moerun::Error —
// never crash, hang, read out of bounds or throw anything else. Accepted images are read back fully.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "moerun/error.hpp"
#include "moerun/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = moerun::SafetensorsFile::from_bytes(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    // Touch every byte of every accepted tensor, so that a bad view shows up under ASan.
    unsigned sum = 0;
    for (const auto& name : f->names()) {
      const moerun::TensorView v = f->get(name);
      const auto* p = static_cast<const uint8_t*>(v.data);
      for (size_t i = 0; i < v.nbytes(); ++i) sum += p[i];
    }
    for (const auto& [k, v] : f->metadata()) sum += static_cast<unsigned>(k.size() + v.size());
    volatile unsigned sink = sum;
    (void)sink;
  } catch (const moerun::Error&) {
  }
  return 0;
}
