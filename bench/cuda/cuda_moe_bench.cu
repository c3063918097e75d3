// cuda_moe_bench — the cuda and cublas backends on model-sized MoE layers, against measured limits.
//
// For each shape and token count: the full forward (routing from logits) eager and as CUDA-graph
// replay, the expert stage alone (top-k given) as graph replay, and the cublas backend. Times are
// medians of CUDA-event intervals, each taken after an L2 flush. Limits are measured in the same run:
// device-to-device copy bandwidth (bytes read + written) and a large bf16 cuBLAS matmul rate (Matmul).
// The flush is a 512 MiB memset, as torch/Triton benchmarks do, which leaves the L2 full of dirty lines
// that the timed kernels then write back; for M <= --read-flush-max-m, 16 by default, the expert stage
// is also timed after a flush that only reads, so the L2 holds clean lines: the '-readflush' rows. At
// M = 1 a graph of --layers layers, each routed to experts no other takes, is replayed with no flush at
// all (row cuda-graph-expert-layers, time per layer): what a decode step through a model's layers sees.
// Bytes: the distinct activated experts' weights (the issue's method: activations are not counted); FLOPs: 2*M*k*(R*H + H*I).
// Usage: cuda_moe_bench [--json out.json] [--torch torch.json] [--quick] [--ms 1024,8192]
//                       [--shapes deepseek-v3,mixtral-8x7b] [--no-forced] [--read-flush-max-m 16] [--layers 8]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <map>
#include <numeric>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backends/cublas/cublas_backend.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/kernels/launch.hpp"
#include "core/knobs.hpp"
#include "core/random.hpp"
#include "moerun/backend.hpp"
#include "moerun/weights.hpp"
#include "routing/topk.hpp"

#include "arg_lists.hpp"
#include "stats.hpp"
#include "bench_util.cuh"
#include "json_file.hpp"
#include "run_stamp.hpp"

using namespace moerun;

void fill(void* p, size_t n, uint64_t seed, float scale) {
  fill_random<<<4096, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed, scale);
  CK(cudaGetLastError());
}

// Reads n 16-byte words (a flush that leaves only clean lines in the L2).
__global__ void flush_read_kernel(const uint4* p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;  // never in practice: keeps the loads
}

enum class Flush { kWrite, kRead, kNone };

struct Timer {
  cudaStream_t s;
  unsigned* sink = nullptr;
  void* flush = nullptr;
  size_t flush_bytes = size_t(512) << 20;
  cudaEvent_t a, b;
  explicit Timer(cudaStream_t st) : s(st) {
    CK(cudaMalloc(&flush, flush_bytes));
    CK(cudaMalloc(&sink, sizeof(unsigned)));
    CK(cudaMemset(flush, 0x5A, flush_bytes));
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
  }
  // The L2 flush before a timed run (Flush: a memset, a read that leaves only clean lines, or none).
  void flush_l2(Flush mode, int i) {
    if (mode == Flush::kNone) return;
    if (mode == Flush::kWrite) {
      CK(cudaMemsetAsync(flush, i & 0xFF, flush_bytes, s));
    } else {
      flush_read_kernel<<<1056, 512, 0, s>>>(static_cast<const uint4*>(flush), flush_bytes / 16, sink);
      CK(cudaGetLastError());
    }
  }
  // One flushed run of f, in ms.
  template <typename F> float time_once(F&& f, Flush mode, int i) {
    flush_l2(mode, i);
    CK(cudaEventRecord(a, s));
    f();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    return ms;
  }
  static double median(const std::vector<float>& t) { return moerun_bench::median(t); }
  template <typename F> double median_ms(F&& f, int reps, int warm = 2, Flush mode = Flush::kWrite) {
    for (int i = 0; i < warm; ++i) f();
    CK(cudaStreamSynchronize(s));
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) t.push_back(time_once(f, mode, i));
    return median(t);
  }
  // f and g alternated call by call, each after a flush (a write flush unless told): their medians.
  template <typename F, typename G>
  std::pair<double, double> median_pair(F&& f, G&& g, int reps, Flush mode = Flush::kWrite) {
    f();
    g();
    CK(cudaStreamSynchronize(s));
    std::vector<float> tf, tg;
    for (int i = 0; i < reps; ++i) {
      tf.push_back(time_once(f, mode, i));
      tg.push_back(time_once(g, mode, i));
    }
    return {median(tf), median(tg)};
  }
};

struct ShapeDef { std::string name; int e, k, h, i; };

