// tile_amx2 alone, the weights from memory: each thread walks 1 GiB of 64-byte aligned panel pairs
// (qwen3 / deepseek-v2-lite gate_up shape, K = 2048) with m token rows of 4160-byte stride in L2, one
// call per pair, as a gemm1 item does. Session 18 (NOTES.md section 2).
//   g++ -O2 -std=c++20 -fopenmp -I src -I include tile_amx2_from_memory.cpp build/src/libmoerun.a \
//       -L/usr/local/cuda/lib64 -lcudart -lfmt -o /tmp/t3 && /tmp/t3 <threads> <prefetch bytes>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#include "backends/cpu/isa.hpp"
#include "backends/cpu/kernels/kernels.hpp"
using namespace moerun::cpu;
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
int main(int argc, char** argv) {
  (void)detected_isa();
  const int threads = argc > 1 ? atoi(argv[1]) : 1;
  const int pf = argc > 2 ? atoi(argv[2]) : 1024;
  const int64_t K = 2048, ldx = K + 32;
  const size_t pair_bytes = 2 * K * 16 * 2;  // 128 KiB
  const size_t npairs = (size_t(1) << 30) / pair_bytes;  // 1 GiB per thread
  for (int m : {32, 64, 80, 96, 112, 128, 160, 192, 256}) {
    double tsum = 0; double flops = 0;
#pragma omp parallel num_threads(threads) reduction(max: tsum) reduction(+: flops)
    {
      uint16_t* w = (uint16_t*)std::aligned_alloc(64, npairs * pair_bytes);
      for (size_t i = 0; i < npairs * pair_bytes / 2; ++i) w[i] = 0x3a80 + (i & 7);
      uint16_t* xb = (uint16_t*)std::aligned_alloc(64, (m + 16) * ldx * 2);
      for (int64_t i = 0; i < (m + 16) * ldx; ++i) xb[i] = 0x3a80;
      float* acc = (float*)std::aligned_alloc(64, 2 * (m + 16) * 16 * 4);
#pragma omp barrier
      double t0 = now_s();
      for (size_t p = 0; p < npairs; ++p) {
        const uint16_t* p0 = w + p * pair_bytes / 2;
        kernels::tile_amx2(p0, p0 + K * 16, K, xb, ldx, m, acc, acc + m * 16, pf);
      }
      tsum = now_s() - t0;
      flops = 2.0 * m * 32 * K * npairs;
      std::free(w); std::free(xb); std::free(acc);
    }
    printf("threads %d pf %d m=%3d: %.3f TFLOP/s total, %.1f GB/s of weights, %.2f us per pair-call\n", threads, pf, m,
           flops / tsum / 1e12, threads * double(npairs * pair_bytes) / tsum / 1e9, tsum / npairs * 1e6);
  }
}
