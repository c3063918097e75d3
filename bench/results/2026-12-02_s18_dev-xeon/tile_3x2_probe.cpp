// Session 18 (NOTES.md section 3): 2 N-blocks x K = 2048 with the weights from memory (1 GiB a thread),
// tile_amx2's passes of 32 (2x2) against passes of 48 (3x2: C0..C5, A tile 6, B tile 7 reloaded from
// L1 for the second and third token group), the rest in a 2x2 or 1x2 pass. Raw intrinsics, no library.
//   g++ -O2 -std=c++20 -fopenmp -mamx-tile -mamx-bf16 -mavx512f tile_3x2_probe.cpp -o p && ./p 2 1024
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
struct alignas(64) Cfg { uint8_t palette = 1, start = 0; uint8_t r0[14] = {}; uint16_t colsb[16] = {}; uint8_t rows[16] = {}; };
void cfg() { Cfg c; for (int t = 0; t < 8; ++t) { c.colsb[t] = 64; c.rows[t] = 16; } _tile_loadconfig(&c); }
constexpr int64_t K = 2048, LDX = K + 32;  // elements
constexpr size_t kStride = LDX * 2;
static inline void pf(const uint16_t* p, int ahead) {
  const char* c = reinterpret_cast<const char*>(p) + ahead;
  for (int l = 0; l < 1024; l += 64) _mm_prefetch(c + l, _MM_HINT_T0);
}
// 2x2: passes of 32 rows over all of K
void k2x2(const uint16_t* b0, const uint16_t* b1, const uint16_t* x, int m, float* c, int ahead) {
  for (int i = 0; i < m; i += 32) {
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    const uint16_t* a = x + i * LDX;
    for (int64_t k = 0; k < K; k += 32) {
      if (ahead) { pf(b0 + k * 16, ahead); pf(b1 + k * 16, ahead); }
      _tile_loadd(6, b0 + k * 16, 64);
      _tile_loadd(7, b1 + k * 16, 64);
      _tile_loadd(4, a + k, kStride);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(5, a + 16 * LDX + k, kStride);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, 64); _tile_stored(1, c + 256, 64); _tile_stored(2, c + 512, 64); _tile_stored(3, c + 768, 64);
  }
}
// 3x2: passes of 48 rows; per k step: A_r (r = 0..2) once, B0 / B1 reloaded (memory first, then L1)
void k3x2(const uint16_t* b0, const uint16_t* b1, const uint16_t* x, int m, float* c, int ahead) {
  for (int i = 0; i < m; i += 48) {
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); _tile_zero(4); _tile_zero(5);
    const uint16_t* a = x + i * LDX;
    for (int64_t k = 0; k < K; k += 32) {
      if (ahead) { pf(b0 + k * 16, ahead); pf(b1 + k * 16, ahead); }
      _tile_loadd(6, a + k, kStride);
      _tile_loadd(7, b0 + k * 16, 64);
      _tile_dpbf16ps(0, 6, 7);
      _tile_loadd(7, b1 + k * 16, 64);
      _tile_dpbf16ps(1, 6, 7);
      _tile_loadd(6, a + 16 * LDX + k, kStride);
      _tile_loadd(7, b0 + k * 16, 64);
      _tile_dpbf16ps(2, 6, 7);
      _tile_loadd(7, b1 + k * 16, 64);
      _tile_dpbf16ps(3, 6, 7);
      _tile_loadd(6, a + 32 * LDX + k, kStride);
      _tile_loadd(7, b0 + k * 16, 64);
      _tile_dpbf16ps(4, 6, 7);
      _tile_loadd(7, b1 + k * 16, 64);
      _tile_dpbf16ps(5, 6, 7);
    }
    for (int t = 0; t < 6; ++t) {}
    _tile_stored(0, c, 64); _tile_stored(1, c + 256, 64); _tile_stored(2, c + 512, 64);
    _tile_stored(3, c + 768, 64); _tile_stored(4, c + 1024, 64); _tile_stored(5, c + 1280, 64);
  }
}
void k1x2pass(const uint16_t* b0, const uint16_t* b1, const uint16_t* a, float* c, int ahead) {
  _tile_zero(0); _tile_zero(1);
  for (int64_t k = 0; k < K; k += 32) {
    if (ahead) { pf(b0 + k * 16, ahead); pf(b1 + k * 16, ahead); }
    _tile_loadd(6, b0 + k * 16, 64);
    _tile_loadd(7, b1 + k * 16, 64);
    _tile_loadd(4, a + k, kStride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
  }
  _tile_stored(0, c, 64); _tile_stored(1, c + 256, 64);
}
void k2x2pass(const uint16_t* b0, const uint16_t* b1, const uint16_t* a, float* c, int ahead) { k2x2(b0, b1, a, 32, c, ahead); }
void k3x2pass(const uint16_t* b0, const uint16_t* b1, const uint16_t* a, float* c, int ahead) { k3x2(b0, b1, a, 48, c, ahead); }
// passes of 48 (3x2), then the rest: 17-32 rows 2x2, 1-16 rows 1x2; the first pass prefetches
void mixed(const uint16_t* b0, const uint16_t* b1, const uint16_t* x, int m, float* c, int ahead) {
  int i = 0;
  for (; m - i > 32; i += 48) k3x2pass(b0, b1, x + i * LDX, c, i == 0 ? ahead : 0);
  if (m - i > 16) k2x2pass(b0, b1, x + i * LDX, c, i == 0 ? ahead : 0);
  else if (m - i > 0) k1x2pass(b0, b1, x + i * LDX, c, i == 0 ? ahead : 0);
}
// the current tile_amx2: passes of 32, the last of 1-16 rows 1x2
void now2x2(const uint16_t* b0, const uint16_t* b1, const uint16_t* x, int m, float* c, int ahead) {
  int i = 0;
  for (; m - i > 16; i += 32) k2x2pass(b0, b1, x + i * LDX, c, ahead);
  if (m - i > 0) k1x2pass(b0, b1, x + i * LDX, c, ahead);
}
int main(int argc, char** argv) {
  syscall(SYS_arch_prctl, 0x1023, 18);  // ARCH_REQ_XCOMP_PERM XTILEDATA
  const int threads = argc > 1 ? atoi(argv[1]) : 2;
  const int ahead = argc > 2 ? atoi(argv[2]) : 1024;
  const size_t pair = 2 * K * 16 * 2, npairs = (size_t(1) << 30) / pair;
  for (int rep = 0; rep < 2; ++rep)
  for (int design = 0; design < 2; ++design) {
    for (int m : {33, 48, 64, 80, 96, 112, 128, 160, 256}) {
      double tmax = 0;
#pragma omp parallel num_threads(threads) reduction(max: tmax)
      {
        static thread_local uint16_t* w = nullptr;
        static thread_local uint16_t* x = nullptr;
        static thread_local float* c = nullptr;
        if (!w) {
          w = (uint16_t*)std::aligned_alloc(64, npairs * pair);
          for (size_t i = 0; i < npairs * pair / 2; ++i) w[i] = 0x3a80 + (i & 7);
          x = (uint16_t*)std::aligned_alloc(64, 256 * kStride);
          for (size_t i = 0; i < 256 * LDX; ++i) x[i] = 0x3a80;
          c = (float*)std::aligned_alloc(64, 8 * 1024 * 4);
        }
        cfg();
#pragma omp barrier
        const double t0 = now_s();
        for (size_t p = 0; p < npairs; ++p) {
          const uint16_t* b0 = w + p * pair / 2;
          if (design == 0) now2x2(b0, b0 + K * 16, x, m, c, ahead);
          else mixed(b0, b0 + K * 16, x, m, c, ahead);
        }
        tmax = now_s() - t0;
        _tile_release();
      }
      printf("%s m=%3d: %.2f us per pair-call, %.1f GB/s, %.2f TFLOP/s\n", design ? "3x2 mixed" : "now 2x2", m, tmax / npairs * 1e6,
             threads * double(npairs * pair) / tmax / 1e9, threads * 2.0 * m * 32 * K * npairs / tmax / 1e12);
    }
  }
}
