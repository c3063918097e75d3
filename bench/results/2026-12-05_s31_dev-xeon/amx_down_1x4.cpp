// Probe (session 31): the down GEMM's calls at K = 768 with up to 16 token rows, as the runner walks them:
// a gemm2 item runs an expert's group of 16 contiguous N-blocks (16 x 24 KiB bf16 VNNI panels), groups in
// shuffled order, weights from memory (1 GiB a thread), 2 threads.
//   2x1: tile_amx2's one-A-tile pass (the library now): 8 calls a group, C0 / C1, A4, B6 / B7.
//   1x4: four blocks a call, 4 calls a group: C0..C3, A4, B tiles rotating over 5 / 6 / 7, so one A tile
//        load serves four products and four weight streams are in flight.
//   read: a plain zmm read of the same blocks in the 2x1 order (what the access pattern allows).
// L1 prefetch 1 KiB ahead in every panel, as the library.
//   g++ -O2 -std=c++20 -fopenmp -mamx-tile -mamx-bf16 -mavx512f amx_down_1x4.cpp -o /tmp/p && /tmp/p 2 3
// (-DKK=2048: the gate_up shape, K = 2048, runs of 8 blocks of 64 KiB.)
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

struct alignas(64) Cfg { uint8_t palette = 1, start = 0, res[14] = {}; uint16_t colsb[16] = {}; uint8_t rows[16] = {}; };
static void cfg(int m) {
  Cfg c;
  for (int t = 0; t < 8; ++t) { c.colsb[t] = 64; c.rows[t] = uint8_t(t >= 5 ? 16 : m); }  // C, A: m rows; B: 16
  asm volatile("ldtilecfg %0" : : "m"(c));
}
static double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

#ifndef KK
#define KK 768
#endif
constexpr int64_t K = KK, kBlockElems = K * 16, kGroup = KK == 768 ? 16 : 8;

static inline void pf(const uint16_t* p, int64_t k) {
  for (int l = 0; l < 1024; l += 64) _mm_prefetch((const char*)p + k * 32 + 1024 + l, _MM_HINT_T0);
}

static void call2(const uint16_t* p0, const uint16_t* p1, const uint16_t* xb, int64_t ldx, float* o) {
  _tile_zero(0); _tile_zero(1);
  for (int64_t k = 0; k < K; k += 32) {
    pf(p0, k); pf(p1, k);
    _tile_loadd(6, p0 + k * 16, 64);
    _tile_loadd(7, p1 + k * 16, 64);
    _tile_loadd(4, xb + k, ldx * 2);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
  }
  _tile_stored(0, o, 64); _tile_stored(1, o + 256, 64);
}

static void call4(const uint16_t* p0, const uint16_t* xb, int64_t ldx, float* o) {
  const uint16_t *p1 = p0 + kBlockElems, *p2 = p1 + kBlockElems, *p3 = p2 + kBlockElems;
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  for (int64_t k = 0; k < K; k += 32) {
    pf(p0, k); pf(p1, k); pf(p2, k); pf(p3, k);
    _tile_loadd(4, xb + k, ldx * 2);
    _tile_loadd(5, p0 + k * 16, 64);
    _tile_dpbf16ps(0, 4, 5);
    _tile_loadd(6, p1 + k * 16, 64);
    _tile_dpbf16ps(1, 4, 6);
    _tile_loadd(7, p2 + k * 16, 64);
    _tile_dpbf16ps(2, 4, 7);
    _tile_loadd(5, p3 + k * 16, 64);
    _tile_dpbf16ps(3, 4, 5);
  }
  _tile_stored(0, o, 64); _tile_stored(1, o + 256, 64); _tile_stored(2, o + 512, 64); _tile_stored(3, o + 768, 64);
}

static float read2(const uint16_t* p0, const uint16_t* p1) {
  __m512 s = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 32) {
    pf(p0, k); pf(p1, k);
    for (int l = 0; l < 512; l += 32) {
      s = _mm512_add_ps(s, _mm512_castsi512_ps(_mm512_loadu_si512(p0 + k * 16 + l)));
      s = _mm512_add_ps(s, _mm512_castsi512_ps(_mm512_loadu_si512(p1 + k * 16 + l)));
    }
  }
  return _mm512_reduce_add_ps(s);
}

int main(int argc, char** argv) {
  if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) { std::puts("no AMX permission"); return 1; }
  const int threads = argc > 1 ? atoi(argv[1]) : 2;
  const int reps = argc > 2 ? atoi(argv[2]) : 3;
  const int64_t ldx = K + 32;
  const size_t group_bytes = size_t(kGroup) * kBlockElems * 2;  // 384 KiB
  const size_t ngroups = (size_t(1) << 30) / group_bytes;
  std::vector<uint16_t*> w(threads);
  std::vector<std::vector<uint32_t>> order(threads);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    w[t] = (uint16_t*)std::aligned_alloc(2 << 20, ngroups * group_bytes);
    for (size_t i = 0; i < ngroups * group_bytes / 2; ++i) w[t][i] = uint16_t(0x3a80 + (i & 7));
    order[t].resize(ngroups);
    for (size_t i = 0; i < ngroups; ++i) order[t][i] = uint32_t(i);
    std::mt19937 g(t + 7);
    std::shuffle(order[t].begin(), order[t].end(), g);
  }
  const char* names[] = {"2x1 (library)", "1x4", "plain read"};
  volatile float sink = 0;
  for (int m : {4, 8, 16}) {
    for (int r = 0; r < reps; ++r)
      for (int v = 0; v < 3; ++v) {
        double tmax = 0;
#pragma omp parallel num_threads(threads) reduction(max : tmax)
        {
          const int t = omp_get_thread_num();
          cfg(m);
          uint16_t* xb = (uint16_t*)std::aligned_alloc(64, 16 * ldx * 2);
          for (int64_t i = 0; i < 16 * ldx; ++i) xb[i] = 0x3a80;
          alignas(64) float o[4 * 256];
          float acc = 0;
#pragma omp barrier
          const double t0 = now_s();
          for (size_t i = 0; i < ngroups; ++i) {
            const uint16_t* g = w[t] + size_t(order[t][i]) * group_bytes / 2;
            if (v == 0)
              for (int b = 0; b < kGroup; b += 2) { call2(g + b * kBlockElems, g + (b + 1) * kBlockElems, xb, ldx, o); acc += o[3]; }
            else if (v == 1)
              for (int b = 0; b < kGroup; b += 4) { call4(g + b * kBlockElems, xb, ldx, o); acc += o[3]; }
            else
              for (int b = 0; b < kGroup; b += 2) acc += read2(g + b * kBlockElems, g + (b + 1) * kBlockElems);
          }
          tmax = now_s() - t0;
          sink = sink + acc;
          std::free(xb);
          _tile_release();
        }
        std::printf("threads %d m=%2d %-14s %5.1f GB/s\n", threads, m, names[v],
                    threads * double(ngroups * group_bytes) / tmax / 1e9);
        std::fflush(stdout);
      }
  }
}
