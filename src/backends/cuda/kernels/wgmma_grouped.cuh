// cuda/kernels/wgmma_grouped.cuh — the own sm90 grouped GEMM: D[rows, n] = A[rows, k] . B_g[n, k]^T per
// expert g over expert-sorted rows (bf16 or fp16, fp32 accumulation), TMA loads into an mbarrier
// ring, warp-specialized wgmma, and an epilogue that writes D or, for a gated w13, the activation.
// Included by wgmma_grouped_{bf16,f16}.cu, one element type each (five kernels: D, and D through each
// of the four gated activations; each unpaired and paired).
//
// WHY (the measurements are in bench/results/2026-12-02_s19_h200/NOTES.md):
//   At about 256 rows per expert (deepseek-v3 and gpt-oss-120b at M = 8192, mixtral at M = 1024) half
//   the experts have a few rows more than two 128-row tiles hold, and CUTLASS's 128 x 256 schedule
//   runs a third, nearly empty tile for them. Wider swap-AB token tiles and a second launch for the
//   tails were slower (docs/performance.md). Here the tile is chosen per tile inside one persistent
//   launch: an expert's last tile is 64 rows when at most 64 rows are left, and then both consumer
//   warpgroups run the same 64 rows, each on half of the 256 weight rows (m64n128k16), in half a full
//   tile's MMA time. The epilogue also fuses the gated activation with whole-row stores, which the
//   CUTLASS register-direct epilogue could not do without losing (cuda_backend.cpp, fused_act).
//   The last 256-column block's MMA is only as wide as its columns (launch.hpp, WgmmaTiles); swap-AB
//   tail tiles for an expert's last <= 48 rows are built but off (they measured slower, launch.hpp).
//
// NOTES:
//   CTA: 384 threads. Warpgroup 0 produces (one thread issues the bulk tensor copies and takes the
//   tiles), warpgroups 1 and 2 consume; setmaxnreg moves registers from the first to the others.
//   A stage is the A tile [128 (or 64) rows x 64 k] and the B tile [256 weight rows x 64 k], 128-byte
//   rows in the 128-byte swizzle: 48 KiB, four stages. Full tile: consumer c takes token rows
//   64c..64c+63 against all 256 weight rows (m64n256k16, 128 fp32 accumulators a thread).
//   Swap-AB tile (an expert's last <= 48 rows): the weights are wgmma's 64-row operand and the tokens
//   its N (16, 32 or 48), one tile for each 128 columns of a block (a 128-row box of B), consumer c on
//   weight rows 64c..64c+63; the epilogue transposes through the staging buffer. Its two 64-row weight
//   blocks could not be one consumer's: two wgmma into different accumulators of one warpgroup, with
//   the 256-wide shape's in the same kernel, made ptxas serialize every wgmma of the kernel (C7511).
//   With kBlocks8 a thread's rows r and r + 8 are a gate row and its up row, so the activation fuses.
//   Narrow N: the last block's MMA is m64nW (64-row tiles m64n(W/2)), W its columns rounded up to 64,
//   and B's box 64 or 128 rows where W fits (192: 256, zero-filled past n).
//   Tiles: expert g has wgmma_m_tiles(count_g) M tiles times ceil(n / 256) N blocks (ceil(n / 128)
//   with WgmmaTiles::n128), numbered expert by
//   expert, N block by N block, M tile fastest, so the CTAs running at the same time share one weight
//   tile (one DRAM read, the rest L2 hits). Each CTA computes the per-expert tile prefix from the
//   device-side segment offsets itself (a warp scan): no host-side counts, capturable in a CUDA graph.
//   Scheduling: a CTA's first tile is its index; after that its producer takes the next tile number
//   from a device counter as it starts loading the next tile, and hands each number to the consumers
//   through a two-slot mbarrier ring. Static striding (tile c + i * grid) measured up to 1.36x slower
//   with 64-row tiles: CTAs that ran short tiles ran ahead of their neighbours into other weight
//   panels, and the tiles of one panel stopped sharing its DRAM reads. The last producer to finish
//   resets the counter pair, so no launch needs a memset before it.
//   Operands: A is the expert-sorted token rows, one 2-D tensor map [rows, k] (two: 128- and 64-row
//   boxes); a tile's rows past its expert's end are loaded and computed but never stored. B is 3-D
//   tensor maps [groups, n, k] (boxes of 256, 128 and 64 weight rows), so the copy engine clips each
//   expert's weight rows at n and fills zeros; k past the end is zero-filled too.
//   Pipeline: a full and an empty mbarrier per stage. The producer waits for a stage's empty phase,
//   arms the full barrier with the stage's bytes and issues both copies; a consumer waits for full,
//   issues four wgmma (k16 each), commits, and once the group before it has retired (wait_group 1)
//   releases that group's stage. The wgmma calls of the two tile shapes sit in two instantiations of
//   one loop, chosen outside it: ptxas serializes every wgmma when they sit in a branch inside it.
//   Epilogue: each consumer stages 64-column chunks of its 64 rows in a padded shared buffer (144-byte
//   rows: the pair writes are free of bank conflicts) and stores 16-byte pieces, a warp instruction
//   four whole 128-byte row pieces, with row and column masks. Storing the bf16 pairs straight from
//   the accumulators (a warp instruction writes 16 bytes in each of 8 rows) was 2.5 ms slower than no
//   stores at all on deepseek-v3 M = 8192's gate_up (10.0 against 7.6 ms) and read the weights from
//   DRAM twice (31 against 17 GB, ncu).
//   Gathered A (KernelArgs::a_index, opt-in: MOERUN_CUDA_GEMM_GATHER=1 in the runner): all 128
//   producer threads copy A's rows with cp.async in the same swizzle, and each stage's full barrier
//   also counts their 128 cp.async arrivals. It is correct (bitwise equal to the gather pass) but
//   slower on the H200 (bench/results/2026-12-03_s20_h200/NOTES.md): deepseek-v3 M = 8192 14.8
//   against 11.5 ms with the pass, qwen3-30b-a3b M = 8192 1.62 against 1.40. ncu on qwen3's gate_up:
//   931 against 703 us with DRAM at 25 against 35% of peak and L2 at 61 against 78%: latency-bound,
//   as if each SM kept too few row loads in flight, where one 2-D tensor copy brings the whole tile.
//   One bulk tensor copy per row (1-row boxes; the 128-byte swizzle follows the shared address, so
//   it was correct too) was slower still, 35.5 ms on deepseek-v3 M = 8192: per-row copies are bound
//   by the copy engine's issue rate. Neither is kept as the default; the row copies were removed.
//   Split K (KernelArgs::k_splits, launch.hpp's rule): where the output tiles leave the SMs idle in
//   the last wave (mixtral-8x7b's down GEMM at 1024 tokens: about 320 tiles of 14336 k on 132 SMs),
//   each output tile is numbered k_splits times in a row and split s runs the s-th run of k tiles.
//   Split s > 0 waits on a flag for split s - 1's fp32 partial (its consumers' accumulators, stored in
//   their register order through L2), adds it, and passes the sum on or, as the last, runs the epilogue
//   (the activation too) and zeroes the flag. So the sum has one order whichever SM runs what.
//   Tail split (KernelArgs::split_tail): the whole output tiles take the first numbers, then each tile
//   of the last partial wave takes wgmma_tail_splits adjacent numbers (launch.hpp), counted by every
//   CTA from the tile total it finds on the device; the same flags and order as above. The split
//   starts at an (expert, column block) group's first tile (wgmma_tail_split_start: the group the wave
//   starts in, or the next), so all M tiles of a group sum alike and the output does not depend on
//   the order of rows inside an expert.
//   Paired mode (WgmmaTiles::pair, off: measured slower, launch.hpp): a cluster of two CTAs takes
//   items of two M tiles of one expert's N block; CTA r copies weight rows 128 r .. + 128 of the block
//   with .multicast::cluster into both CTAs' stage, so each stage's full barrier counts both halves'
//   bytes and each empty barrier four releases (both CTAs' consumers: the stage is written by both
//   producers). Both CTAs run the same items, hence the same k steps, so their rings stay in step;
//   an expert's odd last M tile is a solo item that both run, each on 128 columns. Rank 0's
//   producer takes the item numbers and writes them into both CTAs' tile slots (DSMEM), and rank 1's
//   readers release rank 0's slot. The remote stage releases are plain arrives: with a cluster-scope
//   release each one compiled to MEMBAR.ALL.GPU, and the paired mode ran 1.3-1.9x slower.
//   With the activation (CutlassTile::kTokens128x256Act): B is a gated w13 in GateUpLayout::kBlocks8,
//   where a thread's accumulator block j (even) holds gate columns and block j + 1 their up columns, so
//   act(gate + bias, up + bias) is computed in registers and D is the intermediate [rows, n / 2]. One
//   kernel per activation (kAct), so each epilogue holds one activation's code.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "common.cuh"
#include "launch.hpp"

