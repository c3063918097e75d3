// Session-9 probe 2 (not part of the project): is the one-token VDPBF16PS loop latency-bound with 4
// accumulator chains? Pure register dot products with 4, 8 and 12 chains; bf16 and mxfp4 (quads) from
// L1/L2 with 4 and 8 chains. ns per dot (one k pair of 32 weights), one thread.
// g++ -O3 -march=sapphirerapids -std=c++20 s9_chains_probe.cpp -o probe && taskset -c 2 ./probe
#include <immintrin.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

alignas(64) static uint16_t lut16[32];
alignas(64) static int32_t x32[1024];

template <int C>
__attribute__((noinline)) float regs(int64_t n) {
  __m512 a[C];
  for (int i = 0; i < C; ++i) a[i] = _mm512_setzero_ps();
  __m512bh w = (__m512bh)_mm512_set1_epi32(0x3F803F80), x = (__m512bh)_mm512_set1_epi32(0x3C003C00);
  for (int64_t i = 0; i < n; i += C) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) a[c] = _mm512_dpbf16_ps(a[c], w, x);
    asm volatile("" : "+v"(w), "+v"(x));
  }
  __m512 s = a[0];
  for (int i = 1; i < C; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

// V 0: bf16 4 chains, 1: bf16 8 chains, 2: mxfp4 quads 4 chains, 3: mxfp4 quads 8 chains (two quads/step)
template <int V>
__attribute__((noinline)) float run(const uint8_t* d, int64_t pairs) {
  const __m512 z = _mm512_setzero_ps();
  __m512 a0 = z, a1 = z, a2 = z, a3 = z, a4 = z, a5 = z, a6 = z, a7 = z;
  const __m512i lut = _mm512_load_si512(lut16);
  auto xb = [&](int64_t p) { return (__m512bh)_mm512_set1_epi32(x32[p & 1023]); };
  for (int64_t p = 0; p < pairs; p += 8) {
    if constexpr (V <= 1) {
      const uint8_t* q = d + p * 64;
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096 + 64), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096 + 128), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096 + 192), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096 + 256), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096 + 320), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096 + 384), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096 + 448), _MM_HINT_T0);
      __m512bh w[8];
      for (int j = 0; j < 8; ++j) w[j] = (__m512bh)_mm512_load_si512(q + 64 * j);
      if constexpr (V == 0) {
        a0 = _mm512_dpbf16_ps(a0, w[0], xb(p));     a1 = _mm512_dpbf16_ps(a1, w[1], xb(p + 1));
        a2 = _mm512_dpbf16_ps(a2, w[2], xb(p + 2)); a3 = _mm512_dpbf16_ps(a3, w[3], xb(p + 3));
        a0 = _mm512_dpbf16_ps(a0, w[4], xb(p + 4)); a1 = _mm512_dpbf16_ps(a1, w[5], xb(p + 5));
        a2 = _mm512_dpbf16_ps(a2, w[6], xb(p + 6)); a3 = _mm512_dpbf16_ps(a3, w[7], xb(p + 7));
      } else {
        a0 = _mm512_dpbf16_ps(a0, w[0], xb(p));     a1 = _mm512_dpbf16_ps(a1, w[1], xb(p + 1));
        a2 = _mm512_dpbf16_ps(a2, w[2], xb(p + 2)); a3 = _mm512_dpbf16_ps(a3, w[3], xb(p + 3));
        a4 = _mm512_dpbf16_ps(a4, w[4], xb(p + 4)); a5 = _mm512_dpbf16_ps(a5, w[5], xb(p + 5));
        a6 = _mm512_dpbf16_ps(a6, w[6], xb(p + 6)); a7 = _mm512_dpbf16_ps(a7, w[7], xb(p + 7));
      }
    } else {
      const uint8_t* q = d + p * 16;
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096 + 64), _MM_HINT_T0);
      __m512i v[8];
      for (int h = 0; h < 2; ++h) {
        const __m512i w = _mm512_load_si512(q + 64 * h);
        v[4 * h] = _mm512_permutexvar_epi16(w, lut);
        v[4 * h + 1] = _mm512_permutexvar_epi16(_mm512_srli_epi16(w, 4), lut);
        v[4 * h + 2] = _mm512_permutexvar_epi16(_mm512_srli_epi16(w, 8), lut);
        v[4 * h + 3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(w, 12), lut);
      }
      if constexpr (V == 2) {
        a0 = _mm512_dpbf16_ps(a0, (__m512bh)v[0], xb(p));     a1 = _mm512_dpbf16_ps(a1, (__m512bh)v[1], xb(p + 1));
        a2 = _mm512_dpbf16_ps(a2, (__m512bh)v[2], xb(p + 2)); a3 = _mm512_dpbf16_ps(a3, (__m512bh)v[3], xb(p + 3));
        a0 = _mm512_dpbf16_ps(a0, (__m512bh)v[4], xb(p + 4)); a1 = _mm512_dpbf16_ps(a1, (__m512bh)v[5], xb(p + 5));
        a2 = _mm512_dpbf16_ps(a2, (__m512bh)v[6], xb(p + 6)); a3 = _mm512_dpbf16_ps(a3, (__m512bh)v[7], xb(p + 7));
      } else {
        a0 = _mm512_dpbf16_ps(a0, (__m512bh)v[0], xb(p));     a1 = _mm512_dpbf16_ps(a1, (__m512bh)v[1], xb(p + 1));
        a2 = _mm512_dpbf16_ps(a2, (__m512bh)v[2], xb(p + 2)); a3 = _mm512_dpbf16_ps(a3, (__m512bh)v[3], xb(p + 3));
        a4 = _mm512_dpbf16_ps(a4, (__m512bh)v[4], xb(p + 4)); a5 = _mm512_dpbf16_ps(a5, (__m512bh)v[5], xb(p + 5));
        a6 = _mm512_dpbf16_ps(a6, (__m512bh)v[6], xb(p + 6)); a7 = _mm512_dpbf16_ps(a7, (__m512bh)v[7], xb(p + 7));
      }
    }
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  return _mm512_reduce_add_ps(s);
}