double now_unix_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The compute limit: cuBLAS bf16 8192^3. The H200 spends a sweep at its software power cap
// (clocks_throttle_reasons 0x4 in gpu-check's smi.csv), with SM clocks anywhere in 1.2-1.98 GHz
// depending on what ran just before, so one rate measured at the start is not the rate the card
// has when a compute-bound row runs. Three numbers: the median of 10 flushed calls at the start (the
// roofline's rate, as in earlier tables), the rate over about a second of calls back to back (what a
// dense GEMM sustains under the cap), and, for M >= 1024, the median of calls alternated with the
// row's own runs (Timer::median_pair), so both see the same clocks.
struct Matmul {
  static constexpr int N = 8192;
  void *A = nullptr, *B = nullptr, *C = nullptr;
  cublasHandle_t h = nullptr;
  explicit Matmul(cudaStream_t s) {
    CK(cudaMalloc(&A, size_t(N) * N * 2));
    CK(cudaMalloc(&B, size_t(N) * N * 2));
    CK(cudaMalloc(&C, size_t(N) * N * 2));
    fill(A, size_t(N) * N, 1, 1.0f);
    fill(B, size_t(N) * N, 2, 1.0f);
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS || cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cublas setup failed\n");
      std::exit(1);
    }
  }
  ~Matmul() {
    cublasDestroy(h);
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
  }
  static double flops() { return 2.0 * N * double(N) * N; }
  void run() const {
    const float one = 1.0f, zero = 0.0f;
    if (cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, A, CUDA_R_16BF, N, B, CUDA_R_16BF, N, &zero, C,
                     CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cublasGemmEx failed\n");
      std::exit(1);
    }
  }
};
struct MatmulRate { double median = 0, sustained = 0; };
MatmulRate measure_matmul(Timer& timer, const Matmul& mm, cudaStream_t s) {
  MatmulRate r;
  r.median = Matmul::flops() / (timer.median_ms([&] { mm.run(); }, 10, 3) * 1e-3);
  constexpr int kBack = 700;  // ~1 s at ~800 TFLOP/s
  CK(cudaEventRecord(timer.a, s));
  for (int i = 0; i < kBack; ++i) mm.run();
  CK(cudaEventRecord(timer.b, s));
  CK(cudaEventSynchronize(timer.b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, timer.a, timer.b));
  r.sustained = kBack * Matmul::flops() / (ms * 1e-3);
  return r;
}

