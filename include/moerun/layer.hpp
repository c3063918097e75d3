// moerun/layer.hpp — MoeLayer: a spec, its weights, a plan and a runner; call forward().
#pragma once

#include <memory>

#include "moerun/backend.hpp"
#include "moerun/oracle.hpp"
#include "moerun/platform.hpp"
#include "moerun/spec.hpp"
#include "moerun/weights.hpp"

namespace moerun {

class MoeLayer {
 public:
  // Validates the spec and weights, selects a backend, prepares the weights for it. Throws Error.
  MoeLayer(MoeSpec spec, std::shared_ptr<const MoeWeights> weights, const Platform& platform,
           const Policy& policy = {}, const Registry& registry = Registry::global(),
           const RunnerOptions& options = {});

  const MoeSpec& spec() const noexcept { return spec_; }
  const Selection& plan() const noexcept { return plan_; }
  const MoeWeights& weights() const;  // (throws Error on a moved-from layer, as the calls below do)

  // Checks every tensor of args (dtype, shape, memory, expert ids in range where they are host
  // tensors, adapter ids likewise) and throws Error{kInvalidArgument} naming the bad one before any
  // kernel runs; then runs. A call's tensors are all host or all device tensors; a CPU backend takes
  // host tensors only. Output must not overlap hidden: the cpu and reference backends happen to
  // allow it, the CUDA ones do not (their combine re-reads hidden for a router-gated shared expert
  // while other blocks write output). A failure inside the backend is an Error naming it (kInternal
  // for a built-in backend, kPlugin for one registered from outside); running out of host memory is
  // std::bad_alloc, out of device memory an Error{kDevice} naming cudaErrorMemoryAllocation (or
  // cuBLAS's CUBLAS_STATUS_ALLOC_FAILED), after which the layer stays usable (a call that fits runs).
  // A CUDA forward clears the thread's last CUDA error first (Runner::forward). One call at a time per layer: on CUDA, order calls on different streams
  // (Runner::forward). The built-in CPU backends serialize calls from several threads; other layers
  // run at the same time.
  void forward(const ForwardArgs& args);

  // The kernel variant a call with m tokens takes (the runner's answer, else the capabilities'). This
  // is what runs here; plan().variant is what the platform the layer was planned for would take, and
  // differs where that platform is a described one beyond this machine or MOERUN_CPU_ISA caps it.
  std::string variant_for(int64_t m) const;

 private:
  MoeSpec spec_;
  std::shared_ptr<const MoeWeights> weights_;
  Selection plan_;
  Platform platform_;
  std::unique_ptr<Runner> runner_;  // null only in a moved-from layer
  bool builtin_ = true;             // the plan's backend is a built-in (its failures are moerun's bugs)
  void check_not_moved_from() const;
};

// Checks args against the spec; shared by MoeLayer and tests. Throws Error{kInvalidArgument}.
void check_forward_args(const MoeSpec& spec, const ForwardArgs& args, DeviceKind device);

}  // namespace moerun
