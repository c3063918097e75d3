// cpu/prepack.hpp — the cpu backend's weight layout: expert stacks re-laid out once at load.
//
// Layout "cpu-nb16-v3": each expert's [N, K] matrix is cut into N-blocks of 16 output lanes; a block
// stores its K steps contiguously in the encoding of kernels::PackFmt (still quantized: fp8, int8 and
// 4-bit weights keep their size; fp8 and e2m1 codes in the kernel level's kernels::CodeLayout), K
// padded with zeros to a multiple of 32. Per-K-group scales are re-laid out per block beside it (per
// lane for the 4-bit formats; fp8 block scales as up to 4 scale slots a block and a lane -> slot map:
// kernels::group_scales_bytes, new in v3); per-channel and per-tensor scales become one f32 per lane,
// applied in the epilogue. For gated activations the w13 blocks pair gate and up: lanes 0-7 are the gate rows of
// intermediate columns j..j+7 and lanes 8-15 their up rows, so the activation runs in the GEMM epilogue.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/kernels/kernels.hpp"
#include "moerun/formats.hpp"

namespace moerun::cpu {

inline constexpr const char* kLayoutTag = "cpu-nb16-v3";

// How output rows map onto lanes.
enum class LaneMap : uint8_t {
  kPlain,              // lane l of block b is row 16 b + l
  kGatedSplit,         // gate rows [0, N/2), up rows [N/2, N): block b lanes = gate/up of cols 8b..8b+7
  kGatedInterleaved,   // row 2j = gate j, row 2j+1 = up j; same lane pairing
};

struct PackedStack {
  kernels::PackFmt fmt = kernels::PackFmt::kF32;
  LaneMap map = LaneMap::kPlain;
  int64_t experts = 0, rows = 0, cols = 0;  // E, N, K as in the canonical stack
  int64_t kp = 0;                           // K padded to kernels::kKAlign
  int64_t nblocks = 0;                      // N-blocks per expert
  int64_t outputs = 0;                      // kPlain: N; gated: N / 2 (intermediate columns)
  size_t block_bytes = 0, gs_block_bytes = 0;
  std::shared_ptr<uint8_t> data;            // [E][nblocks][block_bytes], 64-byte aligned
  std::shared_ptr<uint8_t> gscale;          // [E][nblocks][gs_block_bytes] or null
  std::vector<float> lane_scale;            // [E][nblocks * 16] or empty (all ones)
  std::vector<float> gmul;                  // [E] nvfp4: 256 * global scale
  bool e8m0_fold = false;                   // mxfp4: every scale byte in [kE8m0FoldMin, kE8m0FoldMax]
  kernels::CodeLayout code_layout = kernels::CodeLayout::kVnniWords;  // fp8 / e2m1 codes (kernels.hpp)
  std::vector<int32_t> lane_row;            // [nblocks * 16]: canonical row of each lane, -1 = padding
  int64_t weight_bytes_per_expert = 0;      // data + scales as stored (bandwidth accounting)

  kernels::BlockRef block(int64_t e, int64_t b) const noexcept {
    kernels::BlockRef r;
    r.fmt = fmt;
    r.data = data.get() + (static_cast<size_t>(e * nblocks + b)) * block_bytes;
    r.gscale = gscale ? gscale.get() + static_cast<size_t>(e * nblocks + b) * gs_block_bytes : nullptr;
    r.gmul = gmul.empty() ? 1.0f : gmul[static_cast<size_t>(e)];
    r.e8m0_fold = e8m0_fold;
    r.kp = kp;
    return r;
  }
  const float* lane_scales(int64_t e, int64_t b) const noexcept {
    return lane_scale.empty() ? nullptr : lane_scale.data() + (e * nblocks + b) * kernels::kLanes;
  }
};

// Re-lays out a canonical stack, fp8 and e2m1 codes in code_layout (the kernel level's:
// KernelSet::code_layout). Throws Error{kInvalidArgument} for a layout tag other than "canonical", and
// Error{kFormat} when data/scales do not match the format table.
std::shared_ptr<const PackedStack> pack_stack(const ExpertMatrix& m, LaneMap map, kernels::CodeLayout code_layout);

// The prepared copy as an ExpertMatrix: layout "cpu-nb16-v3:<map>" (fp8 and 4-bit formats: plus
// ":vnni-words" or ":per-k"), data = the packed bytes (U8), keepalive[0] = the PackedStack. packed_of()
// returns the stack of such a copy, packs a canonical one, and refuses (Error{kInvalidArgument}) any
// other layout tag, a map other than the one asked for, and fp8 / e2m1 codes laid out for another
// kernel level.
ExpertMatrix prepared_matrix(std::shared_ptr<const PackedStack> p, const ExpertMatrix& source);
std::shared_ptr<const PackedStack> packed_of(const ExpertMatrix& m, LaneMap map, kernels::CodeLayout code_layout);
std::string layout_tag(LaneMap map, WeightFormat format, kernels::CodeLayout code_layout);

kernels::PackFmt pack_fmt_for(WeightFormat f) noexcept;

}  // namespace moerun::cpu
