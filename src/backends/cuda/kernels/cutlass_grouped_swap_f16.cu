// cuda/kernels/cutlass_grouped_swap_f16.cu — the fp16 instantiation of the CUTLASS sm90 grouped GEMM's
// swap-AB schedule (one kernel type: cooperative 128 weight rows x 64 tokens x 64, cluster 1x1).
#include "cutlass_grouped.cuh"

namespace moerun::cuda_kernels {

size_t cutlass_grouped_swap_workspace_bytes_f16(int groups, int sm_count) {
  return sm90::workspace_bytes_t<cutlass::half_t, sm90::CooperativeSwapAB128x64>(groups, sm_count);
}

cudaError_t launch_cutlass_grouped_swap_f16(const CutlassGroupedParams& p, cudaStream_t stream) {
  return sm90::launch_t<cutlass::half_t, sm90::CooperativeSwapAB128x64>(p, stream);
}

}  // namespace moerun::cuda_kernels
