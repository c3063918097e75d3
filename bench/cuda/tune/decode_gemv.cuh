// bench/cuda/tune/decode_gemv.cuh — an experiment kept for decode_probe, not part of the library: the
// one-token forward's two weight streams as matrix-vector products, gate_up (activation fused) over
// the k routed experts' w13, then down with the router-weighted combine fused, so one token runs in two
// kernels instead of three.
//
// RESULT (H200, 2026-12-02, bench/results/2026-12-02_s15_h200/NOTES.md): not faster than the runner's
// mma.sync stream tiles where it matters. qwen3-30b-a3b M = 1: 37.6-38.4 us against 34.0-34.2 us (the
// best of 10 ring / grid settings); gpt-oss-120b shape 67.9 against 67.2 us; deepseek-v3 181.9 against
// 186.9 us (3%); mixtral 218 against 198 us. Outputs within 1 bf16 ulp of the stream tiles'.
//
// NOTES:
//   One token touches every activated weight byte exactly once, so the whole game is keeping the HBM
//   busy from the first microsecond to the last. Each block streams a contiguous range of units through
//   a ring of `stages` stages of stage_kib KiB filled by bulk copies (cp.async.bulk, completion on an
//   mbarrier): whole rows (or 8 rows' chunks of k) per copy, issued by one producer warp, and the ring's
//   depth is what stays in flight. The dot products run on the tensor cores as mma.m16n8k16 with the
//   token's x in every A row (window_mma); each warp takes every 8th 32-wide window of a stage and
//   keeps the partials of the unit's rows in registers, reduced across warps once per unit.
//   Units: gate_up unit (pair, j) is w13 rows 16j..16j+15 of the pair's expert, which in kBlocks8 are
//   gate columns 8j..8j+7 and their up columns, so the activation is applied in the unit's epilogue.
//   Down unit j is output columns [j*U, j*U + U) for all k pairs: the block sums w_p * (row . inter_p)
//   over the pairs in a fixed order, adds the biases and the shared expert, and writes the output row
//   directly; there is no per-pair scratch and no combine pass, and the result does not depend on the
//   grid (every output element is summed by one block in one order).
//   Blocks take equal contiguous ranges of units; the grid is the SM count times ctas_per_sm.
//   PDL: gate_up waits for its predecessor (the routing) before reading the ids, then triggers at once
//   so that the down kernel's blocks are resident early; down fills its ring with weights before it
//   waits (the ids were complete before gate_up started), then reads the intermediate.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/grouped_gemm.cuh"  // MmaOp

