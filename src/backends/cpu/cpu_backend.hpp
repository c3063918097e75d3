// cpu/cpu_backend.hpp — the `cpu` backend: AVX2 / AVX-512 / AMX-BF16 kernels, OpenMP threads, every
// weight format kept quantized in memory and dequantized inside the kernels.
#pragma once

#include <memory>

#include "moerun/backend.hpp"

namespace moerun {

// The backend object the registry holds (register_builtin_backends adds it as "cpu").
std::shared_ptr<const Backend> make_cpu_backend();

}  // namespace moerun
