// core/activation.hpp — the scalar definitions of every activation in MoeSpec (the reference math;
// vectorised kernels must agree with these to within their dtype's tolerance).
#pragma once

#include <algorithm>
#include <cmath>

#include "moerun/spec.hpp"

namespace moerun {

inline float act_silu(float x) noexcept { return x / (1.0f + std::exp(-x)); }
inline float act_gelu_erf(float x) noexcept { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }
inline float act_gelu_tanh(float x) noexcept {
  return 0.5f * x * (1.0f + std::tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
inline float act_relu2(float x) noexcept { return x < 0 ? 0.0f : x * x; }  // NaN stays NaN, as in torch

// gpt-oss: gate clamped above at limit, up clamped to [-limit, limit], out = g*sigmoid(alpha*g)*(u+1).
// A NaN gate or up stays NaN (std::min and std::clamp return their first argument then), as in torch.
inline float act_swiglu_oai(float gate, float up, float alpha, float limit) noexcept {
  if (limit > 0) {
    gate = std::min(gate, limit);
    up = std::clamp(up, -limit, limit);
  }
  return gate / (1.0f + std::exp(-alpha * gate)) * (up + 1.0f);
}

// Applies the spec's activation to one output unit. Gated kinds use (gate, up); others use gate only.
inline float apply_activation(const Activation& a, float gate, float up) noexcept {
  switch (a.kind) {
    case ActivationKind::kSiluAndMul: return act_silu(gate) * up;
    case ActivationKind::kGeluAndMul: return act_gelu_erf(gate) * up;
    case ActivationKind::kGeluTanhAndMul: return act_gelu_tanh(gate) * up;
    case ActivationKind::kSwigluOai: return act_swiglu_oai(gate, up, a.swiglu_alpha, a.swiglu_limit);
    case ActivationKind::kRelu2: return act_relu2(gate);
    case ActivationKind::kSilu: return act_silu(gate);
  }
  return 0.0f;
}

// Row indices of unit i's gate and up inputs within the w13 output (rows = intermediate units).
inline int gate_row(const Activation& a, int i, int units) noexcept { (void)units; return a.interleaved_gate_up ? 2 * i : i; }
inline int up_row(const Activation& a, int i, int units) noexcept { return a.interleaved_gate_up ? 2 * i + 1 : units + i; }

}  // namespace moerun
