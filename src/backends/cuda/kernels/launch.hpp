// cuda/kernels/launch.hpp — host launchers of the cuda backend's kernels: raw pointers, shapes and a
// stream, nothing else (no moerun framework types below this folder).
//
// Every launcher enqueues work on `stream` and returns; none synchronises with the host or allocates,
// so a sequence of them can be captured in a CUDA graph. Launch errors come back as cudaError_t.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gate_up_layout.hpp"

namespace moerun::cuda_kernels {

// Element type of GEMM operands (activations and weights share it).
enum class Elem : int { kBF16 = 0, kF16 = 1, kF32 = 2 };

// Activation codes (same order as moerun::ActivationKind).
enum class Act : int { kSiluAndMul = 0, kGeluAndMul, kGeluTanhAndMul, kSwigluOai, kRelu2, kSilu };

// ---- routing ----------------------------------------------------------------------------------------

struct RoutingParams {
  int num_experts = 0, top_k = 0;
  int scoring = 0;               // 0 softmax, 1 sigmoid
  bool softmax_after_topk = false;
  const float* correction_bias = nullptr;  // [E] or null
  int n_group = 1, topk_group = 1;
  bool renormalize = true;
  float scale = 1.0f;
};

// The most experts and top_k the routing kernel handles (one warp per token, lists in shared memory).
inline constexpr int kMaxRoutingExperts = 1024;
inline constexpr int kMaxRoutingTopK = 32;

// logits [m, E] f32 -> ids [m, k] i32, weights [m, k] f32 (routing::topk_host semantics).
cudaError_t launch_routing(const RoutingParams& p, const float* logits, int64_t m, int32_t* ids,
                           float* weights, cudaStream_t stream);

// logits[m, E] = hidden[m, H] (elem) @ router_weight[E, H]^T (f32) (+ bias[E]).
cudaError_t launch_router_linear(Elem elem, const void* hidden, int64_t m, int h,
                                 const float* router_weight, const float* router_bias, int e,
                                 float* logits, cudaStream_t stream);

// ---- alignment: (token, slot) pairs grouped by expert, plus the GEMM tile table -------------------

struct AlignOutput {
  int32_t* seg_offsets = nullptr;   // [E + 1]: rows of expert e are [seg_offsets[e], seg_offsets[e+1])
  int32_t* token_of_row = nullptr;  // [m*k]: the token row r reads
  int32_t* slot_of_row = nullptr;   // [m*k]: token*k + slot, where row r's result goes
  int32_t* row_of_slot = nullptr;   // [m*k] or null: the inverse map, row_of_slot[slot_of_row[r]] = r
  float* weight_of_row = nullptr;   // [m*k]: its router weight
  int32_t* tile_expert = nullptr;   // [max_tiles(m*k, E, block_m)]
  int32_t* tile_row0 = nullptr;     // [max_tiles]: first row of the tile inside its expert's segment
  int32_t* num_tiles = nullptr;     // [1]
  // Scratch of the multi-block path: align_workspace_bytes(rows, E) bytes, zero when first used. Every
  // call leaves the expert totals and the finished-block counter zero again; the per-block run bases
  // keep stale values, which every count pass rewrites before the fill reads them. Null is fine when
  // that size is 0.
  int32_t* workspace = nullptr;
};

// Calls with up to this many (token, slot) rows align in one block; larger ones in blocks of
// kAlignRowsPerBlock rows, one a thread. (2048 rows a block left qwen3-30b-a3b at M = 1024 with 4
// blocks: ncu timed the two kernels at 6.1 and 9.1 us, s24 call 3.)
inline constexpr int64_t kAlignSingleBlockRows = 2048;
inline constexpr int64_t kAlignRowsPerBlock = 256;
inline int64_t align_blocks(int64_t rows) {
  return rows <= kAlignSingleBlockRows ? 1 : (rows + kAlignRowsPerBlock - 1) / kAlignRowsPerBlock;
}
inline size_t align_workspace_bytes(int64_t rows, int experts) {
  const int64_t b = align_blocks(rows);
  return b <= 1 ? 0 : static_cast<size_t>(experts + 1 + b * experts) * sizeof(int32_t);
}

// Upper bound of the tile count for `rows` rows over E experts in tiles of block_m rows.
inline int64_t max_tiles(int64_t rows, int64_t experts, int block_m) {
  return (rows + block_m - 1) / block_m + (experts < rows ? experts : rows);
}

// The expert-sorted tokens, made with the alignment: dst[r, :] = src[token_of_row[r], :] for every row
// r, h elements of elem (2-byte elements only; h a multiple of 8). Above kAlignSingleBlockRows the
// fill grid copies them, one block a row, loading the token before its place is known: one pass fewer
// than the gather after the fill, which the small calls still run (launch_gather_sorted).
struct AlignGather {
  const void* src = nullptr;  // [m, h]
  void* dst = nullptr;        // [m*k, h]
  int h = 0;
  Elem elem = Elem::kBF16;
};

// ids [m*k] must be in [0, E) (E <= kMaxRoutingExperts). One block up to kAlignSingleBlockRows rows,
// then two grids that need out.workspace; with a gather (non-null) the sorted tokens too.
cudaError_t launch_align(const int32_t* ids, const float* weights, int64_t m, int top_k, int experts,
                         int block_m, const AlignOutput& out, cudaStream_t stream,
                         const AlignGather* gather = nullptr);

// ---- grouped GEMM (gate_up with gathered A and fused activation; down with weighted scatter) --------

struct GroupedGemmParams {
  // A: rows of [*, k] with leading dimension lda. Segment row r (global, over all experts) reads
  // A row a_row_index[r], or row r when a_row_index is null.
  const void* a = nullptr;
  int64_t lda = 0;
  const int32_t* a_row_index = nullptr;
  // B: per expert [n, k] row-major (K contiguous), expert e at b + e * b_expert_stride elements.
  const void* b = nullptr;
  int64_t b_expert_stride = 0;
  int n = 0, k = 0;
  // Segments and tiles: from launch_align. When seg_offsets is null there is one expert (0) whose
  // segment is rows [0, rows) and tiles are consecutive.
  const int32_t* seg_offsets = nullptr;
  const int32_t* tile_expert = nullptr;
  const int32_t* tile_row0 = nullptr;
  const int32_t* num_tiles = nullptr;
  int rows = 0;
  int64_t grid_tiles = 0;  // blocks launched along M (>= the device tile count)
  // Direct mode, for one token (no alignment kernel): tile t is (token, slot) pair t, a one-row
  // segment at row t of expert direct_ids[t], reading A row t / direct_top_k. rows = grid_tiles =
  // m * top_k; seg_offsets, the tile table and a_row_index are not read. Pairs sharing an expert read
  // its weights once each, which is why the runner uses it only where they cannot (m = 1, distinct ids).
  const int32_t* direct_ids = nullptr;
  int direct_top_k = 1;
  // Epilogue.
  bool down = false;            // false: gate_up -> inter; true: down -> rows_out
  Act act = Act::kSiluAndMul;
  float alpha = 1.702f, limit = 7.0f;
  // Order of B's gate and up rows (gated gate_up only). kHalves and kPairs tiles pair them as the
  // canonical layouts do; kBlocks8 (the cuda backend's own upload) and kPairs give each tile BN
  // consecutive rows.
  GateUpLayout layout = GateUpLayout::kHalves;
  const float* bias = nullptr;  // per expert [n] at bias + e * n, in B's row order
  void* inter = nullptr;        // gate_up: [rows, n/2 or n] elem
  int64_t ld_inter = 0;
  float* rows_out = nullptr;    // down: rows_out[slot_of_row[r] * n + col] = w[r] * (acc + bias)
  const int32_t* slot_of_row = nullptr;
  const float* weight_of_row = nullptr;  // null: weight 1
  // The kernel is launched as a programmatic dependent of the previous one. With this set it reads
  // seg_offsets, num_tiles, the tile table and a_row_index, and starts fetching B, before waiting for
  // that kernel. Right only when those were complete before the previous kernel could trigger this
  // one: the down GEMM after a gate_up GEMM of this file (every gate_up block waits for the alignment
  // before it triggers or exits, so the down GEMM cannot start before the alignment has finished),
  // or a single-segment GEMM (no table). Otherwise it waits first.
  bool weights_before_wait = false;
  // Direct mode only: an L2 prefetch of the next GEMM's weights (the down GEMM after a one-token
  // gate_up), so that the down GEMM starts on L2 hits instead of ramping up from DRAM after gate_up's
  // tail. Block (pair t, N tile j of gridDim.y) asks the L2 for l2_slice(l2_next_bytes, gridDim.y, j)
  // of its expert's next weights, at l2_next + expert * l2_next_stride bytes, once its main loop has
  // reached k-tile l2_next_at (at or past the k-tile count: after the main loop). The prefetch is
  // cp.async.bulk.prefetch.L2: a hint that moves nothing into the SM, so results cannot change.
  // l2_next 16-byte aligned; l2_next_stride and l2_next_bytes multiples of 16 (the runner takes the
  // whole down weights of an expert: l2_next_fits).
  const void* l2_next = nullptr;
  int64_t l2_next_stride = 0;
  int64_t l2_next_bytes = 0;
  int l2_next_at = 0;
};

// K per main-loop step of the grouped GEMM's tiles (TileShape::BK in grouped_gemm.cuh).
inline constexpr int kGemmBK = 64;

// Part j of `tiles` equal parts of [0, bytes) (bytes a multiple of 16), each a multiple of 16 bytes:
// together they cover it once; the last ones may be short or empty (length 0).
struct ByteSlice {
  int64_t offset = 0, length = 0;
};
__host__ __device__ constexpr ByteSlice l2_slice(int64_t bytes, int tiles, int j) {
  const int64_t slice = (bytes + 16 * static_cast<int64_t>(tiles) - 1) / (16 * static_cast<int64_t>(tiles)) * 16;
  const int64_t offset = slice * j;
  const int64_t length = offset < bytes ? (bytes - offset < slice ? bytes - offset : slice) : 0;
  return {offset < bytes ? offset : bytes, length};
}

// Whether the runner prefetches the down weights at one token: the top_k experts' whole down weights
// (expert_bytes each, a multiple of 16) fit in half the L2. Larger sets, partly prefetched, measured
// slower (cuda_backend.cpp, down_prefetch_at).
constexpr bool l2_next_fits(int64_t expert_bytes, int top_k, int64_t l2_bytes) {
  return expert_bytes > 0 && expert_bytes % 16 == 0 && expert_bytes * top_k <= l2_bytes / 2;
}

// Tile configurations (the kernel variants shown by Capabilities::variants).
enum class GemmConfig : int {
  kStreamM16 = 0,  // 16 x 64 tiles, 6 stages: decode, streams each expert's weights once
  kTileM64 = 1,    // 64 x 128 tiles, 4 stages
  kTileM128 = 2,   // 128 x 128 tiles, 3 stages
  kStreamM32 = 3,  // 32 x 64 tiles, 5 stages: a few tokens per expert, still one pass over weights
  kStreamM16N32 = 4,  // 16 x 32 tiles, 2 warps, 8 stages: decode with few experts' weights to stream
                      // (twice the blocks of kStreamM16, so the SMs share the bytes more evenly)
};
inline constexpr int kNumGemmConfigs = 5;
int gemm_block_m(GemmConfig c);
const char* gemm_config_name(GemmConfig c);

cudaError_t launch_grouped_gemm_bf16(GemmConfig c, const GroupedGemmParams& p, cudaStream_t stream);
cudaError_t launch_grouped_gemm_f16(GemmConfig c, const GroupedGemmParams& p, cudaStream_t stream);
inline cudaError_t launch_grouped_gemm(Elem elem, GemmConfig c, const GroupedGemmParams& p,
                                       cudaStream_t stream) {
  if (elem == Elem::kBF16) return launch_grouped_gemm_bf16(c, p, stream);
  if (elem == Elem::kF16) return launch_grouped_gemm_f16(c, p, stream);
  return cudaErrorInvalidValue;  // (no f32 tiles: the f16 ones would read f32 data as halves)
}

// ---- the large-M engine: CUTLASS sm90 grouped GEMM over expert-sorted rows -------------------------
//
// D_g[M_g, n] = A_g[M_g, k] · B_g[n, k]^T for every group g (bf16 or fp16 operands and result, fp32
// accumulation), on the sm_90a tensor cores through TMA (kernels/cutlass_grouped.cuh). The group
// sizes are read on the device from seg_offsets, so no launch waits for the host and a sequence of
// launches can be captured in a CUDA graph. k and n must be multiples of 8 (16-byte rows for TMA).

// The CUTLASS schedule: kTokens128x256 and kSwapAB compute the same D from the same arguments and
// differ in speed only; kTokens128x256Act writes the gated activation of that D instead.
enum class CutlassTile : int {
  kTokens128x256 = 0,  // 128 token rows x 256 weight rows x 64: the default, many tokens per expert
  kSwapAB = 1,         // D^T = B · A^T, 128 weight rows x 64 tokens x 64: little padding at 16-64
                       // tokens per expert, where 128-row token tiles do 2-8x the useful MMA work
  kTokens128x256Act = 2,  // kTokens128x256's mainloop with the gated activation in the epilogue: B is
                          // a gated w13 in GateUpLayout::kBlocks8, D the intermediate [rows, n/2]
                          // (no [rows, n] gate_up round trip, no activation pass)
};

struct CutlassGroupedParams {
  int groups = 0;                        // group count: an upper bound (empty groups have M = 0)
  const int32_t* seg_offsets = nullptr;  // [groups + 1], device: group g = rows [seg[g], seg[g+1])
  int64_t rows = 0;                      // with seg_offsets null: one group (groups == 1) of `rows` rows;
                                         // the own wgmma engine also needs it with seg_offsets (rows of a, d)
  const void* a = nullptr;               // [rows, k] row-major, rows of group g contiguous
  const void* b = nullptr;               // group g's [n, k] (K contiguous) at b + g * b_group_stride
  int64_t b_group_stride = 0;            // elements
  void* d = nullptr;                     // [rows, n] row-major ([rows, n/2] for kTokens128x256Act)
  int n = 0, k = 0;
  void* workspace = nullptr;             // device, cutlass_grouped_workspace_bytes(elem, groups, sm_count)
  size_t workspace_bytes = 0;
  int sm_count = 0;                      // the device's multiprocessor count (one persistent CTA each)
  CutlassTile tile = CutlassTile::kTokens128x256;
  // kTokens128x256Act only: d[r, j] = act(D[r, gate j] + bias_g[gate j], D[r, up j] + bias_g[up j])
  // for j < n/2, with D's columns (B's rows) in kBlocks8 order; d is [rows, n/2] (n % 16 == 0).
  Act act = Act::kSiluAndMul;             // a gated activation
  float alpha = 1.702f, limit = 7.0f;     // kSwigluOai
  const float* bias = nullptr;            // group g's [n] at bias + g * n (kBlocks8 order), or null
  GateUpLayout layout = GateUpLayout::kBlocks8;  // the only layout the fused epilogue pairs
  // The own wgmma engine only (CUTLASS refuses it): row r of A is row a_row_index[r] of a ([*, k]),
  // the tokens gathered in the operand load (cp.async) instead of by a pass. Indices are not
  // range-checked.
  const int32_t* a_row_index = nullptr;  // [rows], device
  // The own wgmma engine only (CUTLASS refuses k_splits != 1): each output tile's K in k_splits runs,
  // computed as separate tiles and summed in fp32 in split order through split_workspace (at least
  // wgmma_split_workspace_bytes, or wgmma_tail_split_workspace_bytes with split_tail; 256-byte
  // aligned, zero before the first launch; every launch that completes leaves it so). wgmma_k_splits is the runner's rule.
  int k_splits = 1;
  void* split_workspace = nullptr;
  size_t split_workspace_bytes = 0;
  // With k_splits > 1: split only the output tiles of the last partial wave, each into
  // wgmma_tail_splits runs (k_splits the most); every other tile runs whole.
  bool split_tail = false;
};

size_t cutlass_grouped_workspace_bytes_bf16(int groups, int sm_count);
size_t cutlass_grouped_workspace_bytes_f16(int groups, int sm_count);
size_t cutlass_grouped_swap_workspace_bytes_bf16(int groups, int sm_count);
size_t cutlass_grouped_swap_workspace_bytes_f16(int groups, int sm_count);
size_t cutlass_grouped_act_workspace_bytes_bf16(int groups, int sm_count);
size_t cutlass_grouped_act_workspace_bytes_f16(int groups, int sm_count);
cudaError_t launch_cutlass_grouped_bf16(const CutlassGroupedParams& p, cudaStream_t stream);
cudaError_t launch_cutlass_grouped_f16(const CutlassGroupedParams& p, cudaStream_t stream);
cudaError_t launch_cutlass_grouped_swap_bf16(const CutlassGroupedParams& p, cudaStream_t stream);
cudaError_t launch_cutlass_grouped_swap_f16(const CutlassGroupedParams& p, cudaStream_t stream);
cudaError_t launch_cutlass_grouped_act_bf16(const CutlassGroupedParams& p, cudaStream_t stream);
cudaError_t launch_cutlass_grouped_act_f16(const CutlassGroupedParams& p, cudaStream_t stream);

// Workspace bytes for `groups` groups (never 0 for groups > 0), enough for every CutlassTile, so one
// workspace serves all schedules. Elem::kF32 has no CUTLASS path: 0.
inline size_t cutlass_grouped_workspace_bytes(Elem elem, int groups, int sm_count) {
  size_t a = 0, b = 0, c = 0;
  switch (elem) {
    case Elem::kBF16:
      a = cutlass_grouped_workspace_bytes_bf16(groups, sm_count);
      b = cutlass_grouped_swap_workspace_bytes_bf16(groups, sm_count);
      c = cutlass_grouped_act_workspace_bytes_bf16(groups, sm_count);
      break;
    case Elem::kF16:
      a = cutlass_grouped_workspace_bytes_f16(groups, sm_count);
      b = cutlass_grouped_swap_workspace_bytes_f16(groups, sm_count);
      c = cutlass_grouped_act_workspace_bytes_f16(groups, sm_count);
      break;
    case Elem::kF32: break;
  }
  const size_t ab = a > b ? a : b;
  return ab > c ? ab : c;
}
// Enqueues the pointer-array fill and the grouped GEMM of p.tile. Returns cudaErrorInvalidValue for a
// bad argument (k or n not a multiple of 8, workspace too small, no seg_offsets with groups > 1, f32,
// an unknown tile; for the act tile also n not a multiple of 16, a non-gated activation or a layout
// other than kBlocks8).
inline cudaError_t launch_cutlass_grouped(Elem elem, const CutlassGroupedParams& p, cudaStream_t stream) {
  const bool bf16 = elem == Elem::kBF16;
  if ((!bf16 && elem != Elem::kF16) || p.a_row_index || p.k_splits != 1) return cudaErrorInvalidValue;
  switch (p.tile) {
    case CutlassTile::kTokens128x256:
      return bf16 ? launch_cutlass_grouped_bf16(p, stream) : launch_cutlass_grouped_f16(p, stream);
    case CutlassTile::kSwapAB:
      return bf16 ? launch_cutlass_grouped_swap_bf16(p, stream) : launch_cutlass_grouped_swap_f16(p, stream);
    case CutlassTile::kTokens128x256Act:
      return bf16 ? launch_cutlass_grouped_act_bf16(p, stream) : launch_cutlass_grouped_act_f16(p, stream);
  }
  return cudaErrorInvalidValue;
}

// ---- the own sm90 grouped GEMM (kernels/wgmma_grouped.cuh) ------------------------------------------
//
// The same D (or, with p.tile == kTokens128x256Act, the same activation) as the CUTLASS 128x256
// schedule from the same parameters, with 64-row last tiles and a dynamic tile scheduler: one launch,
// capturable in a CUDA graph, with no workspace but with split K (k_splits > 1: split_workspace). p.rows must be the row count of p.a and p.d,
// also with seg_offsets; p.a, p.b and p.d 16-byte aligned; at most 1024 groups. counters: two device
// ints that are zero before the first launch; every launch that completes leaves them zero again, so
// one pair serves all launches on one stream in sequence (not two launches in flight at once). Null
// counters stride the tiles statically (the tuning harness only). `tiles` says how an expert's last
// rows and the last columns are tiled (WgmmaTiles; every choice gives the same D). cudaErrorInvalidValue
// for a bad argument (kSwapAB, k or n not a multiple of 8, misaligned pointers, a swap_rows other than
// 0/16/32/48; for the act tile also n % 16, a non-gated activation, a layout other than kBlocks8);
// cudaErrorNotSupported when the driver has no tensor-map encoder.
inline constexpr int kWgmmaMaxGroups = 1024;  // groups per launch (the runner falls back to CUTLASS above)

// How the wgmma engine tiles what is left over. An expert's rows run as 128-row tiles; the rows left
// after the last whole one (rem = count % 128) run as
//   rem <= swap_rows             swap-AB tiles: the weights on wgmma's 64-row side, the rem tokens on
//                                its N side (16, 32 or 48), two tiles per 256 columns (one for each 128)
//   rem <= 64                    one 64-row tile (both warpgroups on the same rows, each on half of the
//                                256 weight rows)
//   rem <= 64 + swap_rows        a 64-row tile and swap-AB tiles of the rem - 64 rows after it
//   otherwise                    one 128-row tile
// (half = 0: every remainder as one 128-row tile, the tuning harness only). With narrow_n the last
// 256-column block's MMA is only as wide as its columns, rounded up to 64, and its weight box 64 or
// 128 rows where that fits (gpt-oss-120b's down GEMM: n = 2880 leaves 64 columns in its twelfth block).
// Measured on the H200 (bench/results/2026-12-03_s22_h200/NOTES.md, alternated graph replay): the
// swap-AB tails LOSE, 48 rows up to 13% (gpt-oss-120b M = 8192 4.19 against 3.72 ms without), 16 rows
// tie: a tail tile's time is bound by streaming its expert's 256-row weight panel into the SM (32 KiB
// a k step, as much as a 64-row tile's MMA takes), not by its MMA, so fewer rows buy nothing and two
// half-width tiles cost more. So swap_rows defaults to 0 (MOERUN_CUDA_SWAP_TAILS turns them on);
// narrow_n is on.
//
// pair: the CTAs run in clusters of two, and the two of a cluster take an expert's consecutive M tiles
// (2i, 2i + 1) of one 256-column block; each copies half of the block's weight tile and multicasts it
// to both, so each SM reads 32 KiB from L2 per k step instead of 48 (ncu found the L2 the limit at
// M = 8192: 91-97% of its throughput, bench/results/2026-12-03_s22_h200/NOTES.md). An expert's odd
// last M tile runs on both CTAs, each on 128 of the block's columns. Not with swap-AB tails, split K
// or the gathered A (the launcher refuses them; the runner turns pair off for them).
// Measured on the H200 (bench/results/2026-12-03_s23_h200/NOTES.md, alternated graph replay): it is
// correct (bit for bit the unpaired output) but SLOWER on every sweep row, 2-4% where nearly every
// tile pairs (mixtral-8x7b M = 8192 9.50 against 9.27 ms) and up to 20% where most items are solo
// (deepseek-v3 M = 1024, 32 rows an expert: 6.44 against 5.38). ncu (deepseek-v3 M = 8192 gate_up):
// the L2 reads fell 22% and the L2 throughput from 98% to 90%, but every SM still takes in as many
// bytes, and the two CTAs' stage rings in lockstep (each stage waits for the slower CTA's release)
// took the tensor pipe from 84% to 75%. So pair defaults to 0 (MOERUN_CUDA_PAIR=1 turns it on).
//
// n128: 128-column blocks instead of 256 (each tile's MMA m64n128 a consumer, its weight box 128 rows):
// twice the tiles, for launches whose 256-column tiles fill too few waves of the SMs (the down GEMM
// of mixtral-8x7b at 1024 tokens: about 320 tiles on 132 SMs, 2.4 waves), at the price of 1.5x the
// L2 bytes per FLOP. Not with swap-AB tails, the paired mode or split K (the launcher refuses them).
// wgmma_n128_wanted is the rule the runner applies under MOERUN_CUDA_N128=auto.
// Measured on the H200 (bench/results/2026-12-03_s24_h200/NOTES.md, alternated graph replay): correct
// (bit for bit the 256-column output) but it does NOT pay. On every launch (=1) it is 7-27% slower on
// every sweep row (mixtral-8x7b M = 1024 1.69 against 1.50 ms, qwen3-30b-a3b M = 1024 0.443 against
// 0.397); where the rule applies it (=auto: mixtral at M = 128 and 1024) it ties (1.493 against
// 1.491 ms, 0.708 against 0.699): the fuller last wave is paid for by the 1.5x L2 bytes. So the
// runner's default is 0 (MOERUN_CUDA_N128 unset).
struct WgmmaTiles {
  int half = 1;
  int swap_rows = 0;  // (off: measured slower, above)
  int narrow_n = 1;
  int pair = 0;
  int n128 = 0;
};
inline constexpr bool wgmma_tiles_valid(WgmmaTiles t) {
  return (t.half == 0 || t.half == 1) && (t.narrow_n == 0 || t.narrow_n == 1) &&
         (t.swap_rows == 0 || t.swap_rows == 16 || t.swap_rows == 32 || t.swap_rows == 48) &&
         (t.half == 1 || t.swap_rows == 0) && (t.pair == 0 || (t.pair == 1 && t.swap_rows == 0)) &&
         (t.n128 == 0 || (t.n128 == 1 && t.swap_rows == 0 && t.pair == 0));
}
// The columns of one N block of the engine under t.
MOERUN_HD constexpr int wgmma_block_n(WgmmaTiles t) { return t.n128 ? 128 : 256; }
enum class WgmmaTileKind : int { kRows128 = 0, kRows64 = 1, kSwapAB = 2 };
struct WgmmaMTile {
  int row0 = 0, rows = 0;  // within the expert
  WgmmaTileKind kind = WgmmaTileKind::kRows128;
  int n_half = 0;  // kSwapAB: which 128 of the 256 columns
};
// The M tiles of an expert of `count` rows under `t` (per 256 columns), and the mt-th of them.
MOERUN_HD constexpr int wgmma_m_tiles(int count, WgmmaTiles t) {
  const int full = count / 128, rem = count % 128;
  if (rem == 0) return full;
  if (!t.half || rem > 64 + t.swap_rows) return full + 1;
  return full + (rem <= t.swap_rows ? 2 : rem <= 64 ? 1 : 3);
}
MOERUN_HD constexpr WgmmaMTile wgmma_m_tile(int count, int mt, WgmmaTiles t) {
  const int full = count / 128, rem = count % 128;
  WgmmaMTile r;
  r.row0 = full * 128;
  r.rows = rem;
  if (mt < full) {
    r.row0 = mt * 128;
    r.rows = 128;
  } else if (!t.half || rem > 64 + t.swap_rows) {
    // one 128-row tile
  } else if (rem <= t.swap_rows) {
    r.kind = WgmmaTileKind::kSwapAB;
    r.n_half = mt - full;
  } else if (mt == full) {
    r.kind = WgmmaTileKind::kRows64;
    r.rows = rem < 64 ? rem : 64;
  } else {  // the swap-AB tiles after a 64-row one
    r.kind = WgmmaTileKind::kSwapAB;
    r.row0 += 64;
    r.rows = rem - 64;
    r.n_half = mt - full - 1;
  }
  return r;
}

// The segment that holds number t: the g in [0, groups) with prefix[g] <= t < prefix[g + 1], where
// prefix[g] counts the tiles, items or rows of the experts before g (ascending, prefix[0] = 0,
// t < prefix[groups]). An empty expert repeats its neighbour's prefix; the search takes the last
// expert starting at or before t, so it never lands on one. Every such lookup on the device goes
// through here: the wgmma kernel's tile, pair item and tail-wave decodes (int) and the sorted rows'
// expert in the elementwise passes (int64_t rows).
template <typename Index>
MOERUN_HD constexpr int segment_of(Index t, const int* prefix, int groups) {
  int lo = 0, hi = groups;
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (prefix[mid] <= t) lo = mid;
    else hi = mid;
  }
  return lo;
}

