// Session 35 probe, second form: the policy made under a condition (flag ? createpolicy : 0), as the
// library's first try did, to tell whether that is what faults.
#include <cstdio>
#include <cstdint>
__device__ __forceinline__ uint64_t pol_first() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
__global__ void k(const int4* src, int4* dst, int n, bool flag) {
  __shared__ int4 buf[256];
  const uint64_t pol = flag ? pol_first() : 0;
  int i = blockIdx.x * 256 + threadIdx.x;
  uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(&buf[threadIdx.x]));
  int ss = i < n ? 16 : 0;
  const int4* g = i < n ? src + i : src;
  if (flag)
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(s), "l"(g), "r"(ss), "l"(pol));
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(g), "r"(ss));
  asm volatile("cp.async.commit_group;\n" ::);
  asm volatile("cp.async.wait_group 0;\n" ::);
  __syncthreads();
  if (i < n) dst[i] = buf[threadIdx.x];
}
int main() {
  int n = 1000; int4 *a, *b;
  cudaMalloc(&a, n * 16); cudaMalloc(&b, n * 16);
  cudaMemset(a, 1, n * 16); cudaMemset(b, 0, n * 16);
  k<<<(n + 255) / 256, 256>>>(a, b, n, true);
  cudaError_t e = cudaDeviceSynchronize();
  int4 h; cudaMemcpy(&h, b + 999, 16, cudaMemcpyDeviceToHost);
  printf("err=%s val=%x\n", cudaGetErrorString(e), h.x);
}
