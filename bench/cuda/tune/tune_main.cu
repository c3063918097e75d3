// bench/cuda/tune/tune_main.cu — cutlass_tune: times the grouped GEMMs of each compiled CUTLASS
// schedule on the benchmark's model shapes (expert-sorted rows from uniform top-k routing), plus the
// gather / activation / combine passes, so the schedule in cutlass_grouped.cuh is chosen from data.
// Build: bench/cuda/tune/build.sh (here or on the device).
// Usage: cutlass_tune [--ms 1024,8192] [--shape deepseek-v3] [--cfgs 0,11] [--rounds 2]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernels/launch.hpp"
#include "../bench_util.cuh"

using moerun::cuda_kernels::CutlassGroupedParams;
using Ws = size_t (*)(int, int);
using Launch = cudaError_t (*)(const CutlassGroupedParams&, cudaStream_t);
struct Cfg { const char* name; Ws ws; Launch launch; };
#ifdef TUNE_PASSES_ONLY  // build.sh with TUNE_PASSES_ONLY=1: the passes alone, no CUTLASS kernel linked
const Cfg* const kCfgs = nullptr;
constexpr int kNumCfgs = 0;
#else
// Weak: build.sh compiles only the schedules named in TUNE_CONFIGS, and the others stay null (skipped).
#define DECL(n)                                                      \
  __attribute__((weak)) size_t tune_ws_##n(int, int);                \
  __attribute__((weak)) cudaError_t tune_launch_##n(const CutlassGroupedParams&, cudaStream_t);
DECL(0) DECL(1) DECL(2) DECL(3) DECL(4) DECL(5) DECL(6) DECL(7) DECL(8) DECL(9) DECL(10) DECL(11) DECL(12) DECL(13) DECL(14)
const Cfg kCfgs[] = {{"coop-128x256-c1", tune_ws_0, tune_launch_0}, {"coop-128x256-c2x1", tune_ws_1, tune_launch_1},
                     {"ping-64x256-c1", tune_ws_2, tune_launch_2},   {"ping-128x128-c1", tune_ws_3, tune_launch_3},
                     {"coop-256x128-c1", tune_ws_4, tune_launch_4},  {"ping-64x256-c1x2", tune_ws_5, tune_launch_5},
                     {"swapab-128x64-c1", tune_ws_6, tune_launch_6}, {"swapab-128x96-c1", tune_ws_7, tune_launch_7},
                     {"swapab-128x144-c1", tune_ws_8, tune_launch_8}, {"swapab-128x128-c1", tune_ws_9, tune_launch_9},
                     {"swapab-128x80-c1", tune_ws_10, tune_launch_10},
                     {"wgmma-h64-dyn", tune_ws_11, tune_launch_11},  // wgmma_grouped.cuh, as the library runs it
                     {"wgmma-128-static", tune_ws_12, tune_launch_12},
                     {"wgmma-h64-static", tune_ws_13, tune_launch_13},
                     {"wgmma-128-dyn", tune_ws_14, tune_launch_14}};
constexpr int kNumCfgs = sizeof(kCfgs) / sizeof(kCfgs[0]);
#endif

