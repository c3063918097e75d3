// cuda_moe_bench — the cuda and cublas backends on model-sized MoE layers, against measured limits.
//
// For each shape and token count: the full forward (routing from logits) eager and as CUDA-graph
// replay, the expert stage alone (top-k given) as graph replay, and the cublas backend. Times are
// medians of CUDA-event intervals, each taken after an L2 flush. Limits are measured in the same run:
// device-to-device copy bandwidth (bytes read + written) and a large bf16 cuBLAS matmul rate.
// Bytes: the distinct activated experts' weights + activations in and out; FLOPs: 2*M*k*(R*H + H*I).
// Usage: cuda_moe_bench [--json out.json] [--torch torch.json] [--quick] [--ms 1024,8192]
//                       [--shapes deepseek-v3,mixtral-8x7b] [--no-forced]
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
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backends/cublas/cublas_backend.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "moerun/backend.hpp"
#include "moerun/weights.hpp"
#include "routing/topk.hpp"

#include "bench_util.cuh"

using namespace moerun;

void fill(void* p, size_t n, uint64_t seed, float scale) {
  fill_random<<<4096, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed, scale);
  CK(cudaGetLastError());
}

struct Timer {
  cudaStream_t s;
  void* flush = nullptr;
  size_t flush_bytes = size_t(512) << 20;
  cudaEvent_t a, b;
  explicit Timer(cudaStream_t st) : s(st) {
    CK(cudaMalloc(&flush, flush_bytes));
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
  }
  template <typename F> double median_ms(F&& f, int reps, int warm = 2) {
    for (int i = 0; i < warm; ++i) f();
    CK(cudaStreamSynchronize(s));
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) {
      CK(cudaMemsetAsync(flush, i & 0xFF, flush_bytes, s));  // L2 flush
      CK(cudaEventRecord(a, s));
      f();
      CK(cudaEventRecord(b, s));
      CK(cudaEventSynchronize(b));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
};

struct ShapeDef { std::string name; int e, k, h, i; };

int main(int argc, char** argv) {
  std::string json_path, torch_path, ms_arg, shapes_arg;
  bool quick = false, forced = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--torch" && i + 1 < argc) torch_path = argv[++i];
    else if (a == "--quick") quick = true;
    else if (a == "--ms" && i + 1 < argc) ms_arg = argv[++i];
    else if (a == "--shapes" && i + 1 < argc) shapes_arg = argv[++i];
    else if (a == "--no-forced") forced = false;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) { std::puts("no CUDA device"); return 0; }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Timer timer(s);
  nlohmann::json out;
  out["device"] = prop.name;
  out["sms"] = prop.multiProcessorCount;

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
    const int N = 8192;
    void *A, *B, *C;
    CK(cudaMalloc(&A, size_t(N) * N * 2));
    CK(cudaMalloc(&B, size_t(N) * N * 2));
    CK(cudaMalloc(&C, size_t(N) * N * 2));
    fill(A, size_t(N) * N, 1, 1.0f);
    fill(B, size_t(N) * N, 2, 1.0f);
    cublasHandle_t h;
    cublasCreate(&h);
    cublasSetStream(h, s);
    const float one = 1.0f, zero = 0.0f;
    const double mms = timer.median_ms([&] {
      cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, A, CUDA_R_16BF, N, B, CUDA_R_16BF, N, &zero, C,
                   CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }, 10, 3);
    mm_rate = 2.0 * N * double(N) * N / (mms * 1e-3);
    cublasDestroy(h);
    CK(cudaFree(A)); CK(cudaFree(B)); CK(cudaFree(C));
  }
  std::printf("limits: copy %.2f TB/s (read+write), bf16 matmul %.1f TFLOP/s\n", copy_bw / 1e12, mm_rate / 1e12);
  out["copy_bw_TBps"] = copy_bw / 1e12;
  out["matmul_TFLOPs"] = mm_rate / 1e12;

  std::map<std::string, double> torch_ms;
  if (!torch_path.empty()) {
    std::ifstream f(torch_path);
    if (f) {
      nlohmann::json tj = nlohmann::json::parse(f, nullptr, false);
      if (tj.is_object() && tj.contains("rows"))
        for (auto& r : tj["rows"]) torch_ms[r["shape"].get<std::string>() + "/" + std::to_string(r["M"].get<int>())] = r["ms"].get<double>();
    }
  }

  std::vector<ShapeDef> shapes = {{"deepseek-v3", 256, 8, 7168, 2048},
                                  {"mixtral-8x7b", 8, 2, 4096, 14336},
                                  {"qwen3-30b-a3b", 128, 8, 2048, 768},
                                  {"gpt-oss-120b-silu", 128, 4, 2880, 2880}};
  std::vector<int> ms_list = quick ? std::vector<int>{1, 128} : std::vector<int>{1, 16, 128, 1024, 8192};
  if (!ms_arg.empty()) {  // --ms 1024,8192
    ms_list.clear();
    for (size_t p = 0; p < ms_arg.size();) {
      const size_t q = ms_arg.find(',', p);
      ms_list.push_back(std::atoi(ms_arg.substr(p, q - p).c_str()));
      p = q == std::string::npos ? ms_arg.size() : q + 1;
    }
  }
  if (!shapes_arg.empty()) {  // --shapes deepseek-v3,mixtral-8x7b
    std::vector<ShapeDef> keep;
    for (const ShapeDef& sd : shapes)
      if (("," + shapes_arg + ",").find("," + sd.name + ",") != std::string::npos) keep.push_back(sd);
    shapes = keep;
  }
  Platform plat;
  GpuInfo g;
  g.name = prop.name;
  g.sm = prop.major * 10 + prop.minor;
  g.arch_specific = true;
  g.multiprocessors = prop.multiProcessorCount;
  plat.gpus.push_back(g);
  nlohmann::json rows = nlohmann::json::array(), runners = nlohmann::json::array();
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
      std::mt19937 rng(1234 + M);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> logits(size_t(M) * sd.e);
      for (auto& v : logits) v = nd(rng);
      std::vector<int32_t> ids(size_t(M) * sd.k);
      std::vector<float> tw(ids.size());
      routing::topk_host(spec, logits.data(), M, nullptr, ids.data(), tw.data());
      const std::set<int32_t> distinct(ids.begin(), ids.end());
      const double bytes = distinct.size() * expert_bytes + 2.0 * M * sd.h * 2;
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
      const int reps = M >= 1024 ? 10 : 30;

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
      struct V { std::string name; double ms; };
      std::vector<V> vs;
      vs.push_back({"cuda-eager-full", timer.median_ms([&] { cuda_runner->forward(full); }, reps)});
      cudaGraphExec_t gf = graph_of(full), ge = graph_of(expert);
      vs.push_back({"cuda-graph-full", timer.median_ms([&] { CK(cudaGraphLaunch(gf, s)); }, reps)});
      vs.push_back({"cuda-graph-expert", timer.median_ms([&] { CK(cudaGraphLaunch(ge, s)); }, reps)});
      CK(cudaGraphExecDestroy(gf));
      CK(cudaGraphExecDestroy(ge));
      // Every GEMM variant forced, expert stage as graph replay (the data behind the thresholds).
      for (const char* cfg : {"mma-stream-m16", "mma-stream-m16-n32", "mma-stream-m32", "mma-tile-m64",
                              "mma-tile-m128", "cutlass-sm90-grouped", "cutlass-sm90-swapab"}) {
        if (!forced) break;
        const bool stream_cfg = std::strncmp(cfg, "mma-stream", 10) == 0;
        if (stream_cfg && double(M) * sd.k / sd.e > 64) continue;  // decode tiles at prefill: minutes, no news
        setenv("MOERUN_CUDA_GEMM", cfg, 1);
        cudaGraphExec_t gx = graph_of(expert);
        vs.push_back({std::string("forced:") + cfg, timer.median_ms([&] { CK(cudaGraphLaunch(gx, s)); }, M >= 1024 ? 5 : 15)});
        CK(cudaGraphExecDestroy(gx));
        unsetenv("MOERUN_CUDA_GEMM");
      }
      // Cross-check on model shapes: the CUTLASS engine (both schedules) against the mma tiles, same inputs.
      double cross = -1.0, cross_swap = -1.0;
      if (forced) {
        std::vector<std::vector<uint16_t>> outs;
        for (const char* cfg : {"mma-tile-m64", "cutlass-sm90-grouped", "cutlass-sm90-swapab"}) {
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
        std::printf("check %-18s %5d cutlass vs mma-tile-m64: rel diff %.2e%s\n", sd.name.c_str(), M, cross,
                    cross < 1e-2 ? "" : "  <-- MISMATCH");
        std::printf("check %-18s %5d cutlass-swapab vs mma-tile-m64: rel diff %.2e%s\n", sd.name.c_str(), M,
                    cross_swap, cross_swap < 1e-2 ? "" : "  <-- MISMATCH");
      }
      vs.push_back({"cublas-full", timer.median_ms([&] { cublas_runner->forward(full); }, reps)});
      const std::string key = sd.name + "/" + std::to_string(M);
      const double tms = torch_ms.count(key) ? torch_ms[key] : 0.0;
      if (tms > 0) vs.push_back({"torch-expert", tms});
      const double floor_s = std::max(bytes / copy_bw, flops / mm_rate);
      for (const V& v : vs) {
        const double sec = v.ms * 1e-3;
        const double tbps = bytes / sec / 1e12, tfl = flops / sec / 1e12;
        const double speed = tms > 0 ? tms / v.ms : 0.0;
        const std::string kern = v.name.rfind("forced:", 0) == 0 ? v.name.substr(7)
                                 : v.name.rfind("cuda", 0) == 0 ? cuda_runner->variant_for(M)
                                 : v.name.rfind("cublas", 0) == 0 ? "cublas-grouped" : "torch._grouped_mm";
        std::printf("%-18s %5d %-22s %-16s %9.4f %8.2f %5.1f%% %8.1f %5.1f%% %5.1f%% %6.2fx\n", sd.name.c_str(), M,
                    v.name.c_str(), kern.c_str(), v.ms, tbps, 100.0 * tbps * 1e12 / copy_bw, tfl,
                    100.0 * tfl * 1e12 / mm_rate, 100.0 * floor_s / sec, speed);
        rows.push_back({{"shape", sd.name}, {"M", M}, {"variant", v.name}, {"kernel", kern}, {"ms", v.ms},
                        {"distinct_experts", distinct.size()}, {"bytes", bytes}, {"flops", flops},
                        {"TBps", tbps}, {"pct_copy_bw", 100.0 * tbps * 1e12 / copy_bw}, {"TFLOPs", tfl},
                        {"pct_matmul", 100.0 * tfl * 1e12 / mm_rate}, {"pct_roofline", 100.0 * floor_s / sec},
                        {"speedup_vs_torch", speed}, {"cutlass_vs_m64_rel_diff", cross},
                        {"swapab_vs_m64_rel_diff", cross_swap}});
      }
      std::fflush(stdout);
      CK(cudaFree(dh)); CK(cudaFree(dl)); CK(cudaFree(di)); CK(cudaFree(dw)); CK(cudaFree(dout));
    }
    cuda_runner.reset();
    cublas_runner.reset();
    CK(cudaDeviceSynchronize());
  }
  out["rows"] = rows;
  out["runners"] = runners;
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(1) << "\n";
  return 0;
}
