// Session-8 probe (not part of the project): one-token decode inner loops, one thread, ns per k pair
// (32 weights), for the current packed layouts and for candidate layouts that need fewer shuffles.
// g++ -O3 -march=sapphirerapids -std=c++20 s8_decode_probe.cpp -o probe && taskset -c 2 ./probe
#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

alignas(64) static uint16_t e2m1_lut[32];
alignas(64) static uint8_t fp4_spread[64], fp8_spread[64];
alignas(64) static uint16_t fp8_sub[32];

static void tables() {
  const float tw[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int i = 0; i < 32; ++i) {
    float v = tw[i & 7] * ((i & 8) ? -1.f : 1.f);
    uint32_t u;
    std::memcpy(&u, &v, 4);
    e2m1_lut[i] = static_cast<uint16_t>(u >> 16);
  }
  for (int j = 0; j < 64; ++j) {
    const int word = j / 2, lane = word / 2, odd = word & 1;
    fp8_spread[j] = static_cast<uint8_t>(odd * 16 + lane);
    fp4_spread[j] = static_cast<uint8_t>(odd * 8 + (lane & 7));
  }
  for (int m = 0; m < 8; ++m) {
    float v = m * (1.f / 512) / 256;
    uint32_t u;
    std::memcpy(&u, &v, 4);
    fp8_sub[m] = static_cast<uint16_t>(u >> 16);
  }
}


template <int V>
__attribute__((noinline)) float run(const uint8_t* d, int64_t pairs, const int32_t* x32) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  __m512 a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
  const __m512i lut = _mm512_load_si512(e2m1_lut), sp4 = _mm512_load_si512(fp4_spread);
  const __m512i sp8 = _mm512_load_si512(fp8_spread), sub = _mm512_load_si512(fp8_sub);
  const __m512i em = _mm512_set1_epi16(0x07F0), bias = _mm512_set1_epi16(0x3800);
  const __m512i expo = _mm512_set1_epi16(0x0078), expo_hi = _mm512_set1_epi16(0x7800);
  const __m512i sign = _mm512_set1_epi16(static_cast<short>(0x8000));
  auto xb = [&](int64_t p) { return (__m512bh)_mm512_set1_epi32(x32[p & 1023]); };
  auto fp4_cur = [&](const uint8_t* q) {
    const __m512i src = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
    __m512i s = _mm512_permutexvar_epi8(sp4, src);
    s = _mm512_mask_srli_epi16(s, static_cast<__mmask32>(0xFFFF0000u), s, 4);
    return _mm512_permutexvar_epi16(s, lut);
  };
  auto fp8_cur = [&](const uint8_t* q) {
    const __m512i src = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
    const __m512i w = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, sp8, src);
    __m512i r = _mm512_ternarylogic_epi32(_mm512_slli_epi16(w, 4), em, bias, 0xEA);
    r = _mm512_mask_permutexvar_epi16(r, _mm512_testn_epi16_mask(w, expo), w, sub);
    return _mm512_ternarylogic_epi32(r, _mm512_slli_epi16(w, 8), sign, 0xF8);
  };
  for (int64_t p = 0; p < pairs; p += 4) {
    if constexpr (V == 0) {  // bf16: 64 bytes per pair
      const uint8_t* q = d + p * 64;
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096 + 64), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096 + 128), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096 + 192), _MM_HINT_T0);
      a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_load_si512(q), xb(p));
      a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_load_si512(q + 64), xb(p + 1));
      a2 = _mm512_dpbf16_ps(a2, (__m512bh)_mm512_load_si512(q + 128), xb(p + 2));
      a3 = _mm512_dpbf16_ps(a3, (__m512bh)_mm512_load_si512(q + 192), xb(p + 3));
    } else if constexpr (V == 1) {  // mxfp4 now: 16 bytes per pair, vpermb + vpsrlw + vpermw
      const uint8_t* q = d + p * 16;
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096), _MM_HINT_T0);
      a0 = _mm512_dpbf16_ps(a0, (__m512bh)fp4_cur(q), xb(p));
      a1 = _mm512_dpbf16_ps(a1, (__m512bh)fp4_cur(q + 16), xb(p + 1));
      a2 = _mm512_dpbf16_ps(a2, (__m512bh)fp4_cur(q + 32), xb(p + 2));
      a3 = _mm512_dpbf16_ps(a3, (__m512bh)fp4_cur(q + 48), xb(p + 3));
    } else if constexpr (V == 2) {  // mxfp4, 4 pairs per 64 bytes: nibble q of word j = pair q
      const uint8_t* q = d + p * 16;
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096), _MM_HINT_T0);
      const __m512i w = _mm512_load_si512(q);
      a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_permutexvar_epi16(w, lut), xb(p));
      a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(w, 4), lut), xb(p + 1));
      a2 = _mm512_dpbf16_ps(a2, (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(w, 8), lut), xb(p + 2));
      a3 = _mm512_dpbf16_ps(a3, (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi16(w, 12), lut), xb(p + 3));
    } else if constexpr (V == 3) {  // fp8 now: 32 bytes per pair
      const uint8_t* q = d + p * 32;
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096 + 64), _MM_HINT_T0);
      a0 = _mm512_dpbf16_ps(a0, (__m512bh)fp8_cur(q), xb(p));
      a1 = _mm512_dpbf16_ps(a1, (__m512bh)fp8_cur(q + 32), xb(p + 1));
      a2 = _mm512_dpbf16_ps(a2, (__m512bh)fp8_cur(q + 64), xb(p + 2));
      a3 = _mm512_dpbf16_ps(a3, (__m512bh)fp8_cur(q + 96), xb(p + 3));
    } else if constexpr (V == 4) {  // fp8, 2 pairs per 64 bytes: low byte of word j = pair 0, high = pair 1
      const uint8_t* q = d + p * 32;
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096 + 64), _MM_HINT_T0);
      for (int h = 0; h < 2; ++h) {
        const __m512i w = _mm512_load_si512(q + h * 64);
        __m512i lo = _mm512_ternarylogic_epi32(_mm512_slli_epi16(w, 4), em, bias, 0xEA);
        lo = _mm512_mask_permutexvar_epi16(lo, _mm512_testn_epi16_mask(w, expo), w, sub);
        lo = _mm512_ternarylogic_epi32(lo, _mm512_slli_epi16(w, 8), sign, 0xF8);
        __m512i hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(w, 4), em, bias, 0xEA);
        hi = _mm512_mask_permutexvar_epi16(hi, _mm512_testn_epi16_mask(w, expo_hi), _mm512_srli_epi16(w, 8), sub);
        hi = _mm512_ternarylogic_epi32(hi, w, sign, 0xF8);
        if (h == 0) {
          a0 = _mm512_dpbf16_ps(a0, (__m512bh)lo, xb(p));
          a1 = _mm512_dpbf16_ps(a1, (__m512bh)hi, xb(p + 1));
        } else {
          a2 = _mm512_dpbf16_ps(a2, (__m512bh)lo, xb(p + 2));
          a3 = _mm512_dpbf16_ps(a3, (__m512bh)hi, xb(p + 3));
        }
      }
    } else if constexpr (V == 5) {  // mxfp4 now, 8 chains (two groups of 4 pairs interleaved)
      const uint8_t* q = d + p * 16;
      _mm_prefetch(reinterpret_cast<const char*>(q + 4096), _MM_HINT_T0);
      const __m512i w0 = fp4_cur(q), w1 = fp4_cur(q + 16), w2 = fp4_cur(q + 32), w3 = fp4_cur(q + 48);
      a0 = _mm512_dpbf16_ps(a0, (__m512bh)w0, xb(p));
      a1 = _mm512_dpbf16_ps(a1, (__m512bh)w1, xb(p + 1));
      a2 = _mm512_dpbf16_ps(a2, (__m512bh)w2, xb(p + 2));
      a3 = _mm512_dpbf16_ps(a3, (__m512bh)w3, xb(p + 3));
    }
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
  return _mm512_reduce_add_ps(s);
}