// Split K. A launch with few output tiles for the SMs may leave many of them idle in its last wave: the
// down GEMM of mixtral-8x7b at 1024 tokens has about 320 tiles of 14336 k for 132 SMs. Splitting each
// tile's K into runs fills the waves, at the price of one fp32 partial per output tile through L2 and
// a wait of split s for split s - 1 (wgmma_grouped.cuh, KernelArgs::k_splits). On the H200 it did not
// pay where this rule splits (mixtral at 1024 tokens 0.99x, at 128 0.96x), so the runner splits only
// when MOERUN_CUDA_KSPLIT asks (=auto: this rule).
inline constexpr int kWgmmaMaxKSplits = 4;
// Output tiles at most (an expert's count c takes at most ceil(c / 128) + 2 M tiles per 256 columns,
// wgmma_m_tiles).
constexpr int64_t wgmma_output_tiles_bound(int64_t rows, int groups, int n) {
  return ((rows + 127) / 128 + 3 * int64_t(groups)) * ((n + 255) / 256);
}
// The split workspace is one block per output tile (unit): its two consumers' flags (in 256 bytes),
// then their fp32 partials (2 x 128 threads x 128 floats). The layout depends on the unit alone, so
// launches of other shapes on the same workspace (gate_up and down: other n) never write a partial
// where another launch's flag sits: every flag stays zero between launches.
inline constexpr size_t kWgmmaSplitUnitBytes = 256 + size_t(2) * 128 * 128 * 4;
constexpr size_t wgmma_split_workspace_bytes(int64_t rows, int groups, int n, int k_splits) {
  return k_splits <= 1 ? 0 : static_cast<size_t>(wgmma_output_tiles_bound(rows, groups, n)) * kWgmmaSplitUnitBytes;
}
// The n128 rule: 128-column blocks where the 256-column tiles (as wgmma_k_splits counts them) would
// fill fewer than kWaves waves of the SMs and 128-column ones reach at least one more whole wave.
constexpr bool wgmma_n128_wanted(int64_t rows, int groups, int n, int sm_count) {
  constexpr int64_t kWaves = 4;
  const int64_t m_tiles = (rows + 127) / 128 + groups, t256 = m_tiles * ((n + 255) / 256),
                t128 = m_tiles * ((n + 127) / 128);
  return sm_count > 0 && t256 < kWaves * sm_count && t128 / sm_count > t256 / sm_count;
}
// The tail split (CutlassGroupedParams::split_tail). `tiles` output tiles on `grid` CTAs leave
// s = tiles % grid of them for a last, partial wave, during which grid - s SMs idle for a whole tile.
// Splitting each of those s tiles into n = grid / s runs (at most k_max, each a non-empty run of
// ceil(k tiles / n) tiles of 64) fills that wave and shortens it to 1 / n of a tile; the tiles before
// stay whole, so their partials cost nothing. 1 (no split) with at most one wave or no partial one.
// Only launches of at most kWgmmaTailMaxWaves waves split: with more, the tiles' differing lengths
// have spread their ends over the last wave, and the split measured 0.5-2.5% slower (deepseek-v3,
// gpt-oss-120b and qwen3-30b-a3b at M = 1024 and 8192), where it gains 3% on mixtral-8x7b's down GEMM
// at M = 1024 (about 320 tiles, 2.4 waves; s24 NOTES, call 4).
// A host and device function: the kernel takes it from the tile count it finds on the device.
inline constexpr int kWgmmaTailMaxWaves = 4;
MOERUN_HD constexpr int wgmma_tail_splits(int tiles, int grid, int k_max, int k) {
  if (grid <= 0 || tiles <= grid || tiles % grid == 0 || tiles > kWgmmaTailMaxWaves * grid) return 1;
  int n = grid / (tiles % grid);
  if (n > k_max) n = k_max;
  const int k_tiles = (k + 63) / 64;
  while (n > 1 && (n - 1) * ((k_tiles + n - 1) / n) >= k_tiles) --n;
  return n < 2 ? 1 : n;
}
// Where the tail split starts. The last partial wave starts at tile `wave_start`; tiles are numbered
// expert by expert, column block by column block, M tile fastest, so a (expert, column block) group is
// `m_tiles` adjacent numbers from `group_start`. Every tile of a group must be split alike, so that a
// row gets the same sums in whichever of its expert's M tiles the alignment placed it (the order of
// rows inside an expert comes from atomics and changes from call to call: with the split starting
// inside a group, a row could be summed in runs on one call and whole on the next, an ulp apart). So
// a wave starting inside a group splits from the group's first tile where the workspace holds one
// unit for each split tile (out_tiles - group_start <= grid: the wave stays short), else from the next
// group's (the straddling group runs whole).
MOERUN_HD constexpr int wgmma_tail_split_start(int wave_start, int group_start, int m_tiles, int out_tiles, int grid) {
  const int local = wave_start - group_start;
  if (m_tiles <= 0 || local % m_tiles == 0) return wave_start;
  const int first = group_start + (local / m_tiles) * m_tiles;
  return out_tiles - first <= grid ? first : first + m_tiles;
}
// The tail split's workspace: fewer than `grid` output tiles split, one block each.
constexpr size_t wgmma_tail_split_workspace_bytes(int grid) {
  return static_cast<size_t>(grid > 0 ? grid : 0) * kWgmmaSplitUnitBytes;
}
// Whether a launch may take the tail split: at least the tiles of ceil(rows / 128) full 128-row
// tiles in ceil(n / 256) blocks exceed one wave and stay within kWgmmaTailMaxWaves (the kernel decides
// from the exact count; this spares the others the workspace).
constexpr bool wgmma_tail_split_may_apply(int64_t rows, int groups, int n, int sm_count) {
  const int64_t low = (rows + 127) / 128 * ((n + 255) / 256);
  return sm_count > 0 && wgmma_output_tiles_bound(rows, groups, n) > sm_count && low <= kWgmmaTailMaxWaves * sm_count;
}
// Whether k splits into k_splits non-empty runs of ceil(k tiles / k_splits) tiles of 64.
constexpr bool wgmma_k_splits_fit(int k, int k_splits) {
  const int64_t k_tiles = (static_cast<int64_t>(k) + 63) / 64, run = (k_tiles + k_splits - 1) / k_splits;
  return k_splits >= 1 && (k_splits - 1) * run < k_tiles;
}
// The rule: no split while the output tiles (about) fill at least kFill waves of the SMs; else
// the fewest splits that do, at most kWgmmaMaxKSplits, each at least kMinTiles k tiles of 64 long.
constexpr int wgmma_k_splits(int64_t rows, int groups, int n, int k, int sm_count) {
  constexpr int64_t kFill = 4, kMinTiles = 16;
  // (the tiles as ceil(count / 128) per expert, about what the tail tiles make of them)
  const int64_t tiles = ((rows + 127) / 128 + groups) * ((n + 255) / 256), want = kFill * sm_count;
  if (tiles <= 0 || sm_count <= 0 || tiles >= want) return 1;
  int s = static_cast<int>((want + tiles - 1) / tiles);
  if (s > kWgmmaMaxKSplits) s = kWgmmaMaxKSplits;
  const int64_t k_tiles = (k + 63) / 64;
  while (s > 1 && k_tiles / s < kMinTiles) --s;
  return s;
}
cudaError_t launch_wgmma_grouped_bf16(const CutlassGroupedParams& p, int* counters, WgmmaTiles tiles,
                                      cudaStream_t stream);
