#include "backends/reference/reference_backend.hpp"

#include <cmath>
#include <vector>

#include "core/activation.hpp"
#include "core/convert.hpp"
#include "core/dequantize.hpp"
#include "dispatch/dispatch.hpp"
#include "moerun/error.hpp"
#include "moerun/formats.hpp"
#include "routing/topk.hpp"

namespace moerun {
namespace {

Capabilities reference_capabilities() {
  Capabilities c;
  c.device = DeviceKind::kCpu;
  c.min_cpu_isa = CpuIsa::kScalar;
  c.formats = every_format();
  c.act_dtypes = {DType::kF32, DType::kF16, DType::kBF16};
  c.activations = every_activation();
  c.interleaved_gate_up = true;
  c.scorings = {Scoring::kSoftmax, Scoring::kSigmoid};
  c.softmax_after_topk = c.correction_bias = c.grouped_topk = true;
  c.expert_bias = c.router_bias = c.shared_experts = c.shared_gate = c.apply_router_weight_on_input = true;
  for (const FormatSupport& f : c.formats)
    if (f.act_quant == ActQuant::kNone) c.shared_formats.push_back(f.weights);
  c.tensor_parallel = c.expert_parallel = c.lora = true;
  c.variants = {{"scalar-double", 0, "dequantizes each activated expert to fp32 and accumulates in double", CpuIsa::kScalar, 0.0, {}}};
  return c;
}

// y[n] = sum_k W[n][k] * x[k] in double, W dense fp32 [rows, cols].
void matvec(const float* w, int64_t rows, int64_t cols, const float* x, double* y) {
  for (int64_t n = 0; n < rows; ++n) {
    double acc = 0.0;
    const float* wr = w + n * cols;
    for (int64_t k = 0; k < cols; ++k) acc += static_cast<double>(wr[k]) * x[k];
    y[n] = acc;
  }
}

// (The stacks were checked when the runner was made: check_weights.)
std::vector<float> dequantize_expert(const ExpertMatrix& m, int64_t e) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  for (int64_t n = 0; n < m.rows; ++n) dequantize_row_unchecked(m, e, n, out.data() + n * m.cols);
  return out;
}

class ReferenceRunner final : public Runner {
 public:
  ReferenceRunner(const MoeSpec& spec, const MoeWeights& w) : spec_(spec), w_(w) {
    for (const ExpertMatrix* m : {&w.w13, &w.w2, &w.shared_w13, &w.shared_w2})
      if (!m->empty() && m->layout != "canonical")
        throw_error(ErrorKind::kInvalidArgument, "reference backend needs canonical weights, got layout '" + m->layout + "'");
    // create_runner may be called without MoeLayer's check: the loops below trust every shape.
    check_weights_on_host(w, "reference backend");
    check_weights(spec, w);
  }

