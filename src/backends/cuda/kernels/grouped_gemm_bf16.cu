// cuda/kernels/grouped_gemm_bf16.cu — the bf16 instantiations of the grouped GEMM (5 tile shapes).
#include "grouped_gemm.cuh"

namespace moerun::cuda_kernels {

int gemm_block_m(GemmConfig c) {
  switch (c) {
    case GemmConfig::kStreamM16: return ShapeStreamM16::BM;
    case GemmConfig::kStreamM32: return ShapeStreamM32::BM;
    case GemmConfig::kTileM64: return ShapeTileM64::BM;
    case GemmConfig::kTileM128: return ShapeTileM128::BM;
    case GemmConfig::kStreamM16N32: return ShapeStreamM16N32::BM;
  }
  return 0;
}

const char* gemm_config_name(GemmConfig c) {
  switch (c) {
    case GemmConfig::kStreamM16: return "mma-stream-m16";
    case GemmConfig::kStreamM32: return "mma-stream-m32";
    case GemmConfig::kTileM64: return "mma-tile-m64";
    case GemmConfig::kTileM128: return "mma-tile-m128";
    case GemmConfig::kStreamM16N32: return "mma-stream-m16-n32";
  }
  return "unknown";
}

cudaError_t launch_grouped_gemm_bf16(GemmConfig c, const GroupedGemmParams& p, cudaStream_t stream) {
  return launch_grouped_gemm_t<__nv_bfloat16>(c, p, stream);
}

}  // namespace moerun::cuda_kernels