// One dependent 1-cycle add per iteration, 8 per loop: ns per cycle (the core clock while it runs).
__attribute__((noinline)) uint64_t adds(int64_t n) {
  uint64_t v = 1;
  for (int64_t i = 0; i < n; i += 8)
    asm volatile("add %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\t"
                 "add %0, %0\n\tadd %0, %0\n\tadd %0, %0\n\tadd %0, %0" : "+r"(v));
  return v;
}

template <typename Fn>
double best_ns(Fn fn, int64_t n, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
    best = ns < best ? ns : best;
  }
  return best;
}

int main() {
  for (int i = 0; i < 32; ++i) lut16[i] = static_cast<uint16_t>(0x3F00 + (i & 15) * 8);
  for (int i = 0; i < 1024; ++i) x32[i] = 0x3F803F80 ^ (i & 0x00070007);
  const size_t big = 1 << 20;
  uint8_t* buf = static_cast<uint8_t*>(std::aligned_alloc(64, big));
  for (size_t i = 0; i < big; ++i) buf[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  float sink = 0;
  const int64_t n = 1 << 20;
  for (int round = 0; round < 3; ++round) {
    uint64_t su = 0;
    std::printf("round %d clock %.3f ns/cycle; regs:", round, best_ns([&] { su += adds(n); }, n, 20));
    std::printf(" 1 chain %.3f", best_ns([&] { sink += regs<1>(n); }, n, 20));
    sink += static_cast<float>(su & 1);
    std::printf(" 4 chains %.3f", best_ns([&] { sink += regs<4>(n); }, n, 20));
    std::printf(" | 8 chains %.3f", best_ns([&] { sink += regs<8>(n); }, n, 20));
    std::printf(" | 12 chains %.3f", best_ns([&] { sink += regs<12>(n); }, n, 20));
    for (size_t bytes : {size_t(16) << 10, size_t(512) << 10}) {
      const int64_t pb = static_cast<int64_t>(bytes / 64) & ~7, pf = static_cast<int64_t>(bytes / 16) & ~7;
      std::printf(" || %s bf16 4ch %.3f", bytes < 65536 ? "L1" : "L2", best_ns([&] { sink += run<0>(buf, pb); }, pb, 300));
      std::printf(" 8ch %.3f", best_ns([&] { sink += run<1>(buf, pb); }, pb, 300));
      std::printf(" | mxfp4 4ch %.3f", best_ns([&] { sink += run<2>(buf, pf); }, pf, 300));
      std::printf(" 8ch %.3f", best_ns([&] { sink += run<3>(buf, pf); }, pf, 300));
    }
    std::printf("\n");
  }
  std::printf("(ns per VDPBF16PS / per k pair; sink %g)\n", sink);
}