namespace moerun::cuda_kernels {

// ---- one token: the two weight streams as matrix-vector products (decode_gemv.cuh) ---------------
//
// For a call with one token whose k experts are distinct. gate_up: out[p, :] = act(W13_{ids[p]} . x +
// bias) for pair p < top_k, W13 gated in GateUpLayout::kBlocks8 (rows % 16 == 0) or non-gated. down:
// out[:] = sum_p route_w[p] * (W2_{ids[p]} . x[p, :] + bias_{ids[p]}) + gate * shared[:], written in
// the element type: the combine is fused, with no per-pair scratch.
struct DecodeGemvParams {
  bool down = false;
  const void* x = nullptr;          // gate_up: the token's hidden row [k]; down: the intermediate [top_k, k]
  const int32_t* ids = nullptr;     // [top_k] expert ids (device)
  const float* route_w = nullptr;   // down: [top_k] router weights (null: 1)
  int top_k = 0;
  const void* w = nullptr;          // per expert [rows, k] row-major at w + e * w_expert_stride elements
  int64_t w_expert_stride = 0;
  int rows = 0, k = 0;              // gate_up: rows = w13 rows (2I gated); down: rows = H, k = I
  Act act = Act::kSiluAndMul;       // gate_up
  float alpha = 1.702f, limit = 7.0f;
  const float* bias = nullptr;      // per expert [rows] at bias + e * rows (w13's row order for gate_up)
  void* out = nullptr;              // gate_up: [top_k, rows/2 or rows]; down: [rows]
  const float* shared = nullptr;    // down: the shared expert's output [rows] f32, or null
  const float* shared_gate = nullptr;  // down: its gate sigmoid(hidden . shared_gate) (null: 1)
  const void* hidden = nullptr;     // down with shared_gate: the token's hidden row [rows]
  // gate_up: each block asks the L2 for its share of the top_k experts' next weights (the down
  // weights, l2_next_bytes per expert at l2_next + ids[p] * l2_next_stride) once its units are done.
  const void* l2_next = nullptr;
  int64_t l2_next_stride = 0, l2_next_bytes = 0;
  // Launch geometry: a ring of `stages` stages of stage_kib KiB per block (each holds 8 weight rows,
  // or 8 rows' chunks of k); the units (16 rows of w13, or unit_rows = 8 or 16 output rows of down over
  // all k pairs) are dealt to at most sm_count * ctas_per_sm blocks in equal runs.
  int sm_count = 0, ctas_per_sm = 1, stages = 4, stage_kib = 32, unit_rows = 8;
};

inline constexpr int kGemvConsumerThreads = 256;                 // 8 consumer warps
inline constexpr int kGemvThreads = kGemvConsumerThreads + 32;   // and one producer warp
inline constexpr int kGemvStageRows = 8;                         // weight rows per stage (an MMA's n)
inline constexpr int kGemvUnitRowsMax = 16;
inline constexpr size_t kGemvMaxSmem = 227u << 10;               // sm_90's opt-in limit per block

// How a DecodeGemvParams call is cut into stages and units (decode_gemv.cuh's NOTES).
struct GemvGeometry {
  bool ok = false;
  int chunks = 1;          // chunks per row (rows longer than a stage's share)
  int chunk_elems = 0;     // k per chunk (a multiple of 32 when chunks > 1)
  int k_pad = 0;           // x rows in shared memory, zero-padded to a multiple of 32
  int x_bytes = 0;
  int unit_rows = 16, units_per_pair = 0, units = 0, units_per_block = 0;
  int items_per_stage = 1;  // items (8 rows x one chunk) that share a stage: short rows fill it up
  int stages = 0, stage_bytes = 0, grid = 0;
  size_t smem_bytes = 0;   // the stages, x, the barriers, the unit reductions (two of each)
};
inline GemvGeometry decode_gemv_geometry(const DecodeGemvParams& p, size_t elem_bytes) {
  GemvGeometry g;
  const bool gated = !p.down && p.act != Act::kRelu2 && p.act != Act::kSilu;  // act_gated, host side
  if (p.k <= 0 || p.k % 8 != 0 || p.rows < 0 || p.top_k <= 0 || p.sm_count <= 0 || p.ctas_per_sm <= 0 ||
      p.stages < 2 || p.stage_kib < 4 || p.stage_kib > 96 || (gated && p.rows % 16 != 0) ||
      (p.down && p.unit_rows != 8 && p.unit_rows != 16) || elem_bytes != 2)
    return g;
  g.unit_rows = p.down ? p.unit_rows : 16;
  g.stage_bytes = p.stage_kib << 10;
  const int64_t e = static_cast<int64_t>(elem_bytes);
  if (kGemvStageRows * p.k * e <= g.stage_bytes) {
    g.chunk_elems = p.k;
  } else {
    const int64_t per_row = g.stage_bytes / (kGemvStageRows * e) / 32 * 32;  // k per chunk that fits
    if (per_row < 32) return g;
    const int64_t c = (p.k + per_row - 1) / per_row;
    g.chunk_elems = static_cast<int>(((p.k + c - 1) / c + 31) / 32 * 32);  // balanced chunks
  }
  g.chunks = static_cast<int>((p.k + g.chunk_elems - 1) / g.chunk_elems);
  g.items_per_stage = static_cast<int>(g.stage_bytes / (kGemvStageRows * g.chunk_elems * e));
  g.k_pad = (p.k + 31) / 32 * 32;
  g.x_bytes = static_cast<int>((p.down ? p.top_k : 1) * static_cast<int64_t>(g.k_pad) * e);
  g.units_per_pair = (p.rows + g.unit_rows - 1) / g.unit_rows;
  const int64_t units = p.down ? g.units_per_pair : static_cast<int64_t>(p.top_k) * g.units_per_pair;
  if (units > 0x7fffffff) return g;
  g.units = static_cast<int>(units);
  const int64_t cap = static_cast<int64_t>(p.sm_count) * p.ctas_per_sm;
  g.units_per_block = static_cast<int>((units + cap - 1) / cap);
  g.grid = g.units_per_block > 0 ? static_cast<int>((units + g.units_per_block - 1) / g.units_per_block) : 0;
  g.stages = p.stages;
  g.smem_bytes = static_cast<size_t>(g.stages) * g.stage_bytes + static_cast<size_t>(g.x_bytes) +
                 static_cast<size_t>(g.stages) * 16 + 2 * (8 + 1) * kGemvUnitRowsMax * 4;
  if (g.smem_bytes > kGemvMaxSmem) return g;
  g.ok = true;
  return g;
}

inline constexpr int kGemvWarps = kGemvConsumerThreads / 32;  // consumer warps; one more produces

// ---- mbarrier and bulk-copy primitives (sm_90) ----
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(a), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Arrives on bar expecting `bytes` of bulk-copy traffic in this phase (0: a plain arrival, which
// completes the phase: the stage past a matrix's last row).
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b), "r"(bytes) : "memory");
}
// Copies [src, src + bytes) to dst (16-byte aligned, bytes % 16 == 0), completing on bar.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(d),
               "l"(src), "r"(bytes), "r"(b)
               : "memory");
}
// Both, from one thread (decode_probe's read sweep).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  mbar_expect_tx(bar, bytes);
  if (bytes > 0) bulk_copy(dst, src, bytes, bar);
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(a) : "memory");
}
// The consumer warps' own barrier (named barrier 1): the producer warp never joins it.
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kGemvConsumerThreads) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  } while (!done);
}

