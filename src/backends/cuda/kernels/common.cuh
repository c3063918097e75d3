// cuda/kernels/common.cuh — device helpers shared by the cuda backend's kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "launch.hpp"

namespace moerun::cuda_kernels {

// ---- programmatic dependent launch (PDL, sm_90) ----------------------------------------------------
//
// The decode chain (routing, alignment, two grouped GEMMs, combine) is launched with the
// programmatic-stream-serialization attribute: a kernel's blocks may be scheduled while its
// predecessor is still running, so launch latency and the first wave's ramp hide behind the
// predecessor's tail (and the down GEMM fetches its first weight tiles before waiting). Contract of
// every kernel launched through launch_pdl: call pdl_wait() on every path before touching anything
// the stream's earlier work wrote (and before returning, so that its completion still implies its
// predecessor's); pdl_trigger() only lets the next kernel be scheduled, never lets it read early.
// (sm_90+: on an older target the launch attribute does not exist, so these have nothing to do.)
// The expert-sorted chain (gather, the wgmma GEMMs, activation, combine) is launched plainly: with
// PDL it measured no faster on the H200 and about 1% slower at 1024 tokens (mixtral-8x7b 1.483 /
// 1.526 against 1.470 / 1.507 ms, qwen3-30b-a3b 0.397 / 0.406 against 0.392 / 0.403; alternated,
// bench/results/2026-12-03_s22_h200/NOTES.md).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Asks the L2 to fetch [src, src + bytes) from global memory (sm_90 bulk prefetch: nothing comes to
// the SM, nothing waits for it). src 16-byte aligned, bytes a multiple of 16. Issued in pieces of at
// most 64 KiB: the PTX ISA states no upper bound on one request's size that I found, so none is relied
// on (qwen3-30b-a3b's slices are exactly 64 KiB).
__device__ __forceinline__ void l2_prefetch_bulk(const void* src, int64_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int64_t kPiece = 64 << 10;
  for (int64_t off = 0; off < bytes; off += kPiece) {
    const uint32_t n = static_cast<uint32_t>(bytes - off < kPiece ? bytes - off : kPiece);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(static_cast<const char*>(src) + off), "r"(n)
                 : "memory");
  }
#endif
}

// MOERUN_CUDA_PDL=0 launches the same kernels without the attribute (side-by-side measurement; read
// per launch, so one process can capture graphs of both forms). The one knob read here rather than
// through core/knobs.hpp: bench/cuda/tune's probes link these kernels without the library. The
// table's values (0 | 1) are checked at the boundary; here anything but "0" is on, as there.
inline bool pdl_enabled() {
  const char* v = std::getenv("MOERUN_CUDA_PDL");
  return !(v && v[0] == '0' && v[1] == '\0');
}

template <typename... KArgs, typename... Args>
cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Raises a kernel's dynamic shared-memory limit to `bytes`, once per device: the attribute belongs to
// the device that is current, and runners may drive several GPUs from several threads. Tag names the
// kernel instantiation (its shape or CUTLASS kernel type), so each gets its own record. Only the
// first call's `bytes` count: a kernel whose size varies by launch passes the device's opt-in maximum.
template <typename Tag, typename Kernel>
cudaError_t ensure_max_dynamic_smem(Kernel* kernel, int bytes) {
  static std::atomic<uint64_t> done{0};  // bit d: set on device d (devices past 63 set it every launch)
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess && bit != 0) done.fetch_or(bit, std::memory_order_acq_rel);
  return e;
}

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

// The logistic sigmoid with the hardware exp2 and reciprocal (__expf, __fdividef): a relative error
// near 1e-6 for moderate x (growing to about 1e-5 at |x| = 80, as __expf's does), far below the
// bf16/fp16 rounding every caller applies next (no GPU path has f32 activations). WHY: the precise
// expf and division cost 4-7% of the whole expert stage at M >= 1024 (the wgmma epilogue computes
// 64 activations a thread while the tensor cores wait; session 29, bench/results/2026-12-04_s29_h200).
// x below about -87: 1 + __expf(-x) is past 2^126 (or inf) and __fdividef gives +0, so silu gives -0,
// where the precise form gave about -1e-37. x = -inf gives NaN, as before.
__device__ __forceinline__ float sigmoid_fast(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }
__device__ __forceinline__ float silu(float x) { return x * sigmoid_fast(x); }
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
      if (limit > 0.0f) {  // by comparisons: fminf / fmaxf would turn a NaN into the limit
        g = g > limit ? limit : g;
        u = u > limit ? limit : (u < -limit ? -limit : u);
      }
      return g * sigmoid_fast(alpha * g) * (u + 1.0f);
    }
    case Act::kRelu2: { const float r = gate < 0.0f ? 0.0f : gate; return r * r; }  // (NaN stays NaN)
    case Act::kSilu: return silu(gate);
  }
  return 0.0f;
}

__host__ __device__ __forceinline__ bool act_gated(Act a) { return a != Act::kRelu2 && a != Act::kSilu; }

}  // namespace moerun::cuda_kernels
