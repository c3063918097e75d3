// MoeLayer: validation at the boundary, then the plan's runner.
#include "moerun/layer.hpp"

#include <algorithm>
#include <limits>
#include <new>

#include "core/knobs.hpp"
#include "moerun/error.hpp"

namespace moerun {
namespace {

// The rows one call may carry, M * top_k: the dispatch counts and indexes them in int32 (and the
// reference its token slots), so more would wrap (M = 2^30 at top-4 wrote past the row buffers).
constexpr int64_t kMaxRows = std::numeric_limits<int32_t>::max();

const char* memory_name(DeviceKind d) { return d == DeviceKind::kCpu ? "host" : "device (CUDA)"; }

// A failure inside a backend that is not a moerun::Error (a third party's std::runtime_error, a
// std::length_error) becomes one naming the backend: kInternal (a moerun bug) for a built-in one,
// kPlugin for one registered from outside; std::bad_alloc stays what it is (out of memory).
template <typename F>
auto in_backend(const std::string& backend, bool builtin, const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    throw_error(builtin ? ErrorKind::kInternal : ErrorKind::kPlugin,
                std::string(builtin ? "built-in" : "out-of-tree") + " backend '" + backend + "' " + what + ": " + e.what());
  }
}

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
  const int64_t max_tokens = kMaxRows / std::max(1, spec.top_k);
  if (m > max_tokens)
    throw_error(ErrorKind::kInvalidArgument, "hidden: " + std::to_string(m) + " tokens; one call of top-" +
                                                 std::to_string(spec.top_k) + " takes at most " + std::to_string(max_tokens) +
                                                 " (2^31 - 1 token slots)");
  expect(a.hidden, "hidden", spec.act_dtype, {m, spec.hidden});
  expect(a.output, "output", spec.act_dtype, {m, spec.hidden});
  // A tensor is "given" when it has a shape (an M = 0 tensor has no data but still a shape).
  auto given = [](const TensorView& t) { return t.data != nullptr || t.shape.rank > 0; };
  // Every tensor of a call lives where hidden does, and a CPU backend reads only host memory: a
  // device pointer read as host memory would crash, and ids there cannot be checked below.
  // (Zero-element tensors hold no memory to read: their labels are not checked.)
  const DeviceKind where = a.hidden.device;
  if (device == DeviceKind::kCpu && where != DeviceKind::kCpu && m > 0)
    throw_error(ErrorKind::kInvalidArgument, "hidden: in device memory, but the chosen backend runs on the CPU (host tensors only)");
  const std::pair<const TensorView*, const char*> all[] = {{&a.output, "output"},
                                                           {&a.router_logits, "router_logits"},
                                                           {&a.topk_ids, "topk_ids"},
                                                           {&a.topk_weights, "topk_weights"},
                                                           {a.lora && a.lora->weights ? &a.lora->token_adapter : nullptr,
                                                            "lora.token_adapter"}};
  for (const auto& [t, name] : all)
    if (t && given(*t) && t->numel() != 0 && t->device != where)
      throw_error(ErrorKind::kInvalidArgument, std::string(name) + ": in " + memory_name(t->device) + " memory, hidden in " +
                                                   memory_name(where) + " memory; a call's tensors are all host or all device tensors");
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
  const BackendEntry* entry = registry.find(plan_.backend);
  builtin_ = entry && entry->builtin;
  runner_ = in_backend(plan_.backend, builtin_, "could not make a runner",
                       [&] { return plan_.chosen->create_runner(spec_, *weights_, platform, options); });
  if (!runner_)
    throw_error(builtin_ ? ErrorKind::kInternal : ErrorKind::kPlugin, "backend '" + plan_.backend + "' returned no runner");
}

void MoeLayer::check_not_moved_from() const {
  if (!runner_) throw_error(ErrorKind::kInvalidArgument, "this MoeLayer was moved from: it has no runner");
}

const MoeWeights& MoeLayer::weights() const {
  check_not_moved_from();
  return *weights_;
}

std::string MoeLayer::variant_for(int64_t m) const {
  check_not_moved_from();
  std::string v = runner_->variant_for(m);
  return v.empty() ? plan_.chosen->variant(spec_, platform_, m) : v;
}

void MoeLayer::forward(const ForwardArgs& args) {
  check_not_moved_from();
  check_forward_args(spec_, args, plan_.chosen->capabilities().device);
  if (args.hidden.shape[0] == 0) return;
  if (args.topk_ids.empty() && args.router_logits.empty() && weights_->router_weight.empty())
    throw_error(ErrorKind::kInvalidArgument, "forward needs router_logits or topk ids/weights (these weights have no router)");
  in_backend(plan_.backend, builtin_, "failed in forward", [&] { runner_->forward(args); });
}

}  // namespace moerun
