// example-scalar: a complete, deliberately simple out-of-tree moerun backend.
//
// It shows everything a plugin does: declare capabilities as JSON, read the spec JSON, keep pointers
// to the host's weights, and compute output = sum_k w_k * expert_k(x) (+ shared experts) for the
// top-k the host routed. Dense f32/f16/bf16 weights only, each matrix read in its own dtype (so shared
// experts may be in another one than the routed experts: "shared_formats"); every activation; expert
// biases; shared experts. `moerun verify --plugin libmoerun_example_plugin.so --backend example-scalar` checks it
// against the reference like any built-in.
#include <moerun/plugin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#ifndef EXAMPLE_ABI_VERSION
#define EXAMPLE_ABI_VERSION MOERUN_PLUGIN_ABI_VERSION
#endif

namespace {

float half_to_f32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = man;
      do { ++e; m <<= 1; } while (!(m & 0x400u));
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (m & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 112) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
float bf16_to_f32(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
uint16_t f32_to_half(float f) {
  // Round to nearest even through the bit pattern (normal and subnormal range; saturates to inf).
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (x < 0x38800000u) {  // subnormal or zero in half
    float a;
    std::memcpy(&a, &x, 4);
    const float scaled = a * 16777216.0f;  // 2^24: half subnormal unit is 2^-24
    const uint32_t v = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | v);
  }
  const uint32_t rounded = x + 0xfffu + ((x >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

float load(const moerun_tensor& t, int64_t i) {
  switch (t.dtype) {
    case MOERUN_F32: return static_cast<const float*>(t.data)[i];
    case MOERUN_F16: return half_to_f32(static_cast<const uint16_t*>(t.data)[i]);
    case MOERUN_BF16: return bf16_to_f32(static_cast<const uint16_t*>(t.data)[i]);
    default: return NAN;
  }
}
void store(const moerun_tensor& t, int64_t i, float v) {
  switch (t.dtype) {
    case MOERUN_F32: static_cast<float*>(t.data)[i] = v; break;
    case MOERUN_F16: static_cast<uint16_t*>(t.data)[i] = f32_to_half(v); break;
    case MOERUN_BF16: static_cast<uint16_t*>(t.data)[i] = f32_to_bf16(v); break;
    default: break;
  }
}

struct Runner {
  int experts = 0, top_k = 0, hidden = 0, units = 0, first_expert = 0, local_experts = 0;
  std::string activation;
  float alpha = 1.702f, limit = 7.0f;
  bool interleaved = false, weight_on_input = false, add_shared = false, shared_gated = false, add_b2 = false;
  moerun_weights w{};
};

float activate(const Runner& r, float g, float u) {
  auto silu = [](float x) { return x / (1.0f + std::exp(-x)); };
  if (r.activation == "silu-and-mul") return silu(g) * u;
  if (r.activation == "gelu-and-mul") return 0.5f * g * (1.0f + std::erf(g * 0.70710678f)) * u;
  if (r.activation == "gelu-tanh-and-mul") return 0.5f * g * (1.0f + std::tanh(0.7978845608f * (g + 0.044715f * g * g * g))) * u;
  if (r.activation == "swiglu-oai") {
    if (r.limit > 0) {
      g = std::fmin(g, r.limit);
      u = std::fmax(-r.limit, std::fmin(u, r.limit));
    }
    return g / (1.0f + std::exp(-r.alpha * g)) * (u + 1.0f);
  }
  if (r.activation == "relu2") return g > 0 ? g * g : 0.0f;
  return silu(g);  // "silu"
}

// y[H] += scale * MLP_e(x): gate/up GEMM, activation, down GEMM (fp32 accumulation).
void mlp(const Runner& r, const moerun_expert_matrix& w13, const moerun_expert_matrix& w2, int64_t e, const float* x, float scale,
         const moerun_tensor* b13, const moerun_tensor* b2, bool interleaved, bool gated, std::vector<float>& h1, float* y) {
  const int64_t rows = w13.rows, units = w2.cols, H = r.hidden;
  h1.assign(static_cast<size_t>(rows), 0.0f);
  for (int64_t n = 0; n < rows; ++n) {
    float acc = b13 && b13->data ? load(*b13, e * rows + n) : 0.0f;
    for (int64_t k = 0; k < H; ++k) acc += load(w13.data, (e * rows + n) * H + k) * x[k];
    h1[static_cast<size_t>(n)] = acc;
  }
  std::vector<float> a(static_cast<size_t>(units));
  for (int64_t i = 0; i < units; ++i) {
    const int64_t gi = interleaved ? 2 * i : i, ui = interleaved ? 2 * i + 1 : units + i;
    a[static_cast<size_t>(i)] = activate(r, h1[static_cast<size_t>(gi)], gated ? h1[static_cast<size_t>(ui)] : 0.0f);
  }
  for (int64_t c = 0; c < H; ++c) {
    float acc = b2 && b2->data ? load(*b2, e * H + c) : 0.0f;
    for (int64_t i = 0; i < units; ++i) acc += load(w2.data, (e * H + c) * units + i) * a[static_cast<size_t>(i)];
    y[c] += scale * acc;
  }
}

int fail(char* err, size_t len, const std::string& msg) {
  std::snprintf(err, len, "%s", msg.c_str());
  return 1;
}

int create(const char* spec_json, const moerun_weights* weights, int32_t, void** out, char* err, size_t len) {
  try {
    const auto s = nlohmann::json::parse(spec_json);
    auto r = std::make_unique<Runner>();
    r->experts = s.at("num_experts");
    r->top_k = s.at("top_k");
    r->hidden = s.at("hidden");
    r->activation = s.at("activation").at("kind");
    r->alpha = s.at("activation").at("swiglu_alpha");
    r->limit = s.at("activation").at("swiglu_limit");
    r->interleaved = s.at("activation").at("interleaved_gate_up");
    r->weight_on_input = s.at("apply_router_weight_on_input");
    const int ep = s.at("parallel").at("ep"), rank = s.at("parallel").at("rank");
    r->local_experts = r->experts / ep;
    r->first_expert = (rank % ep) * r->local_experts;
    r->add_shared = s.at("shared").at("count").get<int>() > 0 && rank % ep == 0;
    r->shared_gated = s.at("shared").at("gated_by_router");
    r->add_b2 = s.at("expert_bias").get<bool>() && rank / ep == 0;
    r->w = *weights;
    for (const moerun_expert_matrix* m : {&r->w.w13, &r->w.w2, &r->w.shared_w13, &r->w.shared_w2})
      if (m->data.data && m->format != MOERUN_FMT_F32 && m->format != MOERUN_FMT_F16 && m->format != MOERUN_FMT_BF16)
        return fail(err, len, "example-scalar reads only f32/f16/bf16 weights");
    *out = r.release();
    return 0;
  } catch (const std::exception& e) {
    return fail(err, len, std::string("bad spec: ") + e.what());
  }
}

int forward_unguarded(void* handle, const moerun_forward_args* a, char* err, size_t len) {
  const Runner& r = *static_cast<const Runner*>(handle);
  const int64_t M = a->hidden.dims[0], H = r.hidden, K = r.top_k;
  if (a->hidden.device != 0) return fail(err, len, "example-scalar runs on host memory only");
  const bool gated = r.activation != "relu2" && r.activation != "silu";
  std::vector<float> x(static_cast<size_t>(H)), xin(static_cast<size_t>(H)), y(static_cast<size_t>(H)), h1;
  for (int64_t t = 0; t < M; ++t) {
    for (int64_t c = 0; c < H; ++c) x[static_cast<size_t>(c)] = load(a->hidden, t * H + c);
    std::fill(y.begin(), y.end(), 0.0f);
    for (int64_t j = 0; j < K; ++j) {
      const int32_t id = static_cast<const int32_t*>(a->topk_ids.data)[t * K + j];
      const float wt = static_cast<const float*>(a->topk_weights.data)[t * K + j];
      const int64_t e = id - r.first_expert;
      if (e < 0 || e >= r.local_experts) continue;  // another rank's expert
      for (int64_t c = 0; c < H; ++c) xin[static_cast<size_t>(c)] = r.weight_on_input ? x[static_cast<size_t>(c)] * wt : x[static_cast<size_t>(c)];
      mlp(r, r.w.w13, r.w.w2, e, xin.data(), r.weight_on_input ? 1.0f : wt, &r.w.w13_bias, r.add_b2 ? &r.w.w2_bias : nullptr,
          r.interleaved, gated, h1, y.data());
    }
    if (r.add_shared) {
      float gate = 1.0f;
      if (r.shared_gated) {
        float dot = 0.0f;
        for (int64_t c = 0; c < H; ++c) dot += x[static_cast<size_t>(c)] * load(r.w.shared_gate, c);
        gate = 1.0f / (1.0f + std::exp(-dot));
      }
      mlp(r, r.w.shared_w13, r.w.shared_w2, 0, x.data(), gate, nullptr, nullptr, false, true, h1, y.data());
    }
    for (int64_t c = 0; c < H; ++c) store(a->output, t * H + c, y[static_cast<size_t>(c)]);
  }
  return 0;
}

// No exception may leave a C entry point (the host is not bound to catch it): std::bad_alloc from the
// scratch vectors becomes an error return.
int forward(void* handle, const moerun_forward_args* a, char* err, size_t len) {
#ifdef EXAMPLE_FORWARD_THROWS  // (testing: a C++ plugin that breaks that rule; the host reports it as a failure)
  throw std::runtime_error(EXAMPLE_FORWARD_THROWS);
#endif
  try {
    return forward_unguarded(handle, a, err, len);
  } catch (const std::exception& e) {
    return fail(err, len, std::string("forward failed: ") + e.what());
  }
}

void destroy(void* handle) { delete static_cast<Runner*>(handle); }

const char* kCapabilities = R"({
  "device": "cpu",
  "formats": [{"weights": "f32"}, {"weights": "f16"}, {"weights": "bf16"}],
  "act_dtypes": ["f32", "f16", "bf16"],
  "activations": ["silu-and-mul", "gelu-and-mul", "gelu-tanh-and-mul", "swiglu-oai", "relu2", "silu"],
  "interleaved_gate_up": true,
  "scorings": ["softmax", "sigmoid"],
  "softmax_after_topk": true, "correction_bias": true, "grouped_topk": true,
  "expert_bias": true, "router_bias": true, "shared_experts": true, "shared_gate": true,
  "shared_formats": ["f32", "f16", "bf16"],
  "apply_router_weight_on_input": true, "tensor_parallel": true, "expert_parallel": true,
  "variants": [{"name": "scalar-fp32", "why": "one token at a time, fp32 accumulation"}])"
#ifdef EXAMPLE_GRAPH_SAFE  // (testing: a claim ABI v1 cannot honour, refused at load)
    R"(, "cuda_graph_safe": true)"
#endif
    "}";

const moerun_backend_v1 kBackends[] = {
    {"example-scalar", "example out-of-tree backend: dense weights, scalar fp32 (examples/plugin)", kCapabilities, create, forward, destroy},
};

}  // namespace

extern "C" __attribute__((visibility("default"))) int moerun_plugin_init(uint32_t host_abi_version, moerun_plugin_v1* out,
                                                                         char* err, size_t err_len) {
#ifdef EXAMPLE_INIT_REFUSES  // (testing: a plugin that cannot start, e.g. for want of its device)
  return fail(err, err_len, EXAMPLE_INIT_REFUSES);
#endif
#ifdef EXAMPLE_INIT_THROWS  // (testing: a C++ plugin that lets an exception out of its C entry point)
  throw std::runtime_error(EXAMPLE_INIT_THROWS);
#endif
  out->abi_version = EXAMPLE_ABI_VERSION;  // (alone, first: a host of another version may have a smaller *out)
  if (host_abi_version != EXAMPLE_ABI_VERSION) return fail(err, err_len, "built for another moerun ABI version");
  out->num_backends = 1;
  out->backends = kBackends;
  return 0;
}
