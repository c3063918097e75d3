// cuda/cuda_backend.hpp — the `cuda` backend: the whole MoE forward on one Hopper GPU.
//
// Routing (fused scoring, correction bias, grouped top-k, renormalize, scaling), token alignment by
// expert, the gate_up GEMM with the token gather fused into its operand load and the activation into
// its epilogue, the down GEMM with the router-weighted scatter fused into its epilogue, shared
// experts and the combine pass all run on the device, on the caller's stream, with no host
// synchronisation and no allocation once a call of at least this many tokens has run (so a forward
// can be captured in a CUDA graph). Host tensors are accepted too: staged through device buffers, and
// then the call synchronises.
#pragma once

#include <memory>

#include "moerun/backend.hpp"

namespace moerun {

// Never returns null. The backend's supports() refuses platforms without an sm_90 GPU.
std::shared_ptr<const Backend> make_cuda_backend();

}  // namespace moerun
