// core/convert.hpp — host tensor <-> fp32 conversions for activations (F32, F16, BF16).
#pragma once

#include "moerun/tensor.hpp"

namespace moerun {

// dst[0..numel) = src as fp32. src must be a host tensor of F32, F16 or BF16.
void convert_to_f32(const TensorView& src, float* dst);
// dst = src rounded to dst's dtype (round to nearest even). dst must be a host F32, F16 or BF16 tensor.
void convert_from_f32(const float* src, const TensorView& dst);

}  // namespace moerun
