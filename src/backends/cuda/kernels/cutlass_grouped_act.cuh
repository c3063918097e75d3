// cuda/kernels/cutlass_grouped_act.cuh — the gate_up GEMM of the large-M engine with the gated
// activation in its epilogue (CutlassTile::kTokens128x256Act). Included by cutlass_grouped_act_bf16.cu
// and cutlass_grouped_act_f16.cu, one kernel type each.
//
// NOTES:
//   Same mainloop as the token-row schedule (CooperativeTile128x256: 128 x 256 x 64, two consumer
//   warpgroups of 64 x 256, cluster 1x1, raster along M, device-side group shapes from
//   fill_group_args). The epilogue is our own collective (ActEpilogue below), in the interface of
//   CUTLASS's DefaultEpilogueArray and wrapped like the PtrArrayNoSmemWarpSpecialized one: the
//   consumer warpgroups write straight from registers, no shared memory, no TMA store.
//   Why the weights are in GateUpLayout::kBlocks8: each consumer thread's wgmma accumulator holds
//   columns 8g + 2q + {0, 1} (q = lane % 4) of every 8-column group g of its rows (CUTLASS's
//   CLayout_64xN), so gate column c (c % 16 < 8) and its up column c + 8 are both in that thread's
//   fragment. Which fragment element is the partner is read off the static coordinate layout of the
//   thread's partition at compile time (ActPairing), and checked there: every gate element must have
//   its up element and its column + 1 neighbour, so each thread stores 2 adjacent outputs (4 bytes)
//   per (gate, up) pair of 8-column groups. The thread's own column offset (2q, the dynamic part) is
//   assumed to keep c and c + 1 in one 8-column group; the GPU tests compare the output with the
//   unfused path and the reference (tests/gpu/cuda_backend_test.cpp, CudaFusedAct.*).
//   Output column of tile column c (tile n0 = 256 * tile_n): (n0 + c) / 16 * 8 + c % 8, so a tile
//   writes intermediate columns [128 * tile_n, 128 * tile_n + 128): half of the unfused D tile's bytes,
//   and the [rows, 2I] gate_up buffer and the activation pass (read 2I, write I per row) are gone.
//   Masks: rows past the group's M (the last partial M tile) and columns past n (the last N tile
//   when 2I is not a multiple of 256; 2I is a multiple of 16, so a 16-column block is in or out whole).
//   Stores are 4 bytes: a quad of threads writes 16 contiguous bytes of a row, which L2 merges with
//   the other half of the sector written by the same warp's next store; a 16-byte form would need a
//   4x4 transpose across the quad (shuffles) and is left for when it measures worth it.
#pragma once

#include "common.cuh"
#include "cutlass_grouped.cuh"