static const char* kName[] = {"bf16 (64 B/pair)", "mxfp4 now (vpermb+vpsrlw+vpermw)", "mxfp4 4-pair words (vpermw+shift)",
                              "fp8 now (vpermb + 6)", "fp8 2-pair words (no vpermb)", "mxfp4 now, loads first"};
static const int kBytes[] = {64, 16, 16, 32, 32, 16};

template <int V>
double time_ns_per_pair(const uint8_t* buf, size_t bytes, const int32_t* x32, int reps, float* sink) {
  const int64_t pairs = static_cast<int64_t>(bytes / kBytes[V]) & ~int64_t(3);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    *sink += run<V>(buf, pairs, x32);
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    best = ns / pairs < best ? ns / pairs : best;
  }
  return best;
}

int main(int argc, char** argv) {
  tables();
  const size_t sizes[] = {16 << 10, 512 << 10, size_t(512) << 20};
  const char* where[] = {"L1", "L2", "mem"};
  uint8_t* buf = static_cast<uint8_t*>(std::aligned_alloc(64, sizes[2]));
  for (size_t i = 0; i < sizes[2]; ++i) buf[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  std::vector<int32_t> x(1024);
  for (int i = 0; i < 1024; ++i) x[i] = 0x3F803F80 ^ (i & 0x00070007);
  float sink = 0;
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  for (int round = 0; round < rounds; ++round)
    for (int w = 0; w < 3; ++w) {
      const int reps = w == 2 ? 3 : 200;
      // for memory, a different slice each variant so nothing is cached
      std::printf("round %d %-4s", round, where[w]);
      double t[6];
      t[0] = time_ns_per_pair<0>(buf, sizes[w], x.data(), reps, &sink);
      t[1] = time_ns_per_pair<1>(buf, sizes[w], x.data(), reps, &sink);
      t[2] = time_ns_per_pair<2>(buf, sizes[w], x.data(), reps, &sink);
      t[3] = time_ns_per_pair<3>(buf, sizes[w], x.data(), reps, &sink);
      t[4] = time_ns_per_pair<4>(buf, sizes[w], x.data(), reps, &sink);
      t[5] = time_ns_per_pair<5>(buf, sizes[w], x.data(), reps, &sink);
      for (int v = 0; v < 6; ++v) std::printf(" | %s %.3f", kName[v], t[v]);
      std::printf("\n");
    }
  std::printf("(ns per k pair = 32 weights, one token, best of reps; sink %g)\n", sink);
}