int main(int argc, char** argv) {
  std::string json_path, torch_path, ms_arg, shapes_arg, layers_arg, ab_arg = "cutlass-sm90-grouped";
  bool quick = false, forced = true;
  int read_flush_max_m = 16, layer_stack = 8;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--torch" && i + 1 < argc) torch_path = argv[++i];
    else if (a == "--quick") quick = true;
    else if (a == "--ms" && i + 1 < argc) ms_arg = argv[++i];
    else if (a == "--shapes" && i + 1 < argc) shapes_arg = argv[++i];
    else if (a == "--no-forced") forced = false;
    else if (a == "--read-flush-max-m" && i + 1 < argc) {
      char* end = nullptr;
      const long v = std::strtol(argv[++i], &end, 10);
      read_flush_max_m = *end != '\0' || end == argv[i] || v < 0 || v > 65536 ? -1 : static_cast<int>(v);  // -1: refused below
    }
    else if (a == "--layers" && i + 1 < argc) {
      char* end = nullptr;
      layers_arg = argv[++i];
      const long v = std::strtol(argv[i], &end, 10);
      layer_stack = *end != '\0' || end == argv[i] || v < 0 || v > 64 ? -1 : static_cast<int>(v);  // -1: refused below
    }
    else if (a == "--ab" && i + 1 < argc) ab_arg = argv[++i];
    else if (a == "--help" || a == "-h") {
      std::puts(
          "cuda_moe_bench [--quick] [--ms 1,16,...] [--shapes a,b] [--no-forced] [--json out.json] [--torch t.json]\n"
          "               [--read-flush-max-m N] [--layers N] [--ab list]\n"
          "  --layers N  at M = 1, also time a graph of N layers (0-64, default 8; at most experts / top-k),\n"
          "             each routed to experts no other layer of the graph takes, replayed back to back with\n"
          "             no flush: a decode step's view, each layer's weights last read N - 1 layers before\n"
          "             (row cuda-graph-expert-layers, time per layer). 0 or 1: no such row.\n"
          "  --ab list  comma-separated contenders, each timed against the rule's own graph call by call\n"
          "             (rows ab:<name> and ab:rule-vs-<name>): at M >= 128 a GEMM variant name as\n"
          "             MOERUN_CUDA_GEMM takes (+unfused: its activation epilogue off), and where the rule\n"
          "             takes the wgmma engine 'gather' (the token gather in its operand load) or 'ksplit=N'\n"
          "             (its K in N runs, MOERUN_CUDA_KSPLIT: 2-4, or auto for its rule); at every M\n"
          "             'env:VAR=VALUE' (a MOERUN_CUDA_* variable set for the contender's capture, e.g.\n"
          "             env:MOERUN_CUDA_ONE_TOKEN=1); 'none' for no A/B rows. At M <= --read-flush-max-m\n"
          "             each pair is also timed after a read flush (rows ab:<name>-readflush).\n"
          "             Default: cutlass-sm90-grouped.");
      return 0;
    } else {
      std::fprintf(stderr, "cuda_moe_bench: unknown argument '%s' (--help lists them)\n", a.c_str());
      return 2;
    }
  }
  std::vector<std::string> ab_list;
  for (size_t b = 0; ab_arg != "none" && b < ab_arg.size();) {
    const size_t e = std::min(ab_arg.find(',', b), ab_arg.size());
    if (e > b) ab_list.push_back(ab_arg.substr(b, e - b));
    b = e + 1;
  }
  // Every contender sets a knob (core/knobs.hpp) to a value it takes: a typo must not time the rule
  // against itself under another name.
  for (const std::string& x : ab_list) {
    std::string name, value;
    if (x == "gather") continue;
    if (x.rfind("env:", 0) == 0) {
      const size_t eq = x.find('=');
      if (eq != std::string::npos) name = x.substr(4, eq - 4), value = x.substr(eq + 1);
    } else if (x.rfind("ksplit=", 0) == 0) {
      name = "MOERUN_CUDA_KSPLIT", value = x.substr(7);
    } else {
      const size_t plus = x.find('+');
      if (plus == std::string::npos || x.substr(plus) == "+unfused") name = "MOERUN_CUDA_GEMM", value = x.substr(0, plus);
    }
    const moerun::Knob* k = name.empty() ? nullptr : moerun::find_knob(name);
    if (k && k->area != "cuda") {  // the cuda runner never reads it: the rule would be timed against itself
      std::fprintf(stderr, "cuda_moe_bench: --ab '%s': %s is a %s knob, which the cuda backend never reads "
                   "(moerun knobs --all lists the cuda ones)\n", x.c_str(), name.c_str(), std::string(k->area).c_str());
      return 2;
    }
    // The contender is captured on the rule's runner, so a knob read only when a runner is made would
    // time the rule against itself too (stream_tune.hpp reads this one in the runner's constructor).
    if (name == "MOERUN_CUDA_STREAM_TUNE") {
      std::fprintf(stderr, "cuda_moe_bench: --ab '%s': %s is read when a runner is made, and a contender shares the "
                   "rule's runner; compare it in two runs instead\n", x.c_str(), name.c_str());
      return 2;
    }
    if (!k || !moerun::knob_accepts(*k, value)) {
      std::fprintf(stderr, "cuda_moe_bench: --ab '%s': a contender is gather, ksplit=N, an engine name (+unfused), or "
                   "env:NAME=VALUE, each a knob and a value it takes (%s)\n",
                   x.c_str(), k ? (name + " takes " + moerun::knob_values(*k)).c_str() : "moerun knobs --all lists them");
      return 2;
    }
  }
  try {
    moerun::check_knob_environment();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_moe_bench: %s\n", e.what());
    return 2;
  }
  // The torch baseline's rows (torch_baseline.py --json), read before the device is looked for: a path
  // that is missing or a file that is not that JSON is an error, not a sweep whose vs-torch column is 0.
  std::map<std::string, double> torch_ms;
  std::string torch_device;  // the card torch_baseline.py ran on (compared with this one's below)
  std::map<std::string, int> torch_distinct;  // "shape/M": the experts torch's routing activated
  if (!torch_path.empty()) {
    std::ifstream f(torch_path);
    const nlohmann::json tj = f ? nlohmann::json::parse(f, nullptr, false) : nlohmann::json();
    if (!f || !tj.is_object() || !tj.contains("rows") || !tj["rows"].is_array()) {
      std::fprintf(stderr, "cuda_moe_bench: --torch %s: %s\n", torch_path.c_str(),
                   !f ? "cannot read it" : "not the JSON torch_baseline.py writes (an object with \"rows\")");
      return 2;
    }
    if (tj.contains("device") && tj["device"].is_string()) torch_device = tj["device"].get<std::string>();
    for (const auto& r : tj["rows"]) {  // "shape/M", or "shape/M/read" for a row timed after a read flush
      if (!r.is_object() || !r.contains("shape") || !r["shape"].is_string() || !r.contains("M") ||
          !r["M"].is_number_integer() || !r.contains("ms") || !r["ms"].is_number()) {
        std::fprintf(stderr, "cuda_moe_bench: --torch %s: a row without a string 'shape', an integer 'M' and a number "
                     "'ms': %s\n", torch_path.c_str(), r.dump().substr(0, 120).c_str());
        return 2;
      }
      const std::string key = r["shape"].get<std::string>() + "/" + std::to_string(r["M"].get<int>());
      torch_ms[key + (r.value("flush", std::string("write")) == "read" ? "/read" : "")] = r["ms"].get<double>();
      if (r.contains("distinct_experts") && r["distinct_experts"].is_number_integer())
        torch_distinct[key] = r["distinct_experts"].get<int>();
    }
  }
  if (!json_path.empty() && !moerun_bench::json_path_writable(json_path)) {
    std::fprintf(stderr, "cuda_moe_bench: --json %s: cannot write there\n", json_path.c_str());
    return 2;
  }
  // The shapes and token counts, checked before the device is looked for: a typo must be an error on
  // any machine, not a run that times nothing.
  std::vector<ShapeDef> shapes = {{"deepseek-v3", 256, 8, 7168, 2048},
                                  {"mixtral-8x7b", 8, 2, 4096, 14336},
                                  {"qwen3-30b-a3b", 128, 8, 2048, 768},
                                  {"gpt-oss-120b-silu", 128, 4, 2880, 2880}};
  std::vector<int> ms_list = quick ? std::vector<int>{1, 128} : std::vector<int>{1, 16, 128, 1024, 8192};
  if (!ms_arg.empty()) {  // --ms 1024,8192
    const auto ms = moerun_bench::int_list("cuda_moe_bench: --ms", ms_arg, 1, 65536);
    if (!ms) return 2;
    ms_list.assign(ms->begin(), ms->end());
  }
  if (!shapes_arg.empty()) {  // --shapes deepseek-v3,mixtral-8x7b
    std::vector<ShapeDef> keep;
    for (const std::string& name : moerun_bench::name_list(shapes_arg)) {
      const auto it = std::find_if(shapes.begin(), shapes.end(), [&](const ShapeDef& sd) { return sd.name == name; });
      if (it == shapes.end()) {
        std::string known;
        for (const ShapeDef& sd : shapes) known += (known.empty() ? "" : ", ") + std::string(sd.name);
        std::fprintf(stderr, "cuda_moe_bench: --shapes: unknown shape '%s' (known: %s)\n", name.c_str(), known.c_str());
        return 2;
      }
      keep.push_back(*it);
    }
    if (keep.empty()) {
      std::fprintf(stderr, "cuda_moe_bench: --shapes: an empty list\n");
      return 2;
    }
    shapes = keep;
  }
  if (layer_stack < 0) {
    std::fprintf(stderr, "cuda_moe_bench: --layers: '%s' is not a layer count in 0..64 (0 or 1: no layer-stack row)\n",
                 layers_arg.c_str());
    return 2;
  }
  if (read_flush_max_m < 0) {
    std::fprintf(stderr, "cuda_moe_bench: --read-flush-max-m: a token count in 0..65536 (0: none)\n");
    return 2;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {  // nothing measured: not a success
    std::fprintf(stderr, "cuda_moe_bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Timer timer(s);
  nlohmann::json out;
  out["commit"] = moerun::bench::build_commit();  // (run_stamp.hpp)
  out["started_utc"] = moerun::bench::utc_now();
  out["device"] = prop.name;
  if (!torch_device.empty() && torch_device != prop.name)
    std::fprintf(stderr, "cuda_moe_bench: warning: --torch %s was timed on %s, this card is %s: the vs-torch column "
                 "compares two cards\n", torch_path.c_str(), torch_device.c_str(), prop.name);
  out["sms"] = prop.multiProcessorCount;
  {
    int clusters = 0;
    if (moerun::cuda_kernels::wgmma_pair_clusters(&clusters) == cudaSuccess) {
      out["wgmma_pair_clusters"] = clusters;
      std::printf("# %s: %d SMs; the wgmma engine's paired mode fits %d clusters of two\n", prop.name,
                  prop.multiProcessorCount, clusters);
    }
  }

  // ---- limits ----
  double copy_bw, mm_rate;
  {
    const size_t n = size_t(4) << 30;
    void *x, *y;
    CK(cudaMalloc(&x, n));
    CK(cudaMalloc(&y, n));
    CK(cudaMemset(x, 1, n));
    const double ms = timer.median_ms([&] { CK(cudaMemcpyAsync(y, x, n, cudaMemcpyDeviceToDevice, s)); }, 10);
    copy_bw = 2.0 * n / (ms * 1e-3);
    CK(cudaFree(x));
    CK(cudaFree(y));
  }
  const Matmul matmul(s);
  const MatmulRate rate_start = measure_matmul(timer, matmul, s);
  mm_rate = rate_start.median;
  std::printf("limits: copy %.2f TB/s (read+write), bf16 matmul %.1f TFLOP/s (sustained over 1 s: %.1f)\n",
              copy_bw / 1e12, mm_rate / 1e12, rate_start.sustained / 1e12);
  out["copy_bw_TBps"] = copy_bw / 1e12;
  out["matmul_TFLOPs"] = mm_rate / 1e12;
  out["matmul_sustained_TFLOPs"] = rate_start.sustained / 1e12;

  Platform plat;
  GpuInfo g;
  g.name = prop.name;
  g.sm = prop.major * 10 + prop.minor;
  g.arch_specific = true;
  g.multiprocessors = prop.multiProcessorCount;
  plat.gpus.push_back(g);
  nlohmann::json rows = nlohmann::json::array(), runners = nlohmann::json::array();
  // Written after every shape (a run cut short by a timeout still leaves the rows it finished) and at
  // the end, with the limits measured after the sweep.
  const auto write_json = [&]() {
    if (json_path.empty()) return true;
    out["rows"] = rows;
    out["runners"] = runners;
    return moerun_bench::write_json_file(json_path, out, 1, "cuda_moe_bench");
  };
  std::printf("%-18s %5s %-22s %-16s %9s %8s %6s %8s %6s %6s %7s\n", "shape", "M", "variant", "kernel", "ms", "TB/s",
              "%bw", "TFLOP/s", "%mm", "%roof", "vs-torch");

  for (const ShapeDef& sd : shapes) {
    MoeSpec spec;
    spec.name = sd.name;
    spec.num_experts = sd.e;
    spec.top_k = sd.k;
    spec.hidden = sd.h;
    spec.intermediate = sd.i;
    spec.weight_format = WeightFormat::kBF16;
    spec.act_dtype = DType::kBF16;
    spec.validate();
    const int R = spec.w13_rows();
    const size_t n13 = size_t(sd.e) * R * sd.h, n2 = size_t(sd.e) * sd.h * sd.i;
    void *w13, *w2;
    CK(cudaMalloc(&w13, n13 * 2));
    CK(cudaMalloc(&w2, n2 * 2));
    fill(w13, n13, 11, 1.0f / std::sqrt(float(sd.h)));
    fill(w2, n2, 12, 1.0f / std::sqrt(float(sd.i)));
    CK(cudaDeviceSynchronize());
    MoeWeights w;
    w.w13.format = w.w2.format = WeightFormat::kBF16;
    w.w13.experts = w.w2.experts = sd.e;
    w.w13.rows = R; w.w13.cols = sd.h;
    w.w2.rows = sd.h; w.w2.cols = sd.i;
    w.w13.data = TensorView{w13, DType::kBF16, {sd.e, R, sd.h}, DeviceKind::kCuda, 0};
    w.w2.data = TensorView{w2, DType::kBF16, {sd.e, sd.h, sd.i}, DeviceKind::kCuda, 0};
    // Runner creation includes the decode tiling tune (stream_tune.hpp) for large layers: timed here so
    // its cost is on record (MOERUN_CUDA_STREAM_TUNE=0 gives the time without it).
    // Both timings wait for the runner's asynchronous weight copies; the second runner's release is not
    // in its time.
    const auto t_create = std::chrono::steady_clock::now();
    auto cuda_runner = make_cuda_backend()->create_runner(spec, w, plat, {});
    CK(cudaDeviceSynchronize());
    const double create_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_create).count();
    // A second runner of the same shape finds the tune's picks in the process cache: what every further
    // layer of a model pays.
    const auto t_again = std::chrono::steady_clock::now();
    auto again = make_cuda_backend()->create_runner(spec, w, plat, {});
    CK(cudaDeviceSynchronize());
    const double again_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_again).count();
    again.reset();
    std::printf("%-18s cuda runner created in %.1f ms (another of this shape: %.1f ms)\n", sd.name.c_str(),
                create_ms, again_ms);
    runners.push_back({{"shape", sd.name}, {"create_ms", create_ms}, {"create_again_ms", again_ms}});
    auto cublas_runner = make_cublas_backend()->create_runner(spec, w, plat, {});
    CK(cudaFree(w13));
    CK(cudaFree(w2));
    const double expert_bytes = (double(R) * sd.h + double(sd.h) * sd.i) * 2.0;

    for (int M : ms_list) {
      // Uniform random routing from portable logits: torch_baseline.py draws the same SplitMix64 stream
      // (core/random.hpp), so both time the same experts (std::normal_distribution's stream is the
      // standard library's own). At 16 tokens the distinct experts' count varies by 4-5% from draw to
      // draw, and those rows are bound by their bytes.
      moerun::SplitMix64 rng(1234 + static_cast<uint64_t>(M));
      std::vector<float> logits(size_t(M) * sd.e);
      for (auto& v : logits) v = rng.uniform_pm1();
      std::vector<int32_t> ids(size_t(M) * sd.k);
      std::vector<float> tw(ids.size());
      routing::topk_host(spec, logits.data(), M, nullptr, ids.data(), tw.data());
      const std::set<int32_t> distinct(ids.begin(), ids.end());
      // The distinct activated experts' weight bytes, as the method says (the activations in and out,
      // 2 M H bytes each, were counted here before: up to 5.6% more TB/s on qwen3-30b-a3b at M = 8192).
      const double bytes = distinct.size() * expert_bytes;
      const double flops = 2.0 * M * sd.k * (double(R) * sd.h + double(sd.h) * sd.i);
      void *dh, *dl, *di, *dw, *dout;
      CK(cudaMalloc(&dh, size_t(M) * sd.h * 2));
      CK(cudaMalloc(&dl, logits.size() * 4));
      CK(cudaMalloc(&di, ids.size() * 4));
      CK(cudaMalloc(&dw, tw.size() * 4));
      CK(cudaMalloc(&dout, size_t(M) * sd.h * 2));
      fill(dh, size_t(M) * sd.h, 99 + M, 1.0f);
      CK(cudaMemcpy(dl, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(di, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dw, tw.data(), tw.size() * 4, cudaMemcpyHostToDevice));
      ForwardArgs full;
      full.hidden = TensorView{dh, DType::kBF16, {M, sd.h}, DeviceKind::kCuda, 0};
      full.router_logits = TensorView{dl, DType::kF32, {M, sd.e}, DeviceKind::kCuda, 0};
      full.output = TensorView{dout, DType::kBF16, {M, sd.h}, DeviceKind::kCuda, 0};
      full.stream = s;
      ForwardArgs expert = full;
      expert.router_logits = TensorView{};
      expert.topk_ids = TensorView{di, DType::kI32, {M, sd.k}, DeviceKind::kCuda, 0};
      expert.topk_weights = TensorView{dw, DType::kF32, {M, sd.k}, DeviceKind::kCuda, 0};
      // Compute-bound rows vary with the card's clocks: more of them than the few the time would allow.
      const int reps = M >= 1024 ? 20 : 30;

      auto graph_of = [&](const ForwardArgs& a) {
        cuda_runner->forward(a);
        CK(cudaStreamSynchronize(s));
        cudaGraph_t gr;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        cuda_runner->forward(a);
        CK(cudaStreamEndCapture(s, &gr));
        CK(cudaGraphInstantiate(&ge, gr, 0));
        CK(cudaGraphDestroy(gr));
        return ge;
      };
      // unix_s: when the row's timing ended (lines it up with the clocks gpu-check.sh samples).
      struct V { std::string name; double ms; double unix_s = now_unix_s(); };
      std::vector<V> vs;
      vs.push_back({"cuda-eager-full", timer.median_ms([&] { cuda_runner->forward(full); }, reps)});
      cudaGraphExec_t gf = graph_of(full), ge = graph_of(expert);
      vs.push_back({"cuda-graph-full", timer.median_ms([&] { CK(cudaGraphLaunch(gf, s)); }, reps)});
      double local_rate = 0.0;  // M >= 1024: the matmul rate alternated with the headline row's runs
      if (M >= 1024) {
        const auto [row_ms, mm_ms] = timer.median_pair([&] { CK(cudaGraphLaunch(ge, s)); }, [&] { matmul.run(); }, reps);
        vs.push_back({"cuda-graph-expert", row_ms});
        local_rate = Matmul::flops() / (mm_ms * 1e-3);
      } else {
        vs.push_back({"cuda-graph-expert", timer.median_ms([&] { CK(cudaGraphLaunch(ge, s)); }, reps)});
      }
      if (M <= read_flush_max_m)
        vs.push_back({"cuda-graph-expert-readflush",
                      timer.median_ms([&] { CK(cudaGraphLaunch(ge, s)); }, reps, 2, Flush::kRead)});
      // A decode step's view (--layers): a graph of L layers at one token, layer l routed to its own
      // experts (no two layers of the graph share one; the weights are one copy, so the layers differ
      // in what they read, as a model's layers do), replayed back to back with no flush. Each layer's
      // weights were last read L - 1 layers before, at least 1.5 L2s of other weights ago on every
      // shape here (qwen3-30b-a3b's smallest set: 75 MB), so they come from DRAM as in a model, and the L2
      // holds clean lines of the layers before rather than a flush's dirty ones. Consecutive layers
      // follow each other directly (the next layer's first kernel may start under the previous one's
      // tail through PDL, as it may under a model's attention kernels if those trigger early).
      int stack_layers = 0;
      if (M == 1 && std::min(layer_stack, sd.e / sd.k) >= 2) {
        stack_layers = std::min(layer_stack, sd.e / sd.k);
        std::vector<int32_t> perm(sd.e);
        std::iota(perm.begin(), perm.end(), 0);
        for (int j = sd.e - 1; j > 0; --j)  // Fisher-Yates on the same portable stream
          std::swap(perm[j], perm[rng.below(static_cast<uint32_t>(j + 1))]);
        std::vector<void*> bufs;
        std::vector<ForwardArgs> stack(stack_layers, expert);
        for (int l = 0; l < stack_layers; ++l) {
          void *lid, *lw, *lo;
          CK(cudaMalloc(&lid, size_t(sd.k) * 4));
          CK(cudaMalloc(&lw, size_t(sd.k) * 4));
          CK(cudaMalloc(&lo, size_t(sd.h) * 2));
          CK(cudaMemcpy(lid, perm.data() + size_t(l) * sd.k, size_t(sd.k) * 4, cudaMemcpyHostToDevice));
          CK(cudaMemcpy(lw, tw.data(), size_t(sd.k) * 4, cudaMemcpyHostToDevice));
          bufs.insert(bufs.end(), {lid, lw, lo});
          stack[l].topk_ids = TensorView{lid, DType::kI32, {1, sd.k}, DeviceKind::kCuda, 0};
          stack[l].topk_weights = TensorView{lw, DType::kF32, {1, sd.k}, DeviceKind::kCuda, 0};
          stack[l].output = TensorView{lo, DType::kBF16, {1, sd.h}, DeviceKind::kCuda, 0};
          cuda_runner->forward(stack[l]);
        }
        CK(cudaStreamSynchronize(s));
        cudaGraph_t gr;
        cudaGraphExec_t gl;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        for (const ForwardArgs& a : stack) cuda_runner->forward(a);
        CK(cudaStreamEndCapture(s, &gr));
        CK(cudaGraphInstantiate(&gl, gr, 0));
        CK(cudaGraphDestroy(gr));
        const double ms = timer.median_ms([&] { CK(cudaGraphLaunch(gl, s)); }, reps, 2, Flush::kNone);
        vs.push_back({"cuda-graph-expert-layers", ms / stack_layers});
        CK(cudaGraphExecDestroy(gl));
        for (void* b : bufs) CK(cudaFree(b));
      }
      // Side by side with the rule (--ab): each contender's graph and the rule's alternated call by call,
      // so the card's moving clocks fall on both alike (the forced rows below run one after another).
      // "gather" (the tokens gathered in the wgmma operand load, MOERUN_CUDA_GEMM_GATHER=1) and
      // "ksplit=N" (MOERUN_CUDA_KSPLIT=N) only where the rule takes that engine; an engine from 128
      // tokens; "env:NAME=VALUE" at every M (a knob of the decode path, e.g. MOERUN_CUDA_ONE_TOKEN,
      // acts below 128 tokens).
      for (const std::string& x : ab_list) {
        const size_t plus = x.find('+');
        const std::string var = x.substr(0, plus), suffix = plus == std::string::npos ? "" : x.substr(plus);
        const bool gather = x == "gather", ksplit = x.rfind("ksplit=", 0) == 0, env = x.rfind("env:", 0) == 0;
        const size_t eq = env ? x.find('=') : std::string::npos;
        const std::string env_name = env ? x.substr(4, eq - 4) : "";
        if (!env && M < 128) continue;
        if (gather || ksplit ? cuda_runner->variant_for(M) != "sm90-wgmma-grouped"
                             : !env && var == cuda_runner->variant_for(M) && suffix.empty())
          continue;  // (nothing to compare)
        if (gather) setenv("MOERUN_CUDA_GEMM_GATHER", "1", 1);
        else if (ksplit) setenv("MOERUN_CUDA_KSPLIT", x.substr(7).c_str(), 1);
        else if (env) setenv(env_name.c_str(), x.substr(eq + 1).c_str(), 1);
        else setenv("MOERUN_CUDA_GEMM", var.c_str(), 1);
        if (suffix == "+unfused") setenv("MOERUN_CUDA_FUSED_ACT", "0", 1);
        cudaGraphExec_t gx = graph_of(expert);
        unsetenv("MOERUN_CUDA_GEMM_GATHER");
        unsetenv("MOERUN_CUDA_KSPLIT");
        unsetenv("MOERUN_CUDA_GEMM");
        unsetenv("MOERUN_CUDA_FUSED_ACT");
        if (env) unsetenv(env_name.c_str());
        // The contender's forward may have grown the runner's workspaces (CUTLASS's unfused gate_up
        // needs more scratch), which leaves graphs captured before it pointing at freed memory: the
        // rule's graph is captured again after it.
        cudaGraphExec_t gr = graph_of(expert);
        const auto [x_ms, rule_ms] =
            timer.median_pair([&] { CK(cudaGraphLaunch(gx, s)); }, [&] { CK(cudaGraphLaunch(gr, s)); }, reps);
        vs.push_back({"ab:" + x, x_ms});
        vs.push_back({"ab:rule-vs-" + x, rule_ms});
        if (M <= read_flush_max_m) {  // the same pair after a read flush (clean L2 lines only)
          const auto [xr_ms, ruler_ms] = timer.median_pair([&] { CK(cudaGraphLaunch(gx, s)); },
                                                           [&] { CK(cudaGraphLaunch(gr, s)); }, reps, Flush::kRead);
          vs.push_back({"ab:" + x + "-readflush", xr_ms});
          vs.push_back({"ab:rule-vs-" + x + "-readflush", ruler_ms});
        }
        CK(cudaGraphExecDestroy(gx));
        CK(cudaGraphExecDestroy(gr));
      }
      CK(cudaGraphExecDestroy(gf));
      CK(cudaGraphExecDestroy(ge));
      // Every GEMM variant forced, expert stage as graph replay (the data behind the thresholds).
      // "+unfused": the wgmma engine with its activation epilogue off (MOERUN_CUDA_FUSED_ACT=0). (The
      // gather in its operand load is timed above, alternated with the pass.)
      for (const char* cfg : {"mma-stream-m16", "mma-stream-m16-n32", "mma-stream-m32", "mma-tile-m64",
                              "mma-tile-m128", "cutlass-sm90-grouped", "cutlass-sm90-swapab", "sm90-wgmma-grouped",
                              "sm90-wgmma-grouped+unfused"}) {
        if (!forced) break;
        const bool stream_cfg = std::strncmp(cfg, "mma-stream", 10) == 0;
        if (stream_cfg && double(M) * sd.k / sd.e > 64) continue;  // decode tiles at prefill: minutes, no news
        const std::string name = cfg;
        const size_t plus = name.find('+');
        const std::string suffix = plus == std::string::npos ? "" : name.substr(plus);
        setenv("MOERUN_CUDA_GEMM", name.substr(0, plus).c_str(), 1);
        if (suffix == "+unfused") setenv("MOERUN_CUDA_FUSED_ACT", "0", 1);
        cudaGraphExec_t gx = graph_of(expert);
        vs.push_back({std::string("forced:") + cfg, timer.median_ms([&] { CK(cudaGraphLaunch(gx, s)); }, M >= 1024 ? 11 : 15)});
        CK(cudaGraphExecDestroy(gx));
        unsetenv("MOERUN_CUDA_GEMM");
        unsetenv("MOERUN_CUDA_FUSED_ACT");
      }
      // Cross-check on model shapes: the CUTLASS engine (both schedules) against the mma tiles, same inputs.
      double cross = -1.0, cross_swap = -1.0;
      if (forced) {
        std::vector<std::vector<uint16_t>> outs;
        for (const char* cfg : {"mma-tile-m64", "cutlass-sm90-grouped", "cutlass-sm90-swapab", "sm90-wgmma-grouped"}) {
          setenv("MOERUN_CUDA_GEMM", cfg, 1);
          CK(cudaMemsetAsync(dout, 0xFF, size_t(M) * sd.h * 2, s));
          cuda_runner->forward(expert);
          CK(cudaStreamSynchronize(s));
          outs.emplace_back(size_t(M) * sd.h);
          CK(cudaMemcpy(outs.back().data(), dout, outs.back().size() * 2, cudaMemcpyDeviceToHost));
          unsetenv("MOERUN_CUDA_GEMM");
        }
        auto f = [](uint16_t b) { uint32_t u = uint32_t(b) << 16; float x; std::memcpy(&x, &u, 4); return double(x); };
        auto rel_diff = [&](const std::vector<uint16_t>& o) {
          double num = 0, den = 0;
          for (size_t i = 0; i < outs[0].size(); ++i) {
            const double a = f(outs[0][i]), b = f(o[i]);
            num += (a - b) * (a - b);
            den += a * a;
          }
          return std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : 1e30;
        };
        cross = rel_diff(outs[1]);
        cross_swap = rel_diff(outs[2]);
        const double cross_wgmma = rel_diff(outs[3]);
        std::printf("check %-18s %5d sm90-wgmma vs mma-tile-m64: rel diff %.2e%s\n", sd.name.c_str(), M, cross_wgmma,
                    cross_wgmma < 1e-2 ? "" : "  <-- MISMATCH");
        std::printf("check %-18s %5d cutlass vs mma-tile-m64: rel diff %.2e%s\n", sd.name.c_str(), M, cross,
                    cross < 1e-2 ? "" : "  <-- MISMATCH");
        std::printf("check %-18s %5d cutlass-swapab vs mma-tile-m64: rel diff %.2e%s\n", sd.name.c_str(), M,
                    cross_swap, cross_swap < 1e-2 ? "" : "  <-- MISMATCH");
      }
      vs.push_back({"cublas-full", timer.median_ms([&] { cublas_runner->forward(full); }, reps)});
      const std::string key = sd.name + "/" + std::to_string(M);
      if (torch_distinct.count(key) && torch_distinct[key] != static_cast<int>(distinct.size()))
        std::fprintf(stderr, "cuda_moe_bench: warning: %s M=%d: torch's routing activated %d experts, this one %zu "
                     "(a torch.json of another routing?)\n", sd.name.c_str(), M, torch_distinct[key], distinct.size());
      const double tms = torch_ms.count(key) ? torch_ms[key] : 0.0;
      const double tms_read = torch_ms.count(key + "/read") ? torch_ms[key + "/read"] : 0.0;
      if (tms > 0) vs.push_back({"torch-expert", tms});
      if (tms_read > 0) vs.push_back({"torch-expert-readflush", tms_read});
      const double floor_s = std::max(bytes / copy_bw, flops / mm_rate);
      const double floor_local_s = local_rate > 0 ? std::max(bytes / copy_bw, flops / local_rate) : 0.0;
      for (const V& v : vs) {
        const double sec = v.ms * 1e-3;
        const double tbps = bytes / sec / 1e12, tfl = flops / sec / 1e12;
        const bool read_row = v.name.size() > 10 && v.name.compare(v.name.size() - 10, 10, "-readflush") == 0;
        const bool stack_row = v.name == "cuda-graph-expert-layers";
        const double ref_ms = stack_row ? 0.0 : read_row ? tms_read : tms;  // like against like (torch has no stack)
        const double speed = ref_ms > 0 ? ref_ms / v.ms : 0.0;  // 0: no torch row (printed "-", null in the JSON)
        const std::string kern = v.name.rfind("forced:", 0) == 0 ? v.name.substr(7)
                                 : v.name.rfind("ab:rule-vs-", 0) == 0 || v.name.rfind("cuda", 0) == 0 ? cuda_runner->variant_for(M)
                                 : v.name == "ab:gather" ? cuda_runner->variant_for(M) + "+gather"
                                 : v.name.rfind("ab:ksplit=", 0) == 0 ? cuda_runner->variant_for(M) + "+" + v.name.substr(3)
                                 : v.name.rfind("ab:env:", 0) == 0 ? cuda_runner->variant_for(M) + "+" + v.name.substr(7)
                                 : v.name.rfind("ab:", 0) == 0 ? v.name.substr(3)
                                 : v.name.rfind("cublas", 0) == 0 ? "cublas-grouped" : "torch._grouped_mm";
        char speed_text[16] = "      -";
        if (speed > 0) std::snprintf(speed_text, sizeof speed_text, "%6.2fx", speed);
        std::printf("%-18s %5d %-22s %-16s %9.4f %8.2f %5.1f%% %8.1f %5.1f%% %5.1f%% %s\n", sd.name.c_str(), M,
                    v.name.c_str(), kern.c_str(), v.ms, tbps, 100.0 * tbps * 1e12 / copy_bw, tfl,
                    100.0 * tfl * 1e12 / mm_rate, 100.0 * floor_s / sec, speed_text);
        nlohmann::json extra = nlohmann::json::object();
        if (v.name == "cuda-graph-expert" && local_rate > 0) {
          std::printf("%-18s %5d %-22s matmul alternated with it: %.1f TFLOP/s; %% of that roofline %.1f%%\n",
                      sd.name.c_str(), M, v.name.c_str(), local_rate / 1e12, 100.0 * floor_local_s / sec);
          extra["local_matmul_TFLOPs"] = local_rate / 1e12;
          extra["pct_roofline_local"] = 100.0 * floor_local_s / sec;
        }
        rows.push_back({{"shape", sd.name}, {"M", M}, {"variant", v.name}, {"kernel", kern}, {"ms", v.ms},
                        {"distinct_experts", distinct.size()}, {"bytes", bytes}, {"flops", flops},
                        {"TBps", tbps}, {"pct_copy_bw", 100.0 * tbps * 1e12 / copy_bw}, {"TFLOPs", tfl},
                        {"pct_matmul", 100.0 * tfl * 1e12 / mm_rate}, {"pct_roofline", 100.0 * floor_s / sec},
                        {"speedup_vs_torch", speed > 0 ? nlohmann::json(speed) : nlohmann::json(nullptr)}, {"flush", stack_row ? "none" : read_row ? "read" : "write"},
                        {"unix_s", v.unix_s},
                        {"cutlass_vs_m64_rel_diff", cross},
                        {"swapab_vs_m64_rel_diff", cross_swap}});
        if (stack_row) extra["layers"] = stack_layers;
        rows.back().update(extra);
      }
      std::fflush(stdout);
      CK(cudaFree(dh)); CK(cudaFree(dl)); CK(cudaFree(di)); CK(cudaFree(dw)); CK(cudaFree(dout));
    }
    cuda_runner.reset();
    cublas_runner.reset();
    CK(cudaDeviceSynchronize());
    if (!write_json()) return 1;
  }
  // The same limits again after the sweep: how far the card's state moved while the rows were timed.
  const MatmulRate rate_end = measure_matmul(timer, matmul, s);
  std::printf("limits after the sweep: bf16 matmul %.1f TFLOP/s (sustained %.1f)\n", rate_end.median / 1e12,
              rate_end.sustained / 1e12);
  out["matmul_TFLOPs_end"] = rate_end.median / 1e12;
  out["matmul_sustained_TFLOPs_end"] = rate_end.sustained / 1e12;
  return write_json() ? 0 : 1;
}