cudaError_t launch_wgmma_grouped_f16(const CutlassGroupedParams& p, int* counters, WgmmaTiles tiles,
                                     cudaStream_t stream);
// The paired mode's clusters of two CTAs that fit on the current device at once (its grid is twice
// that, at most sm_count CTAs; every instantiation has the same threads and shared memory).
cudaError_t wgmma_pair_clusters(int* clusters);
inline cudaError_t launch_wgmma_grouped(Elem elem, const CutlassGroupedParams& p, int* counters,
                                        cudaStream_t stream, WgmmaTiles tiles = {}) {
  if (elem == Elem::kBF16) return launch_wgmma_grouped_bf16(p, counters, tiles, stream);
  if (elem == Elem::kF16) return launch_wgmma_grouped_f16(p, counters, tiles, stream);
  return cudaErrorInvalidValue;
}

// Passes around the CUTLASS GEMMs (16-byte vectors; h, n multiples of 8; 2-byte elements only).
// gather: dst[r, :] = src[token_of_row[r], :], r < *total_rows (the combine's row_of_slot comes from
// the alignment).
cudaError_t launch_gather_sorted(Elem elem, const void* src, int h, const int32_t* token_of_row,
                                 const int32_t* total_rows, int64_t rows_bound, void* dst, cudaStream_t stream);