namespace moerun::cuda_kernels::wgmma {

inline constexpr int kBM = 128, kBN = 256, kBK = 64, kStages = 4;
inline constexpr int kThreads = 384;
inline constexpr int kProducerThreads = 128;  // warpgroup 0
inline constexpr int kStageA = kBM * kBK * 2;      // 16 KiB
inline constexpr int kStageB = kBN * kBK * 2;      // 32 KiB
inline constexpr int kMaxGroups = kWgmmaMaxGroups;  // experts per launch (the prefix lives in shared memory)
inline constexpr int kTileSlots = 2;               // tile numbers in flight from producer to consumers
inline constexpr int kOutPitch = 144;              // bytes per staged output row: 64 elements + 16
inline constexpr int kOutBuf = 64 * kOutPitch;     // one consumer's 64 x 64 chunk
inline constexpr size_t kSmemBytes = 1024 /* alignment slack */ + size_t(kStages) * (kStageA + kStageB) +
                                     2 * kOutBuf + 2 * kStages * 8 + 2 * kTileSlots * 8 + kTileSlots * 4 +
                                     2 * (kMaxGroups + 1) * 4 +
                                     8 * kProducerThreads * 4 /* the gathered rows' tokens */;

struct KernelArgs {
  const int32_t* seg = nullptr;  // [groups + 1], device; null: one group of `rows` rows
  int64_t rows = 0;              // rows of A and D
  int groups = 0;
  int n = 0, k = 0;
  void* d = nullptr;             // [rows, ld_d]
  int ld_d = 0;                  // n, or n / 2 with the activation
  WgmmaTiles tiles;              // how the last rows and columns are tiled (launch.hpp)
  int* counters = nullptr;       // [2], zero: the tile counter and the finished-producer count; null: static striding
  float alpha = 1.702f, limit = 7.0f;  // kSwigluOai (the kernel's kAct names the activation)
  const float* bias = nullptr;   // with act: expert g's [n] at bias + g * n (w13's column order), or null
  // Gathered A: row r of A is row a_index[r] of a_src ([*, k], 16-byte aligned), loaded by the
  // producer warpgroup's cp.async (the A tensor maps are then unused). Null: A through the maps.
  const void* a_src = nullptr;
  const int32_t* a_index = nullptr;
  // Split K (launch.hpp, wgmma_k_splits): each output tile runs as k_splits adjacent tiles, split s on
  // the s-th of k_splits equal runs of k tiles. Split s > 0 waits for consumer c's flag of the unit to
  // be s, adds the fp32 partial that split s - 1 left for it, and either leaves the sum (split < last)
  // or runs the epilogue and sets the flag back to 0. split_ws: kWgmmaSplitUnitBytes per unit (launch.hpp),
  // flags then partials [2][32][128] float4 (consumer c's 128 accumulators of its 128 threads,
  // k4-major so a warp's loads are whole lines).
  int k_splits = 1;
  char* split_ws = nullptr;
  // Tail split (launch.hpp, wgmma_tail_splits): only the output tiles of the last partial wave split,
  // into wgmma_tail_splits(tiles, grid, k_splits, k) runs each (k_splits: the most); the others whole.
  bool split_tail = false;
};

// ---- PTX wrappers ---------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
// The same copy into the same shared offset of every CTA in cta_mask (its bit r: cluster rank r),
// each CTA's barrier at bar's offset counting the bytes that land there.
__device__ __forceinline__ void tma_load_3d_multicast(void* dst, const CUtensorMap* map, uint64_t* bar, int c0,
                                                      int c1, int c2, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, "
      "%4, %5}], [%2], %6;\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "h"(cta_mask)
      : "memory");
}
// ---- clusters (the paired mode: two CTAs share each weight tile) ----
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t cluster_id_x() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t cluster_count_x() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(r));
  return r;
}
// Every thread of the cluster: what each did before is visible to all after (barrier init, exit).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// The shared::cluster address of p's counterpart in CTA `rank` of the cluster.
__device__ __forceinline__ uint32_t peer_addr(const void* p, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(smem_u32(p)), "r"(rank));
  return r;
}
// An arrival on a barrier of another CTA of the cluster that orders nothing else (release at CTA scope:
// the arriving thread's own reads are done). A release at cluster scope compiles to MEMBAR.ALL.GPU
// (and waits for this thread's pending global stores); on every k step's stage release it made the
// paired mode 1.3-1.9x slower than the unpaired engine (s23 call 1).
__device__ __forceinline__ void mbar_arrive_remote(uint32_t cluster_addr) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_addr) : "memory");
}
// The same, ordering this thread's earlier writes to the other CTA's shared memory (st_remote) before it.
__device__ __forceinline__ void mbar_arrive_remote_release(uint32_t cluster_addr) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(cluster_addr) : "memory");
}
__device__ __forceinline__ void st_remote(uint32_t cluster_addr, int v) {
  asm volatile("st.shared::cluster.u32 [%0], %1;\n" ::"r"(cluster_addr), "r"(v) : "memory");
}
// mbar_wait for a barrier that a CTA of the cluster arrived on (release.cluster), with what it
// wrote before (the tile slot) visible after.
__device__ __forceinline__ void mbar_wait_cluster(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, "
        "p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// 16 bytes global -> shared, of which the first src_bytes (16 or 0) are read and the rest zero-filled.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// One arrival on bar once every cp.async this thread issued before has landed (the barrier's count
// includes it: noinc).
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// Orders this thread's view of shared memory (the gathered A that cp.async wrote, acquired through
// the full barrier) before its later async-proxy reads (wgmma's operand loads).
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// A K-major operand in the 128-byte swizzle: rows of 128 bytes, 8-row atoms 1024 bytes apart (the
// stride byte offset); the leading byte offset is unused for this layout (1 by convention). The k16
// steps inside a 64-k tile advance the start address by 32 bytes.
__device__ __forceinline__ uint64_t smem_desc_sw128(uint32_t addr) {
  return (uint64_t((addr & 0x3FFFF) >> 4)) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Keeps the compiler from moving reads or writes of the accumulators across a wgmma wait.
__device__ __forceinline__ void fence_acc(float (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D[64 x N] (+)= A[64 x 16] . B[N x 16]^T, both K-major in shared memory (descriptors); accumulate = 0
// overwrites D. One function per shape and element type (TY, the PTX type name), all with the 128
// accumulators as operands (so the descriptors are always %128 and %129): D is d[0 .. N / 2).
#define MOERUN_R8_0 "%0, %1, %2, %3, %4, %5, %6, %7"
#define MOERUN_R8_1 "%8, %9, %10, %11, %12, %13, %14, %15"
#define MOERUN_R8_2 "%16, %17, %18, %19, %20, %21, %22, %23"
#define MOERUN_R8_3 "%24, %25, %26, %27, %28, %29, %30, %31"
#define MOERUN_R8_4 "%32, %33, %34, %35, %36, %37, %38, %39"
#define MOERUN_R8_5 "%40, %41, %42, %43, %44, %45, %46, %47"
#define MOERUN_R8_6 "%48, %49, %50, %51, %52, %53, %54, %55"
#define MOERUN_R8_7 "%56, %57, %58, %59, %60, %61, %62, %63"
#define MOERUN_R8_8 "%64, %65, %66, %67, %68, %69, %70, %71"
#define MOERUN_R8_9 "%72, %73, %74, %75, %76, %77, %78, %79"
#define MOERUN_R8_10 "%80, %81, %82, %83, %84, %85, %86, %87"
#define MOERUN_R8_11 "%88, %89, %90, %91, %92, %93, %94, %95"
#define MOERUN_R8_12 "%96, %97, %98, %99, %100, %101, %102, %103"
#define MOERUN_R8_13 "%104, %105, %106, %107, %108, %109, %110, %111"
#define MOERUN_R8_14 "%112, %113, %114, %115, %116, %117, %118, %119"
#define MOERUN_R8_15 "%120, %121, %122, %123, %124, %125, %126, %127"
#define MOERUN_WGMMA_ACC128 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define MOERUN_WGMMA_FN(NAME, SHAPE, TY, REGS)                                                          \
  __device__ __forceinline__ void NAME(float(&d)[128], uint64_t desc_a, uint64_t desc_b, int accumulate) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                          \
                 "wgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY " {" REGS "}, %128, %129, p, 1, 1, 0, 0;\n}\n" \
                 : MOERUN_WGMMA_ACC128                                                                      \
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));                                             \
  }
#else  // (the host pass and older targets: never called there)
#define MOERUN_WGMMA_FN(NAME, SHAPE, TY, REGS) \
  __device__ __forceinline__ void NAME(float(&)[128], uint64_t, uint64_t, int) {}
#endif
// The register lists of each N (N / 2 accumulators).
#define MOERUN_REGS_16 MOERUN_R8_0
#define MOERUN_REGS_32 MOERUN_REGS_16 "," MOERUN_R8_1
#define MOERUN_REGS_48 MOERUN_REGS_32 "," MOERUN_R8_2
#define MOERUN_REGS_64 MOERUN_REGS_48 "," MOERUN_R8_3
#define MOERUN_REGS_96 MOERUN_REGS_64 "," MOERUN_R8_4 "," MOERUN_R8_5
#define MOERUN_REGS_128 MOERUN_REGS_96 "," MOERUN_R8_6 "," MOERUN_R8_7
#define MOERUN_REGS_192 MOERUN_REGS_128 "," MOERUN_R8_8 "," MOERUN_R8_9 "," MOERUN_R8_10 "," MOERUN_R8_11
#define MOERUN_REGS_256 MOERUN_REGS_192 "," MOERUN_R8_12 "," MOERUN_R8_13 "," MOERUN_R8_14 "," MOERUN_R8_15
// wgmma_m64n<N>k16_<TY> for every N the engine uses.
#define MOERUN_WGMMA_FN_N(N, TY) MOERUN_WGMMA_FN(wgmma_m64n##N##k16_##TY, "m64n" #N "k16", #TY, MOERUN_REGS_##N)
#define MOERUN_WGMMA_ALL_N(TY)                                                                      \
  MOERUN_WGMMA_FN_N(256, TY) MOERUN_WGMMA_FN_N(192, TY) MOERUN_WGMMA_FN_N(128, TY) MOERUN_WGMMA_FN_N(96, TY) \
  MOERUN_WGMMA_FN_N(64, TY) MOERUN_WGMMA_FN_N(48, TY) MOERUN_WGMMA_FN_N(32, TY) MOERUN_WGMMA_FN_N(16, TY)
MOERUN_WGMMA_ALL_N(bf16)
MOERUN_WGMMA_ALL_N(f16)
#undef MOERUN_WGMMA_ALL_N
#undef MOERUN_WGMMA_FN_N
#undef MOERUN_WGMMA_FN
#undef MOERUN_WGMMA_ACC128
#undef MOERUN_REGS_16
#undef MOERUN_REGS_32
#undef MOERUN_REGS_48
#undef MOERUN_REGS_64
#undef MOERUN_REGS_96
#undef MOERUN_REGS_128
#undef MOERUN_REGS_192
#undef MOERUN_REGS_256
#undef MOERUN_R8_0
#undef MOERUN_R8_1
#undef MOERUN_R8_2
#undef MOERUN_R8_3
#undef MOERUN_R8_4
#undef MOERUN_R8_5
#undef MOERUN_R8_6
#undef MOERUN_R8_7
#undef MOERUN_R8_8
#undef MOERUN_R8_9
#undef MOERUN_R8_10
#undef MOERUN_R8_11
#undef MOERUN_R8_12
#undef MOERUN_R8_13
#undef MOERUN_R8_14
#undef MOERUN_R8_15

// The MMA of one consumer's k16 step for element T: N weight rows (swap-AB: N tokens) into d[0 .. N / 2).
template <typename T, int N>
__device__ __forceinline__ void wgmma_k16(float (&d)[128], uint64_t a, uint64_t b, int accumulate) {
  constexpr bool bf = std::is_same_v<T, __nv_bfloat16>;
#define MOERUN_WGMMA_CASE(NN)                                    \
  if constexpr (N == NN) {                                       \
    if constexpr (bf) wgmma_m64n##NN##k16_bf16(d, a, b, accumulate); \
    else wgmma_m64n##NN##k16_f16(d, a, b, accumulate);           \
  }
  MOERUN_WGMMA_CASE(256)
  MOERUN_WGMMA_CASE(192)
  MOERUN_WGMMA_CASE(128)
  MOERUN_WGMMA_CASE(96)
  MOERUN_WGMMA_CASE(64)
  MOERUN_WGMMA_CASE(48)
  MOERUN_WGMMA_CASE(32)
  MOERUN_WGMMA_CASE(16)
#undef MOERUN_WGMMA_CASE
}

// ---- the tile schedule ----------------------------------------------------------------------------
struct Tile {
  int g, row0, rows, n0;
  WgmmaTileKind kind;
  int width;        // columns of the product the MMA covers: 256, or fewer in the last N block (narrow_n);
                    // a swap-AB tile's 128 (n0 may be past n: an empty tile, skipped)
  int split, unit;  // K split of this tile and the output tile's index (t / k_splits)
  int splits;       // the K runs of this output tile (1: whole)
  bool solo;        // paired mode: the item's one M tile, this CTA on its 128 columns of the block
};

// prefix[g] = tiles of the experts before g (prefix[groups] = all tiles, each output tile counted
// k_splits times, splits adjacent); seg in shared memory.
__device__ __forceinline__ Tile decode_tile(int t, const int* prefix, const int* seg, int groups, int n,
                                            WgmmaTiles tiles, int k_splits) {
  const int lo = segment_of(t, prefix, groups);
  const int count = seg[lo + 1] - seg[lo];
  const int m_tiles = wgmma_m_tiles(count, tiles);
  const int local = (t - prefix[lo]) / k_splits;
  const int nb = local / m_tiles, mt = local - nb * m_tiles;
  const WgmmaMTile m = wgmma_m_tile(count, mt, tiles);
  Tile tl;
  tl.split = (t - prefix[lo]) - local * k_splits;
  tl.unit = t / k_splits;  // (every prefix is a multiple of k_splits)
  tl.splits = k_splits;
  tl.g = lo;
  tl.row0 = seg[lo] + m.row0;
  tl.rows = m.rows;
  tl.kind = m.kind;
  const int bn = wgmma_block_n(tiles);
  tl.n0 = nb * bn + m.n_half * (kBN / 2);
  tl.width = m.kind == WgmmaTileKind::kSwapAB ? kBN / 2 : tiles.narrow_n ? min(bn, (n - tl.n0 + 63) / 64 * 64) : bn;
  tl.solo = false;
  return tl;
}

// Paired mode (WgmmaTiles::pair, a cluster of two CTAs): item t is M tiles 2i and 2i + 1 of one
// expert's N block, numbered expert by expert, N block by N block, pair i fastest (prefix counts
// items). CTA `rank` runs M tile 2i + rank on the whole block. An expert with an odd M tile count
// has a solo last item: both CTAs run its one M tile, CTA `rank` on columns 128 rank .. + 128 of the
// block (none where they are past n: it still runs the main loop, in step with the other, and
// stores nothing).
__device__ __forceinline__ Tile decode_pair(int t, const int* prefix, const int* seg, int groups, int n,
                                            WgmmaTiles tiles, int rank) {
  const int lo = segment_of(t, prefix, groups);
  const int count = seg[lo + 1] - seg[lo];
  const int m_tiles = wgmma_m_tiles(count, tiles), pairs = (m_tiles + 1) / 2;
  const int local = t - prefix[lo];
  const int nb = local / pairs, pi = local - nb * pairs;
  const bool solo = 2 * pi + 1 == m_tiles;
  const WgmmaMTile m = wgmma_m_tile(count, solo ? 2 * pi : 2 * pi + rank, tiles);
  Tile tl;
  tl.split = 0;
  tl.splits = 1;
  tl.unit = t;
  tl.g = lo;
  tl.row0 = seg[lo] + m.row0;
  tl.rows = m.rows;
  tl.kind = m.kind;
  tl.solo = solo;
  tl.n0 = nb * kBN + (solo ? rank * (kBN / 2) : 0);
  const int span = solo ? kBN / 2 : kBN, left = (n - tl.n0 + 63) / 64 * 64;
  tl.width = left <= 0 ? 64 : tiles.narrow_n ? min(span, left) : span;
  return tl;
}
// Weight rows of the paired mode's B half h (rows 128 h .. + 128 of a block whose MMA is `width` wide):
// the box each CTA copies, multicast to both (0: none, the half is past the columns).
__device__ __forceinline__ int pair_half_rows(int width, int h) {
  return h == 0 ? (width <= 64 ? 64 : 128) : width <= 128 ? 0 : width <= 192 ? 64 : 128;
}

// A consumer warpgroup is done with stage s: its arrival on the stage's empty barrier, and in the
// paired mode on the other CTA's too (peer_empty: that CTA's empty[0]; its copies write this CTA's stage).
__device__ __forceinline__ void release_stage(uint64_t* empty, int s, uint32_t peer_empty) {
  mbar_arrive(&empty[s]);
  if (peer_empty) mbar_arrive_remote(peer_empty + uint32_t(s) * 8u);
}

// One tile's main loop for one consumer warpgroup: k_tiles stages from (s, phase) on, each released
// once the wgmma group after it was issued (wait_group 1). Returns the last stage, still to be released.
// The 64-row operand at a_base + stage * a_stride, the kN-row one at b_base + stage * b_stride.
template <typename T, int kN>
__device__ __forceinline__ int mainloop(float (&acc)[128], uint32_t a_base, uint32_t a_stride, uint32_t b_base,
                                        uint32_t b_stride, uint64_t* full, uint64_t* empty, int k_tiles, int& s,
                                        uint32_t& phase, int tid, int gathered, uint32_t peer_empty) {
  int prev = -1;
  for (int kt = 0; kt < k_tiles; ++kt) {
    mbar_wait(&full[s], phase);
    if (gathered) fence_proxy_async_shared();
    const uint32_t a = a_base + s * a_stride, b = b_base + s * b_stride;
    fence_acc(acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_k16<T, kN>(acc, smem_desc_sw128(a + kk * 32), smem_desc_sw128(b + kk * 32), kt | kk);
    wgmma_commit();
    fence_acc(acc);
    if (prev >= 0) {
      wgmma_wait<1>();
      if (tid == 0) release_stage(empty, prev, peer_empty);
    }
    prev = s;
    if (++s == kStages) {
      s = 0;
      phase ^= 1;
    }
  }
  return prev;
}

// Two elements (x in the low half) as one 32-bit word, rounded to nearest.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float x, float y) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(x, y);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// ---- the kernel -----------------------------------------------------------------------------------
// kAct: -1 writes D; otherwise the Act whose gated form the epilogue applies (a template argument: one
// kernel with the activation chosen at run time ran 12-23% slower than the unfused GEMM plus pass,
// deepseek-v3, mixtral and qwen3 at M = 1024 / 8192, because its epilogue unrolled every activation's
// code 64 times and the instruction cache could not hold it).
// kPair: the paired mode (WgmmaTiles::pair; launched as clusters of two). A template argument so that
// the unpaired kernel carries none of its code (its instruction mix is the one of the kernel before
// the paired mode existed; s23 NOTES, calls 4 and 5).
inline constexpr int kNoAct = -1;
template <typename T, int kAct, bool kPair>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_kernel(const __grid_constant__ CUtensorMap map_a128, const __grid_constant__ CUtensorMap map_a64,
                   const __grid_constant__ CUtensorMap map_b, const __grid_constant__ CUtensorMap map_b128,
                   const __grid_constant__ CUtensorMap map_b64, const KernelArgs args) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* sa = smem;                              // kStages x 16 KiB
  uint8_t* sb = smem + kStages * kStageA;          // kStages x 32 KiB
  uint8_t* out_buf = sb + kStages * kStageB;       // 2 x kOutBuf
  uint64_t* full = reinterpret_cast<uint64_t*>(out_buf + 2 * kOutBuf);
  uint64_t* empty = full + kStages;
  uint64_t* tile_full = empty + kStages;
  uint64_t* tile_empty = tile_full + kTileSlots;
  int* tile_slot = reinterpret_cast<int*>(tile_empty + kTileSlots);
  int* seg = tile_slot + kTileSlots;               // [groups + 1]
  int* prefix = seg + kMaxGroups + 1;              // [groups + 1]
  int* tok_s = prefix + kMaxGroups + 1;            // [8][128]: gathered row j of producer thread p at j * 128 + p

  const int groups = args.groups;
  const int n_blocks = (args.n + wgmma_block_n(args.tiles) - 1) / wgmma_block_n(args.tiles);
  const int k_tiles = (args.k + kBK - 1) / kBK;
  if (args.seg) {
    for (int i = threadIdx.x; i <= groups; i += blockDim.x) seg[i] = args.seg[i];
  } else if (threadIdx.x == 0) {
    seg[0] = 0;
    seg[1] = static_cast<int>(args.rows);
  }
  const bool gathered = args.a_index != nullptr;
  // Paired mode: rank 0 of each cluster takes the items and hands them to both CTAs (see NOTES).
  constexpr bool pair = kPair;
  const int rank = pair ? static_cast<int>(cluster_rank()) : 0;
  const int team = pair ? static_cast<int>(cluster_id_x()) : static_cast<int>(blockIdx.x);
  const int teams = pair ? static_cast<int>(cluster_count_x()) : static_cast<int>(gridDim.x);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], gathered ? 1 + kProducerThreads : 1);  // + every producer thread's cp.async arrival
      mbar_init(&empty[s], pair ? 4 : 2);  // one arrival from each consumer warpgroup (of both CTAs)
    }
    for (int i = 0; i < kTileSlots; ++i) {
      mbar_init(&tile_full[i], 1);
      // every consumer thread has read the slot (paired: rank 0's, and rank 1's consumers and producer)
      mbar_init(&tile_empty[i], pair ? 256 + 256 + 1 : 256);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (pair) cluster_sync();  // both CTAs' barriers exist before either copies into the other or arrives
  // The tail split's first split number and the work-number total (kept in shared memory and read where
  // used: held in registers across the loops they spilled the producer and the consumers).
  __shared__ int tail_split[2];
  if (threadIdx.x < 32) {  // prefix[g] over the experts' tile counts, 32 experts a step
    const int lane = threadIdx.x;
    int carry = 0;
    if (lane == 0) prefix[0] = 0;
    for (int base = 0; base < groups; base += 32) {
      const int g = base + lane;
      int v = 0;
      if (g < groups) {
        const int mt = wgmma_m_tiles(seg[g + 1] - seg[g], args.tiles);
        v = (pair ? (mt + 1) / 2 : mt) * n_blocks * (args.split_tail ? 1 : args.k_splits);
      }
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int u = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += u;
      }
      if (g < groups) prefix[g + 1] = carry + v;
      carry += __shfl_sync(0xffffffffu, v, 31);
    }
    __syncwarp();
    if (lane == 0) {
      // Work numbers: tile t (each numbered k_splits times with a uniform split), or with the tail split
      // the output tiles before split_from whole, then tail_k adjacent numbers for each tile from it on.
      const int out_tiles = prefix[groups];
      const int tail_k = args.split_tail ? wgmma_tail_splits(out_tiles, teams, args.k_splits, args.k) : 1;
      int split_from = out_tiles;
      if (tail_k > 1) {  // the last partial wave, from the first tile of a (expert, column block) group
        const int wave_start = out_tiles - out_tiles % teams;
        const int lo = segment_of(wave_start, prefix, groups);
        split_from = wgmma_tail_split_start(wave_start, prefix[lo], (prefix[lo + 1] - prefix[lo]) / n_blocks,
                                            out_tiles, teams);
      }
      tail_split[0] = split_from;
      tail_split[1] = args.split_tail ? split_from + (out_tiles - split_from) * tail_k : out_tiles;
    }
  }
  __syncthreads();
  const volatile int* split_from_at = &tail_split[0];
  const volatile int* total_at = &tail_split[1];
  const int tail_k = args.split_tail ? wgmma_tail_splits(prefix[groups], teams, args.k_splits, args.k) : 1;
  auto decode = [&](int t) {
    if (pair) return decode_pair(t, prefix, seg, groups, args.n, args.tiles, rank);
    if (!args.split_tail) return decode_tile(t, prefix, seg, groups, args.n, args.tiles, args.k_splits);
    const int split_from = *split_from_at;
    const bool cut = t >= split_from;
    const int u = cut ? split_from + (t - split_from) / tail_k : t;
    Tile tl = decode_tile(u, prefix, seg, groups, args.n, args.tiles, 1);
    tl.split = cut ? (t - split_from) % tail_k : 0;
    tl.splits = cut ? tail_k : 1;
    tl.unit = u - split_from;  // (its workspace block: fewer than the grid's CTAs are split)
    return tl;
  };
  const int wg = threadIdx.x / 128;
  const bool dynamic = args.counters != nullptr;

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (gathered || threadIdx.x == 0) {
      // Thread 0 takes the tiles and issues B's bulk tensor copies (and, without a gather, A's); with a
      // gather every producer thread copies its share of A's rows with cp.async.
      const int p = threadIdx.x;
      if (p == 0) {
        if (!gathered) {
          tma_prefetch_map(&map_a128);
          tma_prefetch_map(&map_a64);
        }
        tma_prefetch_map(&map_b);
        tma_prefetch_map(&map_b128);
        tma_prefetch_map(&map_b64);
      }
      const T* a_src = static_cast<const T*>(args.a_src);
      int s = 0;
      uint32_t phase = 0;
      for (int t = team, i = 0;; ++i) {
        if (dynamic) {  // hand t to the consumers (slot i % 2), the end marker (t >= total) too
          const int slot = i % kTileSlots;
          if (p == 0 && rank == 0) {  // (paired: to rank 1's producer and consumers too)
            mbar_wait(&tile_empty[slot], ((i / kTileSlots) & 1) ^ 1);
            tile_slot[slot] = t;
            if (pair) {
              st_remote(peer_addr(&tile_slot[slot], 1), t);
              mbar_arrive_remote_release(peer_addr(&tile_full[slot], 1));
            }
            mbar_arrive(&tile_full[slot]);
          } else if (p == 0) {  // paired rank 1: the number rank 0 took
            mbar_wait_cluster(&tile_full[slot], (i / kTileSlots) & 1);
            t = tile_slot[slot];
            mbar_arrive_remote(peer_addr(&tile_empty[slot], 0));
          }
          if (gathered) {  // and to the other producer threads (slot i % 2 is rewritten only after
            named_barrier_sync(3, kProducerThreads);  // every one has passed the next barrier)
            t = tile_slot[i % kTileSlots];
          }
        }
        if (t >= *total_at) break;
        const Tile tl = decode(t);
        const int split_tiles = (k_tiles + tl.splits - 1) / tl.splits;  // k tiles per split (the last may be short)
        const bool a64 = tl.kind != WgmmaTileKind::kRows128;  // (a swap-AB tile's at most 48 rows too)
        // B's box: the weight rows the MMA reads (a narrow last block's 64 or 128, a swap-AB tile's 128).
        // Paired: this CTA's half of the block (rows 128 rank on), multicast, and the stage receives
        // both halves; a solo item's own 128 columns, copied only here (none past n).
        int b_rows = tl.width <= 64 ? 64 : tl.width <= 128 ? 128 : kBN, b_row_off = 0, b_stage_rows = b_rows;
        if (pair && tl.solo) {
          b_rows = b_stage_rows = tl.n0 < args.n ? b_rows : 0;
        } else if (pair) {
          b_rows = pair_half_rows(tl.width, rank);
          b_row_off = rank * (kBN / 2);
          b_stage_rows = pair_half_rows(tl.width, 0) + pair_half_rows(tl.width, 1);
        }
        const CUtensorMap* map_bx = b_rows == 64 ? &map_b64 : b_rows == 128 ? &map_b128 : &map_b;
        const bool multicast = pair && !tl.solo;
        // Gather: 8 lanes copy one 128-byte k row of a token (a whole cache line), so a warp
        // instruction reads 4 lines. Thread p copies chunk p % 8 of rows 4 (p / 32) + (p % 32) / 8 +
        // 16 j, j < 8 (4 for a 64-row tile).
        const int chunk = p & 7, row_in = (p >> 5) * 4 + ((p & 31) >> 3);
        const int nrows = a64 ? 4 : 8;
        // Each thread's tokens (or -1 past the expert's end: zero-filled) sit in shared memory, in
        // slots only that thread uses: in registers the compiler kept eight 64-bit row addresses
        // live across the k loop and spilled the 40-register producer to local memory.
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int r = row_in + 16 * j;
          if (gathered) tok_s[j * kProducerThreads + p] = j < nrows && r < tl.rows ? args.a_index[tl.row0 + r] : -1;
        }
        const uint32_t bytes = (gathered ? 0 : a64 ? kStageA / 2 : kStageA) + uint32_t(b_stage_rows) * kBK * 2;
        // (an empty tile: no loads; paired, both CTAs run every k step of every item in step)
        const int kt_end = tl.n0 < args.n || pair ? min(k_tiles, (tl.split + 1) * split_tiles) : 0;
        for (int kt = tl.split * split_tiles; kt < kt_end; ++kt) {
          mbar_wait(&empty[s], phase ^ 1);
          if (p == 0) {
            mbar_expect_tx(&full[s], bytes);
            if (!gathered)
              tma_load_2d(sa + s * kStageA, a64 ? &map_a64 : &map_a128, &full[s], kt * kBK, tl.row0);
            if (multicast) {
              if (b_rows > 0)
                tma_load_3d_multicast(sb + s * kStageB + b_row_off * 128, map_bx, &full[s], kt * kBK,
                                      tl.n0 + b_row_off, tl.g, uint16_t(0x3));
            } else if (b_rows > 0) {
              tma_load_3d(sb + s * kStageB, map_bx, &full[s], kt * kBK, tl.n0, tl.g);
            }
          }
          if (gathered) {
            // The 128-byte swizzle, as the tensor copy would write it: 16-byte chunk c of row r at
            // r * 128 + ((c ^ (r % 8)) * 16) (the stage is 1024-byte aligned); r % 8 = row_in % 8.
            const int col = kt * kBK + chunk * 8;
            const uint32_t dst = smem_u32(sa + s * kStageA) + uint32_t(row_in) * 128u +
                                 uint32_t((chunk ^ (row_in & 7)) << 4);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              if (j < nrows) {
                const int tok = tok_s[j * kProducerThreads + p];
                const bool in = tok >= 0 && col < args.k;
                cp_async_16(dst + uint32_t(j) * 16u * 128u, in ? a_src + int64_t(tok) * args.k + col : a_src,
                            in ? 16 : 0);
              }
            }
            cp_async_arrive(&full[s]);
          }
          if (++s == kStages) {
            s = 0;
            phase ^= 1;
          }
        }
        if (p == 0 && rank == 0 && dynamic)
          t = teams + atomicAdd(&args.counters[0], 1);
        else
          t += teams;  // (static striding; with the scheduler the slot overrides it)
      }
      if (gathered) asm volatile("cp.async.wait_all;\n" ::: "memory");
      if (dynamic && p == 0 && rank == 0) {
        // The last producer to finish resets the pair: every other one has taken its last number.
        __threadfence();
        if (atomicAdd(&args.counters[1], 1) == teams - 1) {
          atomicExch(&args.counters[0], 0);
          atomicExch(&args.counters[1], 0);
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int c = wg - 1;  // consumer 0 or 1
    const int tid = threadIdx.x - 128 * wg;
    const int warp = tid / 32, lane = tid % 32;
    uint8_t* buf = out_buf + c * kOutBuf;
    T* d = static_cast<T*>(args.d);
    float acc[128];
    int s = 0;
    uint32_t phase = 0;
    // Paired: the other CTA's empty barriers, on which this one's consumers also release each stage.
    const uint32_t peer_empty = pair ? peer_addr(empty, rank ^ 1) : 0u;
    for (int t = team, i = 0;; ++i) {
      if (dynamic) {
        const int slot = i % kTileSlots;
        if (rank == 0) {
          mbar_wait(&tile_full[slot], (i / kTileSlots) & 1);
          t = tile_slot[slot];
          mbar_arrive(&tile_empty[slot]);
        } else {
          mbar_wait_cluster(&tile_full[slot], (i / kTileSlots) & 1);
          t = tile_slot[slot];
          mbar_arrive_remote(peer_addr(&tile_empty[slot], 0));
        }
      } else if (i > 0) {
        t += teams;
      }
      if (t >= *total_at) break;
      const Tile tl = decode(t);
      const int split_tiles = (k_tiles + tl.splits - 1) / tl.splits;
      // No columns: a swap-AB tile's second half past the last column (skipped), or a paired solo
      // item's half past it (run in step with the other CTA, nothing stored).
      const bool no_cols = tl.n0 >= args.n;
      if (no_cols && !pair) continue;
      const bool swap = tl.kind == WgmmaTileKind::kSwapAB, rows64 = tl.kind == WgmmaTileKind::kRows64;
      // This consumer's columns of the product: a 128-row tile's all (its own 64 rows), a 64-row
      // tile's half (the same rows as the other consumer), a swap-AB tile's 64 of its 128.
      const int ncols = swap ? 64 : rows64 ? tl.width / 2 : tl.width;
      const int col_base = tl.n0 + (swap || rows64 ? c * ncols : 0);
      // 128-byte rows: token row r of a stage at r * 128, weight row j at j * 128. The MMA shape is
      // chosen here, outside the k loop (one instantiation each, see NOTES).
      const int my_tiles = min(k_tiles, (tl.split + 1) * split_tiles) - tl.split * split_tiles;
      const uint32_t sa0 = smem_u32(sa), sb0 = smem_u32(sb);
      const uint32_t tok = sa0 + (tl.kind == WgmmaTileKind::kRows128 ? uint32_t(c * 64 * 128) : 0u);
      const uint32_t wts = sb0 + uint32_t((col_base - tl.n0) * 128);
      int prev;
#define MOERUN_MAINLOOP(N, A, SA, B, SB) \
  mainloop<T, N>(acc, A, SA, B, SB, full, empty, my_tiles, s, phase, tid, gathered, peer_empty)
      if (swap) {  // the weights as the 64-row operand, the tokens as N
        prev = tl.rows <= 16   ? MOERUN_MAINLOOP(16, wts, kStageB, tok, kStageA)
               : tl.rows <= 32 ? MOERUN_MAINLOOP(32, wts, kStageB, tok, kStageA)
                               : MOERUN_MAINLOOP(48, wts, kStageB, tok, kStageA);
      } else {
        switch (ncols) {
          case 32: prev = MOERUN_MAINLOOP(32, tok, kStageA, wts, kStageB); break;
          case 64: prev = MOERUN_MAINLOOP(64, tok, kStageA, wts, kStageB); break;
          case 96: prev = MOERUN_MAINLOOP(96, tok, kStageA, wts, kStageB); break;
          case 128: prev = MOERUN_MAINLOOP(128, tok, kStageA, wts, kStageB); break;
          case 192: prev = MOERUN_MAINLOOP(192, tok, kStageA, wts, kStageB); break;
          default: prev = MOERUN_MAINLOOP(256, tok, kStageA, wts, kStageB); break;
        }
      }
#undef MOERUN_MAINLOOP
      wgmma_wait<0>();
      fence_acc(acc);
      if (prev >= 0 && tid == 0) release_stage(empty, prev, peer_empty);
      if (no_cols) continue;
      if (tl.splits > 1) {
        // Splits of one output tile take adjacent numbers, and every CTA runs its tiles in increasing
        // order, so the lowest unfinished tile never waits on a higher one: the chain cannot deadlock
        // (with the grid co-resident, one CTA an SM). The tail split takes every split's number from
        // the device counter, so it holds however the CTAs are dispatched; a split of every tile
        // (MOERUN_CUDA_KSPLIT=2-4 / auto) gives the first tiles statically by CTA index, and there it
        // relies on the CTAs of lower index being resident no later than higher ones (not promised
        // under MPS or a concurrent kernel taking SMs). The sum is p0 + p1 + ... in split order
        // whoever runs them: deterministic.
        const int nv = swap ? 6 : ncols / 8;  // float4s of the accumulators in use (swap-AB: d[0..24))
        char* unit_ws = args.split_ws + int64_t(tl.unit) * kWgmmaSplitUnitBytes;
        float4* slot = reinterpret_cast<float4*>(unit_ws + 256) + c * 32 * 128 + tid;
        int* flag = reinterpret_cast<int*>(unit_ws) + c;
        if (tl.split > 0) {
          if (tid == 0)
            while (ld_acquire_gpu(flag) != tl.split) __nanosleep(64);
          named_barrier_sync(1 + c, 128);
#pragma unroll
          for (int j = 0; j < 32; ++j) {
            if (j < nv) {
              const float4 v = __ldcg(slot + j * 128);
              acc[4 * j] += v.x;
              acc[4 * j + 1] += v.y;
              acc[4 * j + 2] += v.z;
              acc[4 * j + 3] += v.w;
            }
          }
        }
        if (tl.split < tl.splits - 1) {
#pragma unroll
          for (int j = 0; j < 32; ++j)
            if (j < nv) __stcg(slot + j * 128, make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
          __threadfence();
          named_barrier_sync(1 + c, 128);
          if (tid == 0) st_release_gpu(flag, tl.split + 1);
          continue;  // the last split writes D
        }
        if (tid == 0) *flag = 0;  // (read by no one else in this launch; zero for the next)
      }

      // Epilogue. Accumulator block j of m64nNk16 holds rows 16 warp + lane / 4 (+ 8 in its second
      // pair) and columns 8j + 2 (lane % 4) + {0, 1}: token rows and product columns, or in a
      // swap-AB tile product columns (weight rows) and tokens. Each consumer stages 64 output columns
      // of its rows at a time in buf and stores them as 16-byte pieces of whole rows.
      const int rl = 16 * warp + lane / 4, q2 = 2 * (lane % 4);
      constexpr bool kFused = kAct != kNoAct;
      constexpr Act kA = static_cast<Act>(kFused ? kAct : 0);
      const int row_base = tl.kind == WgmmaTileKind::kRows128 ? c * 64 : 0;  // this consumer's first tile row
      const int out_col0 = kFused ? col_base / 2 : col_base;
      const int out_cols = kFused ? args.n / 2 : args.n;
      const int col_lim = min(out_cols, out_col0 + (kFused ? ncols / 2 : ncols));  // (64-row tiles: not the other's)
      const float* bias = kFused && args.bias ? args.bias + int64_t(tl.g) * args.n : nullptr;
      const float alpha = args.alpha, limit = args.limit;
      // Rows [0, rows) of buf to D's rows row0 + row_base + r, columns out_col0 + ch * 64 on.
      auto store_chunk = [&](int ch, int rows) {
        named_barrier_sync(1 + c, 128);
#pragma unroll
        for (int i2 = 0; i2 < 4; ++i2) {
          const int qi = tid + 128 * i2, row = qi >> 3, c16 = qi & 7;
          const int col = out_col0 + ch * 64 + c16 * 8;
          if (row < rows && col < col_lim)
            *reinterpret_cast<uint4*>(d + int64_t(tl.row0 + row_base + row) * args.ld_d + col) =
                *reinterpret_cast<const uint4*>(buf + row * kOutPitch + c16 * 16);
        }
      };
      if (swap) {
        // The accumulators hold product columns col_base + rl (+ 8) of tokens 8j + q2 + {0, 1},
        // transposed into buf one element at a time. In kBlocks8 weight row rl (in an even 8-row
        // block) is a gate row and rl + 8 its up row: output column 8 warp + lane / 4 of the consumer.
        const int nt8 = (tl.rows + 7) / 8;
        auto put = [&](int tok_row, int col, float v) {
          T x;
          if constexpr (std::is_same_v<T, __nv_bfloat16>) x = __float2bfloat16_rn(v);
          else x = __float2half_rn(v);
          *reinterpret_cast<T*>(buf + tok_row * kOutPitch + col * 2) = x;
        };
        float bg = 0.f, bu = 0.f;
        if (bias && col_base + rl < args.n) {
          bg = bias[col_base + rl];
          bu = bias[col_base + rl + 8];
        }
        named_barrier_sync(1 + c, 128);  // the previous tile's last chunk has been stored
#pragma unroll
        for (int j = 0; j < 6; ++j) {
          if (j < nt8) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float g = acc[4 * j + e], u = acc[4 * j + 2 + e];
              const int tr = 8 * j + q2 + e;
              if constexpr (kFused) {
                put(tr, 8 * warp + lane / 4, apply_act(kA, g + bg, u + bu, alpha, limit));
              } else {
                put(tr, rl, g);
                put(tr, rl + 8, u);
              }
            }
          }
        }
        store_chunk(0, tl.rows);
        continue;
      }
      // Output chunks of 64 columns: of D, 8 accumulator blocks each; of the activation, 16 (gate
      // block j, up block j + 1).
      const int chunks = kFused ? (ncols + 127) / 128 : (ncols + 63) / 64;
      const int rows_here = min(64, tl.rows - row_base);
#pragma unroll
      for (int ch = 0; ch < 4; ++ch) {
        if (ch < chunks) {
          named_barrier_sync(1 + c, 128);  // the previous chunk has been read out of the buffer
          if constexpr (!kFused) {
#pragma unroll
            for (int jj = 0; jj < 8; ++jj) {
              const int j = ch * 8 + jj;
              const int cb = (jj * 8 + q2) * 2;
              *reinterpret_cast<uint32_t*>(buf + rl * kOutPitch + cb) = pack2<T>(acc[4 * j], acc[4 * j + 1]);
              *reinterpret_cast<uint32_t*>(buf + (rl + 8) * kOutPitch + cb) = pack2<T>(acc[4 * j + 2], acc[4 * j + 3]);
            }
          } else if (ch < 2) {  // (the act form has at most two chunks: keep the indices in range)
#pragma unroll
            for (int jj = 0; jj < 8; ++jj) {
              const int j = ch * 16 + 2 * jj;  // gate block j, up block j + 1
              const int cb = (jj * 8 + q2) * 2;
              float bg0 = 0.f, bg1 = 0.f, bu0 = 0.f, bu1 = 0.f;
              if (bias) {
                const int gc = col_base + 8 * j + q2;
                if (gc < args.n) {
                  bg0 = bias[gc];
                  bg1 = bias[gc + 1];
                  bu0 = bias[gc + 8];
                  bu1 = bias[gc + 9];
                }
              }
              *reinterpret_cast<uint32_t*>(buf + rl * kOutPitch + cb) =
                  pack2<T>(apply_act(kA, acc[4 * j] + bg0, acc[4 * j + 4] + bu0, alpha, limit),
                           apply_act(kA, acc[4 * j + 1] + bg1, acc[4 * j + 5] + bu1, alpha, limit));
              *reinterpret_cast<uint32_t*>(buf + (rl + 8) * kOutPitch + cb) =
                  pack2<T>(apply_act(kA, acc[4 * j + 2] + bg0, acc[4 * j + 6] + bu0, alpha, limit),
                           apply_act(kA, acc[4 * j + 3] + bg1, acc[4 * j + 7] + bu1, alpha, limit));
            }
          }
          store_chunk(ch, rows_here);
        }
      }
    }
  }
  // Paired: neither CTA leaves while the other may still arrive on its barriers.
  if (pair) cluster_sync();
