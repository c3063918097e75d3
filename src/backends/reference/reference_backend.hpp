// backends/reference — the ground truth: every format, activation, routing, bias, shared expert and
// LoRA, computed the obvious way (dequantize each activated expert to fp32, accumulate in double).
// Slow by design; every other backend is verified against it.
#pragma once

#include <memory>

#include "moerun/backend.hpp"

namespace moerun {
std::shared_ptr<const Backend> make_reference_backend();
}