// act: inter[r, :] = act(gate_up[r, :] + bias[e(r)]) for r < *total_rows (total_rows null: rows_bound),
// where e(r) is the segment of r in seg_offsets[0..experts] (seg_offsets null: expert 0). gate_up is
// [rows, n], its gate and up columns (and the bias) in `layout`; non-gated activations read n columns.
cudaError_t launch_activation_sorted(Elem elem, const void* gate_up, int n, const int32_t* seg_offsets,
                                     int experts, const float* bias, Act act, float alpha, float limit,
                                     GateUpLayout layout, const int32_t* total_rows, int64_t rows_bound,
                                     void* inter, cudaStream_t stream);
// combine: out[t, :] = sum_s w[r] * (y[r, :] + bias[e(r), :]) (+ g_t * shared[t, :]) with
// r = row_of_slot[t*k + s], w = weight_of_row, e(r) from seg_offsets; g_t = 1 or
// sigmoid(hidden[t] . shared_gate). y, shared, hidden and out in `elem`; accumulation in fp32.
cudaError_t launch_combine_sorted(Elem elem, const void* y, int h, int64_t m, int top_k,
                                  const int32_t* row_of_slot, const float* weight_of_row,
                                  const int32_t* seg_offsets, int experts, const float* bias,
                                  const void* shared, const float* shared_gate, const void* hidden,
                                  void* out, cudaStream_t stream);