#endif
}

// ---- host side ------------------------------------------------------------------------------------
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// (L2 promotion 256: each 128-byte row piece of a box brings the next k step's piece into L2 with it.
// Without promotion or with 128 the sweep shapes tied within 1.5% in two alternated calls, s24 NOTES.)
template <typename T>
inline CUresult encode_map(CUtensorMap* m, int rank, const void* base, const cuuint64_t* dims, const cuuint64_t* strides,
                           const cuuint32_t* box) {
  const cuuint32_t es[3] = {1, 1, 1};
  const auto type = std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return tensor_map_encoder()(m, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), dims, strides, box, es,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

// p: as for launch_cutlass_grouped (p.tile kTokens128x256 or kTokens128x256Act; p.rows = the rows of
// p.a and p.d, also with seg_offsets), counters as launch_wgmma_grouped (launch.hpp) says.
template <typename T, int kAct, bool kPair>
struct KernelTag {};  // one dynamic shared-memory record per instantiation (ensure_max_dynamic_smem)

// The paired mode's launch configuration: clusters of two CTAs of the engine's threads and shared memory.
struct PairLaunch {
  cudaLaunchAttribute attr{};
  cudaLaunchConfig_t cfg{};
  PairLaunch(int grid, cudaStream_t stream) {
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 2;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kSmemBytes;
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
  }
  PairLaunch(const PairLaunch&) = delete;  // (cfg points at attr)
  PairLaunch& operator=(const PairLaunch&) = delete;
};

// Clusters of two that fit on the device at once (one CTA an SM; two SMs of one GPC each), found once
// per device: the paired mode's grid is twice that, so every cluster is resident (the scheduler's
// waits assume it).
template <typename Tag, typename Kernel>
cudaError_t pair_clusters(Kernel* kernel, int& clusters) {
  static std::atomic<int> known[64] = {};
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (device >= 0 && device < 64 && (clusters = known[device].load(std::memory_order_acquire)) > 0)
    return cudaSuccess;
  const PairLaunch pl(2, nullptr);
  if (const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &pl.cfg); e != cudaSuccess) return e;
  if (clusters <= 0) return cudaErrorNotSupported;
  if (device >= 0 && device < 64) known[device].store(clusters, std::memory_order_release);
  return cudaSuccess;
}

