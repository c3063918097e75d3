// bench/cuda/tune/decode_probe.cu — decode_probe: the one-token expert stage, side by side in one
// process: the mma.sync stream tiles (gate_up, down, combine: the runner's chain) against the
// matrix-vector kernels of decode_gemv.cuh (gate_up, down with the combine fused) at several ring
// depths and grids. Each variant is a CUDA graph of its chain; every timed replay follows a 512 MiB
// memset (L2 flush) and a fresh set of k distinct experts, and the variants take turns rep by rep.
// Also checks that every variant's output matches the stream tiles'.
// Build: TUNE_DECODE_PROBE=1 bench/cuda/tune/build.sh.
// Each variant is timed after two kinds of L2 flush, alternated rep by rep: a 512 MiB memset (the L2
// then holds dirty lines that the timed chain writes back) and a 512 MiB read (clean lines only). The
// 'bare-read' variant is one plain-load kernel over exactly the k experts' w13 and w2 bytes: what a
// single kernel that does nothing but stream the weights takes.
// Usage: decode_probe [--reps 41] [--shapes qwen3,mixtral] [--max-experts 32] [--quick] | --read-sweep
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "decode_gemv.cuh"
#include "../bench_util.cuh"

namespace ck = moerun::cuda_kernels;

struct Shape { const char* name; int E, k, H, I; ck::Act act; };

// ---- --read-sweep: how fast can one block stream with a bulk-copy ring, against plain loads ----
// mode 0: every thread waits for a stage, sums it, the block syncs, thread 0 refills (the gemv loop's
// skeleton); mode 1: thread 0 alone waits and refills (the copy engine's own rate).
__global__ void ring_read_kernel(const char* src, int64_t per_cta, int stage_bytes, int stages, int mode, float* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + static_cast<size_t>(stages) * stage_bytes);
  const char* base = src + blockIdx.x * per_cta;
  const int n = static_cast<int>(per_cta / stage_bytes);
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) ck::mbar_init(&full[s], 1);
    ck::mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int s = 0; s < stages && s < n; ++s) ck::bulk_load(smem + s * stage_bytes, base + int64_t(s) * stage_bytes, stage_bytes, &full[s]);
  float acc = 0.0f;
  for (int it = 0; it < n; ++it) {
    const int slot = it % stages;
    if (mode == 1) {
      if (threadIdx.x == 0) {
        ck::mbar_wait(&full[slot], (it / stages) & 1);
        acc += reinterpret_cast<const float*>(smem + slot * stage_bytes)[0];
        if (it + stages < n) ck::bulk_load(smem + slot * stage_bytes, base + int64_t(it + stages) * stage_bytes, stage_bytes, &full[slot]);
      }
      continue;
    }
    ck::mbar_wait(&full[slot], (it / stages) & 1);
    const uint4* v = reinterpret_cast<const uint4*>(smem + slot * stage_bytes);
    for (int i = threadIdx.x; i < stage_bytes / 16; i += blockDim.x) {
      const uint4 w = v[i];
      acc += __uint_as_float(w.x) + __uint_as_float(w.y) + __uint_as_float(w.z) + __uint_as_float(w.w);
    }
    __syncthreads();
    if (threadIdx.x == 0 && it + stages < n)
      ck::bulk_load(smem + slot * stage_bytes, base + int64_t(it + stages) * stage_bytes, stage_bytes, &full[slot]);
  }
  if (acc == 123.456f) sink[0] = acc;
}
__global__ void ldg_read_kernel(const uint4* src, int64_t per_cta16, float* sink) {
  const uint4* base = src + blockIdx.x * per_cta16;
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < per_cta16; i += int64_t(blockDim.x) * 8) {
    uint4 w[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t k = i + int64_t(j) * blockDim.x;
      w[j] = k < per_cta16 ? __ldcs(base + k) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) acc += __uint_as_float(w[j].x) + __uint_as_float(w[j].w);
  }
  if (acc == 123.456f) sink[0] = acc;
}