namespace moerun::cuda_kernels::sm90 {

// For a static (value index) -> (row, col) coordinate layout of one thread's accumulator partition:
// per element, the element at (row, col + 8) (its up partner, for a gate element) and at
// (row, col + 1), and whether it starts a stored pair (gate column, even within its 8-group).
template <class CoordLayout>
struct ActPairing {
  static constexpr int kSize = decltype(cute::size(CoordLayout{}))::value;
  struct Table {
    int row[kSize];
    int col[kSize];
    int up[kSize];    // element at (row, col + 8), or -1
    int next[kSize];  // element at (row, col + 1), or -1
    bool lead[kSize];  // a gate column with col % 8 == 0: stores (col, col + 1)
    int leads;
    bool complete;  // every gate element is a lead or a lead's next, and all have their up partner
  };
  static constexpr Table make() {
    Table t{};
    for (int i = 0; i < kSize; ++i) {
      const auto c = CoordLayout{}(i);
      t.row[i] = static_cast<int>(cute::get<0>(c));
      t.col[i] = static_cast<int>(cute::get<1>(c));
    }
    t.complete = true;
    t.leads = 0;
    for (int i = 0; i < kSize; ++i) {
      t.up[i] = t.next[i] = -1;
      for (int p = 0; p < kSize; ++p) {
        if (t.row[p] != t.row[i]) continue;
        if (t.col[p] == t.col[i] + 8) t.up[i] = p;
        if (t.col[p] == t.col[i] + 1) t.next[i] = p;
      }
    }
    for (int i = 0; i < kSize; ++i) {
      const bool gate = t.col[i] % 16 < 8;
      t.lead[i] = gate && t.col[i] % 8 == 0;
      if (!gate) continue;
      if (t.col[i] % 8 > 1 || t.up[i] < 0) t.complete = false;  // c, c + 1 only; the partner is here
      if (t.lead[i]) {
        ++t.leads;
        if (t.next[i] < 0 || t.up[t.next[i]] < 0) t.complete = false;
      }
    }
    if (t.leads * 4 != kSize) t.complete = false;  // each lead covers 2 gate + 2 up elements
    return t;
  }
  static constexpr Table kTable = make();
  static_assert(kTable.complete,
                "the accumulator layout does not hold gate column c, c + 1 and up columns c + 8, c + 9 "
                "of a row in one thread: the kBlocks8 pairing does not apply to this TiledMma");
};

// The act epilogue's per-call arguments (also its device params: nothing to precompute).
template <typename T, typename InternalStrideD>
struct ActEpilogueArguments {
  T** ptr_D = nullptr;                     // per group: row 0 of its [M_g, n/2] output
  InternalStrideD const* dD = nullptr;     // per group: (ld, 1, 0)
  const float* bias = nullptr;             // group g's [n] at bias + g * bias_group_stride, or null
  int64_t bias_group_stride = 0;
  Act act = Act::kSiluAndMul;
  float alpha = 1.702f, limit = 7.0f;
};

// A collective epilogue for the sm90 pointer-array kernels (the interface of CUTLASS's
// DefaultEpilogueArray): out[m, j] = act(acc[m, gate j] + bias, acc[m, up j] + bias) with the
// columns of acc in kBlocks8 order. Wrapped in Sm90TmaWarpSpecializedAdapter (below) to be the
// warp-specialized kernel's CollectiveEpilogue.
template <typename T>
class ActEpilogue {
 public:
  using EpilogueSchedule = cutlass::epilogue::PtrArrayNoSmemWarpSpecialized;
  using DispatchPolicy = EpilogueSchedule;
  // No source operand; the 2.x-style names the kernel and the device adapter read.
  using ThreadEpilogueOp = cutlass::epilogue::thread::LinearCombination<T, 1, float, float>;
  using ElementOutput = T;
  using ElementAccumulator = float;
  using ElementCompute = float;
  using ElementC = void;
  using ElementD = T;
  using StrideC = cutlass::detail::TagToStrideC_t<cutlass::layout::RowMajor*>;
  using StrideD = StrideC;
  using InternalStrideC = cute::remove_pointer_t<StrideC>;
  using InternalStrideD = cute::remove_pointer_t<StrideD>;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  static_assert(cute::is_same_v<InternalStrideD, cute::Stride<int64_t, cute::Int<1>, cute::Int<0>>>,
                "D: row-major, the leading dimension its one dynamic stride");

  struct SharedStorage {};
  using TensorMapStorage = SharedStorage;

