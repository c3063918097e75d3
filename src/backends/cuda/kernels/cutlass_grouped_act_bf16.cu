// cuda/kernels/cutlass_grouped_act_bf16.cu — the bf16 instantiation of the CUTLASS sm90 grouped gate_up
// GEMM with the gated activation in its epilogue (one kernel type: cooperative 128x256x64, cluster 1x1).
#include "cutlass_grouped_act.cuh"

namespace moerun::cuda_kernels {

size_t cutlass_grouped_act_workspace_bytes_bf16(int groups, int sm_count) {
  return sm90::act_workspace_bytes_t<cutlass::bfloat16_t>(groups, sm_count);
}

cudaError_t launch_cutlass_grouped_act_bf16(const CutlassGroupedParams& p, cudaStream_t stream) {
  return sm90::launch_act_t<cutlass::bfloat16_t>(p, stream);
}

}  // namespace moerun::cuda_kernels
