// cuda/kernels/wgmma_grouped_bf16.cu — the bf16 instantiation of the own sm90 grouped GEMM.
#include "wgmma_grouped.cuh"

namespace moerun::cuda_kernels {

cudaError_t launch_wgmma_grouped_bf16(const CutlassGroupedParams& p, int* counters, WgmmaTiles tiles,
                                      cudaStream_t stream) {
  return wgmma::launch_t<__nv_bfloat16>(p, counters, tiles, stream);
}

}  // namespace moerun::cuda_kernels