// |x - ref| over n bf16 elements: relative Frobenius norm, max, and elements that are not finite.
struct Diff { double rel = 0, max_abs = 0; unsigned long long bad = 0; };
__global__ void diff_kernel(const __nv_bfloat16* x, const __nv_bfloat16* ref, size_t n, double* acc,
                            unsigned long long* bad, unsigned int* max_bits) {
  double dd = 0, rr = 0;
  float mx = 0;
  unsigned long long nb = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float a = __bfloat162float(x[i]), r = __bfloat162float(ref[i]);
    if (!isfinite(a)) { ++nb; continue; }
    const float e = fabsf(a - r);
    dd += double(e) * e;
    rr += double(r) * r;
    mx = fmaxf(mx, e);
  }
  atomicAdd(&acc[0], dd);
  atomicAdd(&acc[1], rr);
  atomicAdd(bad, nb);
  atomicMax(max_bits, __float_as_uint(mx));  // non-negative floats order like their bits
}
Diff diff_bf16(const void* x, const void* ref, size_t n) {
  double* acc;
  unsigned long long* bad;
  unsigned int* mx;
  CK(cudaMalloc(&acc, 32));
  CK(cudaMalloc(&bad, 8));
  CK(cudaMalloc(&mx, 4));
  CK(cudaMemset(acc, 0, 32));
  CK(cudaMemset(bad, 0, 8));
  CK(cudaMemset(mx, 0, 4));
  diff_kernel<<<1024, 256>>>(static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(ref), n, acc, bad, mx);
  CK(cudaGetLastError());
  double h[2];
  Diff d;
  unsigned int m;
  CK(cudaMemcpy(h, acc, 16, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&d.bad, bad, 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&m, mx, 4, cudaMemcpyDeviceToHost));
  float mf;
  std::memcpy(&mf, &m, 4);
  d.max_abs = mf;
  d.rel = h[1] > 0 ? std::sqrt(h[0] / h[1]) : (h[0] > 0 ? 1.0 : 0.0);
  for (void* q : {(void*)acc, (void*)bad, (void*)mx}) CK(cudaFree(q));
  return d;
}

void* alloc_random(size_t n, uint64_t seed, float scale) {
  void* p;
  CK(cudaMalloc(&p, n * 2));
  fill_random<<<4096, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed, scale);
  CK(cudaGetLastError());
  return p;
}

