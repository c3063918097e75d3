// Probe (session 33): K-chunked 2x2 tiles with the A chunk (32 rows x KC) kept in L1 and shared by G pairs
// of panels read from L2, C tiles spilled per (pair, chunk); TF/s per thread.
// ./areuse R KC G THREADS;  g++ -O2 -fopenmp -mamx-tile -mamx-bf16 -mavx512f areuse.cpp -o areuse
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
struct Cfg { uint8_t palette, start; uint8_t r[14]; uint16_t colsb[16]; uint8_t rows[16]; };
static void cfg() { Cfg c; memset(&c,0,sizeof c); c.palette=1; for(int t=0;t<8;++t){c.colsb[t]=64;c.rows[t]=16;} _tile_loadconfig(&c); }
int main(int argc,char**argv){
  const int R = atoi(argv[1]); const int kc = atoi(argv[2]); const int G = atoi(argv[3]); const int nth = atoi(argv[4]);
  const int K = 2048;
  double tf[8] = {0};
#pragma omp parallel num_threads(nth)
  {
    syscall(SYS_arch_prctl, 0x1023, 18);
    cfg();
    const size_t ld = K + 32;
    uint16_t* A = (uint16_t*)aligned_alloc(64, R * ld * 2);
    uint16_t* B = (uint16_t*)aligned_alloc(64, (size_t)G * 2 * K * 32 + 4096);
    float* sp = (float*)aligned_alloc(64, (size_t)G * 4 * 1024);
    memset(A, 0, R * ld * 2); memset(B, 0, (size_t)G * 2 * K * 32 + 4096); memset(sp, 0, G*4*1024);
    const size_t stride = ld * 2;
    const long reps = 4000000000L / (2L * R * K * 32 * G) + 1;
    double best = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
#pragma omp barrier
      auto t0 = std::chrono::steady_clock::now();
      for (long c = 0; c < reps; ++c) {
        for (int i = 0; i < R; i += 32) {
          const uint16_t* xb = A + i * ld;
          for (int k0 = 0; k0 < K; k0 += kc) {
            for (int g = 0; g < G; ++g) {
              const uint16_t* p0 = B + (size_t)g * 2 * K * 16; const uint16_t* p1 = p0 + K * 16;
              float* s = sp + g * 1024;
              if (k0 == 0) { _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); }
              else { _tile_loadd(0, s, 64); _tile_loadd(1, s + 256, 64); _tile_loadd(2, s + 512, 64); _tile_loadd(3, s + 768, 64); }
              for (int k = k0; k < k0 + kc; k += 32) {
                _tile_loadd(4, xb + k, stride);
                _tile_loadd(6, p0 + k * 16, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_loadd(7, p1 + k * 16, 64);
                _tile_dpbf16ps(1, 4, 7);
                _tile_loadd(5, xb + 16 * ld + k, stride);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
              }
              _tile_stored(0, s, 64); _tile_stored(1, s + 256, 64); _tile_stored(2, s + 512, 64); _tile_stored(3, s + 768, 64);
            }
          }
        }
      }
      double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (sec < best) best = sec;
    }
    tf[omp_get_thread_num()] = 2.0 * R * K * 32 * G * reps / best / 1e12;
  }
  printf("R=%d kc=%d G=%d threads=%d: ", R, kc, G, nth);
  for (int t = 0; t < nth; ++t) printf("%.2f ", tf[t]);
  printf("TF/s per thread\n");
}