  void forward(const ForwardArgs& args) override {
    const int64_t m = args.hidden.shape[0], h = spec_.hidden;
    const int k = spec_.top_k;
    std::vector<float> x(static_cast<size_t>(m * h));
    convert_to_f32(args.hidden, x.data());
    std::vector<int32_t> ids;
    std::vector<float> topw, logits;
    routing::route_host(spec_, w_, args, x.data(), ids, topw, logits);
    dispatch::Dispatch d;
    dispatch::build_dispatch(spec_, ids.data(), topw.data(), m, d);

    // Per (token, slot) expert outputs, then the combine stage sums them in slot order.
    std::vector<double> y(static_cast<size_t>(m * k * h), 0.0);
    std::vector<char> has(static_cast<size_t>(m * k), 0);
    const int units = local_intermediate(spec_);
    const int rows13 = static_cast<int>(w_.w13.rows);
    const bool add_b2 = spec_.expert_bias && tp_rank(spec_) == 0;

#pragma omp parallel for schedule(dynamic)
    for (int e = 0; e < d.local_experts; ++e) {
      if (d.count(e) == 0) continue;
      const std::vector<float> w13 = dequantize_expert(w_.w13, e);
      const std::vector<float> w2 = dequantize_expert(w_.w2, e);
      std::vector<float> xin(static_cast<size_t>(h)), act(static_cast<size_t>(units));
      std::vector<double> h1(static_cast<size_t>(rows13)), out(static_cast<size_t>(h));
      for (int32_t row = d.offsets[static_cast<size_t>(e)]; row < d.offsets[static_cast<size_t>(e) + 1]; ++row) {
        const int32_t t = d.token[static_cast<size_t>(row)];
        const float wt = d.weight[static_cast<size_t>(row)];
        for (int64_t c = 0; c < h; ++c)
          xin[static_cast<size_t>(c)] = spec_.apply_router_weight_on_input ? x[static_cast<size_t>(t * h + c)] * wt : x[static_cast<size_t>(t * h + c)];
        fake_quantize_act(spec_.act_quant, xin.data(), 1, h);
        matvec(w13.data(), rows13, h, xin.data(), h1.data());
        if (spec_.expert_bias)
          for (int n = 0; n < rows13; ++n) h1[static_cast<size_t>(n)] += w_.w13_bias.as<const float>()[e * rows13 + n];
        // LoRA reads the activations the base GEMM reads, after the dynamic quantization: one definition
        // for every backend (an engine that feeds LoRA the unquantized activations differs from this by
        // the quantization's error on the LoRA term alone).
        const int adapter = lora_adapter(args, t);
        if (adapter >= 0) add_lora(*args.lora->weights, adapter, e, true, xin.data(), h, h1.data(), rows13);
        for (int i = 0; i < units; ++i) {
          const float g = static_cast<float>(h1[static_cast<size_t>(gate_row(spec_.activation, i, units))]);
          const float u = spec_.activation.gated() ? static_cast<float>(h1[static_cast<size_t>(up_row(spec_.activation, i, units))]) : 0.0f;
          act[static_cast<size_t>(i)] = apply_activation(spec_.activation, g, u);
        }
        fake_quantize_act(spec_.act_quant, act.data(), 1, units);
        matvec(w2.data(), h, units, act.data(), out.data());
        if (add_b2)
          for (int64_t c = 0; c < h; ++c) out[static_cast<size_t>(c)] += w_.w2_bias.as<const float>()[e * h + c];
        if (adapter >= 0) add_lora(*args.lora->weights, adapter, e, false, act.data(), units, out.data(), h);
        const double scale = spec_.apply_router_weight_on_input ? 1.0 : wt;
        const size_t base = static_cast<size_t>((t * k + d.slot[static_cast<size_t>(row)]) * h);
        for (int64_t c = 0; c < h; ++c) y[base + static_cast<size_t>(c)] = scale * out[static_cast<size_t>(c)];
        has[static_cast<size_t>(t * k + d.slot[static_cast<size_t>(row)])] = 1;
      }
    }

    std::vector<float> result(static_cast<size_t>(m * h), 0.0f);
    for (int64_t t = 0; t < m; ++t)
      for (int64_t c = 0; c < h; ++c) {
        double acc = 0.0;
        for (int j = 0; j < k; ++j)
          if (has[static_cast<size_t>(t * k + j)]) acc += y[static_cast<size_t>((t * k + j) * h + c)];
        result[static_cast<size_t>(t * h + c)] = static_cast<float>(acc);
      }
    // Every EP rank sees all tokens and the rank outputs are summed, so exactly one EP rank (the
    // first) adds the shared experts' tp slice.
    if (spec_.shared.count > 0 && spec_.parallel.rank % spec_.parallel.ep == 0) add_shared(x.data(), m, result.data());
    convert_from_f32(result.data(), args.output);
  }