// One warp's view of a stage: 8 weight rows x 32 k of a window are the B operand of two
// mma.m16n8k16 (n = the 8 rows), the token's x the A operand (every A row the same x, so every D row
// is the same answer; row 0 is read). The k order inside a window is permuted so that a lane reads its
// 8 weights and 8 x values as one 16-byte word each: lane (g, t) = (lane / 4, lane % 4) owns physical
// k 8t..8t+7 of the window, which the two MMAs see as logical k {2t, 2t+1, 2t+8, 2t+9} (words 0, 1 for
// the first, 2, 3 for the second). A dot product does not care about the order of k as long as x and
// w share it. D[0][2t], D[0][2t+1] (lanes 0..3, c[0], c[1]) are rows 2t and 2t+1 of the group.
template <typename T>
__device__ __forceinline__ void window_mma(float* c, const uint4& w, const uint4& x) {
  const uint32_t a0[4] = {x.x, 0u, x.y, 0u}, b0[2] = {w.x, w.y};
  const uint32_t a1[4] = {x.z, 0u, x.w, 0u}, b1[2] = {w.z, w.w};
  MmaOp<T>::run(c, a0, b0);
  MmaOp<T>::run(c, a1, b1);
}

template <typename T>
__global__ void __launch_bounds__(kGemvThreads) decode_gemv_kernel(const DecodeGemvParams p, const GemvGeometry g) {
  constexpr int kGroupsMax = kGemvUnitRowsMax / kGemvStageRows;  // 8-row groups per unit, at most
  extern __shared__ __align__(128) unsigned char smem[];
  const size_t stage_bytes = static_cast<size_t>(g.stage_bytes);
  T* xs = reinterpret_cast<T*>(smem + g.stages * stage_bytes);  // [pairs of x][k_pad]
  uint64_t* full = reinterpret_cast<uint64_t*>(reinterpret_cast<unsigned char*>(xs) + g.x_bytes);
  uint64_t* empty = full + g.stages;
  float* red = reinterpret_cast<float*>(empty + g.stages);    // [2][kGemvWarps][kGemvUnitRowsMax]
  float* tot = red + 2 * kGemvWarps * kGemvUnitRowsMax;        // [2][kGemvUnitRowsMax]
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  const int groups = g.unit_rows / kGemvStageRows;
  const int pairs_per_unit = p.down ? p.top_k : 1;
  const int ipu = pairs_per_unit * groups * g.chunks;  // items (8 rows x one chunk) per unit
  const int u0 = blockIdx.x * g.units_per_block;
  const int u1 = min(g.units, u0 + g.units_per_block);
  const int total = max(0, u1 - u0) * ipu;  // this block's items, g.items_per_stage to a stage
  const int64_t K = p.k;
  const int64_t item_elems = static_cast<int64_t>(kGemvStageRows) * g.chunk_elems;

  // Unit u's first row (of the expert's matrix; for down, of the output).
  auto unit_row0 = [&](int u) { return p.down ? u * g.unit_rows : (u % g.units_per_pair) * g.unit_rows; };

  if (tid == 0) {
    for (int s = 0; s < g.stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kGemvWarps);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warp == kGemvWarps) {
    // ---- producer: gate_up reads the ids only after its predecessor (the routing) is done; down
    // streams weights at once (the ids were complete before gate_up started) ----
    if (!p.down) pdl_wait();
    const T* W = static_cast<const T*>(p.w);
    // Item idx: its expert's weights at its rows and chunk (src), its row count, its chunk's k.
    auto item = [&](int idx, const T*& src, int& nr, int& kl) {
      const int u = u0 + idx / ipu;
      int rem = idx % ipu;
      int pair = u / g.units_per_pair;
      if (p.down) {
        pair = rem / (groups * g.chunks);
        rem %= groups * g.chunks;
      }
      const int grp = rem / g.chunks, c = rem % g.chunks;
      const int r = unit_row0(u) + grp * kGemvStageRows;
      const int k0 = c * g.chunk_elems;
      src = W + static_cast<int64_t>(p.ids[pair]) * p.w_expert_stride + static_cast<int64_t>(r) * K + k0;
      nr = max(0, min(kGemvStageRows, p.rows - r));
      kl = min(g.chunk_elems, p.k - k0);
    };
    const int ips = g.items_per_stage;
    const int copies = g.chunks == 1 ? 1 : kGemvStageRows;  // per item: whole rows are one run
    for (int s0 = 0, st = 0; s0 < total; s0 += ips, ++st) {
      const int slot = st % g.stages, n = min(ips, total - s0);
      if (lane == 0) {
        if (st >= g.stages) mbar_wait(&empty[slot], static_cast<uint32_t>((st / g.stages - 1) & 1));
        uint32_t bytes = 0;  // 0 (every item past a matrix's last row): a plain arrival
        for (int j = 0; j < n; ++j) {
          const T* src;
          int nr, kl;
          item(s0 + j, src, nr, kl);
          bytes += static_cast<uint32_t>(nr * kl * sizeof(T));
        }
        mbar_expect_tx(&full[slot], bytes);
      }
      __syncwarp();
      // Item j of the stage at j * item_elems; a chunk's rows at chunk_elems apart.
      for (int q = lane; q < n * copies; q += 32) {
        const T* src;
        int nr, kl;
        item(s0 + q / copies, src, nr, kl);
        const int row = q % copies;
        T* dst = reinterpret_cast<T*>(smem + slot * stage_bytes) + (q / copies) * item_elems + row * g.chunk_elems;
        if (copies == 1 && nr > 0)
          bulk_copy(dst, src, static_cast<uint32_t>(nr * K * sizeof(T)), &full[slot]);
        else if (copies > 1 && row < nr)
          bulk_copy(dst, src + row * K, static_cast<uint32_t>(kl * sizeof(T)), &full[slot]);
      }
    }
    // gate_up: this block's share of the down weights into the L2 (GroupedGemmParams::l2_next).
    if (lane == 0 && !p.down && p.l2_next) {
      const ByteSlice sl = l2_slice(p.l2_next_bytes, static_cast<int>(gridDim.x), blockIdx.x);
      for (int pr = 0; pr < p.top_k && sl.length > 0; ++pr)
        l2_prefetch_bulk(static_cast<const char*>(p.l2_next) + p.ids[pr] * p.l2_next_stride + sl.offset, sl.length);
    }
    if (p.down) pdl_wait();
    pdl_trigger();
    return;
  }

  // ---- consumers: x (the token's hidden row, or the k intermediate rows) into shared memory ----
  pdl_wait();
  pdl_trigger();
  {
    const int nx = p.down ? p.top_k : 1;
    const int per = g.k_pad / 8;  // 16-byte words per x row
    const uint4* X = static_cast<const uint4*>(p.x);
    for (int i = tid; i < nx * per; i += kGemvConsumerThreads) {
      const int row = i / per, col = i % per;
      reinterpret_cast<uint4*>(xs)[i] = col * 8 < K ? X[static_cast<int64_t>(row) * (K / 8) + col] : make_uint4(0, 0, 0, 0);
    }
  }
  float gate_shared = 1.0f;
  if (p.down && p.shared && p.shared_gate) {  // sigmoid(hidden . shared_gate), every block (H reads)
    const T* hid = static_cast<const T*>(p.hidden);
    float a = 0.0f;
    for (int i = tid; i < p.rows; i += kGemvConsumerThreads) a += to_f32(hid[i]) * p.shared_gate[i];
    for (int off = 16; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
    if (lane == 0) red[warp] = a;
    consumers_sync();
    float v = 0.0f;
    for (int w = 0; w < kGemvWarps; ++w) v += red[w];
    gate_shared = 1.0f / (1.0f + expf(-v));
  }
  consumers_sync();  // xs is complete (and red is free again)

  const int gq = lane / 4, t = lane % 4;
  int it = 0;
  for (int u = u0; u < u1; ++u) {
    const int row0 = unit_row0(u);
    float* red_u = red + (u & 1) * kGemvWarps * kGemvUnitRowsMax;
    float* tot_u = tot + (u & 1) * kGemvUnitRowsMax;
    float acc[kGroupsMax][2];
#pragma unroll
    for (int i = 0; i < kGroupsMax; ++i) acc[i][0] = acc[i][1] = 0.0f;
    for (int pp = 0; pp < pairs_per_unit; ++pp) {
      const int pair = p.down ? pp : u / g.units_per_pair;
      const float scale = p.down && p.route_w ? p.route_w[pair] : 1.0f;
      const T* xrow = xs + (p.down ? pair * g.k_pad : 0);
#pragma unroll
      for (int grp = 0; grp < kGroupsMax; ++grp) {
        if (grp >= groups) break;
        float c4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int c = 0; c < g.chunks; ++c, ++it) {
          const int st = it / g.items_per_stage, j = it % g.items_per_stage, slot = st % g.stages;
          const int k0 = c * g.chunk_elems;
          const int kl = min(g.chunk_elems, static_cast<int>(K) - k0);
          if (j == 0) mbar_wait(&full[slot], static_cast<uint32_t>((st / g.stages) & 1));
          const T* wrow = reinterpret_cast<const T*>(smem + slot * stage_bytes) + j * item_elems + static_cast<int64_t>(gq) * g.chunk_elems;
#pragma unroll 2
          for (int ws = warp * 32; ws < kl; ws += 32 * kGemvWarps) {  // this warp's windows
            const int kw = ws + 8 * t;
            const uint4 w = kw < kl ? *reinterpret_cast<const uint4*>(wrow + kw) : make_uint4(0, 0, 0, 0);
            const uint4 x = *reinterpret_cast<const uint4*>(xrow + k0 + kw);
            window_mma<T>(c4, w, x);
          }
          if (j == g.items_per_stage - 1 || it == total - 1) {  // this warp is done with the slot
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[slot]);
          }
        }
        acc[grp][0] = fmaf(scale, c4[0], acc[grp][0]);
        acc[grp][1] = fmaf(scale, c4[1], acc[grp][1]);
      }
    }

    // ---- the unit's epilogue: the warps' partials (lanes 0..3 hold rows 2t, 2t+1 of each group),
    // then the activation / the output. red and tot alternate by unit, so one barrier after the
    // writes and one after the sums is all a unit needs ----
    if (lane < 4) {
#pragma unroll
      for (int grp = 0; grp < kGroupsMax; ++grp) {
        if (grp >= groups) break;
        red_u[warp * kGemvUnitRowsMax + grp * 8 + 2 * t] = acc[grp][0];
        red_u[warp * kGemvUnitRowsMax + grp * 8 + 2 * t + 1] = acc[grp][1];
      }
    }
    consumers_sync();
    if (tid < g.unit_rows) {
      float s = 0.0f;
#pragma unroll
      for (int w = 0; w < kGemvWarps; ++w) s += red_u[w * kGemvUnitRowsMax + tid];
      tot_u[tid] = s;
    }
    consumers_sync();
    T* out = static_cast<T*>(p.out);
    if (!p.down) {
      const int pair = u / g.units_per_pair;
      const float* bias = p.bias ? p.bias + static_cast<int64_t>(p.ids[pair]) * p.rows : nullptr;
      if (act_gated(p.act)) {  // kBlocks8: rows row0..row0+7 gate, row0+8..row0+15 up (rows % 16 == 0)
        if (tid < 8) {
          float gt = tot_u[tid], up = tot_u[tid + 8];
          if (bias) {
            gt += bias[row0 + tid];
            up += bias[row0 + 8 + tid];
          }
          out[static_cast<int64_t>(pair) * (p.rows / 2) + row0 / 2 + tid] = from_f32<T>(apply_act(p.act, gt, up, p.alpha, p.limit));
        }
      } else if (tid < g.unit_rows && row0 + tid < p.rows) {
        float v = tot_u[tid];
        if (bias) v += bias[row0 + tid];
        out[static_cast<int64_t>(pair) * p.rows + row0 + tid] = from_f32<T>(apply_act(p.act, v, 0.0f, p.alpha, p.limit));
      }
    } else if (tid < g.unit_rows && row0 + tid < p.rows) {
      const int h = row0 + tid;
      float v = tot_u[tid];
      if (p.bias)
        for (int pr = 0; pr < p.top_k; ++pr)
          v += (p.route_w ? p.route_w[pr] : 1.0f) * p.bias[static_cast<int64_t>(p.ids[pr]) * p.rows + h];
      if (p.shared) v += gate_shared * p.shared[h];
      out[h] = from_f32<T>(v);
    }
  }
}

template <typename T>
cudaError_t launch_decode_gemv_t(const DecodeGemvParams& p, cudaStream_t stream) {
  const GemvGeometry g = decode_gemv_geometry(p, sizeof(T));
  if (!g.ok) return cudaErrorInvalidValue;
  if (g.units == 0) return cudaSuccess;
  // The attribute is raised to the largest block once, so smaller calls need nothing more.
  if (const cudaError_t e = ensure_max_dynamic_smem<std::pair<DecodeGemvParams, T>>(decode_gemv_kernel<T>, static_cast<int>(kGemvMaxSmem)); e != cudaSuccess)
    return e;
  return launch_pdl(decode_gemv_kernel<T>, dim3(static_cast<unsigned>(g.grid)), dim3(kGemvThreads), g.smem_bytes, stream, p, g);
}

inline cudaError_t launch_decode_gemv(Elem elem, const DecodeGemvParams& p, cudaStream_t stream) {
  return elem == Elem::kBF16 ? launch_decode_gemv_t<__nv_bfloat16>(p, stream) : cudaErrorInvalidValue;
}

}  // namespace moerun::cuda_kernels
