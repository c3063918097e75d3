// cuda/cuda_backend.cpp — the `cuda` backend: capabilities, and a runner that launches the forward.
#include "backends/cuda/cuda_backend.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/device_runner.hpp"
#include "backends/cuda/kernels/one_token.hpp"
#include "backends/cuda/stream_tune.hpp"
#include "core/knobs.hpp"

namespace moerun {
namespace {

using cuda_detail::DeviceMoe;
using namespace cuda_kernels;

// Kernel variant by tokens per expert (m * k / E); the same rule feeds Capabilities::variants.
// Thresholds from the H200 sweeps (bench/results/2026-11-30_*_h200: 4 model shapes, M 1..8192, every
// variant forced): the 16-row stream tiles win up to ~8 tokens per expert (16x32 tiles over 16x64, measured
// side by side in 2026-11-30_d533313_h200: deepseek-v3 M=1 0.209 vs 0.232 ms, mixtral M=1 0.222 vs
// 0.246, M=16 0.672 vs 0.718; gpt-oss M=1 the one loss, 0.075 vs 0.071; within 2% elsewhere; a runner
// whose one-token call streams >= 16 MB times both tilings at construction and keeps the faster per
// token count: stream_tune.hpp), stream-m32 up to ~12, and above that
// the CUTLASS sm90 grouped GEMM (wgmma + TMA) wins or ties everywhere measured (deepseek-v3 at 12-16
// tokens per expert: 5.46 vs 5.78 ms, 5.51 vs 6.00 ms; qwen3 at 16-24 is the exception, m32 ahead by
// 1-5%); at >= 64 it is 1.3-2.3x the mma.sync tiles, which top out near 250 TFLOP/s. tile-m64 and
// tile-m128 stay reachable through MOERUN_CUDA_GEMM (and tile-m64 serves shapes the CUTLASS path
// cannot take).
// Within CUTLASS, the swap-AB schedule (weight rows x 64-token tiles) up to 48 tokens per expert, the
// 128x256 token-row schedule above (2026-11-30 H200 sweep, both forced in one run, graph replay): at
// 32 tokens per expert swap-AB 0.732 vs 0.793 ms (mixtral M=128), 5.57 vs 5.68 ms (deepseek-v3
// M=1024), 1.62 vs 1.67 ms (gpt-oss M=1024); at 64 a tie (qwen3 M=1024, 0.403 vs 0.400 ms); at 256
// it loses 1.3-1.7x (mixtral M=1024 1.83 vs 1.38 ms), where the 64x64 wgmma's shared-memory traffic
// caps it.
// Since 2026-12-02 the own sm90 grouped GEMM (wgmma_grouped.cuh: 128x256 tiles, 64-row last tiles
// whose two warpgroups split the weight rows, a dynamic tile scheduler, the activation fused) takes
// every token count above the stream tiles' 12 per expert, in place of both CUTLASS schedules
// (bench/results/2026-12-02_s19_h200/NOTES.md):
//   - GEMMs alone (cutlass_tune, two alternated rounds) against CUTLASS's 128x256: deepseek-v3 M=8192
//     11.0-11.3 vs 11.7-11.9 ms, gpt-oss-120b M=8192 3.02-3.12 vs 3.04-3.37 ms, qwen3 M=1024 0.340 vs
//     0.357 ms; mixtral (M=1024 and 8192) and qwen3 M=8192 tie;
//   - whole expert stage, every variant forced in one sweep, at 32 tokens per expert against swap-AB:
//     deepseek-v3 M=1024 5.53 vs 5.74 ms, gpt-oss-120b M=1024 1.57 vs 1.67, mixtral M=128 0.690 vs
//     0.731.
// Both CUTLASS schedules stay reachable through MOERUN_CUDA_GEMM (cutlass-sm90-grouped,
// cutlass-sm90-swapab); so does the rest of the comment above, which still describes them.
constexpr double kStreamMaxTpe = 8.0;
constexpr double kStream32MaxTpe = 12.0;
constexpr const char* kCutlassVariant = "cutlass-sm90-grouped";
constexpr const char* kCutlassSwapVariant = "cutlass-sm90-swapab";
constexpr const char* kWgmmaVariant = "sm90-wgmma-grouped";
constexpr const char* kOneTokenVariant = "fused-one-token";

// One GEMM path: an own mma.sync tile configuration, or the expert-sorted path (gather, two sm90
// grouped GEMMs, activation and combine passes) on CUTLASS (either schedule) or the own wgmma engine.
struct Path {
  bool cutlass = false;  // the expert-sorted path
  GemmConfig cfg = GemmConfig::kTileM64;
  bool swap_ab = false;  // with cutlass: CutlassTile::kSwapAB
  bool wgmma = false;    // with cutlass: the own grouped GEMM (wgmma_grouped.cuh) instead of CUTLASS
  bool one_token = false;  // the fused one-token stage (one_token.hpp); cfg: the chain it falls back to
  const char* name() const {
    if (one_token) return kOneTokenVariant;
    if (!cutlass) return gemm_config_name(cfg);
    return wgmma ? kWgmmaVariant : swap_ab ? kCutlassSwapVariant : kCutlassVariant;
  }
};

// MOERUN_CUDA_GEMM=<variant name> forces one GEMM variant (benchmarks, tests and tuning only). The
// names it takes are the knob table's (an unknown one is refused at the boundary and ignored here);
// "cutlass-sm90-grouped", "cutlass-sm90-swapab" and "sm90-wgmma-grouped" fall back to the rule for f32.
Path forced_path(bool cutlass_ok, bool* forced) {
  *forced = false;
  const std::optional<std::string_view> name = knob_choice("MOERUN_CUDA_GEMM");
  if (!name) return {};
  const std::string_view v = *name;
  const bool swap = v == kCutlassSwapVariant, wgmma = v == kWgmmaVariant;
  // (forcing the wgmma engine on a layer with more than kWgmmaMaxGroups local experts: its launch refuses)
  if (swap || wgmma || v == kCutlassVariant) {
    *forced = cutlass_ok;
    return {cutlass_ok, GemmConfig::kTileM64, swap && cutlass_ok, wgmma && cutlass_ok};
  }
  for (int c = 0; c < kNumGemmConfigs; ++c)
    if (v == gemm_config_name(static_cast<GemmConfig>(c))) {
      *forced = true;
      return {false, static_cast<GemmConfig>(c)};
    }
  return {};
}

Path path_for_tpe(double tpe, bool cutlass_ok) {
  bool forced = false;
  const Path f = forced_path(cutlass_ok, &forced);
  if (forced) return f;
  if (tpe <= kStreamMaxTpe) return {false, GemmConfig::kStreamM16N32};
  if (tpe <= kStream32MaxTpe) return {false, GemmConfig::kStreamM32};
  if (!cutlass_ok) return {false, GemmConfig::kTileM64};
  return {true, GemmConfig::kTileM64, false, true};
}

bool direct_enabled() { return knob_on("MOERUN_CUDA_DIRECT", true); }  // read per call: tests compare both

// Whether gate_up runs with the gated activation in its epilogue instead of the GEMM and the separate
// activation pass. On CUTLASS's 128x256 schedule (cutlass_grouped_act.cuh) only with
// MOERUN_CUDA_FUSED_ACT=1: on
// the H200 (2026-11-30, same binary, alternated twice, graph replay) the fused form was slower on every
// row that takes it: mixtral-8x7b M=1024 1.81-1.90 vs 1.37-1.39 ms, M=8192 11.27 vs 9.06-9.11 ms;
// qwen3-30b-a3b M=1024 0.51-0.52 vs 0.41 ms, M=8192 1.75 vs 1.36-1.39 ms; deepseek-v3 M=8192 12.81 vs
// 11.98-12.00 ms; gpt-oss-120b M=8192 4.14-4.16 vs 3.59-3.64 ms. Its register-direct 4-byte stores
// hold both consumer warpgroups off the tensor cores far longer than the TMA-store epilogue saves in
// pass traffic (bench/results/2026-11-30_2ce71f6_h200/NOTES.md). Read per call like the above.
// The own wgmma engine stages its activation epilogue through shared memory and stores whole rows, so
// there the fused form is the default (H200, 2026-12-02, forced rows of one sweep: deepseek-v3 M=1024
// 5.53 vs 5.63 ms, qwen3 M=1024 0.377 vs 0.384, gpt-oss M=8192 3.58 vs 3.62; one loss, deepseek-v3
// M=8192 12.78 vs 12.26; bench/results/2026-12-02_s19_h200/NOTES.md); MOERUN_CUDA_FUSED_ACT=0 turns it
// off (and =1 on) for either engine.
bool fused_act_enabled(bool wgmma) { return knob_on("MOERUN_CUDA_FUSED_ACT", wgmma); }

// Whether the wgmma engine gathers the tokens in gate_up's operand load (cp.async of each row from
// the caller's hidden states) instead of a gather pass writing them expert-sorted first. The pass
// writes and the GEMM re-reads rows * H * 2 bytes (qwen3-30b-a3b M = 8192: 268 MB, 0.11 ms), but on
// the H200 the gathered GEMM lost more than that on every row that was timed (alternated with the
// pass, graph replay: deepseek-v3 M = 8192 14.6 against 11.6 ms, qwen3-30b-a3b M = 8192 1.59 against
// 1.38, mixtral-8x7b M = 1024 1.77 against 1.38; bench/results/2026-12-03_s20_h200/NOTES.md), so it
// is off unless MOERUN_CUDA_GEMM_GATHER=1. Read per call, so one process can time both side by side.
bool gemm_gather_enabled() { return knob_on("MOERUN_CUDA_GEMM_GATHER", false); }

// Whether the sorted path's token gather rides in the alignment's fill grid (launch.hpp, AlignGather)
// or runs as its own pass after it (MOERUN_CUDA_FILL_GATHER=0; side-by-side runs). Read per call.
bool fill_gather_enabled() { return knob_on("MOERUN_CUDA_FILL_GATHER", true); }

// The wgmma engine's tail tiles (launch.hpp, WgmmaTiles): MOERUN_CUDA_SWAP_TAILS=0|16|32|48 (an
// expert's last rows up to that many as swap-AB tiles; default 0, which measured fastest) and MOERUN_CUDA_NARROW_N=0|1 (the
// last column block's MMA as wide as its columns; default 1) and MOERUN_CUDA_PAIR=0|1 (clusters of two
// CTAs sharing each weight tile by multicast; default 0, measured slower: launch.hpp). Read per call, so one process can time
// the forms side by side (cuda_moe_bench --ab env:...); any other value is an error.
cuda_kernels::WgmmaTiles wgmma_tiles_from_env() {
  cuda_kernels::WgmmaTiles t;
  // The values each takes are the knob table's (core/knobs.cpp); a malformed one is refused here too,
  // as these shape the launches.
  auto read = [](const char* name, int& out) {
    if (const std::optional<long> v = knob_count_strict(name)) out = static_cast<int>(*v);
  };
  read("MOERUN_CUDA_SWAP_TAILS", t.swap_rows);
  read("MOERUN_CUDA_NARROW_N", t.narrow_n);
  read("MOERUN_CUDA_PAIR", t.pair);
  if (t.pair && t.swap_rows)
    throw_error(ErrorKind::kInvalidArgument, "cuda: MOERUN_CUDA_PAIR=1 does not combine with MOERUN_CUDA_SWAP_TAILS");
  return t;
}

// MOERUN_CUDA_DOWN_PREFETCH: where in its main loop a one-token gate_up block asks the L2 for its
// expert's down weights (GroupedGemmParams::l2_next): "end" (after the main loop; also unset or any
// other value), "start", "mid" (half-way through K), or "0" / "off" (never). Returns the k-tile, or
// -1. Read per call.
// Measured on the H200 (2026-11-30, same binary, four alternated rounds, graph replay of the expert
// stage, bench/results/2026-11-30_s7-experiments_h200-and-host-xeon): qwen3-30b-a3b M=1, whose eight
// experts' down weights (25 MB) fit in half the L2, 35.2-36.2 us with "end" against 36.0-36.6 us
// without. In an earlier call "start" was slower (40.6-43.5 against 38.4-38.8 us), the prefetch
// competing with gate_up's own weights, and "mid" no better (38.3-38.8). Where the down weights do not
// fit (gpt-oss-120b shape: 66 MB), prefetching part of each expert was slower (75.6 vs 73.2 us), so the
// runner prefetches only whole sets (l2_next_fits).
int down_prefetch_at(int k_tiles) {
  const std::string_view w = knob_choice("MOERUN_CUDA_DOWN_PREFETCH").value_or("end");
  if (w == "0" || w == "off") return -1;
  if (w == "start") return 0;
  if (w == "mid") return k_tiles / 2;
  return k_tiles;
}

// Whether a one-token call takes the fused stage (one_token.hpp) where the layer fits it: only with
// MOERUN_CUDA_ONE_TOKEN=1, as it measured no faster than the chain (read per call: side-by-side runs).
bool one_token_enabled() { return knob_on("MOERUN_CUDA_ONE_TOKEN", false); }

int device_sm_count(int device) {
  int n = 0;
  MOERUN_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return n;
}

size_t align256(size_t x) { return (x + 255) & ~size_t(255); }

class CudaRunner final : public Runner {
 public:
  CudaRunner(const MoeSpec& spec, const MoeWeights& w, const RunnerOptions& o)
      : d_(spec, w, o.device_index, true, GateUpLayout::kBlocks8), sm_count_(device_sm_count(o.device_index)) {
    on_device_.enter(o.device_index);  // (the caller's device back at the end, or after the members if this throws)
    MOERUN_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes_, cudaDevAttrL2CacheSize, o.device_index));
    cutlass_ok_ = d_.elem() == Elem::kBF16 || d_.elem() == Elem::kF16;
    // Only the own mma tiles combine from the f32 rows, and by the rule (path_for_tpe) they take calls of
    // up to kStream32MaxTpe tokens per expert; the sorted path above that never reads them (a variant
    // forced onto larger calls grows them when it runs).
    if (cutlass_ok_) d_.limit_rows_f32(static_cast<int64_t>(kStream32MaxTpe * d_.experts() / d_.top_k()));
    if (cutlass_ok_) {
      cutlass_ws_.reserve(cutlass_grouped_workspace_bytes(d_.elem(), d_.experts(), sm_count_));
      const int32_t zero[2] = {0, 0};  // the wgmma engine's tile counters: zero, and left zero by each launch
      wgmma_counters_.upload(zero, sizeof(zero));
    }
    tune_stream(o.device_index);
    // The fused one-token stage: gated bf16/fp16 layers without shared experts whose down slice fits
    // an SM's shared memory, on a device that launches cooperative grids.
    int coop = 0, optin = 0;
    MOERUN_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, o.device_index));
    MOERUN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, o.device_index));
    if (cutlass_ok_ && coop && spec.activation.gated() && d_.shared_inter() == 0 &&
        d_.gate_up_layout() == GateUpLayout::kBlocks8) {
      one_token_geo_ = one_token_geometry(d_.top_k(), d_.hidden(), d_.inter(), sm_count_, static_cast<size_t>(optin));
      // All its CTAs at once, one an SM (the cooperative launch's condition). An error here only
      // means the opt-in stage is not used: the chain runs, and the runner is made.
      bool resident = false;
      if (one_token_geo_.grid > 0 && one_token_resident(d_.elem(), one_token_geo_, &resident) != cudaSuccess) {
        (void)cudaGetLastError();
        resident = false;
      }
      if (!resident) one_token_geo_ = {};
      if (one_token_geo_.grid > 0) {
        const int32_t zero[2] = {0, 0};  // its grid barrier: zero, and left zero by each launch
        one_token_barrier_.upload(zero, sizeof(zero));
      }
    }
    on_device_.leave();
  }
  ~CudaRunner() override { on_device_.enter_noexcept(d_.device()); }

  std::string variant_for(int64_t m) const override { return path_for(m).name(); }

  void forward(const ForwardArgs& args) override {
    const int64_t m = args.hidden.shape.rank > 0 ? args.hidden.shape[0] : 0;
    if (m == 0) return;
    const cuda_detail::DeviceScope scope(d_.device());
    forward_on(args, m, path_for(m));
  }

 private:
  // The forward on a given path (the stream tune times both stream tilings through it).
  void forward_on(const ForwardArgs& args, int64_t m, const Path& path) {
    if (path.one_token) {
      forward_one_token(args);
      return;
    }
    if (path.cutlass) {
      forward_cutlass(args, m, path.swap_ab ? CutlassTile::kSwapAB : CutlassTile::kTokens128x256, path.wgmma);
      return;
    }
    const GemmConfig cfg = path.cfg;
    const int bm = gemm_block_m(cfg);
    // One token: the GEMMs take (token, slot) pair t as tile t (direct mode) and the alignment kernel
    // is skipped. Its k experts are distinct as routed (given top-k ids that repeat an expert are
    // still right, that expert's weights are just read once per slot). MOERUN_CUDA_DIRECT=0 aligns
    // anyway (side-by-side runs).
    const bool direct = m == 1 && direct_enabled();
    const auto call = d_.begin(args, bm, 0, !direct);
    const cudaStream_t s = call.stream;
    const MoeSpec& sp = d_.spec();
    const Elem el = d_.elem();
    const int E = d_.experts(), K = d_.top_k(), H = d_.hidden(), I = d_.inter(), R = d_.w13_rows();
    const int64_t rows = m * K;
    const auto al = d_.align_out();

    GroupedGemmParams g1;
    g1.a = call.hidden;
    g1.lda = H;
    g1.a_row_index = al.token_of_row;
    g1.b = d_.w13.get();
    g1.b_expert_stride = static_cast<int64_t>(R) * H;
    g1.n = R;
    g1.k = H;
    g1.seg_offsets = al.seg_offsets;
    g1.tile_expert = al.tile_expert;
    g1.tile_row0 = al.tile_row0;
    g1.num_tiles = al.num_tiles;
    g1.grid_tiles = max_tiles(rows, E, bm);
    g1.act = cuda_detail::act_of(sp.activation.kind);
    g1.alpha = sp.activation.swiglu_alpha;
    g1.limit = sp.activation.swiglu_limit;
    g1.layout = d_.gate_up_layout();
    g1.bias = sp.expert_bias ? d_.b13.as<float>() : nullptr;
    g1.inter = d_.inter_buf.get();
    g1.ld_inter = I;
    if (direct) {
      g1.a_row_index = nullptr;
      g1.direct_ids = call.ids;
      g1.direct_top_k = K;
      g1.rows = static_cast<int>(rows);
      g1.grid_tiles = rows;
      // When the k experts' down weights fit in half the L2, gate_up's blocks prefetch them there as
      // they finish (down_prefetch_at): the DRAM stays busy through gate_up's tail and the kernel
      // boundary, and the down GEMM starts on L2 hits.
      const int64_t expert_bytes = static_cast<int64_t>(H) * I * static_cast<int64_t>(cuda_detail::elem_size(el));
      const int at = down_prefetch_at((H + kGemmBK - 1) / kGemmBK);
      if (at >= 0 && l2_next_fits(expert_bytes, K, l2_bytes_)) {
        g1.l2_next = d_.w2.get();
        g1.l2_next_stride = expert_bytes;
        g1.l2_next_bytes = expert_bytes;
        g1.l2_next_at = at;
      }
    }
    MOERUN_CUDA_CHECK(launch_grouped_gemm(el, cfg, g1, s));

    GroupedGemmParams g2 = g1;
    g2.l2_next = nullptr;
    g2.a = d_.inter_buf.get();
    g2.lda = I;
    g2.a_row_index = nullptr;
    g2.b = d_.w2.get();
    g2.b_expert_stride = static_cast<int64_t>(H) * I;
    g2.n = H;
    g2.k = I;
    g2.down = true;
    g2.bias = sp.expert_bias ? d_.b2.as<float>() : nullptr;
    g2.rows_out = d_.rows_buf.as<float>();
    g2.direct_top_k = 1;  // direct: the intermediate row of pair t is row t
    g2.slot_of_row = direct ? nullptr : al.slot_of_row;  // direct: row t is pair t
    g2.weight_of_row = direct ? call.weights : al.weight_of_row;
    // The tile table (or the direct ids) was complete before gate_up started: gate_up waits for its
    // predecessor before it triggers.
    g2.weights_before_wait = true;
    MOERUN_CUDA_CHECK(launch_grouped_gemm(el, cfg, g2, s));

    const float* shared = nullptr;
    if (d_.shared_inter() > 0) {
      const GemmConfig sc = path_for_tpe(static_cast<double>(m), false).cfg;
      const int sbm = gemm_block_m(sc);
      GroupedGemmParams s1;
      s1.a = call.hidden;
      s1.lda = H;
      s1.b = d_.sw13.get();
      s1.n = d_.shared_rows();
      s1.k = H;
      s1.rows = static_cast<int>(m);
      s1.grid_tiles = (m + sbm - 1) / sbm;
      s1.act = g1.act;
      s1.alpha = g1.alpha;
      s1.limit = g1.limit;
      s1.layout = GateUpLayout::kHalves;  // shared w13 is gate rows then up rows
      s1.inter = d_.sinter.get();
      s1.ld_inter = d_.shared_inter();
      MOERUN_CUDA_CHECK(launch_grouped_gemm(el, sc, s1, s));
      GroupedGemmParams s2 = s1;
      s2.a = d_.sinter.get();
      s2.lda = d_.shared_inter();
      s2.b = d_.sw2.get();
      s2.n = H;
      s2.k = d_.shared_inter();
      s2.down = true;
      s2.rows_out = d_.sout.as<float>();
      s2.weights_before_wait = true;  // one segment: no tile table
      MOERUN_CUDA_CHECK(launch_grouped_gemm(el, sc, s2, s));
      shared = d_.sout.as<float>();
    }
    MOERUN_CUDA_CHECK(launch_combine(d_.rows_buf.as<float>(), m, K, H, shared,
                                     sp.shared.gated_by_router ? d_.sgate.as<float>() : nullptr,
                                     call.hidden, el, call.out, el, s));
    d_.finish(args, call);
  }

  // The fused one-token stage: one kernel, no alignment, no combine pass (one_token.hpp).
  void forward_one_token(const ForwardArgs& args) {
    const auto call = d_.begin(args, gemm_block_m(GemmConfig::kStreamM16N32), 0, false, /*rows_f32=*/false);
    const MoeSpec& sp = d_.spec();
    OneTokenParams p;
    p.x = call.hidden;
    p.ids = call.ids;
    p.weights = call.weights;
    p.w13 = d_.w13.get();
    p.w2 = d_.w2.get();
    p.b13 = sp.expert_bias ? d_.b13.as<float>() : nullptr;
    p.b2 = sp.expert_bias ? d_.b2.as<float>() : nullptr;
    p.experts = d_.experts();
    p.top_k = d_.top_k();
    p.hidden = d_.hidden();
    p.inter = d_.inter();
    p.act = cuda_detail::act_of(sp.activation.kind);
    p.alpha = sp.activation.swiglu_alpha;
    p.limit = sp.activation.swiglu_limit;
    p.inter_buf = d_.inter_buf.get();
    p.out = call.out;
    p.barrier = one_token_barrier_.as<int>();
    const cudaError_t e = launch_one_token(d_.elem(), p, one_token_geo_, call.stream);
    if (e == cudaErrorCooperativeLaunchTooLarge) {
      // Fewer SMs than at construction (MPS limits, say): nothing ran and the error is not sticky.
      // This runner keeps the chain from now on, this call included (its begin runs again: the
      // routing and staging are idempotent). Under stream capture CUDA may have invalidated the
      // capture with the refused launch, and the chain's launches then throw; a refusal that CUDA
      // reports only when the graph is instantiated or launched reaches the caller there, and this
      // flag stays unset (the residency check at construction is what keeps that from happening).
      (void)cudaGetLastError();
      one_token_refused_.store(true, std::memory_order_relaxed);
      forward_on(args, 1, path_for(1));
      return;
    }
    MOERUN_CUDA_CHECK(e);
    d_.finish(args, call);
  }

  Path path_for(int64_t m) const {
    bool forced = false;
    const Path f = forced_path(cutlass_ok_, &forced);
    if (forced) return f;
    Path p = path_for_tpe(static_cast<double>(m) * d_.top_k() / d_.experts(), cutlass_ok_);
    if (!p.cutlass && p.cfg == GemmConfig::kStreamM16N32) p.cfg = cuda_detail::stream_pick_for(picks_, m, p.cfg);
    if (p.wgmma && d_.experts() > kWgmmaMaxGroups) p.wgmma = false;  // CUTLASS's 128x256 takes any count
    if (m == 1 && one_token_geo_.grid > 0 && direct_enabled() && one_token_enabled() &&
        !one_token_refused_.load(std::memory_order_relaxed))
      p.one_token = true;
    return p;
  }

  // The stream tilings' picks for this runner: timed by measure_stream_picks on its own weights the
  // first time the process meets this shape on this kind of device (with these knobs), else the earlier
  // runner's (stream_tune.hpp). Skipped under MOERUN_CUDA_GEMM, with expert parallelism (the synthetic
  // ids assume every expert is local), and where stream_tune_wanted says it does not pay. A timing that
  // fails (out of memory for its workspaces, say) leaves the rule's 16x32 tiles: the tune is only ever
  // an optimisation, so it never stops a runner from being made.
  void tune_stream(int device) {
    bool forced = false;
    forced_path(cutlass_ok_, &forced);
    const MoeSpec& sp = d_.spec();
    const int E = d_.experts(), K = d_.top_k(), H = d_.hidden();
    const size_t es = cuda_detail::elem_size(d_.elem());
    const int64_t bytes_m1 =
        static_cast<int64_t>(K) * (static_cast<int64_t>(d_.w13_rows()) * H + static_cast<int64_t>(H) * d_.inter()) *
        static_cast<int64_t>(es);
    if (forced || sp.parallel.ep != 1 || !cuda_detail::stream_tune_wanted(cuda_detail::stream_tune_mode(), bytes_m1))
      return;
    if (cuda_detail::tune_points(E, K, kStreamMaxTpe).empty() || K > E) return;
    cudaDeviceProp prop{};
    MOERUN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    // Everything the timed calls' speed depends on: the kind of device (identical GPUs share one
    // timing), shapes, element and activation types, activation, shared experts, biases, and the
    // per-call knobs that change the decode chain.
    auto env = [](const char* n) { const char* v = std::getenv(n); return std::string(v ? v : "-"); };
    const std::string key = std::string(prop.name) + " sm" + std::to_string(prop.multiProcessorCount) + " l2" +
                            std::to_string(prop.l2CacheSize) + " E" + std::to_string(E) + " K" + std::to_string(K) +
                            " H" + std::to_string(H) + " I" + std::to_string(d_.inter()) + " R" +
                            std::to_string(d_.w13_rows()) + " Rs" + std::to_string(d_.shared_rows()) + " Is" +
                            std::to_string(d_.shared_inter()) + " el" + std::to_string(static_cast<int>(d_.elem())) +
                            " act" + std::to_string(static_cast<int>(sp.activation.kind)) + " ad" +
                            std::to_string(static_cast<int>(sp.act_dtype)) + " b" + std::to_string(sp.expert_bias ? 1 : 0) +
                            " direct" + env("MOERUN_CUDA_DIRECT") + " pdl" + env("MOERUN_CUDA_PDL") + " l2pf" +
                            env("MOERUN_CUDA_DOWN_PREFETCH");
    // A timing that fails leaves this runner on the rule's tiling and the shape untimed in the cache, so
    // the next runner of the shape times it again (a failure is not a result to keep for the process).
    try {
      picks_ = cuda_detail::stream_tune_cache().get(key, [&] { return measure_stream_picks(device); });
    } catch (const std::exception&) {
      cudaGetLastError();  // a non-sticky error (allocation) must not reach the next CUDA call
      MOERUN_CUDA_CHECK(cudaDeviceSynchronize());  // a sticky one does: then making the runner fails
      picks_.clear();
    }
  }

  // Times the 16x32 and 16x64 stream tilings on this runner's weights at each of tune_points' token
  // counts and returns the faster per bucket (stream_tune.hpp). Synthetic calls: a constant hidden state,
  // kSets sets of uniformly routed distinct experts per token (so each timed call streams other
  // experts' weights), weights 1/k; one warm-up of each tiling (it allocates the workspaces), then three
  // rounds alternating the two, kSets calls each; the medians decide, and the 16x64 tiles must be at
  // least 1% faster to be taken.
  std::vector<cuda_detail::StreamPick> measure_stream_picks(int device) {
    const MoeSpec& sp = d_.spec();
    const int E = d_.experts(), K = d_.top_k(), H = d_.hidden();
    const size_t es = cuda_detail::elem_size(d_.elem());
    const std::vector<int64_t> points = cuda_detail::tune_points(E, K, kStreamMaxTpe);
    std::vector<cuda_detail::StreamPick> picks;
    MOERUN_CUDA_CHECK(cudaSetDevice(device));  // the buffers below live on the runner's device
    constexpr int kSets = 4;
    const int64_t mmax = points.back();
    std::vector<int32_t> ids(static_cast<size_t>(kSets * mmax * K));
    std::mt19937 rng(20261130u);
    std::vector<int32_t> perm(static_cast<size_t>(E));
    for (int64_t t = 0; t < kSets * mmax; ++t) {  // the first K of a partial shuffle: distinct experts
      for (int e = 0; e < E; ++e) perm[static_cast<size_t>(e)] = e;
      for (int j = 0; j < K; ++j) {
        std::swap(perm[static_cast<size_t>(j)], perm[static_cast<size_t>(j + static_cast<int>(rng() % (E - j)))]);
        ids[static_cast<size_t>(t * K + j)] = perm[static_cast<size_t>(j)];
      }
    }
    const std::vector<float> weights(ids.size(), 1.0f / static_cast<float>(K));
    cuda_detail::DeviceBuffer hid, did, dw, out;
    hid.reserve(static_cast<size_t>(mmax) * H * es);
    out.reserve(static_cast<size_t>(mmax) * H * es);
    did.upload(ids.data(), ids.size() * sizeof(int32_t));
    dw.upload(weights.data(), weights.size() * sizeof(float));
    struct Timing {  // released however measure_stream_picks leaves
      cudaStream_t s = nullptr;
      cudaEvent_t e0 = nullptr, e1 = nullptr;
      ~Timing() {
        if (e0) cudaEventDestroy(e0);
        if (e1) cudaEventDestroy(e1);
        if (s) cudaStreamDestroy(s);
      }
    } tm;
    MOERUN_CUDA_CHECK(cudaStreamCreateWithFlags(&tm.s, cudaStreamNonBlocking));
    MOERUN_CUDA_CHECK(cudaEventCreate(&tm.e0));
    MOERUN_CUDA_CHECK(cudaEventCreate(&tm.e1));
    const cudaStream_t s = tm.s;
    const cudaEvent_t e0 = tm.e0, e1 = tm.e1;
    // ~0.01 (bf16, f32), ~1 (f16); on the timing stream, which does not wait for the legacy one
    MOERUN_CUDA_CHECK(cudaMemsetAsync(hid.get(), 0x3C, static_cast<size_t>(mmax) * H * es, s));
    auto view = [&](void* p, int64_t rows, int64_t cols, DType t) {
      TensorView v;
      v.data = p;
      v.dtype = t;
      v.shape = Shape{rows, cols};
      v.device = DeviceKind::kCuda;
      v.device_index = device;
      return v;
    };
    auto call = [&](int64_t m, int set, GemmConfig cfg) {
      ForwardArgs a;
      a.hidden = view(hid.get(), m, H, sp.act_dtype);
      a.topk_ids = view(did.as<int32_t>() + set * mmax * K, m, K, DType::kI32);
      a.topk_weights = view(dw.as<float>() + set * mmax * K, m, K, DType::kF32);
      a.output = view(out.get(), m, H, sp.act_dtype);
      a.stream = s;
      forward_on(a, m, Path{false, cfg});
    };
    const GemmConfig cfgs[2] = {GemmConfig::kStreamM16N32, GemmConfig::kStreamM16};
    for (const int64_t m : points) {
      for (const GemmConfig c : cfgs) call(m, 0, c);
      float t[2][3];
      for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 2; ++c) {
          call(m, kSets - 1, cfgs[c]);  // untimed: the GPU is busy while the timed calls are launched
          MOERUN_CUDA_CHECK(cudaEventRecord(e0, s));
          for (int set = 0; set < kSets; ++set) call(m, set, cfgs[c]);
          MOERUN_CUDA_CHECK(cudaEventRecord(e1, s));
          MOERUN_CUDA_CHECK(cudaEventSynchronize(e1));
          MOERUN_CUDA_CHECK(cudaEventElapsedTime(&t[c][r], e0, e1));
        }
      for (auto& row : t) std::sort(row, row + 3);
      cuda_detail::StreamPick p;
      p.m_hi = m;
      p.us_n32 = t[0][1] * 1000.0f / kSets;
      p.us_m16 = t[1][1] * 1000.0f / kSets;
      p.cfg = p.us_m16 < 0.99f * p.us_n32 ? GemmConfig::kStreamM16 : GemmConfig::kStreamM16N32;
      picks.push_back(p);
    }
    return picks;
  }

  // The expert-sorted path: gather the tokens expert-sorted, grouped GEMM (gate_up), activation,
  // grouped GEMM (down), weighted combine. The GEMMs run on the own wgmma engine (wgmma: tile is
  // kTokens128x256) or on CUTLASS in the schedule `tile`. With a gated activation and 128x256 tiles
  // the activation runs in the gate_up GEMM's epilogue (CutlassTile::kTokens128x256Act: w13 is in
  // kBlocks8 order) and gate_up is never stored: by default on the wgmma engine, only with
  // MOERUN_CUDA_FUSED_ACT=1 on CUTLASS (fused_act_enabled). Shared experts take the same engine as
  // one group, unfused (their w13 is kHalves).
  void forward_cutlass(const ForwardArgs& args, int64_t m, CutlassTile tile, bool wgmma) {
    const MoeSpec& sp = d_.spec();
    const Elem el = d_.elem();
    const size_t es = cuda_detail::elem_size(el);
    const int E = d_.experts(), K = d_.top_k(), H = d_.hidden(), I = d_.inter(), R = d_.w13_rows();
    const int Rs = d_.shared_rows(), Is = d_.shared_inter();
    const size_t rows = static_cast<size_t>(m) * K;
    const Act act = cuda_detail::act_of(sp.activation.kind);
    const bool fused = tile == CutlassTile::kTokens128x256 && sp.activation.gated() &&
                       d_.gate_up_layout() == GateUpLayout::kBlocks8 && fused_act_enabled(wgmma);
    const WgmmaTiles tiles = wgmma ? wgmma_tiles_from_env() : WgmmaTiles{};
    auto gemm = [&](const CutlassGroupedParams& p, cudaStream_t st) {
      if (!wgmma) return launch_cutlass_grouped(el, p, st);
      CutlassGroupedParams q = p;
      const SplitK split = split_k_for(q.rows, q.groups, q.n, q.k);
      q.k_splits = split.k;
      q.split_tail = split.tail;
      if (q.k_splits > 1) {
        q.split_workspace_bytes = q.split_tail ? wgmma_tail_split_workspace_bytes(q.sm_count)
                                               : wgmma_split_workspace_bytes(q.rows, q.groups, q.n, q.k_splits);
        q.split_workspace = split_workspace(q.split_workspace_bytes, st);
      }
      WgmmaTiles tq = tiles;
      if (q.k_splits > 1 || q.a_row_index) tq.pair = 0;  // (the paired mode has neither)
      tq.n128 = q.k_splits == 1 && !tq.pair && !tq.swap_rows && n128_for(q.rows, q.groups, q.n);
      return launch_wgmma_grouped(el, q, wgmma_counters_.as<int>(), st, tq);
    };
    // scratch: sorted tokens (not with the gather in the GEMM), later the down output [rows, H]
    //          | gate_up [rows, R] (unfused only) | shared gate_up [m, Rs] | shared down [m, H]
    const size_t off_gu = align256(rows * H * es);
    const size_t off_sgu = off_gu + (fused ? 0 : align256(rows * R * es));
    const size_t off_sd = off_sgu + align256(static_cast<size_t>(m) * Rs * es);
    const size_t scratch = off_sd + align256(Is > 0 ? static_cast<size_t>(m) * H * es : 0);
    const auto call = d_.begin(args, 128, scratch, /*align=*/false, /*rows_f32=*/false);
    const cudaStream_t s = call.stream;
    // The tail split's workspace (one block per split output tile, fewer than the SMs) is held by every
    // forward on the wgmma engine, whether or not its own launches split: more tokens make more tiles,
    // and past a few waves none split, so a forward of many tokens would otherwise leave nothing for a
    // later capture of fewer, which must not allocate (split_workspace refuses it then).
    if (wgmma && tail_split_mode()) split_workspace(wgmma_tail_split_workspace_bytes(sm_count_), s);
    const auto al = d_.align_out();
    char* base = static_cast<char*>(d_.scratch.get());
    void* xs = base;  // sorted tokens, then (same bytes) the down output
    void* gu = base + off_gu;
    const int32_t* total = al.seg_offsets + E;

    // The tokens are gathered expert-sorted by the alignment (AlignGather), or by a pass after it
    // (MOERUN_CUDA_FILL_GATHER=0), unless the wgmma engine is to gather them in gate_up's operand load
    // (MOERUN_CUDA_GEMM_GATHER=1, from 16-byte aligned rows; CUTLASS cannot).
    const bool gather_in_gemm = wgmma && gemm_gather_enabled();
    const bool gather_in_fill = !gather_in_gemm && fill_gather_enabled();
    AlignGather gather;
    gather.src = call.hidden;
    gather.dst = xs;
    gather.h = H;
    gather.elem = el;
    d_.align(call, 128, gather_in_fill ? &gather : nullptr);
    if (!gather_in_gemm && !gather_in_fill)
      MOERUN_CUDA_CHECK(launch_gather_sorted(el, call.hidden, H, al.token_of_row, total, static_cast<int64_t>(rows),
                                             xs, s));
    CutlassGroupedParams g;
    g.groups = E;
    g.seg_offsets = al.seg_offsets;
    g.workspace = cutlass_ws_.get();
    g.workspace_bytes = cutlass_ws_.capacity();
    g.sm_count = sm_count_;
    g.tile = tile;  // the shared experts' GEMMs below copy it
    g.rows = static_cast<int64_t>(rows);  // (the wgmma engine's tensor maps; CUTLASS reads seg_offsets)
    g.a = gather_in_gemm ? call.hidden : xs;
    g.a_row_index = gather_in_gemm ? al.token_of_row : nullptr;
    g.b = d_.w13.get();
    g.b_group_stride = static_cast<int64_t>(R) * H;
    g.d = gu;
    g.n = R;
    g.k = H;
    const float* b13 = sp.expert_bias ? d_.b13.as<float>() : nullptr;
    if (fused) {
      CutlassGroupedParams ga = g;
      ga.tile = CutlassTile::kTokens128x256Act;
      ga.d = d_.inter_buf.get();
      ga.act = act;
      ga.alpha = sp.activation.swiglu_alpha;
      ga.limit = sp.activation.swiglu_limit;
      ga.bias = b13;
      ga.layout = d_.gate_up_layout();
      MOERUN_CUDA_CHECK(gemm(ga, s));
    } else {
      MOERUN_CUDA_CHECK(gemm(g, s));
      MOERUN_CUDA_CHECK(launch_activation_sorted(el, gu, R, al.seg_offsets, E, b13, act, sp.activation.swiglu_alpha,
                                                 sp.activation.swiglu_limit, d_.gate_up_layout(), total,
                                                 static_cast<int64_t>(rows), d_.inter_buf.get(), s));
    }
    g.a = d_.inter_buf.get();
    g.a_row_index = nullptr;
    g.b = d_.w2.get();
    g.b_group_stride = static_cast<int64_t>(H) * I;
    g.d = xs;
    g.n = H;
    g.k = I;
    MOERUN_CUDA_CHECK(gemm(g, s));

    const void* shared = nullptr;
    if (Is > 0) {
      void* sgu = base + off_sgu;
      void* sd = base + off_sd;
      CutlassGroupedParams sg = g;
      sg.groups = 1;
      sg.seg_offsets = nullptr;
      sg.rows = m;
      sg.a = call.hidden;
      sg.b = d_.sw13.get();
      sg.b_group_stride = 0;
      sg.d = sgu;
      sg.n = Rs;
      sg.k = H;
      MOERUN_CUDA_CHECK(gemm(sg, s));
      MOERUN_CUDA_CHECK(launch_activation_sorted(el, sgu, Rs, nullptr, 1, nullptr, act, sp.activation.swiglu_alpha,
                                                 sp.activation.swiglu_limit, GateUpLayout::kHalves, nullptr, m,
                                                 d_.sinter.get(), s));
      sg.a = d_.sinter.get();
      sg.b = d_.sw2.get();
      sg.d = sd;
      sg.n = H;
      sg.k = Is;
      MOERUN_CUDA_CHECK(gemm(sg, s));
      shared = sd;
    }
    MOERUN_CUDA_CHECK(launch_combine_sorted(el, xs, H, m, K, al.row_of_slot, al.weight_of_row, al.seg_offsets, E,
                                            sp.expert_bias ? d_.b2.as<float>() : nullptr, shared,
                                            sp.shared.gated_by_router ? d_.sgate.as<float>() : nullptr, call.hidden,
                                            call.out, s));
    d_.finish(args, call);
  }

  // MOERUN_CUDA_N128: 128-column blocks in the wgmma engine (launch.hpp, WgmmaTiles::n128) for every
  // launch (1), where wgmma_n128_wanted says (auto), or none (0 or unset). Read per call.
  bool n128_for(int64_t rows, int groups, int n) const {
    const std::string_view v = knob_choice_strict("MOERUN_CUDA_N128").value_or("0");
    if (v == "auto") return wgmma_n128_wanted(rows, groups, n, sm_count_);
    return v == "1";
  }
  // The wgmma engine's K splits for one GEMM. By default (unset, or =tail) the tail split: only the
  // last partial wave's output tiles, in launches of at most kWgmmaTailMaxWaves waves
  // (wgmma_tail_splits and wgmma_tail_split_may_apply, launch.hpp; at most kWgmmaMaxKSplits runs, as
  // many as fit k). It measured 3% faster on mixtral-8x7b at M = 1024 (its down GEMM: 2.4 waves of
  // tiles), alternated with no split on the H200 (bench/results/2026-12-03_s24_h200/NOTES.md, call 4);
  // launches of more waves do not split (there it lost 0.5-2.5%). =1 (or 0) splits nothing; =auto takes
  // wgmma_k_splits, a split of every tile; =2-4 splits every tile in that many runs (read per call, for
  // side-by-side runs; lowered until the runs are non-empty). Splitting every tile measured no gain:
  // mixtral-8x7b at 1024 tokens tied (0.99x, two runs) and lost 4% at 128 (four runs, s21 NOTES).
  struct SplitK {
    int k = 1;          // runs (the most, with the tail split)
    bool tail = false;  // only the last partial wave's tiles
  };
  static bool tail_split_mode() { return knob_choice("MOERUN_CUDA_KSPLIT").value_or("tail") == "tail"; }
  SplitK split_k_for(int64_t rows, int groups, int n, int k) const {
    const std::string_view mode = knob_choice("MOERUN_CUDA_KSPLIT").value_or("tail");
    if (mode == "auto") return {wgmma_k_splits(rows, groups, n, k, sm_count_), false};
    const bool tail = mode == "tail";
    if (tail && !wgmma_tail_split_may_apply(rows, groups, n, sm_count_)) return {};
    int s = tail ? kWgmmaMaxKSplits : mode[0] - '0';  // one digit: the table takes 0-4
    if (s <= 1) return {};
    s = std::min(s, kWgmmaMaxKSplits);
    while (s > 1 && !wgmma_k_splits_fit(k, s)) --s;
    return {s, tail && s > 1};
  }
  // The split partials and flags, grown like the other workspaces (never while the stream is being
  // captured) and zero-filled when they grow: the flags must start at zero, and every launch leaves
  // them so.
  void* split_workspace(size_t bytes, cudaStream_t s) {
    if (bytes <= split_ws_.capacity()) return split_ws_.get();
    cuda_detail::DeviceMoe::refuse_if_capturing(s, "this forward's split-K workspace (" + std::to_string(bytes) + " bytes)");
    MOERUN_CUDA_CHECK(cudaDeviceSynchronize());  // the old one may still be in use
    d_.grow(split_ws_, bytes);
    const cudaError_t e = cudaMemsetAsync(split_ws_.get(), 0, split_ws_.capacity(), s);
    if (e != cudaSuccess) split_ws_.release();  // (unzeroed flags must not be kept: the next call grows it again)
    MOERUN_CUDA_CHECK(e);
    return split_ws_.get();
  }

  cuda_detail::RunnerDevice on_device_;  // first: destroyed last (cuda_check.hpp)
  DeviceMoe d_;
  int sm_count_ = 0;
  int l2_bytes_ = 0;
  bool cutlass_ok_ = false;
  cuda_detail::DeviceBuffer cutlass_ws_;
  cuda_detail::DeviceBuffer wgmma_counters_;  // int[2] for launch_wgmma_grouped
  cuda_detail::DeviceBuffer split_ws_;        // its split-K partials and flags (split_workspace)
  OneTokenGeometry one_token_geo_;            // grid 0: the layer does not take the fused one-token stage
  cuda_detail::DeviceBuffer one_token_barrier_;  // int[2] for launch_one_token
  std::atomic<bool> one_token_refused_{false};   // a cooperative launch was refused: the chain from then on
  std::vector<cuda_detail::StreamPick> picks_;  // tune_stream's, ascending m_hi; empty: the rule's 16x32
};

