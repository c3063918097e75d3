// cublas/cublas_backend.hpp — the `cublas` backend: device routing and alignment, then
// cublasGemmGroupedBatchedEx over the activated experts.
//
// cuBLAS takes its group sizes on the host, so every forward copies the per-expert token counts back
// and synchronises with the host: the backend states host_sync = true and cuda_graph_safe = false.
#pragma once

#include <memory>

#include "moerun/backend.hpp"

namespace moerun {

// Never returns null.
std::shared_ptr<const Backend> make_cublas_backend();

}  // namespace moerun