// ---- combine ----------------------------------------------------------------------------------------

// out[t, :] = sum_s rows[t*k + s, :] (+ gate_t * shared[t, :]) in `out_elem`. gate_t = 1, or
// sigmoid(hidden[t] . shared_gate) when shared_gate is given (hidden in `hidden_elem`).
cudaError_t launch_combine(const float* rows, int64_t m, int top_k, int h, const float* shared,
                           const float* shared_gate, const void* hidden, Elem hidden_elem,
                           void* out, Elem out_elem, cudaStream_t stream);

// Elementwise helpers used by the cublas backend.
// gather: dst[r, :] = src[token_of_row[r], :] for r < rows_bound (rows beyond seg_offsets[E] skipped).
cudaError_t launch_gather_rows(Elem elem, const void* src, int h, const int32_t* token_of_row,
                               const int32_t* total_rows, int64_t rows_bound, void* dst,
                               cudaStream_t stream);
// act: inter[r, j] = act(gate_up[r, :] + bias of the row's expert), for r < *total_rows.
cudaError_t launch_activation(Elem elem, const void* gate_up, int64_t n, const int32_t* expert_of_row,
                              const float* bias, Act act, float alpha, float limit, bool interleaved,
                              const int32_t* total_rows, int64_t rows_bound, void* inter,
                              cudaStream_t stream);
// scatter: rows_out[slot_of_row[r], :] = w[r] * (y[r, :] + bias[expert_of_row[r], :]).
cudaError_t launch_weighted_scatter(Elem elem, const void* y, int h, const int32_t* slot_of_row,
                                    const float* weight_of_row, const int32_t* expert_of_row,
                                    const float* bias, const int32_t* total_rows,
                                    int64_t rows_bound, float* rows_out, cudaStream_t stream);
// expert_of_row[r] from seg_offsets (for the elementwise helpers).
cudaError_t launch_expert_of_row(const int32_t* seg_offsets, int experts, int64_t rows_bound,
                                 int32_t* expert_of_row, cudaStream_t stream);

}  // namespace moerun::cuda_kernels
