// cuda/kernels/one_token.hpp — the whole one-token expert stage in one kernel: gate_up with the gated
// activation, a grid-wide barrier, down with the router-weighted combine. For layers whose down
// weights, split over the SMs by output column, fit each SM's shared memory (qwen3-30b-a3b: 8 experts x
// 16 columns x 768 x 2 bytes = 192 KiB a CTA).
//
// WHY: at one token the stage is a pure weight stream (qwen3-30b-a3b: 75.5 MB, 17.6 us at 4.3 TB/s),
// but the three-kernel chain (gate_up, down, combine) took 34-36 us after a memset flush where one
// kernel that only reads the same bytes took 25 (bench/results/2026-12-02_s15_h200/NOTES.md): the down
// GEMM cannot start streaming until gate_up has finished, and its 25 MB then stream alone. Here each
// CTA bulk-copies its slice of the k experts' down weights into shared memory while the CTAs compute
// gate_up, so the whole 75 MB streams in one phase; after the barrier the down products run out of
// shared memory and each CTA writes its output columns whole (the k slots summed in slot order, as
// the combine pass sums them), so no combine pass runs.
//
// STATUS: opt-in (MOERUN_CUDA_ONE_TOKEN=1). It measured 2% faster than the chain after a memset flush
// and 5% slower after a read flush (one_token.cu's notes): one phase of streaming is not enough when 16
// warps an SM keep only half of DRAM's rate in flight. Kept as the base of the next try (gate_up
// streamed through a shared-memory ring by TMA).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "launch.hpp"

namespace moerun::cuda_kernels {

struct OneTokenParams {
  const void* x = nullptr;         // [H] the token, 16-byte aligned
  const int32_t* ids = nullptr;    // [K] its experts; an id outside [0, E) contributes nothing (a
                                   // defence: ForwardArgs requires ids in range, and the chain does not check)
  const float* weights = nullptr;  // [K] their router weights
  const void* w13 = nullptr;       // [E, 2I, H], gated, GateUpLayout::kBlocks8
  const void* w2 = nullptr;        // [E, H, I]
  const float* b13 = nullptr;      // [E, 2I] in w13's row order, or null
  const float* b2 = nullptr;       // [E, H], or null
  int experts = 0, top_k = 0, hidden = 0, inter = 0;
  Act act = Act::kSiluAndMul;      // gated
  float alpha = 1.702f, limit = 7.0f;
  void* inter_buf = nullptr;       // [K, I] workspace: the CTAs exchange the intermediate through it
  void* out = nullptr;             // [H]
  int* barrier = nullptr;          // [2] zero; every launch leaves them zero
};

// How the stage splits over the CTAs: one CTA an SM (`grid` = the SM count), each with `cols` output
// columns of down (ceil(H / grid); the last CTAs may have fewer or none: H = 136 on 132 SMs leaves
// CTAs 68.. without columns) and at most `units` 16-row units of gate_up (8 gate and their 8 up rows
// of one slot), in `smem` bytes. grid == 0: the layer does not fit (the down slice too large for
// max_smem, H or I not a multiple of 8, more than kOneTokenMaxUnits units a CTA).
struct OneTokenGeometry {
  int grid = 0, cols = 0, units = 0;
  size_t smem = 0;
};
inline constexpr int kOneTokenMaxUnits = 64;
OneTokenGeometry one_token_geometry(int top_k, int hidden, int inter, int sms, size_t max_smem);

// Whether g.grid CTAs of the kernel (bf16 or fp16) can all be resident on the current device at once,
// which a cooperative launch needs: raises the kernel's shared-memory limit, then asks the occupancy
// calculator. A runner checks this once and otherwise keeps the chain.
cudaError_t one_token_resident(Elem elem, const OneTokenGeometry& g, bool* resident);

// Enqueues the stage (bf16 or fp16; a cooperative launch of g.grid CTAs, so that the barrier's CTAs
// are co-resident). cudaErrorInvalidValue for f32, a non-gated activation, a geometry that is not
// one_token_geometry's, a null pointer, or x, w13, w2 or inter_buf off a 16-byte boundary;
// cudaErrorCooperativeLaunchTooLarge where the grid cannot be resident (then nothing ran, the error is
// not sticky, and the caller may run the chain instead).
//
// One launch at a time per barrier: two launches sharing `barrier` that run at once (two streams)
// would count each other's CTAs. The cuda runner owns one barrier, so its forwards must be ordered
// (include/moerun/backend.hpp, Runner).
cudaError_t launch_one_token(Elem elem, const OneTokenParams& p, const OneTokenGeometry& g, cudaStream_t stream);

}  // namespace moerun::cuda_kernels
