// cuda/kernels/grouped_gemm.cuh — the cuda backend's grouped GEMM on tensor cores (mma.sync
// m16n8k16, fp32 accumulation), with the token gather fused into the A-operand load and either the
// gated activation (gate_up) or the router-weighted scatter (down) fused into the epilogue.
//
// NOTES:
//   Problem shapes live on the device: the grid is sized on the host from an upper bound of the tile
//   count (launch_align's max_tiles), and each block reads its (expert, first row) from the tile
//   table, leaving at once when its index is past the device-side tile count. Nothing syncs with the
//   host, so a forward is capturable in a CUDA graph.
//   Operands stream through a STAGES-deep cp.async pipeline into XOR-swizzled shared memory (16-byte
//   chunks, chunk ^ (row & 7)), read by ldmatrix without bank conflicts. Rows past an expert's
//   segment and K past the end are zero-filled by the copy itself (src-size 0), so they cost no
//   memory traffic: a decode tile of 16 rows holding one token reads only that token.
//   For gate_up with a gated activation a block's BN weight rows are BN/2 gate rows and the BN/2 up
//   rows of the same intermediate columns (kHalves), or BN consecutive rows (kPairs, and kBlocks8,
//   the cuda backend's upload: BN/2 is a multiple of 8, so a tile holds whole 16-row blocks), so the
//   activation is applied in the epilogue and only the intermediate [rows, I] is written.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common.cuh"

