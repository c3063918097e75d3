// Session 35 probes: one cp.async.cg with an L2::cache_hint policy (createpolicy evict_first) and a
// src-size operand, the form GroupedGemmParams::weights_evict_first uses; run under compute-sanitizer.
// Calls 2-3 ran two builds of this kernel: the policy made at the top (`hint_probe`, no argument) and
// made under a condition, `flag ? createpolicy : 0`, as the library's first form did (`hint_probe2`,
// here `hint_probe conditional`). Both ran clean; the library's fault was elsewhere (NOTES.md).
// Build: nvcc -O2 -gencode=arch=compute_90a,code=sm_90a -o hint_probe hint_probe.cu
#include <cstdint>
#include <cstdio>
#include <cstring>

__device__ __forceinline__ uint64_t pol_first() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}

template <bool kConditional>
__global__ void k(const int4* src, int4* dst, int n, bool flag) {
  __shared__ int4 buf[256];
  const uint64_t pol = kConditional ? (flag ? pol_first() : 0) : pol_first();
  const int i = blockIdx.x * 256 + threadIdx.x;
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(&buf[threadIdx.x]));
  const int ss = i < n ? 16 : 0;
  const int4* g = i < n ? src + i : src;
  if (!kConditional || flag)
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(s), "l"(g), "r"(ss), "l"(pol));
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(g), "r"(ss));
  asm volatile("cp.async.commit_group;\n" ::);
  asm volatile("cp.async.wait_group 0;\n" ::);
  __syncthreads();
  if (i < n) dst[i] = buf[threadIdx.x];
}

int main(int argc, char** argv) {
  const bool conditional = argc > 1 && std::strcmp(argv[1], "conditional") == 0;
  const int n = 1000;
  int4 *a, *b;
  cudaMalloc(&a, n * 16);
  cudaMalloc(&b, n * 16);
  cudaMemset(a, 1, n * 16);
  cudaMemset(b, 0, n * 16);
  if (conditional) k<true><<<(n + 255) / 256, 256>>>(a, b, n, true);
  else k<false><<<(n + 255) / 256, 256>>>(a, b, n, true);
  const cudaError_t e = cudaDeviceSynchronize();
  int4 h;
  cudaMemcpy(&h, b + 999, 16, cudaMemcpyDeviceToHost);
  std::printf("%s: err=%s val=%x\n", conditional ? "conditional" : "top", cudaGetErrorString(e), h.x);
  return e == cudaSuccess ? 0 : 1;
}
