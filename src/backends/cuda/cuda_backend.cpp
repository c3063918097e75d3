// cuda/cuda_backend.cpp — the `cuda` backend: capabilities, and a runner that launches the forward.
#include "backends/cuda/cuda_backend.hpp"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "backends/cuda/device_runner.hpp"

namespace moerun {
namespace {

using cuda_detail::DeviceMoe;
using namespace cuda_kernels;

// Kernel variant by tokens per expert (m * k / E); the same rule feeds Capabilities::variants.
// Thresholds from bench/results (H200, 4 model shapes, M 1..8192, every variant forced): stream-m16
// wins up to ~8 tokens per expert, tile-m64 from 32 on (and beats tile-m128 at every size measured,
// so tile-m128 is reachable only through MOERUN_CUDA_GEMM).
constexpr double kStreamMaxTpe = 8.0;
constexpr double kStream32MaxTpe = 16.0;

// MOERUN_CUDA_GEMM=<variant name> forces one GEMM variant (benchmarks and tuning only).
int forced_config() {
  const char* v = std::getenv("MOERUN_CUDA_GEMM");
  if (!v || !*v) return -1;
  for (int c = 0; c < kNumGemmConfigs; ++c)
    if (std::strcmp(v, gemm_config_name(static_cast<GemmConfig>(c))) == 0) return c;
  return -1;
}

GemmConfig config_for_tpe(double tpe) {
  const int f = forced_config();
  if (f >= 0) return static_cast<GemmConfig>(f);
  if (tpe <= kStreamMaxTpe) return GemmConfig::kStreamM16;
  if (tpe <= kStream32MaxTpe) return GemmConfig::kStreamM32;
  return GemmConfig::kTileM64;
}

class CudaRunner final : public Runner {
 public:
  CudaRunner(const MoeSpec& spec, const MoeWeights& w, const RunnerOptions& o)
      : d_(spec, w, o.device_index, true) {}

  std::string variant_for(int64_t m) const override { return gemm_config_name(config_for(m)); }

  void forward(const ForwardArgs& args) override {
    const int64_t m = args.hidden.shape.rank > 0 ? args.hidden.shape[0] : 0;
    if (m == 0) return;
    const GemmConfig cfg = config_for(m);
    const int bm = gemm_block_m(cfg);
    const auto call = d_.begin(args, bm);
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
    g1.interleaved = sp.activation.interleaved_gate_up;
    g1.bias = sp.expert_bias ? d_.b13.as<float>() : nullptr;
    g1.inter = d_.inter_buf.get();
    g1.ld_inter = I;
    MOERUN_CUDA_CHECK(launch_grouped_gemm(el, cfg, g1, s));

    GroupedGemmParams g2 = g1;
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
    g2.slot_of_row = al.slot_of_row;
    g2.weight_of_row = al.weight_of_row;
    MOERUN_CUDA_CHECK(launch_grouped_gemm(el, cfg, g2, s));

    const float* shared = nullptr;
    if (d_.shared_inter() > 0) {
      const GemmConfig sc = config_for_tpe(static_cast<double>(m));
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
      s1.interleaved = false;  // shared w13 is gate rows then up rows
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
      MOERUN_CUDA_CHECK(launch_grouped_gemm(el, sc, s2, s));
      shared = d_.sout.as<float>();
    }
    MOERUN_CUDA_CHECK(launch_combine(d_.rows_buf.as<float>(), m, K, H, shared,
                                     sp.shared.gated_by_router ? d_.sgate.as<float>() : nullptr,
                                     call.hidden, el, call.out, el, s));
    d_.finish(args, call);
  }

 private:
  GemmConfig config_for(int64_t m) const {
    return config_for_tpe(static_cast<double>(m) * d_.top_k() / d_.experts());
  }
  DeviceMoe d_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    caps_ = cuda_detail::common_gpu_capabilities();
    caps_.needs_arch_specific = true;  // built as sm_90a
    caps_.shared_experts = true;
    caps_.shared_gate = true;
    caps_.cuda_graph_safe = true;
    caps_.host_sync = false;
    caps_.variants = {
        {gemm_config_name(GemmConfig::kStreamM16), kStreamMaxTpe,
         "decode: 16-row tiles stream each activated expert's weights once, 6-stage cp.async"},
        {gemm_config_name(GemmConfig::kStreamM32), kStream32MaxTpe,
         "32x64 tiles, 5-stage cp.async: a few tokens per expert, weights still streamed once"},
        {gemm_config_name(GemmConfig::kTileM64), 0.0,
         "64x128 tensor-core tiles (mma.sync), 4-stage cp.async pipeline"},
    };
  }
  std::string_view name() const override { return "cuda"; }
  std::string_view description() const override {
    return "whole forward on one Hopper GPU: device routing and alignment, grouped tensor-core GEMMs "
           "with fused gather, activation and weighted scatter; CUDA-graph capturable";
  }
  const Capabilities& capabilities() const override { return caps_; }
  void extra_checks(const MoeSpec& spec, const Platform& platform, Support& out) const override {
    (void)platform;
    cuda_detail::common_gpu_checks(spec, out);
  }
  std::unique_ptr<Runner> create_runner(const MoeSpec& spec, const MoeWeights& weights,
                                        const Platform& platform, const RunnerOptions& options) const override {
    (void)platform;
    return std::make_unique<CudaRunner>(spec, weights, options);
  }

 private:
  Capabilities caps_;
};

}  // namespace

std::shared_ptr<const Backend> make_cuda_backend() { return std::make_shared<CudaBackend>(); }

}  // namespace moerun
