// Probe (session 33): 2x2 AMX tile passes of 32 rows over R rows of A (row stride K*2 + 64 bytes, K = 2048)
// against one pair of panels that stays in L2, each thread its own buffers; TF/s per thread.
// ./rows_l2 R PF THREADS PACKED KC: PF 1 = the library's 16 T0 prefetches per panel and step (512 B ahead);
// PACKED 1 = A stored tile-major (each A tile 1 KiB contiguous); KC > 0 = K in chunks of KC with C tiles
// spilled per (chunk, row pass), so that a chunk of the panels is reused from L1 by every row pass.
// g++ -O2 -fopenmp -mamx-tile -mamx-bf16 -mavx512f rows_l2.cpp -o rows_l2
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
  const int R = atoi(argv[1]); const int K = 2048; const int pf = argc > 2 ? atoi(argv[2]) : 0;
  const int nth = argc > 3 ? atoi(argv[3]) : 2; const int packed = argc > 4 ? atoi(argv[4]) : 0; const int kc = argc > 5 ? atoi(argv[5]) : 0;
  double tf[8] = {0};
#pragma omp parallel num_threads(nth)
  {
    syscall(SYS_arch_prctl, 0x1023, 18);
    cfg();
    const size_t ld = K + 32;
    uint16_t* A = (uint16_t*)aligned_alloc(64, R * ld * 2);
    uint16_t* B = (uint16_t*)aligned_alloc(64, 2 * K * 32 + 4096);
    memset(A, 0, R * ld * 2); memset(B, 0, 2 * K * 32 + 4096);
    const uint16_t* p0 = B; const uint16_t* p1 = B + K * 16;
    alignas(64) float out[2][32 * 16];
    const size_t stride = ld * 2;
    const long calls = 20000000L / R;
    double best = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
#pragma omp barrier
      auto t0 = std::chrono::steady_clock::now();
      static thread_local float spill[64][4][256] __attribute__((aligned(64)));
      for (long c = 0; c < calls / 64; ++c) {
        if (kc) {
          for (int k0 = 0; k0 < K; k0 += kc) {
            for (int i = 0; i < R; i += 32) {
              const uint16_t* xb = A + i * ld;
              float (*sp)[256] = spill[i / 32];
              if (k0 == 0) { _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); }
              else { _tile_loadd(0, sp[0], 64); _tile_loadd(1, sp[1], 64); _tile_loadd(2, sp[2], 64); _tile_loadd(3, sp[3], 64); }
              for (int k = k0; k < k0 + kc; k += 32) {
                _tile_loadd(6, p0 + k * 16, 64);
                _tile_loadd(7, p1 + k * 16, 64);
                _tile_loadd(4, xb + k, stride);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_loadd(5, xb + 16 * ld + k, stride);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
              }
              _tile_stored(0, sp[0], 64); _tile_stored(1, sp[1], 64); _tile_stored(2, sp[2], 64); _tile_stored(3, sp[3], 64);
            }
          }
          continue;
        }
        for (int i = 0; i < R; i += 32) {
          const uint16_t* xb = A + i * ld;
          _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
          for (int k = 0; k < K; k += 32) {
            if (pf) for (int l = 0; l < 1024; l += 64) {
              _mm_prefetch((const char*)p0 + 512 + k * 32 + l, _MM_HINT_T0);
              _mm_prefetch((const char*)p1 + 512 + k * 32 + l, _MM_HINT_T0);
            }
            _tile_loadd(6, p0 + k * 16, 64);
            _tile_loadd(7, p1 + k * 16, 64);
            if (packed) _tile_loadd(4, A + (size_t)i * K + k * 16, 64); else _tile_loadd(4, xb + k, stride);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            if (packed) _tile_loadd(5, A + (size_t)(i + 16) * K + k * 16, 64); else _tile_loadd(5, xb + 16 * ld + k, stride);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          }
          _tile_stored(0, out[0], 64); _tile_stored(1, out[1], 64);
          _tile_stored(2, out[0] + 256, 64); _tile_stored(3, out[1] + 256, 64);
        }
      }
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s < best) best = s;
    }
    tf[omp_get_thread_num()] = 2.0 * R * K * 32 * (calls / 64) / best / 1e12;
  }
  printf("R=%d pf=%d threads=%d packed=%d kc=%d: ", R, pf, nth, packed, kc);
  for (int t = 0; t < nth; ++t) printf("%.2f ", tf[t]);
  printf("TF/s per thread\n");
}
