// cpu/cpu_backend.cpp — the `cpu` backend's capabilities and runner factory (cpu_backend.hpp).
#include "backends/cpu/cpu_backend.hpp"

#include <algorithm>

#include "backends/cpu/isa.hpp"
#include "backends/cpu/runner.hpp"
#include "moerun/error.hpp"

namespace moerun {
namespace {

Capabilities make_caps() {
  Capabilities c;
  c.device = DeviceKind::kCpu;
  c.min_cpu_isa = CpuIsa::kAvx2;
  c.formats = every_format();
  c.act_dtypes = {DType::kF32, DType::kF16, DType::kBF16};
  c.activations = every_activation();
  c.interleaved_gate_up = true;
  c.scorings = {Scoring::kSoftmax, Scoring::kSigmoid};
  c.softmax_after_topk = true;
  c.correction_bias = true;
  c.grouped_topk = true;
  c.expert_bias = true;
  c.router_bias = true;
  c.shared_experts = true;
  c.shared_gate = true;
  // Shared experts left unquantized beside quantized routed ones: their stacks pack like any bf16 / f16 /
  // f32 stack, run on every level's kernels (no code layout to agree on with the routed formats'), and
  // their rows skip the routed experts' activation quantization (runner.cpp: saq).
  c.shared_formats = {WeightFormat::kF32, WeightFormat::kF16, WeightFormat::kBF16};
  c.apply_router_weight_on_input = true;
  c.tensor_parallel = true;
  c.expert_parallel = true;
  c.lora = true;
  c.host_sync = false;
  c.variants = {
      {"avx2-stream", static_cast<double>(cpu::kStreamMaxTokens),
       "decode: streams each weight byte once, dequantized in registers, tokens broadcast from L1 (bf16/f32 "
       "weights: up to 16 tokens per expert, groups of 4 over L1-sized K chunks)", CpuIsa::kAvx2, 0.0, {}},
      {"avx2-tiled", 0.0, "prefill: 16-lane weight panels dequantized once into L2, 6x16 FMA register tiles", CpuIsa::kAvx2,
       static_cast<double>(cpu::kStreamMaxTokens), {}},
      {"avx512-stream", static_cast<double>(cpu::kAvx512StreamMaxTokens), "decode on AVX-512: one zmm per k step", CpuIsa::kAvx512, 0.0, {}},
      {"avx512-tiled", 0.0, "prefill on AVX-512: 12x16 FMA register tiles on f32 panels", CpuIsa::kAvx512,
       static_cast<double>(cpu::kAvx512StreamMaxTokens), {}},
      // bf16 layers only, and (the backend's variant() says so per format) bf16, fp8 and fp4 weights:
      // f32, f16 and int8 weights stay on avx512-stream.
      // Every call at the avx512bf16 level where VDPBF16PS issues as fast as an FMA (this machine's
      // measured rate, isa.hpp avx512bf16_stream_max); up to 8 tokens per expert elsewhere.
      {"avx512bf16-stream",
       cpu::avx512bf16_stream_max(cpu::detected_features().bf16_dot_rate) >= cpu::kStreamMaxTokensLimit
           ? 0.0
           : static_cast<double>(cpu::kAvx512Bf16StreamMaxTokens),
       "decode with bf16 activations (and prefill where VDPBF16PS issues at the FMA rate, as on AMD Zen 4): "
       "bf16/fp8/fp4 weights decoded to bf16 pairs by shifts and word-table lookups, one VDPBF16PS per 32 "
       "weights", CpuIsa::kAvx512Bf16, 0.0, {DType::kBF16}},
      // Layers with int8 activation quantization and 4-bit weights only (variant() says so per spec); larger
      // calls run the bf16 / f32 kernels on the dequantized activations.
      {"avx512vnni-q8-stream", static_cast<double>(cpu::kQ8StreamMaxTokens),
       "decode with int8 activations (act_quant int8-token-group, mxfp4/nvfp4 weights): e2m1 codes decoded to "
       "bytes by vpermb, exact VPDPBUSD dot products per K group, one f32 fold per group and token",
       CpuIsa::kAvx512Bf16, 0.0, {}},
      // The same on AVX2 (vpmaddubsw), for every call of such a layer: its weights are packed for it.
      {"avx2-q8-stream", 0.0,
       "int8 activations (act_quant int8-token-group, mxfp4/nvfp4 weights) on AVX2: e2m1 codes decoded to bytes "
       "by vpshufb, exact vpmaddubsw + vpmaddwd dot products per K group, every token count",
       CpuIsa::kAvx2, 0.0, {}},
      // 4-bit layers with bf16 activations the spec leaves unquantized (variant() says so per spec).
      {"avx512vnni-q15-stream", static_cast<double>(cpu::kQ15StreamMaxTokens),
       "decode of mxfp4/nvfp4 weights with bf16 activations: each token held at 15 bits per 32 columns as two "
       "int8 rows (high and low part) through the q8 kernel's exact dot products (up to 8 tokens per expert "
       "at the avx512bf16 level where VDPBF16PS is slow, one where it runs at the FMA rate)",
       CpuIsa::kAvx512Bf16, 0.0, {DType::kBF16}},
      {"avx2-q15-stream", static_cast<double>(cpu::kAvx2Q15StreamMaxTokens),
       "the same on AVX2 (vpmaddubsw); such a layer's tiled calls decode f32 panels from the VNNI words",
       CpuIsa::kAvx2, 0.0, {DType::kBF16}},
      // The AMX level's decode of 2 or more tokens per call (which formats and how many tokens per expert,
      // again per format: variant()).
      {"amx-bf16-stream", static_cast<double>(cpu::kAmxStreamMaxTokensDecoded),
       "2-64 tokens per expert with bf16 activations on AMX: fp8/fp4 weights decoded 16 k pairs at a time "
       "into a bf16 tile in L1, one TDPBF16PS per 512 weights whatever the token count (bf16 weights take "
       "amx-bf16-tiles from 2 tokens)", CpuIsa::kAmx, 1.0, {DType::kBF16}},
      // AMX multiplies bf16 operands: exact for bf16 activations, a precision loss for f16/f32 ones (measured
      // 2e-3..6e-3 relative on the H200 host's Xeon), so only bf16 layers take it.
      {"amx-bf16-tiles", 0.0,
       "AMX tiles on bf16 VNNI panels, two N-blocks a call in 2x2 16x16 f32 accumulator tiles: bf16 weights "
       "from 2 tokens per expert (the packed weights are the panels, read straight from memory), other "
       "formats past their stream cut (panels decoded per block)", CpuIsa::kAmx,
       static_cast<double>(cpu::kAmxStreamMaxTokensBf16), {DType::kBF16}},
  };
  return c;
}

// The kernels run on this machine: its usable level, never above the platform the plan was made for.
CpuIsa runner_isa(const Platform& platform) {
  return static_cast<CpuIsa>(std::min(static_cast<int>(cpu::effective_isa()), static_cast<int>(platform.cpu.isa())));
}

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  std::string_view description() const override {
    return "x86 CPU: AVX2/AVX-512/AMX-BF16 kernels chosen at run time, OpenMP threads, quantized weights "
           "dequantized in the kernels";
  }
  const Capabilities& capabilities() const override { return caps_; }
  std::string variant(const MoeSpec& spec, const Platform& platform, int64_t m) const override {
    // A described platform's own level (what it would run there); on this machine, the level its runner
    // takes. CpuInfo::isa() alone can name a level whose kernels this CPU lacks an extension for (the
    // AVX512-BF16 level also needs VBMI and VNNI: isa.cpp).
    const CpuIsa isa = platform.cpu.vendor == "described" ? platform.cpu.isa() : runner_isa(platform);
    if (isa < CpuIsa::kAvx2) return "";
    return cpu::variant_name(spec, cpu::kernels_for_spec(spec, isa), cpu::pack_fmt_for(spec.weight_format), m);
  }
  std::unique_ptr<Runner> create_runner(const MoeSpec& spec, const MoeWeights& weights, const Platform& platform,
                                        const RunnerOptions& options) const override {
    return std::make_unique<cpu::CpuRunner>(spec, weights, options, runner_isa(platform));
  }

 private:
  Capabilities caps_ = make_caps();
};

}  // namespace

std::shared_ptr<const Backend> make_cpu_backend() { return std::make_shared<const CpuBackend>(); }

}  // namespace moerun
