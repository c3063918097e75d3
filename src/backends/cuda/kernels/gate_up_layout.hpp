// cuda/kernels/gate_up_layout.hpp — where the gate and up rows of a gated expert's w13 (and the
// columns of its gate_up product) sit. Plain C++ (host and device), so the CPU tests can check it.
#pragma once

#include <cstdint>
#include <vector>

#if defined(__CUDACC__)
#define MOERUN_HD __host__ __device__
#else
#define MOERUN_HD
#endif

namespace moerun::cuda_kernels {

// Order of the 2I rows of a gated expert's w13 ([2I, H]), hence of the columns of x · w13^T.
//   kHalves:  gate rows [0, I), up rows [I, 2I) (the canonical layout).
//   kPairs:   row 2j gate j, row 2j+1 up j (canonical with interleaved_gate_up).
//   kBlocks8: row 16b+x gate 8b+x, row 16b+8+x up 8b+x (x < 8; I % 8 == 0). The cuda backend's
//             device layout for gated activations: in the sm90 wgmma accumulator a thread holds
//             columns 8g+2q+{0,1} of every 8-column group g, so gate column c and its up column c+8
//             lie in the same thread's registers and the CUTLASS epilogue can apply the activation
//             without exchanging data; the own mma.sync tiles and the activation pass read it too.
enum class GateUpLayout : int { kHalves = 0, kPairs = 1, kBlocks8 = 2 };

struct GateUpCols {
  int gate = 0, up = 0;
};

// The columns (rows of w13) of gate j and up j, for `outn` = I intermediate columns. Used on whole
// matrices and on tiles alike: a tile of BN consecutive kBlocks8 or kPairs rows (BN % 16 == 0) is the
// same layout with outn = BN / 2; a kHalves tile of BN/2 gate rows then their BN/2 up rows too.
MOERUN_HD constexpr GateUpCols gate_up_cols(GateUpLayout layout, int j, int outn) {
  switch (layout) {
    case GateUpLayout::kPairs: return {2 * j, 2 * j + 1};
    case GateUpLayout::kBlocks8: return {(j / 8) * 16 + j % 8, (j / 8) * 16 + j % 8 + 8};
    case GateUpLayout::kHalves: break;
  }
  return {j, outn + j};
}

// Which canonical (kHalves) row feeds row `r` of a gated w13 in `layout` (a permutation of [0, 2I)).
MOERUN_HD constexpr int gate_up_halves_row(GateUpLayout layout, int r, int inter) {
  switch (layout) {
    case GateUpLayout::kPairs: return (r % 2 == 0 ? 0 : inter) + r / 2;
    case GateUpLayout::kBlocks8: return (r % 16 < 8 ? 0 : inter) + (r / 16) * 8 + r % 8;
    case GateUpLayout::kHalves: break;
  }
  return r;
}

// One strided copy of a reordering upload: `height` runs of `width` rows, run t from source row
// src_row + t * src_pitch to destination row dst_row + t * dst_pitch (rows of the whole [E * 2I] stack;
// one cudaMemcpy2D each).
struct GateUpRowCopy {
  int64_t dst_row = 0, src_row = 0, width = 0, dst_pitch = 0, src_pitch = 0, height = 0;
};

// The copies that reorder `experts` gated [2I]-row blocks from kHalves or kPairs into kBlocks8
// (I % 8 == 0), without a temporary. kPairs: 16 copies over all experts at once (row 16b + 2x (+1 for
// up) goes to 16b + x (+8); both repeat every 16 rows and 2I is a multiple of 16). kHalves: 2 per
// expert (gate rows 8b.. and up rows I + 8b.., 8 at a time, go to 16b.. and 16b + 8..).
inline std::vector<GateUpRowCopy> blocks8_upload_plan(GateUpLayout from, int64_t experts, int64_t inter) {
  std::vector<GateUpRowCopy> plan;
  if (from == GateUpLayout::kPairs) {
    for (int64_t x = 0; x < 16; ++x)
      plan.push_back({x, 2 * (x % 8) + (x >= 8 ? 1 : 0), 1, 16, 16, experts * inter / 8});
  } else if (from == GateUpLayout::kHalves) {
    for (int64_t e = 0; e < experts; ++e)
      for (int64_t half = 0; half < 2; ++half)
        plan.push_back({e * 2 * inter + half * 8, e * 2 * inter + half * inter, 8, 16, 8, inter / 8});
  }
  return plan;
}

}  // namespace moerun::cuda_kernels