namespace moerun::cuda_kernels {

template <typename T> struct MmaOp;
template <> struct MmaOp<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float* c, const uint32_t* a, const uint32_t* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <> struct MmaOp<__half> {
  static __device__ __forceinline__ void run(float* c, const uint32_t* a, const uint32_t* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

__device__ __forceinline__ void cp_async16(uint32_t smem_addr, const void* gmem, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem), "r"(src_size));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_>
struct TileShape {
  static constexpr int BM = BM_, BN = BN_, BK = kGemmBK, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int STAGES = STAGES_;
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
  static constexpr int MT = WM / 16, NT = WN / 8;
  static constexpr int kChunks = BK / 8;  // 16-byte chunks per smem row
  static constexpr int kAChunksPerThread = BM * kChunks / kThreads;
  static constexpr int kBChunksPerThread = BN * kChunks / kThreads;
  static constexpr int kStageElems = (BM + BN) * BK;
  static constexpr int kEpiLd = BN + 4;
  static constexpr size_t kSmemPipe = size_t(STAGES) * kStageElems * 2;
  static constexpr size_t kSmemEpi = size_t(BM) * kEpiLd * 4;
  static constexpr size_t kSmem = kSmemPipe > kSmemEpi ? kSmemPipe : kSmemEpi;
  static_assert(BM % (16 * WARPS_M) == 0 && BN % (16 * WARPS_N) == 0, "warp tile must be 16x16 multiples");
  static_assert(NT % 2 == 0, "B fragments are loaded 16 columns at a time");
  static_assert((BM * kChunks) % kThreads == 0 && (BN * kChunks) % kThreads == 0,
                "every thread copies the same number of chunks");
  static_assert(kChunks == 8, "the swizzle assumes 8 chunks (128 bytes) per row");
  static_assert(BN % 16 == 0, "a gated kBlocks8 tile must hold whole 16-row (gate 8, up 8) blocks");
};

// Global weight row behind tile-local B row rr, or -1 when it is past the matrix.
__device__ __forceinline__ int b_row_of(int rr, int tile_n, int BN, int n, bool gated, GateUpLayout layout) {
  if (!gated || layout != GateUpLayout::kHalves) {  // BN consecutive rows
    const int g = tile_n * BN + rr;
    return g < n ? g : -1;
  }
  const int half = BN / 2, c0 = tile_n * half, inter = n / 2;
  const int j = rr < half ? rr : rr - half;
  if (c0 + j >= inter) return -1;
  return rr < half ? c0 + j : inter + c0 + j;
}

template <typename T, typename S>
__global__ void __launch_bounds__(S::kThreads) grouped_gemm_kernel(const GroupedGemmParams p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int tile_n = blockIdx.y;
  const bool early_b = p.weights_before_wait;
  if (!early_b) pdl_wait();

  // ---- which rows: the tile table (device) or consecutive tiles of one segment ----
  int expert, row0, seg_start, seg_rows;
  if (p.direct_ids) {
    const int tile = blockIdx.x;
    if (tile >= p.rows) {
      if (early_b) pdl_wait();
      return;
    }
    expert = p.direct_ids[tile];
    row0 = 0;
    seg_start = tile;
    seg_rows = 1;
  } else if (p.seg_offsets) {
    const int tile = blockIdx.x;
    if (tile >= *p.num_tiles) {
      if (early_b) pdl_wait();
      return;
    }
    expert = p.tile_expert[tile];
    row0 = p.tile_row0[tile];
    seg_start = p.seg_offsets[expert];
    seg_rows = p.seg_offsets[expert + 1] - seg_start;
  } else {
    expert = 0;
    row0 = blockIdx.x * S::BM;
    seg_start = 0;
    seg_rows = p.rows;
    if (row0 >= seg_rows) {
      if (early_b) pdl_wait();
      return;
    }
  }
  const bool gated = !p.down && act_gated(p.act);
  const int K = p.k;
  const T* A = static_cast<const T*>(p.a);
  const T* B = static_cast<const T*>(p.b) + static_cast<int64_t>(expert) * p.b_expert_stride;

  // ---- per-thread source rows of the chunks it copies (fixed over K) ----
  const T* a_src[S::kAChunksPerThread];
  bool a_ok[S::kAChunksPerThread];
  uint32_t a_dst[S::kAChunksPerThread];
  int a_ch[S::kAChunksPerThread];
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
#pragma unroll
  for (int i = 0; i < S::kAChunksPerThread; ++i) {
    const int c = tid + i * S::kThreads, r = c / S::kChunks, ch = c % S::kChunks;
    const int lr = row0 + r;
    a_ok[i] = lr < seg_rows;
    const int64_t g = seg_start + (a_ok[i] ? lr : 0);
    const int64_t arow = p.a_row_index ? p.a_row_index[g] : p.direct_ids ? g / p.direct_top_k : g;
    a_src[i] = A + arow * p.lda + ch * 8;
    a_ch[i] = ch;
    a_dst[i] = (r * S::BK + ((ch ^ (r & 7)) * 8)) * 2;
  }
  const T* b_src[S::kBChunksPerThread];
  bool b_ok[S::kBChunksPerThread];
  uint32_t b_dst[S::kBChunksPerThread];
  int b_ch[S::kBChunksPerThread];
#pragma unroll
  for (int i = 0; i < S::kBChunksPerThread; ++i) {
    const int c = tid + i * S::kThreads, r = c / S::kChunks, ch = c % S::kChunks;
    const int g = b_row_of(r, tile_n, S::BN, p.n, gated, p.layout);
    b_ok[i] = g >= 0;
    b_src[i] = B + static_cast<int64_t>(g >= 0 ? g : 0) * K + ch * 8;
    b_ch[i] = ch;
    b_dst[i] = (S::BM * S::BK + r * S::BK + ((ch ^ (r & 7)) * 8)) * 2;
  }

  auto load_a = [&](int stage, int kt) {
    const int k0 = kt * S::BK;
    const uint32_t base = smem_base + stage * S::kStageElems * 2;
#pragma unroll
    for (int i = 0; i < S::kAChunksPerThread; ++i) {
      const bool ok = a_ok[i] && k0 + a_ch[i] * 8 < K;
      cp_async16(base + a_dst[i], ok ? a_src[i] + k0 : A, ok);
    }
  };
  auto load_b = [&](int stage, int kt) {
    const int k0 = kt * S::BK;
    const uint32_t base = smem_base + stage * S::kStageElems * 2;
#pragma unroll
    for (int i = 0; i < S::kBChunksPerThread; ++i) {
      const bool ok = b_ok[i] && k0 + b_ch[i] * 8 < K;
      cp_async16(base + b_dst[i], ok ? b_src[i] + k0 : B, ok);
    }
  };
  auto load_stage = [&](int stage, int kt) {
    load_a(stage, kt);
    load_b(stage, kt);
  };

  // ---- main loop ----
  float acc[S::MT][S::NT][4];
#pragma unroll
  for (int i = 0; i < S::MT; ++i)
#pragma unroll
    for (int j = 0; j < S::NT; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

  const int wm0 = (warp / S::WARPS_N) * S::WM, wn0 = (warp % S::WARPS_N) * S::WN;
  const int KT = (K + S::BK - 1) / S::BK;
  if (early_b) {
    // The first STAGES-1 weight tiles as one extra copy group while the previous kernel finishes;
    // the main loop's wait counts stay right: group kt + 1 (not kt) holds stage kt's activations.
#pragma unroll
    for (int s = 0; s < S::STAGES - 1; ++s)
      if (s < KT) load_b(s, s);
    cp_async_commit();
    pdl_wait();
#pragma unroll
    for (int s = 0; s < S::STAGES - 1; ++s) {
      if (s < KT) load_a(s, s);
      cp_async_commit();
    }
  } else {
#pragma unroll
    for (int s = 0; s < S::STAGES - 1; ++s) {
      if (s < KT) load_stage(s, s);
      cp_async_commit();
    }
  }
  // Direct mode: this block's slice of its expert's next weights (GroupedGemmParams::l2_next).
  auto prefetch_next = [&] {
    const ByteSlice sl = l2_slice(p.l2_next_bytes, static_cast<int>(gridDim.y), tile_n);
    if (sl.length > 0)
      l2_prefetch_bulk(static_cast<const char*>(p.l2_next) + expert * p.l2_next_stride + sl.offset, sl.length);
  };
  const bool prefetch = p.l2_next && tid == 0;
  for (int kt = 0; kt < KT; ++kt) {
    if (prefetch && kt == p.l2_next_at) prefetch_next();
    cp_async_wait<S::STAGES - 2>();
    __syncthreads();
    const int nk = kt + S::STAGES - 1;
    if (nk < KT) load_stage(nk % S::STAGES, nk);
    cp_async_commit();

    const uint32_t sa = smem_base + (kt % S::STAGES) * S::kStageElems * 2;
    const uint32_t sb = sa + S::BM * S::BK * 2;
#pragma unroll
    for (int kk = 0; kk < S::BK / 16; ++kk) {
      uint32_t af[S::MT][4];
      uint32_t bf[S::NT][2];
#pragma unroll
      for (int mt = 0; mt < S::MT; ++mt) {
        const int r = wm0 + mt * 16 + (lane % 16);
        const int ch = kk * 2 + lane / 16;
        ldmatrix_x4(af[mt], sa + (r * S::BK + ((ch ^ (r & 7)) * 8)) * 2);
      }
#pragma unroll
      for (int np = 0; np < S::NT / 2; ++np) {
        const int r = wn0 + np * 16 + (lane / 16) * 8 + (lane % 8);
        const int ch = kk * 2 + (lane / 8) % 2;
        uint32_t t4[4];
        ldmatrix_x4(t4, sb + (r * S::BK + ((ch ^ (r & 7)) * 8)) * 2);
        bf[2 * np][0] = t4[0];
        bf[2 * np][1] = t4[1];
        bf[2 * np + 1][0] = t4[2];
        bf[2 * np + 1][1] = t4[3];
      }
#pragma unroll
      for (int mt = 0; mt < S::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < S::NT; ++nt) MmaOp<T>::run(acc[mt][nt], af[mt], bf[nt]);
    }
  }
  if (prefetch && p.l2_next_at >= KT) prefetch_next();
  cp_async_wait<0>();
  pdl_trigger();  // the next kernel may be scheduled; it still waits for this one to finish
  __syncthreads();

  // ---- epilogue: accumulators through shared memory, then fused activation or weighted scatter ----
  float* ep = reinterpret_cast<float*>(smem_raw);
#pragma unroll
  for (int mt = 0; mt < S::MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < S::NT; ++nt) {
      const int r = wm0 + mt * 16 + lane / 4, c = wn0 + nt * 8 + 2 * (lane % 4);
      ep[r * S::kEpiLd + c] = acc[mt][nt][0];
      ep[r * S::kEpiLd + c + 1] = acc[mt][nt][1];
      ep[(r + 8) * S::kEpiLd + c] = acc[mt][nt][2];
      ep[(r + 8) * S::kEpiLd + c + 1] = acc[mt][nt][3];
    }
  __syncthreads();

  const int rows_here = min(S::BM, seg_rows - row0);
  if (!p.down) {
    const int outc = gated ? S::BN / 2 : S::BN;
    const int outn = gated ? p.n / 2 : p.n;
    const int c0 = tile_n * outc;
    const float* bias = p.bias ? p.bias + static_cast<int64_t>(expert) * p.n : nullptr;
    T* out = static_cast<T*>(p.inter);
    for (int idx = tid; idx < rows_here * outc; idx += S::kThreads) {
      const int r = idx / outc, c = idx % outc;
      if (c0 + c >= outn) continue;
      float v;
      if (gated) {
        const GateUpCols lc = gate_up_cols(p.layout, c, S::BN / 2);  // tile-local B rows
        float g = ep[r * S::kEpiLd + lc.gate], u = ep[r * S::kEpiLd + lc.up];
        if (bias) {
          g += bias[b_row_of(lc.gate, tile_n, S::BN, p.n, true, p.layout)];
          u += bias[b_row_of(lc.up, tile_n, S::BN, p.n, true, p.layout)];
        }
        v = apply_act(p.act, g, u, p.alpha, p.limit);
      } else {
        float x = ep[r * S::kEpiLd + c];
        if (bias) x += bias[c0 + c];
        v = apply_act(p.act, x, 0.0f, p.alpha, p.limit);
      }
      out[static_cast<int64_t>(seg_start + row0 + r) * p.ld_inter + c0 + c] = from_f32<T>(v);
    }
  } else {
    const int c0 = tile_n * S::BN;
    const float* bias = p.bias ? p.bias + static_cast<int64_t>(expert) * p.n : nullptr;
    for (int idx = tid; idx < rows_here * S::BN; idx += S::kThreads) {
      const int r = idx / S::BN, c = idx % S::BN;
      const int col = c0 + c;
      if (col >= p.n) continue;
      const int64_t g = seg_start + row0 + r;
      const float w = p.weight_of_row ? p.weight_of_row[g] : 1.0f;
      const int64_t dst = p.slot_of_row ? p.slot_of_row[g] : g;
      float x = ep[r * S::kEpiLd + c];
      if (bias) x += bias[col];
      p.rows_out[dst * p.n + col] = w * x;
    }
  }
}

using ShapeStreamM16 = TileShape<16, 64, 1, 4, 6>;
using ShapeStreamM32 = TileShape<32, 64, 1, 4, 5>;
using ShapeTileM64 = TileShape<64, 128, 2, 2, 4>;
using ShapeTileM128 = TileShape<128, 128, 2, 4, 3>;
using ShapeStreamM16N32 = TileShape<16, 32, 1, 2, 8>;

template <typename T, typename S>
cudaError_t launch_shape(const GroupedGemmParams& p, cudaStream_t stream) {
  // 16-byte loads of A and B rows: k, lda and the expert stride whole vectors of 8, the bases 16-byte
  // aligned (the runner's always are; a direct caller's k % 8 != 0 read the next row's first elements).
  if (p.k % 8 != 0 || p.lda % 8 != 0 || p.b_expert_stride % 8 != 0 || reinterpret_cast<uintptr_t>(p.a) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.b) % 16 != 0)
    return cudaErrorInvalidValue;
  if (const cudaError_t e = ensure_max_dynamic_smem<std::pair<T, S>>(grouped_gemm_kernel<T, S>, static_cast<int>(S::kSmem));
      e != cudaSuccess)
    return e;
  const bool gated = !p.down && act_gated(p.act);
  const int ntiles = gated ? (p.n / 2 + S::BN / 2 - 1) / (S::BN / 2) : (p.n + S::BN - 1) / S::BN;
  if (p.grid_tiles <= 0 || ntiles <= 0) return cudaSuccess;
  if (ntiles > 65535 || p.grid_tiles > 0x7fffffff) return cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned>(p.grid_tiles), static_cast<unsigned>(ntiles));
  return launch_pdl(grouped_gemm_kernel<T, S>, grid, dim3(S::kThreads), S::kSmem, stream, p);
}

template <typename T>
cudaError_t launch_grouped_gemm_t(GemmConfig c, const GroupedGemmParams& p, cudaStream_t stream) {
  switch (c) {
    case GemmConfig::kStreamM16: return launch_shape<T, ShapeStreamM16>(p, stream);
    case GemmConfig::kStreamM32: return launch_shape<T, ShapeStreamM32>(p, stream);
    case GemmConfig::kTileM64: return launch_shape<T, ShapeTileM64>(p, stream);
    case GemmConfig::kTileM128: return launch_shape<T, ShapeTileM128>(p, stream);
    case GemmConfig::kStreamM16N32: return launch_shape<T, ShapeStreamM16N32>(p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace moerun::cuda_kernels