// The k experts' weights (w13 rows then w2 rows, each expert contiguous) read once with plain loads.
__global__ void bare_read_kernel(const uint4* w13, const uint4* w2, const int32_t* ids, int k, int64_t n13, int64_t n2,
                                 float* sink) {
  const int64_t per = n13 + n2, total = per * k;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  float acc = 0.0f;
  for (int64_t i0 = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i0 < total; i0 += 4 * stride) {
    uint4 w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = i0 + j * stride;
      if (i < total) {
        const int p = int(i / per);
        const int64_t o = i % per;
        w[j] = o < n13 ? __ldcs(w13 + ids[p] * n13 + o) : __ldcs(w2 + ids[p] * n2 + (o - n13));
      } else {
        w[j] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) acc += __uint_as_float(w[j].x) + __uint_as_float(w[j].w);
  }
  if (acc == 123.456f) sink[0] = acc;
}
__global__ void flush_read_kernel(const uint4* p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

int read_sweep(int sms, cudaStream_t st) {
  const size_t bytes = size_t(1) << 30;
  char* buf;
  float* sink;
  CK(cudaMalloc(&buf, bytes));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(buf, 0, bytes));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaFuncSetAttribute(ring_read_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 << 10));
  auto timeit = [&](const char* name, auto&& launch, size_t moved) {
    std::vector<float> t;
    for (int r = 0; r < 13; ++r) {
      CK(cudaEventRecord(a, st));
      launch();
      CK(cudaGetLastError());
      CK(cudaEventRecord(b, st));
      CK(cudaEventSynchronize(b));
      float ms;
      CK(cudaEventElapsedTime(&ms, a, b));
      if (r >= 2) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    std::printf("read-sweep %-40s %.3f ms  %.2f TB/s\n", name, t[t.size() / 2], moved / (t[t.size() / 2] * 1e-3) / 1e12);
    std::fflush(stdout);
  };
  for (int cps : {1, 2, 4}) {
    const int grid = sms * cps;
    const int64_t per16 = int64_t(bytes / 16) / grid;
    char nm[64];
    std::snprintf(nm, sizeof nm, "ldg512x8 cps%d", cps);
    timeit(nm, [&] { ldg_read_kernel<<<grid, 512, 0, st>>>(reinterpret_cast<const uint4*>(buf), per16, sink); }, size_t(per16) * 16 * grid);
  }
  const int cfg[][4] = {{0, 16, 4, 1}, {0, 16, 6, 1}, {0, 16, 8, 1}, {0, 16, 12, 1}, {0, 16, 4, 2}, {0, 16, 3, 3},
                        {0, 8, 8, 1},  {0, 8, 16, 1}, {0, 32, 4, 1}, {0, 32, 6, 1}, {0, 4, 16, 1}, {0, 4, 32, 1},
                        {1, 16, 6, 1}, {1, 16, 12, 1}, {1, 32, 6, 1}, {1, 4, 24, 1}, {1, 64, 3, 1}};
  for (const auto& c : cfg) {
    const int mode = c[0], sb = c[1] << 10, stages = c[2], cps = c[3], grid = sms * cps;
    const int64_t per = int64_t(bytes) / grid / sb * sb;
    const size_t smem = size_t(stages) * (sb + 8);
    if (smem * cps > (227u << 10)) continue;
    char nm[64];
    std::snprintf(nm, sizeof nm, "ring mode%d stage%dK x%d cps%d", mode, c[1], stages, cps);
    timeit(nm, [&] { ring_read_kernel<<<grid, 256, smem, st>>>(buf, per, sb, stages, mode, sink); }, size_t(per) * grid);
  }
  CK(cudaFree(buf));
  CK(cudaFree(sink));
  return 0;
}

