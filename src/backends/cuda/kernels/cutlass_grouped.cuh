// cuda/kernels/cutlass_grouped.cuh — the large-M engine: a CUTLASS 3.x sm90 grouped GEMM (pointer
// array, TMA loads and stores, warp-specialized cooperative wgmma, persistent group scheduler).
// Included by one .cu file per element type and schedule (cutlass_grouped_{bf16,f16}.cu: token rows;
// cutlass_grouped_swap_{bf16,f16}.cu: swap-AB; cutlass_grouped_act_{bf16,f16}.cu, through
// cutlass_grouped_act.cuh: token rows with the gated activation in the epilogue), each of which
// instantiates exactly one kernel type: the CI compiles this on two cores.
//
// NOTES:
//   Problem shapes live on the device. The host passes the group count (an upper bound: the local
//   expert count) and no host-side shapes, so CUTLASS launches one persistent CTA per SM and its
//   scheduler warp walks the device-side shape array; groups with M = 0 own no tiles and are skipped.
//   A small kernel (fill_group_args) writes that array and the per-group A/B/D pointers and strides
//   from the device-side segment offsets, so a forward never waits for the host and stays capturable
//   in a CUDA graph.
//   TMA needs every operand to be a strided box: A is the expert-sorted copy of the tokens (the gather
//   pass), B the expert's [n, k] weight block (K contiguous, CUTLASS "column-major B"), D row-major.
//   Global strides must be multiples of 16 bytes: k and n multiples of 8 for 2-byte elements, which
//   the backend's capabilities (hidden_multiple = intermediate_multiple = 8) already demand.
//   Tile choice: 128 x 256 x 64, two consumer warpgroups (64 x 256 each), cluster 1x1, the fastest of
//   six schedules timed by bench/cuda/tune on the benchmark shapes at M = 1024 and 8192 (the others,
//   5-45% slower: cooperative 128x256 cluster 2x1 — it rounds each expert's M tiles up to a pair —,
//   pingpong 64x256 with and without a 1x2 cluster, pingpong 128x128, cooperative 256x128). The
//   scheduler rasters along M, so the CTAs running at the same time read the same weight tile (one
//   DRAM read, the rest L2 hits). Known cost: an expert with just over 256 rows pays a third,
//   nearly empty M tile (bench/results/2026-11-30_6ed8a25_h200/NOTES.md).
//
// NOTES, swap-AB schedule (CooperativeSwapAB128x64, "cutlass-sm90-swapab", chosen from 12 to 48 tokens per
//   expert: cuda_backend.cpp):
//   It computes D_g^T[n, M_g] = B_g[n, k] · A_g[M_g, k]^T: the weight rows take CUTLASS's M, the tokens
//   its N, because the 128-row M tile is what few-token experts waste (32 rows use 1/4 of it).
//   The weight side keeps the 128 tile: n (a multiple of 8) runs to thousands of rows, so only each
//   expert's last M tile can be partial (n = 2880: 22.5 tiles); TMA clips its loads and stores at n.
//   Token tile 64, not 96 or 128: at 16-64 tokens per expert (the measured 82% case, mixtral M=128)
//   the padded MMA work is 1-4x the useful work instead of 2-8x (128-row tiles) or 1.5-6x (96).
//   Wider token tiles do not rescue ~256 tokens per expert either: 80, 96, 128 and 144 all measured
//   slower than the 128x256 token-row schedule there (deepseek-v3 M=8192: 13.2-18.5 vs 11.05 ms,
//   bench/results/2026-11-30_2ce71f6_h200/tune_bac4eac/tune.log).
//   Its cost is smem bandwidth (estimate, not measured): each consumer warpgroup's m64n64k16 wgmma
//   reads 2 KB of A and 2 KB of B, ~32 clk at 128 B/clk, for ~32 clk of math, so the tile cannot
//   beat the tensor-core peak with margin to spare; fine where it is meant to run (weight-bandwidth
//   bound, far under peak), and why it is not expected to beat 128x256 at hundreds of tokens per expert.
//   K tile 64: 128-byte rows (the 128-byte swizzle) and 24 KB a stage (16 KB weights + 8 KB tokens),
//   so the automatic carve-out gives 8 stages, 128 KB of weights in flight (128x256: 4 x 48 KB) —
//   enough to keep streaming weights through each tile's epilogue, which the cooperative schedule
//   does not overlap with the warpgroups' own mainloop (the producer warp runs ahead meanwhile).
//   Cooperative, cluster 1x1: the two consumer warpgroups split the 128 weight rows (64 each) and
//   share the token tile; a 2x1 cluster would multicast only the small token tile, and a 1x2 one
//   rounds each expert's token tiles up to a pair (the padding this schedule exists to remove).
//   Raster along N (tokens): the CTAs running at the same time take the N tiles of one weight tile
//   (one DRAM read, the rest L2 hits); with <= 64 tokens there is one N tile and consecutive CTAs
//   stream consecutive weight tiles.
//   D is the same row-major [rows, n] buffer, which the transposed problem sees as column-major with
//   leading dimension n: the epilogue stores through transposing stmatrix and a TMA box whose global
//   dims are (n, M_g), so a group writes exactly rows [seg[g], seg[g+1]) x [0, n) and an empty group
//   (no N tile) writes nothing.
//   A and B stay K-major (TN): token rows and weight rows are both K-contiguous, so swapping changes
//   only D's layout and which pointer is which; the mainloop and its TMA boxes are the same kind.
//   One kernel type per dtype beside the token-row one (its own .cu files), so the CI's two cores
//   still compile one CUTLASS kernel per translation unit.
//
// NOTES, fused activation (CutlassTile::kTokens128x256Act, cutlass_grouped_act.cuh):
//   With a gated activation the backend's 128x256 gate_up GEMM can run as this schedule's mainloop
//   with our own register-direct epilogue, which applies act(gate + bias, up + bias) and writes only
//   the intermediate [rows, I], so gate_up's [rows, 2I] store and the activation pass (read 2I, write
//   I per row) are not needed. It relies on the cuda backend's kBlocks8 weight order (gate_up_layout.hpp), which
//   puts each gate column and its up column in one thread's accumulators. The swap-AB schedule still
//   stores gate_up and runs the pass (its pairing would run along the accumulator rows instead).
//   Measured slower than the unfused form on every row that takes it (7-38% on the H200: the numbers
//   are at fused_act_enabled in cuda_backend.cpp), so it runs only with MOERUN_CUDA_FUSED_ACT=1. The
//   suspected cost is the register-direct epilogue itself: both consumer warpgroups compute and store
//   4-byte pairs while no MMA runs on the SM, where the TMA-store epilogue hands a tile to the copy
//   engine in a few hundred cycles. Next: stage the 128 x 128 output tile in shared memory and store it
//   with bulk copies, then measure again.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "common.cuh"
#include "launch.hpp"

