// cpu/runner.hpp — the cpu backend's Runner: route -> dispatch -> per-expert fused GEMMs -> combine.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "backends/cpu/isa.hpp"
#include "backends/cpu/prepack.hpp"
#include "backends/cpu/profile.hpp"
#include "backends/cpu/q8_rows.hpp"
#include "backends/cpu/workspace.hpp"
#include "dispatch/dispatch.hpp"
#include "moerun/backend.hpp"
#include "routing/topk.hpp"

namespace moerun::cpu {

// The kernels a layer gets at an ISA level (AMX tiles only for bf16 activations), and the variant a
// call with m tokens takes: shared by the runner and by CpuBackend::variant (what explain shows).
KernelSet kernels_for_spec(const MoeSpec& spec, CpuIsa isa);
std::string variant_name(const MoeSpec& spec, const KernelSet& ks, kernels::PackFmt fmt, int64_t m);

class CpuRunner final : public Runner {
 public:
  CpuRunner(const MoeSpec& spec, const MoeWeights& weights, const RunnerOptions& options, CpuIsa isa);
  ~CpuRunner() override;  // prints the MOERUN_CPU_PROFILE report, if one was taken
  void forward(const ForwardArgs& args) override;
  std::string variant_for(int64_t m) const override;

  const KernelSet& kernel_set() const noexcept { return ks_; }
  // Forwards (of every runner in the process) whose gate_up epilogue wrote the intermediate in bf16
  // directly (runner.cpp: h_f32): how tests tell that the path they compare was taken.
  static int64_t bf16_intermediate_forwards() noexcept;

 private:
  using Job = RunnerJob;    // workspace.hpp
  using Item = RunnerItem;
  using Scratch = ThreadScratch;  // one per thread of a forward (workspace.hpp)

  // Whether a call of m tokens on blocks of format f takes AMX tiles (bf16 activations at hand).
  bool takes_amx(kernels::PackFmt f, int64_t m) const noexcept;
  // Whether such a call takes four N-blocks at once (tile_amx4) where it is given four.
  bool takes_amx4(const PackedStack& w, int64_t m) const noexcept;
  // The kernel a call of m tokens on blocks of format f takes (run_block), and so which copy of its
  // activation rows it reads: the q8 rows, the bf16 rows (Xb / Hbb) or the f32 rows (X / Hb). q8_rows:
  // the job's q8 rows are packed; bf16_rows: the forward keeps bf16 copies.
  enum class CallPath { kQ8Stream, kBf16Stream, kF32Stream, kAmxTiles, kF32Tiles };
  CallPath call_path(kernels::PackFmt f, int64_t m, bool q8_rows, bool bf16_rows) const noexcept;
  static bool reads_f32(CallPath p) noexcept { return p == CallPath::kF32Stream || p == CallPath::kF32Tiles; }
  // q8: the job's q8 rows (int8 activation codes, or 15-bit rows two a token: KernelSet::q8_rows_per_token;
  // null where the job's call does not take the q8 kernel), taken by calls the q8 kernel runs
  // (KernelSet::uses_q8_stream); acc then needs room for m x q8_rows_per_token rows of 16.
  void run_block(const PackedStack& w, int64_t e, int64_t b, const float* x, const uint16_t* xb,
                 const kernels::Q8Rows* q8, int64_t ldx, int64_t m, Scratch& s, float* acc) const;
  // Block b of expert e as a call on `path` of m tokens reads it: the level's prefetch distances and
  // mxfp4 scale folding (run_block, run_pair).
  kernels::BlockRef call_block(const PackedStack& w, int64_t e, int64_t b, CallPath path, int64_t m) const;
  // q15 rows (KernelSet::q8_rows_per_token 2) from a kernel that does not join them (q8_joins_rows false):
  // each token's high and low rows of acc summed into row i.
  void sum_q15_rows(float* acc, int m) const;
  // Whether such calls run as stream pairs (runner.cpp NOTES): one-token calls on the bf16 stream or the
  // q8 kernel where the level has the pair kernel (KernelSet::stream2_bf16, stream2_q8).
  bool takes_stream_pairs(kernels::PackFmt f, int64_t m, bool q8_rows, bool bf16_rows) const noexcept;
  // Blocks b0 and b1 of expert e at one token (its bf16 row xb, its q8 rows q8: run_block's) into acc0
  // and acc1: bitwise what two run_block calls give (acc0 and acc1 as large as run_block's acc).
  void run_pair(const PackedStack& w, int64_t e, int64_t b0, int64_t b1, const uint16_t* xb, const kernels::Q8Rows* q8,
                float* acc0, float* acc1) const;
  // Blocks b .. b + nb - 1 (nb 1-4) into acc + q * acc_stride: tile_amx4 or tile_amx2 calls where the
  // blocks take AMX tiles, else run_block per block. The accumulators are bitwise the same either way.
  // next: the first block's bytes of this thread's next call (null: unknown), where the AMX kernels'
  // prefetches run on to (kernels.hpp, next_step).
  void run_blocks(const PackedStack& w, int64_t e, int64_t b, int nb, const float* x, const uint16_t* xb,
                  const kernels::Q8Rows* q8, int64_t ldx, int64_t m, Scratch& s, float* acc, int64_t acc_stride,
                  const void* next = nullptr) const;

  MoeSpec spec_;
  RunnerOptions options_;
  KernelSet ks_;
  int el_ = 0, il_ = 0, h_ = 0, is_ = 0;
  int64_t hp_ = 0, ilp_ = 0, isp_ = 0;
  std::shared_ptr<const PackedStack> w13_, w2_, sw13_, sw2_;
  ActivationKind shared_act_ = ActivationKind::kSiluAndMul;
  std::vector<float> w13_bias_, w2_bias_, router_w_, router_b_, corr_b_, shared_gate_;
  bool add_w2_bias_ = false;

  std::mutex mu_;  // one forward at a time per runner
  // Sized by the routing, not M, and reserved at construction for every local expert (the buffers
  // that grow with M are the workspace's: WorkspacePool).
  std::unique_ptr<ForwardProfile> prof_;  // MOERUN_CPU_PROFILE set when the runner was created
};

}  // namespace moerun::cpu