int main(int argc, char** argv) {
  std::vector<int> ms = {1024, 8192};
  int rounds = 1;    // --rounds n: every schedule n times, alternated (the card's clocks drift with its power cap)
  std::string only;  // --shape name: only that model shape
  std::string cfgs;  // --cfgs 0,12: only those compiled schedules (by number; the first is the reference)
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--rounds") rounds = std::max(1, std::atoi(argv[++i]));
    else if (std::string(argv[i]) == "--shape") only = argv[++i];
    else if (std::string(argv[i]) == "--cfgs") cfgs = "," + std::string(argv[++i]) + ",";
    else if (std::string(argv[i]) == "--ms") {
      ms.clear();
      for (std::string s = argv[++i]; !s.empty();) {
        const size_t q = s.find(',');
        ms.push_back(std::atoi(s.substr(0, q).c_str()));
        s = q == std::string::npos ? "" : s.substr(q + 1);
      }
    }
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  void* flush;
  const size_t flush_bytes = size_t(512) << 20;
  CK(cudaMalloc(&flush, flush_bytes));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  auto time_ms = [&](auto&& f, int reps = 10) {
    for (int i = 0; i < 2; ++i) f();
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) {
      CK(cudaMemsetAsync(flush, i, flush_bytes, st));
      CK(cudaEventRecord(a, st));
      f();
      CK(cudaEventRecord(b, st));
      CK(cudaEventSynchronize(b));
      float x;
      CK(cudaEventElapsedTime(&x, a, b));
      t.push_back(x);
    }
    std::sort(t.begin(), t.end());
    return double(t[t.size() / 2]);
  };
  struct Shape { const char* name; int e, k, h, i; };
  const Shape shapes[] = {{"deepseek-v3", 256, 8, 7168, 2048}, {"mixtral-8x7b", 8, 2, 4096, 14336},
                          {"qwen3-30b-a3b", 128, 8, 2048, 768}, {"gpt-oss-120b-silu", 128, 4, 2880, 2880}};
  std::printf("%-18s %5s %-20s %9s %7s %9s %7s %9s %7s\n", "shape", "M", "schedule", "gemm1 ms", "TFLOP/s",
              "gemm2 ms", "TFLOP/s", "both ms", "TFLOP/s");
  for (const Shape& sh : shapes) {
    if (!only.empty() && only != sh.name) continue;
    const int R = 2 * sh.i;
    // (the weights only where a schedule is timed: deepseek-v3's are 22 GB)
    void* w13 = kNumCfgs ? alloc_random(size_t(sh.e) * R * sh.h, 1, 0.02f) : nullptr;
    void* w2 = kNumCfgs ? alloc_random(size_t(sh.e) * sh.h * sh.i, 2, 0.02f) : nullptr;
    for (int M : ms) {
      const int64_t rows = int64_t(M) * sh.k;
      std::mt19937 rng(7 + M);
      std::vector<int> count(sh.e, 0), perm(sh.e);
      std::vector<int32_t> tok, slot;
      std::vector<std::vector<int32_t>> by_e(sh.e);
      for (int t = 0; t < M; ++t) {
        std::iota(perm.begin(), perm.end(), 0);
        for (int j = 0; j < sh.k; ++j) {
          std::swap(perm[j], perm[j + rng() % (sh.e - j)]);
          by_e[perm[j]].push_back(t * sh.k + j);
        }
      }
      std::vector<int32_t> seg(sh.e + 1, 0), tor, sor;
      std::vector<float> wor;
      for (int e = 0; e < sh.e; ++e) {
        seg[e + 1] = seg[e] + int(by_e[e].size());
        for (int32_t s : by_e[e]) { tor.push_back(s / sh.k); sor.push_back(s); wor.push_back(0.5f); }
      }
      int32_t *dseg, *dtor, *dsor, *dros;
      float* dwor;
      CK(cudaMalloc(&dseg, seg.size() * 4));
      CK(cudaMalloc(&dtor, rows * 4));
      CK(cudaMalloc(&dsor, rows * 4));
      CK(cudaMalloc(&dros, rows * 4));
      CK(cudaMalloc(&dwor, rows * 4));
      CK(cudaMemcpy(dseg, seg.data(), seg.size() * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dtor, tor.data(), rows * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dsor, sor.data(), rows * 4, cudaMemcpyHostToDevice));
      std::vector<int32_t> ros(rows);  // the combine's slot -> row map (the alignment's, in the library)
      for (int r = 0; r < int(rows); ++r) ros[sor[r]] = r;
      CK(cudaMemcpy(dros, ros.data(), rows * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dwor, wor.data(), rows * 4, cudaMemcpyHostToDevice));
      void* hidden = alloc_random(size_t(M) * sh.h, 3, 1.0f);
      void* xs = alloc_random(size_t(rows) * sh.h, 4, 1.0f);
      void* gu = alloc_random(size_t(rows) * R, 5, 1.0f);
      void* inter = alloc_random(size_t(rows) * sh.i, 6, 1.0f);
      void* d;
      CK(cudaMalloc(&d, size_t(rows) * sh.h * 2));
      void* out;
      CK(cudaMalloc(&out, size_t(M) * sh.h * 2));
      const double f1 = 2.0 * rows * R * sh.h, f2 = 2.0 * rows * sh.h * sh.i;
      // The first compiled schedule's outputs are the reference the others are checked against (each
      // output poisoned with NaN first, so an unwritten element fails too).
      void *ref1 = nullptr, *ref2 = nullptr;
      bool have_ref = false;
      for (int round = 0; round < rounds; ++round)
      for (int ci = 0; ci < kNumCfgs; ++ci) {
        const Cfg& c = kCfgs[ci];
        if (!c.ws || !c.launch) continue;  // not compiled into this build
        if (!cfgs.empty() && cfgs.find("," + std::to_string(ci) + ",") == std::string::npos) continue;
        const size_t wsb = c.ws(sh.e, sms);
        void* ws;
        CK(cudaMalloc(&ws, wsb));
        CK(cudaMemset(ws, 0, wsb));  // (the wgmma engine's tile counters must start at zero)
        CutlassGroupedParams p;
        p.groups = sh.e;
        p.seg_offsets = dseg;
        p.rows = rows;  // (CUTLASS ignores it with seg_offsets; the wgmma engine sizes its tensor maps with it)
        p.workspace = ws;
        p.workspace_bytes = wsb;
        p.sm_count = sms;
        CutlassGroupedParams p1 = p, p2 = p;
        p1.a = xs; p1.b = w13; p1.b_group_stride = int64_t(R) * sh.h; p1.d = gu; p1.n = R; p1.k = sh.h;
        p2.a = inter; p2.b = w2; p2.b_group_stride = int64_t(sh.h) * sh.i; p2.d = d; p2.n = sh.h; p2.k = sh.i;
        std::string check;
        if (round == 0) {
          CK(cudaMemset(gu, 0xFF, size_t(rows) * R * 2));
          CK(cudaMemset(d, 0xFF, size_t(rows) * sh.h * 2));
          CK(c.launch(p1, st));
          CK(c.launch(p2, st));
          CK(cudaStreamSynchronize(st));
          if (!have_ref) {
            CK(cudaMalloc(&ref1, size_t(rows) * R * 2));
            CK(cudaMalloc(&ref2, size_t(rows) * sh.h * 2));
            CK(cudaMemcpy(ref1, gu, size_t(rows) * R * 2, cudaMemcpyDeviceToDevice));
            CK(cudaMemcpy(ref2, d, size_t(rows) * sh.h * 2, cudaMemcpyDeviceToDevice));
            have_ref = true;
            check = "  (reference)";
          } else {
            const Diff a = diff_bf16(gu, ref1, size_t(rows) * R), b = diff_bf16(d, ref2, size_t(rows) * sh.h);
            char buf[160];
            std::snprintf(buf, sizeof buf, "  check gemm1 rel %.2e max %.3g bad %llu, gemm2 rel %.2e max %.3g bad %llu%s",
                          a.rel, a.max_abs, a.bad, b.rel, b.max_abs, b.bad,
                          (a.bad || b.bad || a.rel > 1e-2 || b.rel > 1e-2) ? "  MISMATCH" : "");
            check = buf;
          }
        }
        const double t1 = time_ms([&] { CK(c.launch(p1, st)); });
        const double t2 = time_ms([&] { CK(c.launch(p2, st)); });
        std::printf("%-18s %5d %-20s %9.4f %7.1f %9.4f %7.1f %9.4f %7.1f%s\n", sh.name, M, c.name, t1, f1 / t1 / 1e9, t2,
                    f2 / t2 / 1e9, t1 + t2, (f1 + f2) / (t1 + t2) / 1e9, check.c_str());
        std::fflush(stdout);
        CK(cudaFree(ws));
      }
      if (ref1) CK(cudaFree(ref1));
      if (ref2) CK(cudaFree(ref2));
      using namespace moerun::cuda_kernels;
      const double tg = time_ms([&] {
        CK(launch_gather_sorted(Elem::kBF16, hidden, sh.h, dtor, dseg + sh.e, rows, xs, st));
      }, 31);
      const double ta = time_ms([&] {
        CK(launch_activation_sorted(Elem::kBF16, gu, R, dseg, sh.e, nullptr, Act::kSiluAndMul, 1.702f, 7.0f, GateUpLayout::kBlocks8,
                                    dseg + sh.e, rows, inter, st));
      }, 31);
      const double tc = time_ms([&] {
        CK(launch_combine_sorted(Elem::kBF16, d, sh.h, M, sh.k, dros, dwor, dseg, sh.e, nullptr, nullptr, nullptr,
                                 hidden, out, st));
      }, 31);
      const double gb_g = 2.0 * rows * sh.h * 2 / 1e9, gb_a = rows * (R + sh.i) * 2.0 / 1e9,
                   gb_c = (rows + M) * sh.h * 2.0 / 1e9;
      std::printf("%-18s %5d passes: gather %.4f ms (%.2f TB/s)  act %.4f ms (%.2f TB/s)  combine %.4f ms (%.2f TB/s)\n",
                  sh.name, M, tg, gb_g / tg, ta, gb_a / ta, tc, gb_c / tc);
      for (void* q : {hidden, xs, gu, inter, d, out}) CK(cudaFree(q));
      for (void* q : {(void*)dseg, (void*)dtor, (void*)dsor, (void*)dros, (void*)dwor}) CK(cudaFree(q));
    }
    CK(cudaFree(w13));
    CK(cudaFree(w2));
  }
  return 0;
}