class CudaBackend final : public cuda_detail::GpuBackendBase {
 public:
  CudaBackend() {
    caps_ = cuda_detail::common_gpu_capabilities();
    caps_.needs_arch_specific = true;  // built as sm_90a
    caps_.shared_experts = true;
    caps_.shared_gate = true;
    caps_.cuda_graph_safe = true;
    caps_.host_sync = false;
    // {name, max tokens per expert, why, cpu isa (unused), min tokens per expert, act dtypes (any)}
    caps_.variants = {
        {gemm_config_name(GemmConfig::kStreamM16N32), kStreamMaxTpe,
         "decode: 16x32 tiles (2 warps, 8-stage cp.async) stream each activated expert's weights once; "
         "a large layer's runner times them against 16x64 tiles (mma-stream-m16) per token count and "
         "keeps the faster (one token: MOERUN_CUDA_ONE_TOKEN=1 takes fused-one-token, the whole stage "
         "in one kernel, where the down slice fits shared memory; opt-in, measured no faster)",
         CpuIsa::kScalar, 0.0, {}},
        {gemm_config_name(GemmConfig::kStreamM32), kStream32MaxTpe,
         "32x64 tiles, 5-stage cp.async: a few tokens per expert, weights still streamed once", CpuIsa::kScalar,
         kStreamMaxTpe, {}},
        {kWgmmaVariant, 0.0,
         "more than 12 tokens per expert: the own sm90 grouped GEMM (TMA, warp-specialized wgmma, "
         "128x256 tiles, 64-row last tiles whose warpgroups split the weight rows, a dynamic tile "
         "scheduler, device-side group sizes, the gated activation in gate_up's epilogue) between gather "
         "and combine passes; bf16 and fp16 (CUTLASS's schedules, cutlass-sm90-grouped and "
         "cutlass-sm90-swapab, stay reachable through MOERUN_CUDA_GEMM)",
         CpuIsa::kScalar, kStream32MaxTpe, {}},
    };
  }
  std::string_view name() const override { return "cuda"; }
  std::string_view description() const override {
    return "whole forward on one Hopper GPU: device routing and alignment, grouped tensor-core GEMMs "
           "(own mma.sync tiles with fused gather, activation and scatter for decode; sm90 wgmma/TMA "
           "grouped GEMMs, own and CUTLASS's, for large M); CUDA-graph capturable";
  }
  std::unique_ptr<Runner> create_runner(const MoeSpec& spec, const MoeWeights& weights,
                                        const Platform& platform, const RunnerOptions& options) const override {
    (void)platform;
    return std::make_unique<CudaRunner>(spec, weights, options);
  }
};

}  // namespace

std::shared_ptr<const Backend> make_cuda_backend() { return std::make_shared<CudaBackend>(); }

}  // namespace moerun
