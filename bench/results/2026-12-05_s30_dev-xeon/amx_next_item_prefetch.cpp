// Probe (session 30): tile_amx2's two N-block passes with the weights from memory, and the NEXT
// call's panel pair prefetched into L2 (PREFETCHT2) spread over every k step of every pass of this
// call, so the DRAM stream runs behind the AMX work instead of in front of the first pass.
// Each thread walks 1 GiB of 128 KiB panel pairs (K = 2048, two 16-lane bf16 VNNI panels) in a
// shuffled order (as the runner's dynamic items come), m token rows of 4160-byte stride.
//   g++ -O2 -std=c++20 -fopenmp -mamx-tile -mamx-bf16 -mavx512f amx_next_item_prefetch.cpp -o /tmp/p
//   /tmp/p <threads> [reps]
// Variant lists: amx_prefetch_variants.log is this file's list; amx_next_item_prefetch.log came from
// the first list, {L1 1K; next->L2 over all passes + L1 1K; next->L2 alone; next->L2 + L1 256} (mode 1,
// which this file still implements).
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
static void cfg16() {
  Cfg c; for (int t = 0; t < 8; ++t) { c.colsb[t] = 64; c.rows[t] = 16; }
  asm volatile("ldtilecfg %0" : : "m"(c));
}
static double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// One pass of 32 rows over both panels. pf1: L1 prefetch distance in the current panels (0 none).
// next: the next call's pair (2 * 64 KiB contiguous) or null; nl: its lines to prefetch per k step;
// nxt_line: running line index into it.
template <bool kTwoA>
static inline void pass2(const uint16_t* p0, const uint16_t* p1, int64_t kp, const uint16_t* xb, int64_t ldx,
                         float* o0, float* o1, int pf1, int pf2, const char* next, int nl, int64_t& nxt_line, int64_t nxt_end) {
  _tile_zero(0); _tile_zero(1);
  if constexpr (kTwoA) { _tile_zero(2); _tile_zero(3); }
  const size_t stride = size_t(ldx) * 2;
  for (int64_t k = 0; k < kp; k += 32) {
    if (pf1 > 0)
      for (int l = 0; l < 1024; l += 64) {
        _mm_prefetch((const char*)p0 + k * 32 + pf1 + l, _MM_HINT_T0);
        _mm_prefetch((const char*)p1 + k * 32 + pf1 + l, _MM_HINT_T0);
      }
    if (pf2 > 0)
      for (int l = 0; l < 1024; l += 64) {
        _mm_prefetch((const char*)p0 + k * 32 + pf2 + l, _MM_HINT_T2);
        _mm_prefetch((const char*)p1 + k * 32 + pf2 + l, _MM_HINT_T2);
      }
    if (next)
      for (int q = 0; q < nl && nxt_line < nxt_end; ++q, ++nxt_line) _mm_prefetch(next + nxt_line * 64, _MM_HINT_T2);
    _tile_loadd(6, p0 + k * 16, 64);
    _tile_loadd(7, p1 + k * 16, 64);
    _tile_loadd(4, xb + k, stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (kTwoA) {
      _tile_loadd(5, xb + 16 * ldx + k, stride);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, o0, 64); _tile_stored(1, o1, 64);
  if constexpr (kTwoA) { _tile_stored(2, o0 + 256, 64); _tile_stored(3, o1 + 256, 64); }
}

static void call2(const uint16_t* p0, const uint16_t* p1, int64_t kp, const uint16_t* xb, int64_t ldx, int m,
                  float* acc0, float* acc1, int pf1, int pf2, const char* next, int64_t next_bytes, int mode) {
  alignas(64) float o0[32 * 16], o1[32 * 16];
  const int passes = (m + 31) / 32;
  const int64_t steps = (mode == 2 ? 1 : passes) * (kp / 32), lines = next_bytes / 64;
  const int nl = int((lines + steps - 1) / steps);
  int64_t nxt = 0;
  for (int i = 0; i < m; i += 32) {
    const int rows = std::min(32, m - i);
    const uint16_t* x = xb + int64_t(i) * ldx;
    const char* nx = mode == 2 && i + 32 < m ? nullptr : next;
    const int p2 = i == 0 ? pf2 : 0;  // within-pair L2 prefetch in the first (memory) pass only
    if (rows > 16) pass2<true>(p0, p1, kp, x, ldx, o0, o1, pf1, p2, nx, nl, nxt, lines);
    else pass2<false>(p0, p1, kp, x, ldx, o0, o1, pf1, p2, nx, nl, nxt, lines);
    std::memcpy(acc0 + int64_t(i) * 16, o0, size_t(rows) * 64);
    std::memcpy(acc1 + int64_t(i) * 16, o1, size_t(rows) * 64);
  }
}

int main(int argc, char** argv) {
  if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) { std::puts("no AMX permission"); return 1; }
  const int threads = argc > 1 ? atoi(argv[1]) : 2;
  const int reps = argc > 2 ? atoi(argv[2]) : 3;
  const int64_t K = 2048, ldx = K + 32;
  const size_t pair_bytes = 2 * K * 16 * 2;               // 128 KiB
  const size_t npairs = (size_t(1) << 30) / pair_bytes;   // 1 GiB a thread
  struct V { const char* name; int pf1; int pf2; int mode; };
  const V vs[] = {{"now: L1 1K", 1024, 0, 0}, {"L1 1K + L2 4K", 1024, 4096, 0}, {"L1 1K + L2 8K", 1024, 8192, 0},
                  {"L1 2K", 2048, 0, 0}, {"L1 1K, next->L2 last pass", 1024, 0, 2},
                  {"L1 1K+L2 4K, next last", 1024, 4096, 2}};
  std::vector<uint16_t*> w(threads);
  std::vector<std::vector<uint32_t>> order(threads);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    w[t] = (uint16_t*)std::aligned_alloc(4096, npairs * pair_bytes);
    for (size_t i = 0; i < npairs * pair_bytes / 2; ++i) w[t][i] = 0x3a80 + (i & 7);
    order[t].resize(npairs);
    for (size_t i = 0; i < npairs; ++i) order[t][i] = uint32_t(i);
    std::mt19937 g(t + 1);
    std::shuffle(order[t].begin(), order[t].end(), g);
  }
  for (int m : {32, 64, 96, 128, 256}) {
    for (int r = 0; r < reps; ++r)
      for (const V& v : vs) {
        double tmax = 0;
#pragma omp parallel num_threads(threads) reduction(max : tmax)
        {
          const int t = omp_get_thread_num();
          cfg16();
          uint16_t* xb = (uint16_t*)std::aligned_alloc(64, (m + 32) * ldx * 2);
          for (int64_t i = 0; i < (m + 32) * ldx; ++i) xb[i] = 0x3a80;
          float* acc = (float*)std::aligned_alloc(64, 2 * (m + 32) * 16 * 4);
#pragma omp barrier
          const double t0 = now_s();
          for (size_t i = 0; i < npairs; ++i) {
            const uint16_t* p0 = w[t] + size_t(order[t][i]) * pair_bytes / 2;
            const char* nx = v.mode && i + 1 < npairs ? (const char*)(w[t] + size_t(order[t][i + 1]) * pair_bytes / 2) : nullptr;
            call2(p0, p0 + K * 16, K, xb, ldx, m, acc, acc + m * 16, v.pf1, v.pf2, nx, pair_bytes, v.mode);
          }
          tmax = now_s() - t0;
          std::free(xb); std::free(acc);
          _tile_release();
        }
        const double flops = 2.0 * m * 32 * K * npairs * threads;
        std::printf("threads %d m=%3d %-26s %6.3f TFLOP/s %5.1f GB/s %6.2f us/call\n", threads, m, v.name,
                    flops / tmax / 1e12, threads * double(npairs * pair_bytes) / tmax / 1e9, tmax / npairs * 1e6);
        std::fflush(stdout);
      }
  }
}