  using Arguments = ActEpilogueArguments<T, InternalStrideD>;
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&, int) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& args) {
    return args.ptr_D != nullptr && args.dD != nullptr && act_gated(args.act);
  }

  CUTLASS_HOST_DEVICE explicit ActEpilogue(Params const& params) : params_(params) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl, cute::Tensor<FrgEngine, FrgLayout> const& acc,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    using namespace cute;
    static_assert(is_static<BlockShapeMNK>::value && rank(BlockShapeMNK{}) == 3, "static (M, N, K) tile");
    static_assert(is_static<FrgLayout>::value, "static accumulator layout");
    const int M = static_cast<int>(get<0>(problem_shape_mnkl));
    const int N = static_cast<int>(get<1>(problem_shape_mnkl));
    const int m_coord = static_cast<int>(get<0>(blk_coord_mnkl));
    const int n_coord = static_cast<int>(get<1>(blk_coord_mnkl));
    const int l_coord = static_cast<int>(get<3>(blk_coord_mnkl));  // the group (pointer arrays)
    constexpr int kBlkM = size<0>(BlockShapeMNK{}), kBlkN = size<1>(BlockShapeMNK{});
    static_assert(kBlkN % 16 == 0, "an N tile holds whole (gate 8, up 8) column blocks");

    // Tile-local (row, col) of each accumulator element: the same partition as the fragment, so
    // element i of both is one (row, col) (DefaultEpilogueArray relies on this too).
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor tile_crd = make_identity_tensor(make_shape(Int<kBlkM>{}, Int<kBlkN>{}));
    Tensor tCc = thr_mma.partition_C(tile_crd);
    CUTE_STATIC_ASSERT_V(size(tCc) == size(acc), "one coordinate per accumulator");
    using Pairing = ActPairing<cute::remove_cvref_t<decltype(tCc.layout())>>;
    static_assert(Pairing::kSize == decltype(size(acc))::value, "coordinate and fragment sizes agree");

    T* out = params_.ptr_D[l_coord];
    const int64_t ld = get<0>(params_.dD[l_coord]);
    const float* bias = params_.bias ? params_.bias + l_coord * params_.bias_group_stride : nullptr;
    const int m0 = m_coord * kBlkM, n0 = n_coord * kBlkN;
    const Act act = params_.act;
    const float alpha = params_.alpha, limit = params_.limit;

    for_each(make_int_sequence<Pairing::kSize>{}, [&](auto I) {
      constexpr int i = decltype(I)::value;
      if constexpr (Pairing::kTable.lead[i]) {
        constexpr int i1 = Pairing::kTable.next[i];
        constexpr int u0 = Pairing::kTable.up[i], u1 = Pairing::kTable.up[i1];
        const auto crd = tCc(i);
        const int m = m0 + static_cast<int>(get<0>(crd));
        const int col = n0 + static_cast<int>(get<1>(crd));  // a gate column, even
        if (m < M && col < N) {
          float g0 = acc(i), g1 = acc(i1), x0 = acc(u0), x1 = acc(u1);
          if (bias) {
            const float2 bg = *reinterpret_cast<const float2*>(bias + col);
            const float2 bu = *reinterpret_cast<const float2*>(bias + col + 8);
            g0 += bg.x;
            g1 += bg.y;
            x0 += bu.x;
            x1 += bu.y;
          }
          const T y0(apply_act(act, g0, x0, alpha, limit));
          const T y1(apply_act(act, g1, x1, alpha, limit));
          const uint32_t packed = static_cast<uint32_t>(y0.raw()) | (static_cast<uint32_t>(y1.raw()) << 16);
          const int oc = (col / 16) * 8 + col % 8;
          __stcg(reinterpret_cast<unsigned int*>(out + static_cast<int64_t>(m) * ld + oc), packed);  // st.global
        }
      }
    });
  }

 private:
  Params params_;
};

// The fused kernel type: the token-row mainloop with ActEpilogue (no shared memory for it, so the
// mainloop's stage count is the carve-out of an empty epilogue). It spells out the same kernel
// assembly as GroupedGemm in cutlass_grouped.cuh with its own epilogue: a shared base template put
// the kernel's name through a base class, which nvcc's host stub for the 128x256 instantiation could
// not resolve (CUDA 13.0: "GroupedKernel ... does not name a template type").
template <typename T>
struct GroupedGemmAct {
  using Schedule = CooperativeTile128x256;
  static constexpr bool kSwapAB = false;
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
  using Shape = typename ProblemShape::UnderlyingProblemShape;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  static constexpr int kAlign = 128 / cutlass::sizeof_bits<T>::value;
  static_assert(kAlign == 8, "2-byte elements only");

