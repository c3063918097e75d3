// bench/cuda/bench_util.cuh — what the CUDA benchmarks share: a CUDA-call check that exits with the
// failing call's name, and a deterministic uniform bf16 fill (a splitmix64 hash of the index and seed).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s failed: %s at %s:%d\n", #call, cudaGetErrorName(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

// p[i] = uniform in [-scale, scale), the same values for the same (n, seed) on every run.
__global__ void fill_random(__nv_bfloat16* p, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 29; x *= 0x94D049BB133111EBull; x ^= x >> 32;
    const float u = static_cast<float>(x & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f;
    p[i] = __float2bfloat16(u * scale);
  }
}