namespace moerun::cuda_kernels::sm90 {

// The token-row schedule (CutlassTile::kTokens128x256; changing it is a one-line edit here).
struct CooperativeTile128x256 {
  using TileShape = cute::Shape<cute::_128, cute::_256, cute::_64>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};

// The swap-AB schedule (CutlassTile::kSwapAB): CUTLASS M = weight rows, N = tokens (NOTES above).
struct CooperativeSwapAB128x64 {
  static constexpr bool kSwapAB = true;
  using TileShape = cute::Shape<cute::_128, cute::_64, cute::_64>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};

// A schedule without a kSwapAB member is a token-row one (the tuning harness's structs).
template <typename Schedule>
constexpr bool schedule_swaps_ab() {
  if constexpr (requires { Schedule::kSwapAB; }) return Schedule::kSwapAB;
  else return false;
}

// T: cutlass::bfloat16_t or cutlass::half_t. D = A · B^T per group, fp32 accumulation, no C operand.
// Token-row schedules: A = tokens [M_g, k], B = weights [n, k], D row-major [M_g, n].
// Swap-AB schedules: A = weights [n, k], B = tokens [M_g, k], D column-major [n, M_g] (ld n), i.e. the
// same bytes as the row-major [M_g, n] output. Either way both operands are K-major.
template <typename T, typename Schedule = CooperativeTile128x256>
struct GroupedGemm {
  static constexpr bool kSwapAB = schedule_swaps_ab<Schedule>();
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;  // (M, N, K) per group
  using Shape = typename ProblemShape::UnderlyingProblemShape;
  using LayoutA = cutlass::layout::RowMajor;     // [M, K], K contiguous
  using LayoutB = cutlass::layout::ColumnMajor;  // [N, K], K contiguous
  using LayoutD = cute::conditional_t<kSwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kAlign = 128 / cutlass::sizeof_bits<T>::value;  // 16-byte TMA boxes
  static_assert(kAlign == 8, "the backend guarantees 16-byte rows only for 2-byte elements (k, n % 8 == 0)");

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Schedule::TileShape,
      typename Schedule::ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      void, LayoutD*, kAlign,  // no source operand C
      T, LayoutD*, kAlign, typename Schedule::EpilogueSchedule,
      cutlass::epilogue::fusion::LinearCombination<T, float, void, float>>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, LayoutA*, kAlign, T, LayoutB*, kAlign, float,
      typename Schedule::TileShape, typename Schedule::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Schedule::KernelSchedule>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  static_assert(cute::is_same_v<StrideA, cute::Stride<int64_t, cute::Int<1>, cute::Int<0>>>,
                "fill_group_args writes only the leading dimension: A must be K-major with no batch mode");
  static_assert(cute::is_same_v<StrideB, StrideA>, "B ([N, K], K contiguous) shares A's stride form");
  // The mode of D's one dynamic stride (its leading dimension, n): 0 for row-major, 1 for column-major.
  static constexpr int kLdModeD = kSwapAB ? 1 : 0;
  static_assert(kSwapAB ? cute::is_same_v<StrideD, cute::Stride<cute::Int<1>, int64_t, cute::Int<0>>>
                        : cute::is_same_v<StrideD, StrideA>,
                "D: row-major [M, n] (token rows) or column-major [n, M] (swap-AB), leading dimension n");
};

// The per-call device arrays, carved from the front of the caller's workspace (16-byte aligned).
template <typename G, typename T>
struct GroupArrays {
  typename G::Shape* shapes = nullptr;
  const T** a = nullptr;
  const T** b = nullptr;
  T** d = nullptr;
  typename G::StrideA* sa = nullptr;
  typename G::StrideB* sb = nullptr;
  typename G::StrideD* sd = nullptr;
  void* cutlass_ws = nullptr;

