// MoeLayer: validation at the boundary, then the plan's runner.
#include "moerun/layer.hpp"

#include "core/knobs.hpp"
#include "moerun/error.hpp"

namespace moerun {
namespace {

void expect(const TensorView& t, const char* what, DType dtype, Shape shape) {
  if (t.dtype != dtype || !(t.shape == shape))
    throw_error(ErrorKind::kInvalidArgument, std::string(what) + ": expected " + std::string(dtype_name(dtype)) + " " +
                                                 shape.str() + ", got " + std::string(dtype_name(t.dtype)) + " " + t.shape.str());
  if (t.data == nullptr && shape.numel() > 0) throw_error(ErrorKind::kInvalidArgument, std::string(what) + ": null data");
}

}  // namespace

void check_forward_args(const MoeSpec& spec, const ForwardArgs& a, DeviceKind device) {
  if (a.hidden.shape.rank != 2) throw_error(ErrorKind::kInvalidArgument, "hidden: expected [M, H], got " + a.hidden.shape.str());
  const int64_t m = a.hidden.shape[0];
  if (m < 0) throw_error(ErrorKind::kInvalidArgument, "hidden: negative token count");
  expect(a.hidden, "hidden", spec.act_dtype, {m, spec.hidden});
  expect(a.output, "output", spec.act_dtype, {m, spec.hidden});
  // A tensor is "given" when it has a shape (an M = 0 tensor has no data but still a shape).
  auto given = [](const TensorView& t) { return t.data != nullptr || t.shape.rank > 0; };
  if (given(a.topk_ids) || given(a.topk_weights)) {
    expect(a.topk_ids, "topk_ids", DType::kI32, {m, spec.top_k});
    expect(a.topk_weights, "topk_weights", DType::kF32, {m, spec.top_k});
    // Expert ids are validated here, on the host, before any kernel runs (the spec's bounds, not a backend's).
    if (a.topk_ids.device == DeviceKind::kCpu) {
      const int32_t* ids = a.topk_ids.as<const int32_t>();
      for (int64_t i = 0; i < m * spec.top_k; ++i)
        if (ids[i] < 0 || ids[i] >= spec.num_experts)
          throw_error(ErrorKind::kInvalidArgument, "topk_ids[" + std::to_string(i / spec.top_k) + ", " + std::to_string(i % spec.top_k) +
                                                       "] = " + std::to_string(ids[i]) + ": must be in [0, " + std::to_string(spec.num_experts) + ")");
    }
  } else if (given(a.router_logits)) {
    expect(a.router_logits, "router_logits", DType::kF32, {m, spec.num_experts});
  }
  if (a.lora && a.lora->weights) {
    check_lora(spec, *a.lora->weights);
    expect(a.lora->token_adapter, "lora.token_adapter", DType::kI32, {m});
    if (a.lora->token_adapter.device == DeviceKind::kCpu) {
      const int32_t* ad = a.lora->token_adapter.as<const int32_t>();
      for (int64_t t = 0; t < m; ++t)
        if (ad[t] < -1 || ad[t] >= a.lora->weights->adapters)
          throw_error(ErrorKind::kInvalidArgument, "lora.token_adapter[" + std::to_string(t) + "] = " + std::to_string(ad[t]) +
                                                       ": must be -1 or in [0, " + std::to_string(a.lora->weights->adapters) + ")");
    }
  }
  for (const TensorView* t : {&a.hidden, &a.output})
    if (t->device != device && device == DeviceKind::kCpu)
      throw_error(ErrorKind::kInvalidArgument, "tensors must be in host memory for a CPU backend");
}

MoeLayer::MoeLayer(MoeSpec spec, std::shared_ptr<const MoeWeights> weights, const Platform& platform, const Policy& policy,
                   const Registry& registry, const RunnerOptions& options)
    : spec_(std::move(spec)), weights_(std::move(weights)) {
  check_knob_environment();  // a mistyped measurement knob must not measure the default in silence
  spec_.validate();
  if (!weights_) throw_error(ErrorKind::kInvalidArgument, "MoeLayer needs weights");
  check_weights(spec_, *weights_);
  platform_ = platform;
  plan_ = select(spec_, platform, policy, registry);
  runner_ = plan_.chosen->create_runner(spec_, *weights_, platform, options);
}

std::string MoeLayer::variant_for(int64_t m) const {
  std::string v = runner_->variant_for(m);
  return v.empty() ? plan_.chosen->variant(spec_, platform_, m) : v;
}

void MoeLayer::forward(const ForwardArgs& args) {
  check_forward_args(spec_, args, plan_.chosen->capabilities().device);
  if (args.hidden.shape[0] == 0) return;
  if (args.topk_ids.empty() && args.router_logits.empty() && weights_->router_weight.empty())
    throw_error(ErrorKind::kInvalidArgument, "forward needs router_logits or topk ids/weights (these weights have no router)");
  runner_->forward(args);
}

}  // namespace moerun