  using CollectiveEpilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<ActEpilogue<T>>;
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
  static_assert(cute::is_same_v<StrideB, StrideA> && cute::is_same_v<StrideD, StrideA>,
                "B ([N, K], K contiguous) and D (row-major) share A's stride form");
  static constexpr int kLdModeD = 0;
};

template <typename T>
typename GroupedGemmAct<T>::Gemm::Arguments make_act_arguments(const GroupArrays<GroupedGemmAct<T>, T>& arr,
                                                               const CutlassGroupedParams& p, int sm_count,
                                                               int device) {
  using G = GroupedGemmAct<T>;
  typename G::Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = {p.groups, arr.shapes, nullptr};  // shapes on the device only
  args.mainloop.ptr_A = arr.a;
  args.mainloop.dA = arr.sa;
  args.mainloop.ptr_B = arr.b;
  args.mainloop.dB = arr.sb;
  args.epilogue.ptr_D = arr.d;
  args.epilogue.dD = arr.sd;
  args.epilogue.bias = p.bias;
  args.epilogue.bias_group_stride = p.n;
  args.epilogue.act = p.act;
  args.epilogue.alpha = p.alpha;
  args.epilogue.limit = p.limit;
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sm_count;
  using Raster = decltype(args.scheduler.raster_order);
  args.scheduler.raster_order = Raster::AlongM;  // CTAs running together share a weight tile
  return args;
}

template <typename T>
size_t act_workspace_bytes_t(int groups, int sm_count) {
  using G = GroupedGemmAct<T>;
  const GroupArrays<G, T> arr;  // the sizes depend on counts only
  CutlassGroupedParams p;
  p.groups = groups;
  const auto args = make_act_arguments<T>(arr, p, sm_count, 0);
  return GroupArrays<G, T>::bytes(groups) + G::Gemm::get_workspace_size(args);
}

template <typename T>
cudaError_t launch_act_t(const CutlassGroupedParams& p, cudaStream_t stream) {
  using G = GroupedGemmAct<T>;
  if (p.groups <= 0 || p.n <= 0 || p.k <= 0) return cudaSuccess;
  if (p.n % 16 != 0 || p.k % G::kAlign != 0 || p.b_group_stride % G::kAlign != 0 || !act_gated(p.act) ||
      p.layout != GateUpLayout::kBlocks8)
    return cudaErrorInvalidValue;
  // TMA needs 16-byte aligned global bases for A and B (a misaligned one is a sticky fault).
  if ((reinterpret_cast<uintptr_t>(p.a) | reinterpret_cast<uintptr_t>(p.b)) % 16 != 0) return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(p.d) % 4 != 0 || (p.bias && reinterpret_cast<uintptr_t>(p.bias) % 8 != 0))
    return cudaErrorInvalidValue;  // 4-byte output pairs, 8-byte bias pairs
  if (p.sm_count <= 0 || !p.workspace || p.workspace_bytes < act_workspace_bytes_t<T>(p.groups, p.sm_count))
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
  constexpr int kFillThreads = 128;
  fill_group_args<G, T><<<(p.groups + kFillThreads - 1) / kFillThreads, kFillThreads, 0, stream>>>(
      p.groups, p.seg_offsets, p.rows, static_cast<const T*>(p.a), static_cast<const T*>(p.b), p.b_group_stride,
      static_cast<T*>(p.d), p.n / 2, p.n, p.k, arr);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;

  const auto args = make_act_arguments<T>(arr, p, p.sm_count, device);
  cutlass::Status st = G::Gemm::can_implement(args);
  if (st != cutlass::Status::kSuccess) return status_to_cuda(st);
  st = G::Kernel::initialize_workspace(args, arr.cutlass_ws, stream);
  if (st != cutlass::Status::kSuccess) return status_to_cuda(st);
  auto params = G::Kernel::to_underlying_arguments(args, arr.cutlass_ws);
  return status_to_cuda(G::Gemm::run(params, stream));
}

}  // namespace moerun::cuda_kernels::sm90