 private:
  static int lora_adapter(const ForwardArgs& args, int64_t t) {
    if (!args.lora || !args.lora->weights || args.lora->token_adapter.empty()) return -1;
    return args.lora->token_adapter.as<const int32_t>()[t];
  }

  // acc[rows] += B[a][e] @ (A[a][e] @ x): the adapter's delta for one GEMM.
  void add_lora(const LoraWeights& l, int a, int e, bool gate_up, const float* x, int64_t cols, double* acc, int64_t rows) const {
    const int64_t el = local_experts(spec_), r = l.rank;
    const float* A = (gate_up ? l.gate_up_a : l.down_a).as<const float>() + ((a * el + e) * r) * cols;
    const float* B = (gate_up ? l.gate_up_b : l.down_b).as<const float>() + ((a * el + e) * rows) * r;
    std::vector<double> ax(static_cast<size_t>(r));
    matvec(A, r, cols, x, ax.data());
    for (int64_t n = 0; n < rows; ++n) {
      double s = 0.0;
      for (int64_t j = 0; j < r; ++j) s += static_cast<double>(B[n * r + j]) * ax[static_cast<size_t>(j)];
      acc[n] += s;
    }
  }

  // Shared experts: a dense gated MLP every token passes through, optionally gated by sigmoid(x . g).
  void add_shared(const float* x, int64_t m, float* result) const {
    const int64_t h = spec_.hidden, units = w_.shared_w2.cols;
    const std::vector<float> w13 = dequantize_expert(w_.shared_w13, 0);
    const std::vector<float> w2 = dequantize_expert(w_.shared_w2, 0);
    // Shared experts are always gated silu-style MLPs in the models we read, except that they use the
    // layer's activation kind when it is gated; non-gated layers have none.
    Activation a = spec_.activation;
    a.interleaved_gate_up = false;
#pragma omp parallel for
    for (int64_t t = 0; t < m; ++t) {
      std::vector<float> xin(x + t * h, x + (t + 1) * h), act(static_cast<size_t>(units));
      std::vector<double> h1(static_cast<size_t>(2 * units)), out(static_cast<size_t>(h));
      fake_quantize_act(spec_.shared_act_quant(), xin.data(), 1, h);
      matvec(w13.data(), 2 * units, h, xin.data(), h1.data());
      for (int64_t i = 0; i < units; ++i)
        act[static_cast<size_t>(i)] = apply_activation(a, static_cast<float>(h1[static_cast<size_t>(i)]), static_cast<float>(h1[static_cast<size_t>(units + i)]));
      fake_quantize_act(spec_.shared_act_quant(), act.data(), 1, units);
      matvec(w2.data(), h, units, act.data(), out.data());
      double gate = 1.0;
      if (spec_.shared.gated_by_router) {
        double dot = 0.0;
        for (int64_t c = 0; c < h; ++c) dot += static_cast<double>(x[t * h + c]) * w_.shared_gate.as<const float>()[c];
        gate = 1.0 / (1.0 + std::exp(-dot));
      }
      for (int64_t c = 0; c < h; ++c) result[t * h + c] = static_cast<float>(result[t * h + c] + gate * out[static_cast<size_t>(c)]);
    }
  }

  MoeSpec spec_;
  const MoeWeights& w_;
};

class ReferenceBackend final : public Backend {
 public:
  std::string_view name() const override { return "reference"; }
  std::string_view description() const override {
    return "ground truth: every format and feature, dequantize + double accumulation (slow)";
  }
  const Capabilities& capabilities() const override { return caps_; }
  std::unique_ptr<Runner> create_runner(const MoeSpec& spec, const MoeWeights& weights, const Platform&,
                                        const RunnerOptions&) const override {
    return std::make_unique<ReferenceRunner>(spec, weights);
  }

 private:
  Capabilities caps_ = reference_capabilities();
};

}  // namespace

std::shared_ptr<const Backend> make_reference_backend() { return std::make_shared<ReferenceBackend>(); }

}  // namespace moerun
