// cuda/kernels/grouped_gemm_f16.cu — the fp16 instantiations of the grouped GEMM (5 tile shapes).
#include "grouped_gemm.cuh"

namespace moerun::cuda_kernels {

cudaError_t launch_grouped_gemm_f16(GemmConfig c, const GroupedGemmParams& p, cudaStream_t stream) {
  return launch_grouped_gemm_t<__half>(c, p, stream);
}

}  // namespace moerun::cuda_kernels
