// Shard arithmetic, random weights for a spec, and the weight checks every loader and backend relies on.
#include "moerun/weights.hpp"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/random.hpp"
#include "moerun/error.hpp"

namespace moerun {

// (ep or tp not positive: a spec that was never validated; 0 rather than a division by zero.)
int local_experts(const MoeSpec& s) noexcept { return s.parallel.ep > 0 ? s.num_experts / s.parallel.ep : 0; }
int first_local_expert(const MoeSpec& s) noexcept {
  return s.parallel.ep > 0 ? (s.parallel.rank % s.parallel.ep) * local_experts(s) : 0;
}
int local_intermediate(const MoeSpec& s) noexcept { return s.parallel.tp > 0 ? s.intermediate / s.parallel.tp : 0; }
int tp_rank(const MoeSpec& s) noexcept { return s.parallel.ep > 0 ? s.parallel.rank / s.parallel.ep : 0; }

namespace {

// Fills one expert's [rows, cols] with uniform values of variance about 1/cols (a = sqrt(3/cols)): the
// scale of a trained layer's weights, so activations neither vanish nor blow up through the two GEMMs.
// The amplitude varies by a factor 2^(k/8), k uniform in -4..4, per expert, per row, per 128 x 128
// block and per 16 columns of a row: every scale a quantized format keeps (per tensor, per channel, per
// block, per 32 or 16 columns) then differs from its neighbours, so a kernel that reads the wrong
// scale fails the harness. With one amplitude for all, 99% of mxfp4's group scales came out equal
// and a kernel reading scale[0] for every group gave the same bits (session 53's review). (The levels
// are literals, not exp2: the weights of a seed are the same bits with any libm.)
constexpr float kAmplitudeLevels[9] = {0.70710678f, 0.77110541f, 0.84089642f, 0.91700404f, 1.0f,
                                       1.09050773f, 1.18920712f, 1.29683955f, 1.41421356f};
constexpr float kLevelMeanSquare = [] {
  float s = 0.0f;
  for (float f : kAmplitudeLevels) s += f * f;
  return s / 9.0f;
}();

void fill_uniform(float* dst, int64_t rows, int64_t cols, uint64_t seed) {
  constexpr int64_t kBlock = 128, kGroup = 16;
  const auto factor = [](SplitMix64& g) { return kAmplitudeLevels[g.below(9)]; };
  SplitMix64 gs(derive_seed(seed, 1));
  const int64_t row_blocks = (rows + kBlock - 1) / kBlock, col_blocks = (cols + kBlock - 1) / kBlock;
  std::vector<float> block(static_cast<size_t>(row_blocks * col_blocks));
  for (float& f : block) f = factor(gs);
  // Four factors multiply the variance by kLevelMeanSquare^4 on average: divided out again.
  const float a = std::sqrt(3.0f / static_cast<float>(cols)) * factor(gs) / (kLevelMeanSquare * kLevelMeanSquare);
  SplitMix64 g(seed);
  for (int64_t r = 0; r < rows; ++r) {
    const float ar = a * factor(gs);
    float ag = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      if (c % kGroup == 0) ag = ar * factor(gs) * block[static_cast<size_t>((r / kBlock) * col_blocks + c / kBlock)];
      dst[r * cols + c] = ag * g.uniform_pm1();
    }
  }
}

HostTensor random_f32(Shape shape, float amplitude, uint64_t seed) {
  HostTensor t(DType::kF32, shape);
  SplitMix64 g(seed);
  float* p = t.as<float>();
  for (int64_t i = 0; i < shape.numel(); ++i) p[i] = amplitude * g.uniform_pm1();
  return t;
}

// Copies a one-expert tensor into slot e of an [E, ...] destination created on first use.
void place(const TensorView& one, int64_t experts, int64_t e, std::shared_ptr<HostTensor>& dst) {
  if (one.data == nullptr) return;  // absent (a rank-0 view has numel 1: test the pointer)
  if (!dst) {
    Shape s = one.shape;
    s.dims[0] = experts;
    dst = std::make_shared<HostTensor>(one.dtype, s);
  }
  const size_t per = one.nbytes();
  std::memcpy(static_cast<char*>(dst->data()) + per * static_cast<size_t>(e), one.data, per);
}

// Random [E, N, K] expert stack in `format`: generated and quantized one expert at a time (parallel),
// so peak extra memory is one fp32 expert per thread, not a full fp32 copy of the stack.
ExpertMatrix random_stack(WeightFormat format, int64_t experts, int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<ExpertMatrix> parts(static_cast<size_t>(experts));
  std::shared_ptr<HostTensor> data, scale, global;
  std::exception_ptr failure;
#pragma omp parallel
  {
    // No exception may leave the parallel region (std::terminate): a failed allocation of the
    // per-thread buffer is recorded like any other and rethrown after it.
    std::vector<float> buf;
    try {
      buf.resize(static_cast<size_t>(rows * cols));
    } catch (...) {
#pragma omp critical
      failure = std::current_exception();
    }
#pragma omp for schedule(dynamic)
    for (int64_t e = 0; e < experts; ++e) {
      if (buf.empty() && rows * cols > 0) continue;  // (this thread's buffer failed: recorded above)
      try {
        fill_uniform(buf.data(), rows, cols, derive_seed(seed, static_cast<uint64_t>(e)));
        parts[static_cast<size_t>(e)] = quantize_experts(format, buf.data(), 1, rows, cols);
      } catch (...) {
#pragma omp critical
        failure = std::current_exception();
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
  for (int64_t e = 0; e < experts; ++e) {
    const ExpertMatrix& p = parts[static_cast<size_t>(e)];
    place(p.data, experts, e, data);
    place(p.scale, experts, e, scale);
    place(p.global_scale, experts, e, global);
  }
  ExpertMatrix m;
  m.format = format;
  m.experts = experts;
  m.rows = rows;
  m.cols = cols;
  if (data) { m.data = data->view(); m.keepalive.push_back(data); }
  if (scale) { m.scale = scale->view(); m.keepalive.push_back(scale); }
  if (global) { m.global_scale = global->view(); m.keepalive.push_back(global); }
  return m;
}

void expect_f32(const HostTensor& t, Shape shape, bool required, const std::string& what) {
  if (!required) {
    if (!t.empty())
      throw_error(ErrorKind::kFormat, "unexpected " + what + " " + t.shape().str() + ": the spec has none");
    return;
  }
  if (t.empty() && shape.numel() > 0)
    throw_error(ErrorKind::kFormat, "missing " + what + " (expected F32 " + shape.str() + ")");
  if (t.dtype() != DType::kF32 || !(t.shape() == shape))
    throw_error(ErrorKind::kFormat, "expected F32 " + shape.str() + ", got " + std::string(dtype_name(t.dtype())) +
                                        " " + t.shape().str() + " for " + what);
}

void expect_dims(const ExpertMatrix& m, int64_t e, int64_t n, int64_t k, WeightFormat f, const std::string& what) {
  if (m.experts != e || m.rows != n || m.cols != k || m.format != f)
    throw_error(ErrorKind::kFormat, "expected " + std::string(to_string(f)) + " [" + std::to_string(e) + ", " +
                                        std::to_string(n) + ", " + std::to_string(k) + "], got " +
                                        std::string(to_string(m.format)) + " [" + std::to_string(m.experts) + ", " +
                                        std::to_string(m.rows) + ", " + std::to_string(m.cols) + "] for " + what);
  check_expert_matrix(m, what);
}

}  // namespace

MoeWeights random_weights(const MoeSpec& spec, uint64_t seed) {
  spec.validate();
  const int el = local_experts(spec), il = local_intermediate(spec), h = spec.hidden;
  const int r = spec.w13_rows() / spec.parallel.tp;
  MoeWeights w;
  w.w13 = random_stack(spec.weight_format, el, r, h, derive_seed(seed, 1));
  w.w2 = random_stack(spec.weight_format, el, h, il, derive_seed(seed, 2));
  if (spec.expert_bias) {
    w.w13_bias = random_f32({el, r}, 0.1f, derive_seed(seed, 3));
    w.w2_bias = random_f32({el, h}, 0.1f, derive_seed(seed, 4));
  }
  w.router_weight = random_f32({spec.num_experts, h}, std::sqrt(3.0f / static_cast<float>(h)), derive_seed(seed, 5));
  if (spec.router_bias) w.router_bias = random_f32({spec.num_experts}, 0.1f, derive_seed(seed, 6));
  if (spec.routing.correction_bias) w.correction_bias = random_f32({spec.num_experts}, 0.05f, derive_seed(seed, 7));
  if (spec.shared.count > 0) {
    const int is = spec.shared.intermediate / spec.parallel.tp;
    w.shared_w13 = random_stack(spec.shared_weight_format(), 1, 2 * is, h, derive_seed(seed, 8));
    w.shared_w2 = random_stack(spec.shared_weight_format(), 1, h, is, derive_seed(seed, 9));
    if (spec.shared.gated_by_router)
      w.shared_gate = random_f32({1, h}, std::sqrt(3.0f / static_cast<float>(h)), derive_seed(seed, 10));
  }
  return w;
}

int64_t estimate_weight_bytes(const MoeSpec& spec) noexcept {
  if (spec.parallel.tp <= 0 || spec.parallel.ep <= 0) return 0;  // (an unvalidated spec)
  const auto bytes_per = [](WeightFormat f) {
    switch (f) {
      case WeightFormat::kF32: return 4.0;
      case WeightFormat::kF16: case WeightFormat::kBF16: return 2.0;
      case WeightFormat::kMxfp4: return 0.5 + 1.0 / 32;
      case WeightFormat::kNvfp4: return 0.5 + 1.0 / 16;
      default: return 1.0;  // fp8 and int8; their scales are < 1%
    }
  };
  const double r = (spec.activation.gated() ? 2.0 : 1.0) * spec.intermediate / spec.parallel.tp;  // (w13_rows in double)
  const double h = spec.hidden, il = local_intermediate(spec);
  double bytes = local_experts(spec) * (r * h + h * il) * bytes_per(spec.weight_format);
  if (spec.shared.count > 0)
    bytes += 3.0 * h * spec.shared.intermediate / spec.parallel.tp * bytes_per(spec.shared_weight_format());
  return static_cast<int64_t>(bytes);
}

LoraWeights random_lora(const MoeSpec& spec, uint64_t seed) {
  LoraWeights l;
  l.adapters = spec.lora.max_adapters;
  l.rank = spec.lora.max_rank;
  if (l.adapters == 0) return l;
  const int64_t L = l.adapters, el = local_experts(spec), r = l.rank, h = spec.hidden;
  const int64_t rows = spec.w13_rows() / spec.parallel.tp, il = local_intermediate(spec);
  const float sa = std::sqrt(3.0f / static_cast<float>(h)), sb = 0.5f / static_cast<float>(r);
  l.gate_up_a = random_f32({L, el, r, h}, sa, derive_seed(seed, 21));
  l.gate_up_b = random_f32({L, el, rows, r}, sb, derive_seed(seed, 22));
  l.down_a = random_f32({L, el, r, il}, std::sqrt(3.0f / static_cast<float>(il)), derive_seed(seed, 23));
  l.down_b = random_f32({L, el, h, r}, sb, derive_seed(seed, 24));
  return l;
}

HostTensor random_token_adapters(int64_t tokens, int adapters, uint64_t seed) {
  HostTensor t(DType::kI32, {tokens});
  SplitMix64 g(seed);
  for (int64_t i = 0; i < tokens; ++i)
    t.as<int32_t>()[i] = static_cast<int32_t>(g.below(static_cast<uint32_t>(adapters + 1))) - 1;
  return t;
}

void check_weights(const MoeSpec& spec, const MoeWeights& w) {
  const int64_t el = local_experts(spec), il = local_intermediate(spec), h = spec.hidden;
  const int64_t r = spec.w13_rows() / spec.parallel.tp;
  expect_dims(w.w13, el, r, h, spec.weight_format, "w13");
  expect_dims(w.w2, el, h, il, spec.weight_format, "w2");
  if (spec.shared.count > 0) {
    const int64_t is = spec.shared.intermediate / spec.parallel.tp;
    expect_dims(w.shared_w13, 1, 2 * is, h, spec.shared_weight_format(), "shared_w13");
    expect_dims(w.shared_w2, 1, h, is, spec.shared_weight_format(), "shared_w2");
  } else if (!w.shared_w13.empty() || !w.shared_w2.empty()) {
    throw_error(ErrorKind::kFormat, "unexpected shared expert weights: spec.shared.count = 0");
  }
  check_weight_tensors(spec, w);
}

void check_weight_tensors(const MoeSpec& spec, const MoeWeights& w) {
  const int64_t el = local_experts(spec), h = spec.hidden;
  const int64_t r = spec.w13_rows() / spec.parallel.tp, e = spec.num_experts;
  expect_f32(w.w13_bias, {el, r}, spec.expert_bias, "w13_bias");
  expect_f32(w.w2_bias, {el, h}, spec.expert_bias, "w2_bias");
  if (!w.router_weight.empty()) expect_f32(w.router_weight, {e, h}, true, "router_weight");
  expect_f32(w.router_bias, {e}, spec.router_bias, "router_bias");
  expect_f32(w.correction_bias, {e}, spec.routing.correction_bias, "correction_bias");
  expect_f32(w.shared_gate, {1, h}, spec.shared.gated_by_router, "shared_gate");
}

void check_weights_on_host(const MoeWeights& w, std::string_view backend) {
  const std::pair<const ExpertMatrix*, const char*> stacks[] = {
      {&w.w13, "w13"}, {&w.w2, "w2"}, {&w.shared_w13, "shared_w13"}, {&w.shared_w2, "shared_w2"}};
  for (const auto& [m, name] : stacks)
    for (const auto& [v, part] : {std::pair<const TensorView*, const char*>{&m->data, "data"},
                                  {&m->scale, "scale"}, {&m->global_scale, "global_scale"}})
      if (!v->empty() && v->device != DeviceKind::kCpu)
        throw_error(ErrorKind::kInvalidArgument, std::string(backend) + " reads weights on the CPU: " + name + "." + part +
                                                     " is on cuda:" + std::to_string(v->device_index) +
                                                     "; give it host weights");
}

void check_lora(const MoeSpec& spec, const LoraWeights& l) {
  if (l.adapters < 1 || l.adapters > spec.lora.max_adapters)
    throw_error(ErrorKind::kInvalidArgument, "lora adapters = " + std::to_string(l.adapters) + ": must be in [1, spec.lora.max_adapters=" +
                                                 std::to_string(spec.lora.max_adapters) + "]");
  if (l.rank < 1 || l.rank > spec.lora.max_rank)
    throw_error(ErrorKind::kInvalidArgument, "lora rank = " + std::to_string(l.rank) + ": must be in [1, spec.lora.max_rank=" +
                                                 std::to_string(spec.lora.max_rank) + "]");
  const int64_t L = l.adapters, el = local_experts(spec), r = l.rank, h = spec.hidden;
  const int64_t rows = spec.w13_rows() / spec.parallel.tp, il = local_intermediate(spec);
  expect_f32(l.gate_up_a, {L, el, r, h}, true, "lora.gate_up_a");
  expect_f32(l.gate_up_b, {L, el, rows, r}, true, "lora.gate_up_b");
  expect_f32(l.down_a, {L, el, r, il}, true, "lora.down_a");
  expect_f32(l.down_b, {L, el, h, r}, true, "lora.down_b");
}

}  // namespace moerun
