// bench/cuda/tune/tune_kernel.cu — one CUTLASS sm90 grouped-GEMM schedule for cutlass_tune, chosen by
// -DTUNE_CONFIG=<n> (compiled once per schedule by build.sh; not part of the CMake build, so the CI
// never compiles these extra kernels).
#include "backends/cuda/kernels/cutlass_grouped.cuh"

namespace sm90 = moerun::cuda_kernels::sm90;
using namespace cute;

#if TUNE_CONFIG == 0
using Sched = sm90::CooperativeTile128x256;
#elif TUNE_CONFIG == 1
struct Sched {  // cooperative 128x256, cluster 2x1: the two M tiles of an expert share B by multicast
  using TileShape = Shape<_128, _256, _64>;
  using ClusterShape = Shape<_2, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
#elif TUNE_CONFIG == 2
struct Sched {  // pingpong 64x256: one warpgroup's epilogue overlaps the other's mainloop
  using TileShape = Shape<_64, _256, _64>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};
#elif TUNE_CONFIG == 3
struct Sched {  // pingpong 128x128
  using TileShape = Shape<_128, _128, _64>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};
#elif TUNE_CONFIG == 4
struct Sched {  // cooperative 256x128
  using TileShape = Shape<_256, _128, _64>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
#elif TUNE_CONFIG == 5
struct Sched {  // pingpong 64x256, cluster 1x2: the A tile multicast to two N tiles
  using TileShape = Shape<_64, _256, _64>;
  using ClusterShape = Shape<_1, _2, _1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};
#elif TUNE_CONFIG == 6
using Sched = sm90::CooperativeSwapAB128x64;  // swap-AB: 128 weight rows x 64 tokens (the compiled one)
#elif TUNE_CONFIG == 7
struct Sched {  // swap-AB with 96-token tiles: a third fewer weight-tile reads at ~256 tokens per expert
  static constexpr bool kSwapAB = true;
  using TileShape = Shape<_128, _96, _64>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
#elif TUNE_CONFIG >= 8 && TUNE_CONFIG <= 10
// Swap-AB with a token tile sized to the tokens per expert, so fewer padded rows: uniform routing
// puts T ~ tpe +- sqrt(tpe) rows on an expert, and a 128-row tile pays a nearly empty third tile for
// half the experts at tpe = 256 (deepseek-v3 / gpt-oss M = 8192, mixtral M = 1024). 144 covers
// 256 + 2 sigma in two tiles; 128 pads like the token-row 128x256 schedule (what swapping alone
// costs or gains); 80 covers 64 + 2 sigma (qwen3 M = 1024) in one. (136 = 8 x 17 does not build: the
// smem layout needs the token tile in 16-row steps.)
template <int kTokens>
struct SwapAB {
  static constexpr bool kSwapAB = true;
  using TileShape = Shape<_128, Int<kTokens>, _64>;
  using ClusterShape = Shape<_1, _1, _1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
#if TUNE_CONFIG == 8
using Sched = SwapAB<144>;
#elif TUNE_CONFIG == 9
using Sched = SwapAB<128>;
#else
using Sched = SwapAB<80>;
#endif
#else
#error "TUNE_CONFIG must be 0..10"
#endif

#define TUNE_CAT2(a, b) a##b
#define TUNE_CAT(a, b) TUNE_CAT2(a, b)

size_t TUNE_CAT(tune_ws_, TUNE_CONFIG)(int groups, int sms) {
  return sm90::workspace_bytes_t<cutlass::bfloat16_t, Sched>(groups, sms);
}
cudaError_t TUNE_CAT(tune_launch_, TUNE_CONFIG)(const moerun::cuda_kernels::CutlassGroupedParams& p, cudaStream_t s) {
  return sm90::launch_t<cutlass::bfloat16_t, Sched>(p, s);
}