  static constexpr size_t kTensorMapAlign = 128;
  static size_t align16(size_t x) { return (x + 15) & ~size_t(15); }
  static size_t bytes(int groups) {
    const size_t g = static_cast<size_t>(groups);
    return align16(g * sizeof(typename G::Shape)) + 3 * align16(g * sizeof(void*)) +
           align16(g * sizeof(typename G::StrideA)) + align16(g * sizeof(typename G::StrideB)) +
           align16(g * sizeof(typename G::StrideD)) + kTensorMapAlign;
  }
  GroupArrays() = default;
  GroupArrays(void* ws, int groups) {
    char* p = static_cast<char*>(ws);
    const size_t g = static_cast<size_t>(groups);
    shapes = reinterpret_cast<typename G::Shape*>(p);
    p += align16(g * sizeof(typename G::Shape));
    a = reinterpret_cast<const T**>(p);
    p += align16(g * sizeof(void*));
    b = reinterpret_cast<const T**>(p);
    p += align16(g * sizeof(void*));
    d = reinterpret_cast<T**>(p);
    p += align16(g * sizeof(void*));
    sa = reinterpret_cast<typename G::StrideA*>(p);
    p += align16(g * sizeof(typename G::StrideA));
    sb = reinterpret_cast<typename G::StrideB*>(p);
    p += align16(g * sizeof(typename G::StrideB));
    sd = reinterpret_cast<typename G::StrideD*>(p);
    p += align16(g * sizeof(typename G::StrideD));
    const uintptr_t u = reinterpret_cast<uintptr_t>(p);
    cutlass_ws = p + ((kTensorMapAlign - u % kTensorMapAlign) % kTensorMapAlign);  // tensor maps: 128 B aligned (64 B needed)
  }
};

// One thread per group: its (M, N, K), pointers and leading dimensions. Group g covers rows
// [seg[g], seg[g+1]) of the tokens and of D, or rows [0, rows) when seg is null (one group).
// `tokens` is [rows, k], `weights` group g's [n, k] at weights + g * w_group_stride, `d` [rows, ld_d]
// (ld_d = n; n/2 for the fused-activation kernel, whose output is the intermediate);
// a swap-AB kernel gets the weights as A and the tokens as B, and the shape (n, M_g, k).
template <typename G, typename T>
__global__ void fill_group_args(int groups, const int32_t* __restrict__ seg, int64_t rows, const T* tokens,
                                const T* weights, int64_t w_group_stride, T* d, int64_t ld_d, int n, int k,
                                GroupArrays<G, T> out) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  const int64_t start = seg ? seg[g] : 0;
  const int count = seg ? seg[g + 1] - seg[g] : static_cast<int>(rows);
  const T* x = tokens + start * k;
  const T* w = weights + g * w_group_stride;
  if constexpr (G::kSwapAB) {
    out.shapes[g] = typename G::Shape{n, count, k};
    out.a[g] = w;
    out.b[g] = x;
  } else {
    out.shapes[g] = typename G::Shape{count, n, k};
    out.a[g] = x;
    out.b[g] = w;
  }
  out.d[g] = d + start * ld_d;  // row `start` of D: element (row, col) at col + row * ld_d in both layouts
  typename G::StrideA sa{};
  cute::get<0>(sa) = k;
  out.sa[g] = sa;
  typename G::StrideB sb{};
  cute::get<0>(sb) = k;
  out.sb[g] = sb;
  typename G::StrideD sd{};
  cute::get<G::kLdModeD>(sd) = ld_d;
  out.sd[g] = sd;
}

