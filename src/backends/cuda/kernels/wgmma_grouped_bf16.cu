// cuda/kernels/wgmma_grouped_bf16.cu — the bf16 instantiation of the own sm90 grouped GEMM.
#include "wgmma_grouped.cuh"

namespace moerun::cuda_kernels {

cudaError_t launch_wgmma_grouped_bf16(const CutlassGroupedParams& p, int* counters, WgmmaTiles tiles,
                                      cudaStream_t stream) {
  return wgmma::launch_t<__nv_bfloat16>(p, counters, tiles, stream);
}

cudaError_t wgmma_pair_clusters(int* clusters) {
  using K = wgmma::KernelTag<__nv_bfloat16, wgmma::kNoAct, true>;
  auto* kernel = wgmma::grouped_kernel<__nv_bfloat16, wgmma::kNoAct, true>;
  if (const cudaError_t e = ensure_max_dynamic_smem<K>(kernel, static_cast<int>(wgmma::kSmemBytes)); e != cudaSuccess)
    return e;
  return wgmma::pair_clusters<K>(kernel, *clusters);
}

}  // namespace moerun::cuda_kernels
