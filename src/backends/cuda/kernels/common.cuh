// cuda/kernels/common.cuh — device helpers shared by the cuda backend's kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "launch.hpp"

namespace moerun::cuda_kernels {

template <typename T> __device__ __forceinline__ float to_f32(T v);
template <> __device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}

// Gated activations take (gate, up); non-gated ones take x in `gate` and ignore `up`.
__device__ __forceinline__ float apply_act(Act act, float gate, float up, float alpha, float limit) {
  switch (act) {
    case Act::kSiluAndMul: return silu(gate) * up;
    case Act::kGeluAndMul: return gelu_erf(gate) * up;
    case Act::kGeluTanhAndMul: return gelu_tanh(gate) * up;
    case Act::kSwigluOai: {
      float g = gate, u = up;
      if (limit > 0.0f) {
        g = fminf(g, limit);
        u = fminf(fmaxf(u, -limit), limit);
      }
      return g * (1.0f / (1.0f + expf(-alpha * g))) * (u + 1.0f);
    }
    case Act::kRelu2: { const float r = fmaxf(gate, 0.0f); return r * r; }
    case Act::kSilu: return silu(gate);
  }
  return 0.0f;
}

__host__ __device__ __forceinline__ bool act_gated(Act a) { return a != Act::kRelu2 && a != Act::kSilu; }

}  // namespace moerun::cuda_kernels