template <typename T, int kAct>
cudaError_t launch_kernel(const CUtensorMap& ma128, const CUtensorMap& ma64, const CUtensorMap& mb,
                          const CUtensorMap& mb128, const CUtensorMap& mb64, const KernelArgs& a,
                          int grid, cudaStream_t stream) {
  if (!a.tiles.pair) {
    if (const cudaError_t e = ensure_max_dynamic_smem<KernelTag<T, kAct, false>>(grouped_kernel<T, kAct, false>,
                                                                                 static_cast<int>(kSmemBytes));
        e != cudaSuccess)
      return e;
    grouped_kernel<T, kAct, false><<<grid, kThreads, kSmemBytes, stream>>>(ma128, ma64, mb, mb128, mb64, a);
    return cudaGetLastError();
  }
  using Tag = KernelTag<T, kAct, true>;
  if (const cudaError_t e = ensure_max_dynamic_smem<Tag>(grouped_kernel<T, kAct, true>, static_cast<int>(kSmemBytes));
      e != cudaSuccess)
    return e;
  int clusters = 0;
  if (const cudaError_t e = pair_clusters<Tag>(grouped_kernel<T, kAct, true>, clusters); e != cudaSuccess) return e;
  const PairLaunch pl(2 * std::min(clusters, grid / 2 > 0 ? grid / 2 : 1), stream);
  return cudaLaunchKernelEx(&pl.cfg, grouped_kernel<T, kAct, true>, ma128, ma64, mb, mb128, mb64, a);
}