int main(int argc, char** argv) {
  int reps = 41;
  int max_experts = 32;  // experts allocated per shape (fewer: faster under compute-sanitizer)
  std::string only;  // --shapes a,b: shapes whose name contains one of these
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--reps") reps = std::atoi(argv[++i]);
    else if (std::string(argv[i]) == "--shapes") only = argv[++i];
    else if (std::string(argv[i]) == "--max-experts") max_experts = std::atoi(argv[++i]);
  }
  bool quick = false;  // --quick: the runner's 16x32 chain and the first gemv configuration only (sanitizers)
  for (int i = 1; i < argc; ++i) quick = quick || std::string(argv[i]) == "--quick";
  auto wanted = [&](const std::string& n) {
    if (only.empty()) return true;
    for (std::string s = only; !s.empty();) {
      const size_t q = s.find(',');
      if (n.find(s.substr(0, q)) != std::string::npos) return true;
      s = q == std::string::npos ? "" : s.substr(q + 1);
    }
    return false;
  };
  int sms = 0, l2 = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--read-sweep") return read_sweep(sms, st);
  void* flush;
  const size_t flush_bytes = size_t(512) << 20;
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMemset(flush, 0x5A, flush_bytes));
  unsigned* fsink;
  CK(cudaMalloc(&fsink, 4));
  cudaEvent_t ev0, ev1;
  CK(cudaEventCreate(&ev0));
  CK(cudaEventCreate(&ev1));

  const Shape shapes[] = {{"qwen3-30b-a3b", 128, 8, 2048, 768, ck::Act::kSiluAndMul},
                          {"deepseek-v3", 256, 8, 7168, 2048, ck::Act::kSiluAndMul},
                          {"mixtral-8x7b", 8, 2, 4096, 14336, ck::Act::kSiluAndMul},
                          {"gpt-oss-120b-silu", 128, 4, 2880, 2880, ck::Act::kSiluAndMul}};
  std::mt19937 rng(1234);
  for (const Shape& sh : shapes) {
    if (!wanted(sh.name)) continue;
    const int NE = std::max(sh.k, std::min(sh.E, max_experts)), R = 2 * sh.I, H = sh.H, I = sh.I, K = sh.k;
    const size_t w13_n = size_t(NE) * R * H, w2_n = size_t(NE) * H * I;
    __nv_bfloat16 *w13, *w2, *x, *inter, *inter2, *out, *out2;
    CK(cudaMalloc(&w13, w13_n * 2));
    CK(cudaMalloc(&w2, w2_n * 2));
    CK(cudaMalloc(&x, size_t(H) * 2));
    CK(cudaMalloc(&inter, size_t(K) * I * 2));
    CK(cudaMalloc(&inter2, size_t(K) * I * 2));
    CK(cudaMalloc(&out, size_t(H) * 2));
    CK(cudaMalloc(&out2, size_t(H) * 2));
    fill_random<<<4096, 256>>>(w13, w13_n, 11, 0.05f);
    fill_random<<<4096, 256>>>(w2, w2_n, 12, 0.05f);
    fill_random<<<64, 256>>>(x, H, 13, 1.0f);
    CK(cudaGetLastError());
    float* rows_out;
    CK(cudaMalloc(&rows_out, size_t(K) * H * 4));
    int32_t* ids;
    float* rw;
    CK(cudaMalloc(&ids, K * 4));
    CK(cudaMalloc(&rw, K * 4));
    std::vector<float> hw(K, 1.0f / K);
    for (int i = 0; i < K; ++i) hw[i] = 0.5f / K + float(i) / (K * K);
    CK(cudaMemcpy(rw, hw.data(), K * 4, cudaMemcpyHostToDevice));
    auto new_ids = [&] {
      std::vector<int> all(NE);
      for (int i = 0; i < NE; ++i) all[i] = i;
      std::shuffle(all.begin(), all.end(), rng);
      CK(cudaMemcpyAsync(ids, all.data(), K * 4, cudaMemcpyHostToDevice, st));
    };
    const int64_t down_bytes = int64_t(H) * I * 2;
    const bool fits = ck::l2_next_fits(down_bytes, K, l2);

    // The runner's chain with stream tiles cfg.
    auto old_chain = [&](ck::GemmConfig cfg) {
      ck::GroupedGemmParams g1;
      g1.a = x; g1.lda = H; g1.b = w13; g1.b_expert_stride = int64_t(R) * H; g1.n = R; g1.k = H;
      g1.act = sh.act; g1.layout = ck::GateUpLayout::kBlocks8; g1.inter = inter; g1.ld_inter = I;
      g1.direct_ids = ids; g1.direct_top_k = K; g1.rows = K; g1.grid_tiles = K;
      if (fits) { g1.l2_next = w2; g1.l2_next_stride = down_bytes; g1.l2_next_bytes = down_bytes; g1.l2_next_at = (H + 63) / 64; }
      CK(ck::launch_grouped_gemm(ck::Elem::kBF16, cfg, g1, st));
      ck::GroupedGemmParams g2 = g1;
      g2.l2_next = nullptr; g2.a = inter; g2.lda = I; g2.b = w2; g2.b_expert_stride = int64_t(H) * I; g2.n = H; g2.k = I;
      g2.down = true; g2.rows_out = rows_out; g2.direct_top_k = 1; g2.weight_of_row = rw; g2.weights_before_wait = true;
      CK(ck::launch_grouped_gemm(ck::Elem::kBF16, cfg, g2, st));
      CK(ck::launch_combine(rows_out, 1, K, H, nullptr, nullptr, x, ck::Elem::kBF16, out, ck::Elem::kBF16, st));
    };
    // which: 3 = both kernels, 1 = gate_up only, 2 = down only (timing the halves; not checked)
    auto new_chain = [&](int stages, int cps, bool pf, int unit_rows, int kib, int which) {
      ck::DecodeGemvParams a;
      a.x = x; a.ids = ids; a.top_k = K; a.w = w13; a.w_expert_stride = int64_t(R) * H; a.rows = R; a.k = H;
      a.act = sh.act; a.out = inter2; a.sm_count = sms; a.ctas_per_sm = cps; a.stages = stages; a.stage_kib = kib;
      if (pf && fits) { a.l2_next = w2; a.l2_next_stride = down_bytes; a.l2_next_bytes = down_bytes; }
      if (which & 1) CK(ck::launch_decode_gemv(ck::Elem::kBF16, a, st));
      ck::DecodeGemvParams b;
      b.down = true; b.x = inter2; b.ids = ids; b.route_w = rw; b.top_k = K; b.w = w2; b.w_expert_stride = int64_t(H) * I;
      b.rows = H; b.k = I; b.out = out2; b.sm_count = sms; b.ctas_per_sm = cps; b.stages = stages; b.unit_rows = unit_rows; b.stage_kib = kib;
      if (which & 2) CK(ck::launch_decode_gemv(ck::Elem::kBF16, b, st));
    };
    struct Var { std::string name; std::function<void()> run; __nv_bfloat16* o; bool check = true; cudaGraphExec_t g = nullptr; std::vector<float> t, t_read; };
    std::vector<Var> vars;
    vars.push_back({"stream16x32", [&] { old_chain(ck::GemmConfig::kStreamM16N32); }, out});
    vars.push_back({"stream16x64", [&] { old_chain(ck::GemmConfig::kStreamM16); }, out});
    // stages, blocks per SM, L2 prefetch of the down weights, down unit rows, stage KiB
    // The three fastest of session 15's first sweep (bench/results/2026-12-02_s15_h200/NOTES.md).
    const int cfgs[][5] = {{3, 2, 1, 8, 32}, {2, 3, 1, 8, 32}, {3, 1, 1, 8, 64}};
    auto geometry_ok = [&](const int* c) {
      ck::DecodeGemvParams a;
      a.top_k = K; a.rows = R; a.k = H; a.act = sh.act; a.sm_count = sms; a.ctas_per_sm = c[1]; a.stages = c[0]; a.stage_kib = c[4];
      ck::DecodeGemvParams b = a;
      b.down = true; b.rows = H; b.k = I; b.unit_rows = c[3];
      return ck::decode_gemv_geometry(a, 2).ok && ck::decode_gemv_geometry(b, 2).ok;
    };
    const int64_t n13 = int64_t(R) * H / 8, n2 = int64_t(H) * I / 8;  // 16-byte words per expert
    vars.push_back({"bare-read", [&] {
                      bare_read_kernel<<<sms * 4, 512, 0, st>>>(reinterpret_cast<const uint4*>(w13), reinterpret_cast<const uint4*>(w2),
                                                                ids, K, n13, n2, reinterpret_cast<float*>(fsink));
                      CK(cudaGetLastError());
                    }, out, false});
    for (const auto& c : cfgs) {
      if (quick && vars.size() > 3) break;
      if (!geometry_ok(c)) continue;
      char nm[64];
      std::snprintf(nm, sizeof nm, "gemv-s%dx%dK-c%d-pf%d-u%d", c[0], c[4], c[1], c[2], c[3]);
      vars.push_back({nm, [&, c] { new_chain(c[0], c[1], c[2] != 0, c[3], c[4], 3); }, out2});
    }
    if (quick) vars.resize(std::min<size_t>(vars.size(), 4));
    for (int which : {1, 2}) {
      if (quick || !geometry_ok(cfgs[0])) break;
      const auto& c = cfgs[0];
      char nm[64];
      std::snprintf(nm, sizeof nm, "gemv-s%dx%dK-c%d-%s-only", c[0], c[4], c[1], which == 1 ? "up" : "down");
      vars.push_back({nm, [&, c, which] { new_chain(c[0], c[1], c[2] != 0, c[3], c[4], which); }, out2, false});
    }
    // Correctness: every variant against the stream tiles on one set of ids.
    new_ids();
    std::vector<__nv_bfloat16> ref(H), got(H);
    vars[0].run();
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(ref.data(), out, H * 2, cudaMemcpyDeviceToHost));
    double refmax = 0;
    for (int i = 0; i < H; ++i) refmax = std::max(refmax, std::fabs(double(__bfloat162float(ref[i]))));
    for (auto& v : vars) {
      if (!v.check) {
        v.run();
        CK(cudaStreamSynchronize(st));
      } else {
      CK(cudaMemsetAsync(v.o, 0xff, H * 2, st));  // NaN
      v.run();
      CK(cudaStreamSynchronize(st));
      CK(cudaMemcpy(got.data(), v.o, H * 2, cudaMemcpyDeviceToHost));
      double md = 0;
      bool nan = false;
      for (int i = 0; i < H; ++i) {
        const double a = __bfloat162float(got[i]), b = __bfloat162float(ref[i]);
        if (std::isnan(a)) nan = true;
        md = std::max(md, std::fabs(a - b));
      }
      std::printf("%s %-24s max|diff| %.3g (max|ref| %.3g)%s\n", sh.name, v.name.c_str(), md, refmax, nan ? " NaN!" : "");
      }
      // graph
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      v.run();
      CK(cudaStreamEndCapture(st, &g));
      CK(cudaGraphInstantiate(&v.g, g, 0));
      CK(cudaGraphDestroy(g));
    }
    for (int r = 0; r < reps + 2; ++r)
      for (int read = 0; read < 2; ++read)
        for (auto& v : vars) {
          new_ids();
          if (read) {
            flush_read_kernel<<<sms * 8, 512, 0, st>>>(static_cast<const uint4*>(flush), flush_bytes / 16, fsink);
            CK(cudaGetLastError());
          } else {
            CK(cudaMemsetAsync(flush, r, flush_bytes, st));
          }
          CK(cudaEventRecord(ev0, st));
          CK(cudaGraphLaunch(v.g, st));
          CK(cudaEventRecord(ev1, st));
          CK(cudaEventSynchronize(ev1));
          float ms;
          CK(cudaEventElapsedTime(&ms, ev0, ev1));
          if (r >= 2) (read ? v.t_read : v.t).push_back(ms * 1000.0f);
        }
    const double bytes = double(K) * (double(R) * H + double(H) * I) * 2;
    for (auto& v : vars) {
      for (int read = 0; read < 2; ++read) {
        std::vector<float>& t = read ? v.t_read : v.t;
        std::sort(t.begin(), t.end());
        const float med = t[t.size() / 2];
        std::printf("%s %-24s %s flush: median %.2f us (p10 %.2f p90 %.2f)  %.2f TB/s over %.1f MB\n", sh.name,
                    v.name.c_str(), read ? "read " : "write", med, t[t.size() / 10], t[t.size() * 9 / 10],
                    bytes / (med * 1e-6) / 1e12, bytes / 1e6);
      }
      CK(cudaGraphExecDestroy(v.g));
    }
    std::fflush(stdout);
    for (void* p : {(void*)w13, (void*)w2, (void*)x, (void*)inter, (void*)inter2, (void*)out, (void*)out2, (void*)rows_out,
                    (void*)ids, (void*)rw})
      CK(cudaFree(p));
  }
  return 0;
}
