// bench/cuda/tune/wgmma_grouped.cu — cutlass_tune's entries for the own sm90 grouped GEMM
// (src/backends/cuda/kernels/wgmma_grouped.cuh): schedule 11 as the library runs it (64-row last tiles,
// dynamic tile scheduler), 12 with 128-row tiles only and static striding (the mainloop alone against
// CUTLASS's 128x256 on equal padding), 13 with 64-row last tiles and static striding, 14 with 128-row
// tiles and the dynamic scheduler. tune_main zeroes each workspace, whose first 8 bytes are the counters.
#include "backends/cuda/kernels/wgmma_grouped.cuh"

namespace {
cudaError_t launch(const moerun::cuda_kernels::CutlassGroupedParams& p, cudaStream_t s, int half, bool dynamic) {
  return moerun::cuda_kernels::wgmma::launch_t<__nv_bfloat16>(p, dynamic ? static_cast<int*>(p.workspace) : nullptr,
                                                               half, s);
}
}  // namespace

size_t tune_ws_11(int, int) { return 16; }
size_t tune_ws_12(int, int) { return 16; }
size_t tune_ws_13(int, int) { return 16; }
size_t tune_ws_14(int, int) { return 16; }
cudaError_t tune_launch_11(const moerun::cuda_kernels::CutlassGroupedParams& p, cudaStream_t s) {
  return launch(p, s, 1, true);
}
cudaError_t tune_launch_12(const moerun::cuda_kernels::CutlassGroupedParams& p, cudaStream_t s) {
  return launch(p, s, 0, false);
}
cudaError_t tune_launch_13(const moerun::cuda_kernels::CutlassGroupedParams& p, cudaStream_t s) {
  return launch(p, s, 1, false);
}
cudaError_t tune_launch_14(const moerun::cuda_kernels::CutlassGroupedParams& p, cudaStream_t s) {
  return launch(p, s, 0, true);
}
