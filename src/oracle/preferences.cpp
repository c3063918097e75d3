// The built-in preference table: which capable backend wins, and why. Data, not code: a new backend
// adds a row here (or a caller passes its own table in SelectOptions); no special cases elsewhere.
#include "moerun/oracle.hpp"

namespace moerun {

const std::vector<Preference>& builtin_preferences() {
  static const std::vector<Preference> rows = {
      {"cuda", 100, {DeviceKind::kCuda}, {},
       "own sm90 kernels: fused routing, on-device alignment, weight-streaming decode, grouped GEMM prefill; CUDA-graph safe",
       "bench/results/2026-11-30_0cff3c8_h200 (cuda vs cublas vs torch, side by side on H200)"},
      {"cublas", 50, {DeviceKind::kCuda}, {},
       "cuBLAS grouped GEMM: vendor-tuned but one host sync per call (not graph-safe)",
       "bench/results/2026-11-30_0cff3c8_h200 (cublas-full vs cuda-eager-full: cublas 1.08-2.6x slower on every row)"},
      {"cpu", 20, {}, {},
       "vectorised CPU kernels with on-the-fly dequantization and threads; far faster than reference",
       "bench/results/2026-11-30_b89a107_cpu-amd-epyc-zen1 and 2026-11-30_0cff3c8_h200-host-xeon (cpu vs reference vs oneDNN, side by side)"},
      {"reference", -100, {}, {}, "ground truth: exact but slow; chosen only when nothing else can run", "by design"},
  };
  return rows;
}

}  // namespace moerun