template <typename T>
cudaError_t launch_t(const CutlassGroupedParams& p, int* counters, WgmmaTiles tiles, cudaStream_t stream) {
  const bool act = p.tile == CutlassTile::kTokens128x256Act;
  if (!wgmma_tiles_valid(tiles)) return cudaErrorInvalidValue;
  if (p.groups <= 0 || p.n <= 0 || p.k <= 0 || p.rows <= 0) return cudaSuccess;
  if (p.tile == CutlassTile::kSwapAB || p.groups > kMaxGroups || p.n % 8 != 0 || p.k % 8 != 0 ||
      p.b_group_stride % 8 != 0 || p.sm_count <= 0 || p.rows > 0x7fffffff || (!p.seg_offsets && p.groups != 1) ||
      reinterpret_cast<uintptr_t>(p.a) % 16 != 0 || reinterpret_cast<uintptr_t>(p.b) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.d) % 16 != 0 ||
      (act && (p.n % 16 != 0 || !act_gated(p.act) || p.layout != GateUpLayout::kBlocks8)))
    return cudaErrorInvalidValue;
  if (tiles.pair && (p.k_splits != 1 || p.a_row_index)) return cudaErrorInvalidValue;
  if (tiles.n128 && p.k_splits != 1) return cudaErrorInvalidValue;
  // Tile numbers are int on the device: a bound past INT32_MAX (an output of tens of TB) is refused.
  if ((int64_t(p.rows + 127) / 128 + 3 * int64_t(p.groups)) * int64_t(tiles.n128 ? (p.n + 127) / 128 : (p.n + 255) / 256) *
          p.k_splits > 0x7fffffff)
    return cudaErrorInvalidValue;
  if (p.k_splits < 1 || p.k_splits > kWgmmaMaxKSplits || (p.k_splits > 1 && (!wgmma_k_splits_fit(p.k, p.k_splits) ||
      !p.split_workspace || reinterpret_cast<uintptr_t>(p.split_workspace) % 256 != 0 ||
      p.split_workspace_bytes < (p.split_tail ? wgmma_tail_split_workspace_bytes(p.sm_count)
                                              : wgmma_split_workspace_bytes(p.rows, p.groups, p.n, p.k_splits)))))
    return cudaErrorInvalidValue;
  if (!tensor_map_encoder()) return cudaErrorNotSupported;
  CUtensorMap ma128{}, ma64{}, mb{}, mb128{}, mb64{};  // (with a gather the A maps stay unused)
  const bool gather = p.a_row_index != nullptr;
  const cuuint64_t a_dims[2] = {cuuint64_t(p.k), cuuint64_t(p.rows)};
  const cuuint64_t a_strides[1] = {cuuint64_t(p.k) * sizeof(T)};
  const cuuint32_t box128[2] = {kBK, kBM}, box64[2] = {kBK, kBM / 2};
  const cuuint64_t b_dims[3] = {cuuint64_t(p.k), cuuint64_t(p.n), cuuint64_t(p.groups)};
  const cuuint64_t b_strides[2] = {cuuint64_t(p.k) * sizeof(T), cuuint64_t(p.b_group_stride > 0 ? p.b_group_stride : int64_t(p.n) * p.k) * sizeof(T)};
  const cuuint32_t b_box[3] = {kBK, kBN, 1}, b_box128[3] = {kBK, kBN / 2, 1},
                  b_box64[3] = {kBK, kBN / 4, 1};  // (narrow last blocks, swap-AB tiles)
  if ((!gather && (encode_map<T>(&ma128, 2, p.a, a_dims, a_strides, box128) != CUDA_SUCCESS ||
                   encode_map<T>(&ma64, 2, p.a, a_dims, a_strides, box64) != CUDA_SUCCESS)) ||
      encode_map<T>(&mb, 3, p.b, b_dims, b_strides, b_box) != CUDA_SUCCESS ||
      encode_map<T>(&mb128, 3, p.b, b_dims, b_strides, b_box128) != CUDA_SUCCESS ||
      encode_map<T>(&mb64, 3, p.b, b_dims, b_strides, b_box64) != CUDA_SUCCESS)
    return cudaErrorInvalidValue;
  KernelArgs a;
  a.seg = p.seg_offsets;
  a.rows = p.rows;
  a.groups = p.groups;
  a.n = p.n;
  a.k = p.k;
  a.d = p.d;
  a.ld_d = act ? p.n / 2 : p.n;
  a.tiles = tiles;
  a.counters = counters;
  a.alpha = p.alpha;
  a.limit = p.limit;
  a.bias = act ? p.bias : nullptr;
  a.a_src = gather ? p.a : nullptr;
  a.a_index = p.a_row_index;
  a.k_splits = p.k_splits;
  a.split_tail = p.split_tail && p.k_splits > 1;
  if (p.k_splits > 1) a.split_ws = static_cast<char*>(p.split_workspace);
  if (!act) return launch_kernel<T, kNoAct>(ma128, ma64, mb, mb128, mb64, a, p.sm_count, stream);
  switch (p.act) {
    case Act::kSiluAndMul: return launch_kernel<T, static_cast<int>(Act::kSiluAndMul)>(ma128, ma64, mb, mb128, mb64, a, p.sm_count, stream);
    case Act::kGeluAndMul: return launch_kernel<T, static_cast<int>(Act::kGeluAndMul)>(ma128, ma64, mb, mb128, mb64, a, p.sm_count, stream);
    case Act::kGeluTanhAndMul:
      return launch_kernel<T, static_cast<int>(Act::kGeluTanhAndMul)>(ma128, ma64, mb, mb128, mb64, a, p.sm_count, stream);
    case Act::kSwigluOai: return launch_kernel<T, static_cast<int>(Act::kSwigluOai)>(ma128, ma64, mb, mb128, mb64, a, p.sm_count, stream);
    default: return cudaErrorInvalidValue;  // (act_gated refused the others above)
  }
}

}  // namespace moerun::cuda_kernels::wgmma
