// cuda/kernels/wgmma_grouped_f16.cu — the fp16 instantiation of the own sm90 grouped GEMM.
#include "wgmma_grouped.cuh"

namespace moerun::cuda_kernels {

cudaError_t launch_wgmma_grouped_f16(const CutlassGroupedParams& p, int* counters, WgmmaTiles tiles,
                                      cudaStream_t stream) {
  return wgmma::launch_t<__half>(p, counters, tiles, stream);
}

}  // namespace moerun::cuda_kernels
