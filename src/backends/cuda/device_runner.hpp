// cuda/device_runner.hpp — pieces shared by the cuda and cublas runners: weights on the device,
// device workspaces, staging of host tensors and the routing + alignment prologue.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernels/launch.hpp"
#include "moerun/backend.hpp"

namespace moerun::cuda_detail {

cuda_kernels::Elem elem_of(DType t);
cuda_kernels::Act act_of(ActivationKind k);
size_t elem_size(cuda_kernels::Elem e);

// Capabilities both GPU backends share (device, formats, routings, activations, shape rules).
Capabilities common_gpu_capabilities();
// Rules common_gpu_capabilities cannot say: act dtype equals the weight dtype, n_group <= 32, E
// divisible by n_group, the shared expert's sizes multiples of 8.
void common_gpu_checks(const MoeSpec& spec, Support& out);

// What the two GPU backends share as Backends: the capabilities record (filled by the subclass's
// constructor) and the common checks; each adds its name, description and runner.
class GpuBackendBase : public Backend {
 public:
  const Capabilities& capabilities() const override { return caps_; }
  void extra_checks(const MoeSpec& spec, const Platform& platform, Support& out) const override {
    (void)platform;
    common_gpu_checks(spec, out);
  }

 protected:
  Capabilities caps_;
};

// Copies a host tensor (or an expert matrix's data) to a new device buffer; empty views give none.
void upload_view(DeviceBuffer& dst, const TensorView& v, const std::string& what);

// The order of gate and up rows the spec's w13 comes in: kPairs with interleaved_gate_up, else kHalves.
cuda_kernels::GateUpLayout spec_gate_up_layout(const MoeSpec& spec);

// Uploads `experts` gated [2 * inter] row blocks of row_bytes each (w13: a row of H elements; its
// bias: one float) given in layout `from`, reordered into `to` on the way: one strided copy per
// run of rows (cudaMemcpy2D), no full-size temporary. from == to is a plain copy; otherwise `to` must
// be kBlocks8 (inter % 8 == 0).
void upload_gate_up(DeviceBuffer& dst, const TensorView& v, int experts, int inter, size_t row_bytes,
                    cuda_kernels::GateUpLayout from, cuda_kernels::GateUpLayout to, const std::string& what);

// The device state of one runner: weights, workspaces, and the routed/aligned tokens of a call.
class DeviceMoe {
 public:
  // gate_up: the row order to keep the routed experts' w13 and its bias in on the device, when the
  // activation is gated (the cuda backend: kBlocks8; cublas: spec_gate_up_layout(spec), as given).
  // Shared experts' w13 stays in kHalves.
  DeviceMoe(const MoeSpec& spec, const MoeWeights& weights, int device_index, bool need_tiles,
            cuda_kernels::GateUpLayout gate_up);
  ~DeviceMoe();

  // Resolves the call's tensors to device pointers (staging host tensors into workspaces), routes
  // and aligns the tokens with tiles of block_m rows. Returns the stream the call runs on.
  struct Call {
    int64_t m = 0;
    bool host = false;
    cudaStream_t stream = nullptr;
    const void* hidden = nullptr;  // [m, H] on the device, 16-byte aligned (begin stages it if not)
    void* out = nullptr;
    const int32_t* ids = nullptr;  // [m * top_k] on the device: given or routed
    const float* weights = nullptr;
  };
  // align = false skips the alignment (one-token calls, whose GEMMs read ids and weights directly;
  // callers that align later, with a gather, through align()).
  // rows_f32: the call's path combines from the f32 rows (rows_buf, sout: the mma tiles, cuBLAS).
  Call begin(const ForwardArgs& args, int block_m, size_t scratch_bytes = 0, bool align = true, bool rows_f32 = true);
  // Aligns the call's (token, slot) pairs by expert with tiles of block_m rows (align_out()'s tables);
  // with a gather, also writes the expert-sorted tokens (launch.hpp, AlignGather).
  void align(const Call& call, int block_m, const cuda_kernels::AlignGather* gather = nullptr);
  // Copies the output back for host calls and synchronises; nothing for device calls.
  void finish(const ForwardArgs& args, const Call& call);

  const MoeSpec& spec() const noexcept { return spec_; }
  cuda_kernels::Elem elem() const noexcept { return elem_; }
  int experts() const noexcept { return E_; }
  int top_k() const noexcept { return K_; }
  int hidden() const noexcept { return H_; }
  int inter() const noexcept { return I_; }
  int w13_rows() const noexcept { return R_; }
  int shared_inter() const noexcept { return Is_; }
  int shared_rows() const noexcept { return Rs_; }
  // Row order of w13 and b13 on the device (gated activations; non-gated: kHalves, unused).
  cuda_kernels::GateUpLayout gate_up_layout() const noexcept { return gate_up_; }

 private:
  RunnerDevice on_device_;  // first: destroyed last, after the buffers below (cuda_check.hpp)

 public:
  // Weights.
  DeviceBuffer w13, w2, b13, b2, corr, router_w, router_b, sw13, sw2, sgate;
  // Workspaces (sized for capacity() tokens).
  DeviceBuffer hidden_in, logits, ids, tw, out, token_of_row, slot_of_row, row_of_slot, weight_of_row, seg, tile_e,
      tile_r, ntiles, align_ws, inter_buf, rows_buf, sinter, sout, scratch;
  cuda_kernels::AlignOutput align_out() const;
  // Grows the workspaces for m tokens (throws when that would allocate during a capture). The f32 rows
  // (rows_buf, sout) grow for min(m, rows_f32_max_m) tokens on every call, and for m where rows_f32 says
  // this call's path reads them. A failed allocation leaves the capacities unset, so the next call
  // grows again rather than trusting buffers the failure released.
  void reserve(int64_t m, cudaStream_t s, size_t scratch_bytes, bool rows_f32 = true);
  // The most tokens a call combining from the f32 rows takes by the runner's rule (the sorted path,
  // which takes larger calls, never reads them): reserve's bound for the other paths. Unlimited unless
  // set (cuBLAS reads them at every size).
  void limit_rows_f32(int64_t m) noexcept { rows_f32_max_m_ = m; }
  int device() const noexcept { return device_; }
  // Grows b to at least `bytes` (true when it allocated). Once a forward of this runner has been
  // captured, the old allocation is kept until the runner goes rather than freed: the graph still
  // points at it, and a larger eager forward after the capture must not leave it replaying freed
  // memory. (Callers check first that the stream is not being captured.)
  bool grow(DeviceBuffer& b, size_t bytes);
  // Throws kInvalidArgument when s is being captured: `what` (a workspace) would be allocated then.
  static void refuse_if_capturing(cudaStream_t s, const std::string& what);

 private:
  MoeSpec spec_;
  cuda_kernels::Elem elem_;
  int E_, K_, H_, I_, R_, Is_ = 0, Rs_ = 0;
  cuda_kernels::GateUpLayout gate_up_ = cuda_kernels::GateUpLayout::kHalves;
  int device_;
  bool need_tiles_;
  int64_t cap_m_ = -1;
  size_t cap_scratch_ = 0;
  int64_t cap_rows_m_ = 0;  // tokens rows_buf and sout hold
  int64_t rows_f32_max_m_ = std::numeric_limits<int64_t>::max();
  bool captured_ = false;       // a forward ran under stream capture (begin saw it)
  std::vector<void*> retired_;  // allocations outgrown after a capture (grow), freed with the runner
  cudaStream_t own_stream_ = nullptr;
};

}  // namespace moerun::cuda_detail