inline cudaError_t status_to_cuda(cutlass::Status s) {
  switch (s) {
    case cutlass::Status::kSuccess: return cudaSuccess;
    case cutlass::Status::kErrorMisalignedOperand:
    case cutlass::Status::kErrorInvalidProblem:
    case cutlass::Status::kErrorNotSupported:
    case cutlass::Status::kErrorWorkspaceNull: return cudaErrorInvalidValue;
    default: {
      const cudaError_t e = cudaGetLastError();
      return e != cudaSuccess ? e : cudaErrorLaunchFailure;
    }
  }
}

template <typename T, typename Schedule = CooperativeTile128x256>
typename GroupedGemm<T, Schedule>::Gemm::Arguments make_arguments(
    const GroupArrays<GroupedGemm<T, Schedule>, T>& arr, int groups, int sm_count, int device) {
  using G = GroupedGemm<T, Schedule>;
  typename G::Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = {groups, arr.shapes, nullptr};  // shapes on the device only
  args.mainloop.ptr_A = arr.a;
  args.mainloop.dA = arr.sa;
  args.mainloop.ptr_B = arr.b;
  args.mainloop.dB = arr.sb;
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = nullptr;
  args.epilogue.ptr_D = arr.d;
  args.epilogue.dD = arr.sd;
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sm_count;
  // Raster along the token tiles, so the CTAs running at the same time share one weight tile: the
  // weights are B (the N tile) of a token-row kernel and A (the M tile) of a swap-AB one.
  using Raster = decltype(args.scheduler.raster_order);
  args.scheduler.raster_order = G::kSwapAB ? Raster::AlongN : Raster::AlongM;
  return args;
}

// Bytes of workspace one launcher needs for `groups` groups on `sm_count` SMs (pointer arrays plus
// CUTLASS's per-SM tensor maps).
template <typename T, typename Schedule = CooperativeTile128x256>
size_t workspace_bytes_t(int groups, int sm_count) {
  using G = GroupedGemm<T, Schedule>;
  const GroupArrays<G, T> arr;  // the sizes depend on counts only
  const auto args = make_arguments<T, Schedule>(arr, groups, sm_count, 0);
  return GroupArrays<G, T>::bytes(groups) + G::Gemm::get_workspace_size(args);
}

template <typename T, typename Schedule = CooperativeTile128x256>
cudaError_t launch_t(const CutlassGroupedParams& p, cudaStream_t stream) {
  using G = GroupedGemm<T, Schedule>;
  if (p.groups <= 0 || p.n <= 0 || p.k <= 0) return cudaSuccess;
  if (p.n % G::kAlign != 0 || p.k % G::kAlign != 0 || p.b_group_stride % G::kAlign != 0) return cudaErrorInvalidValue;
  // TMA needs 16-byte aligned global bases (a misaligned one is a sticky fault, not an error code).
  if ((reinterpret_cast<uintptr_t>(p.a) | reinterpret_cast<uintptr_t>(p.b) | reinterpret_cast<uintptr_t>(p.d)) % 16 != 0)
    return cudaErrorInvalidValue;
  if (p.sm_count <= 0 || !p.workspace || p.workspace_bytes < workspace_bytes_t<T, Schedule>(p.groups, p.sm_count))
    return cudaErrorInvalidValue;
  if (!p.seg_offsets && p.groups != 1) return cudaErrorInvalidValue;
  if (const cudaError_t e = ensure_max_dynamic_smem<G>(cutlass::device_kernel<typename G::Kernel>,
                                                       static_cast<int>(G::Kernel::SharedStorageSize));
      e != cudaSuccess)
    return e;
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  GroupArrays<G, T> arr(p.workspace, p.groups);
  const T* tokens = static_cast<const T*>(p.a);
  const T* weights = static_cast<const T*>(p.b);
  T* d = static_cast<T*>(p.d);
  constexpr int kFillThreads = 128;
  fill_group_args<G, T><<<(p.groups + kFillThreads - 1) / kFillThreads, kFillThreads, 0, stream>>>(
      p.groups, p.seg_offsets, p.rows, tokens, weights, p.b_group_stride, d, p.n, p.n, p.k, arr);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;

  const auto args = make_arguments<T, Schedule>(arr, p.groups, p.sm_count, device);
  cutlass::Status st = G::Gemm::can_implement(args);
  if (st != cutlass::Status::kSuccess) return status_to_cuda(st);
  st = G::Kernel::initialize_workspace(args, arr.cutlass_ws, stream);
  if (st != cutlass::Status::kSuccess) return status_to_cuda(st);
  auto params = G::Kernel::to_underlying_arguments(args, arr.cutlass_ws);
  return status_to_cuda(G::Gemm::run(params, stream));
}

}  // namespace moerun::cuda_kernels::sm90
