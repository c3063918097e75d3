// Session 50 probe: does the fp8 decode's instruction count limit the one-token weight stream on a
// Sapphire Rapids core (AVX512-BF16, VDPBF16PS once per 2 cycles)? The decode-ratio target (fp8-block
// 1.8x faster than bf16 at one token) needs fp8 to read memory within 10% of bf16's byte rate; on the
// GPU host's Xeon it read 18.5 against 20.7 GB/s (2 threads, session 50 call 1).
//
// The stream here is the library's one-token pair kernel in miniature (dot2_t): two N-blocks of 16
// lanes x K = 2048, runs of 16 fp8 blocks (8 of bf16: the same bytes), blocks q and q + 8 of a run
// interleaved step by step, 4 accumulator chains per block, a K group's scale folded every 64 pairs,
// prefetch into L1 2 KiB and into L2 1.5 KiB ahead (the AMX level's pair distances). Variants, all
// over the same bytes and alternated round by round:
//   shift   the library's decode since session 18: normal-code check per 128 codes, high byte 2 ops
//           (vpsraw, vpternlog), low byte 3 (vpsllw, vpsraw, vpternlog)
//   madd    the low byte in 2 ops: vpmaddubsw with 16 in the even byte slots gives 16 x the sign-
//           extended low code, the same word vpsllw 8 + vpsraw 4 gives
//   nocheck madd without the normal-code check (wrong for zero and subnormal codes: timing only; what
//           a pack-time flag per quad would buy)
//   raw     no decode (the loaded words go to the dots as they are): the stream and the dots alone
//   bf16    bf16 blocks (1 dot per 64 bytes), the same bytes in 8-block runs
// Build: g++ -O2 -std=c++20 -fopenmp -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16
// Run:   ./fp8_decode_probe [GiB=1] [rounds=15]; prints GB/s medians at 1 and 2 threads.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr int64_t kK = 2048, kPairs = kK / 2, kGroupPairs = 64;
constexpr int kL1 = 2048, kL2 = 1536;

enum V { kShift, kMadd, kNoCheck, kRaw, kBf16, kVariants };
const char* kNames[] = {"shift", "madd", "nocheck", "raw", "bf16"};

inline __m512i hi(__m512i w) {
  return _mm512_ternarylogic_epi32(_mm512_srai_epi16(w, 4), _mm512_set1_epi16(static_cast<short>(0x87F0)),
                                   _mm512_set1_epi16(0x3800), 0xEA);
}
inline __m512i lo_shift(__m512i w) { return hi(_mm512_slli_epi16(w, 8)); }
inline __m512i lo_madd(__m512i w) {
  return _mm512_ternarylogic_epi32(_mm512_maddubs_epi16(_mm512_set1_epi16(16), w),
                                   _mm512_set1_epi16(static_cast<short>(0x87F0)), _mm512_set1_epi16(0x3800), 0xEA);
}
inline bool normal(__m512i a, __m512i b) {
  const __m512i e = _mm512_set1_epi8(0x78);
  return (_mm512_testn_epi8_mask(a, e) | _mm512_testn_epi8_mask(b, e)) == 0;
}
// The slow path's stand-in (the table lookup of the library): a vpermw per pair.
inline __m512i slow(__m512i w, __m512i t) { return _mm512_permutexvar_epi16(w, t); }

template <int Var>
inline void quad(const uint8_t* d, int64_t p, __m512i& w0, __m512i& w1, __m512i& w2, __m512i& w3) {
  if constexpr (Var == kBf16) {
    w0 = _mm512_loadu_si512(d + p * 64);
    w1 = _mm512_loadu_si512(d + p * 64 + 64);
    w2 = _mm512_loadu_si512(d + p * 64 + 128);
    w3 = _mm512_loadu_si512(d + p * 64 + 192);
    return;
  }
  const __m512i a = _mm512_loadu_si512(d + p * 32), b = _mm512_loadu_si512(d + p * 32 + 64);
  if constexpr (Var == kRaw) {
    w0 = a; w1 = _mm512_srli_epi64(a, 0); w2 = b; w3 = _mm512_srli_epi64(b, 0);
  } else if constexpr (Var == kNoCheck) {
    w0 = lo_madd(a); w1 = hi(a); w2 = lo_madd(b); w3 = hi(b);
  } else {
    if (normal(a, b)) [[likely]] {
      w0 = Var == kMadd ? lo_madd(a) : lo_shift(a); w1 = hi(a);
      w2 = Var == kMadd ? lo_madd(b) : lo_shift(b); w3 = hi(b);
    } else {
      const __m512i t = _mm512_set1_epi16(0x3800);
      w0 = slow(a, t); w1 = slow(_mm512_srli_epi16(a, 8), t); w2 = slow(b, t); w3 = slow(_mm512_srli_epi16(b, 8), t);
    }
  }
}

inline __m512 dot(__m512 acc, __m512i w, const uint16_t* x, int64_t p) {
  int32_t v;
  std::memcpy(&v, x + 2 * p, 4);
  return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)_mm512_set1_epi32(v));
}

// Two blocks at one token, interleaved step by step (the library's dot2_t).
template <int Var>
void pair(const uint8_t* b0, const uint8_t* b1, const float* s0, const float* s1, const uint16_t* x, float* out) {
  constexpr int kStep = Var == kBf16 ? 256 : 128;  // bytes per 4 pairs
  const __m512 z = _mm512_setzero_ps();
  __m512 a0 = z, a1 = z, a2 = z, a3 = z, c0 = z, c1 = z, c2 = z, c3 = z, sum0 = z, sum1 = z;
  for (int64_t p0 = 0; p0 < kPairs; p0 += kGroupPairs) {
    for (int64_t p = p0; p < p0 + kGroupPairs; p += 4) {
      const int64_t off = (p / 4) * kStep;
      for (int q = 0; q < kStep; q += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(b0 + off + kL1 + q), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b1 + off + kL1 + q), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b0 + off + kL2 + q), _MM_HINT_T2);
        _mm_prefetch(reinterpret_cast<const char*>(b1 + off + kL2 + q), _MM_HINT_T2);
      }
      __m512i w0, w1, w2, w3, v0, v1, v2, v3;
      quad<Var>(b0, p, w0, w1, w2, w3);
      quad<Var>(b1, p, v0, v1, v2, v3);
      a0 = dot(a0, w0, x, p); c0 = dot(c0, v0, x, p);
      a1 = dot(a1, w1, x, p + 1); c1 = dot(c1, v1, x, p + 1);
      a2 = dot(a2, w2, x, p + 2); c2 = dot(c2, v2, x, p + 2);
      a3 = dot(a3, w3, x, p + 3); c3 = dot(c3, v3, x, p + 3);
    }
    const int64_t g = p0 / kGroupPairs;
    sum0 = _mm512_fmadd_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)), _mm512_loadu_ps(s0 + g * 16), sum0);
    sum1 = _mm512_fmadd_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)), _mm512_loadu_ps(s1 + g * 16), sum1);
    a0 = a1 = a2 = a3 = c0 = c1 = c2 = c3 = z;
  }
  _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), sum0));
  _mm512_storeu_ps(out + 16, _mm512_add_ps(_mm512_loadu_ps(out + 16), sum1));
}

// One thread's share: runs of n blocks, pairs (q, q + n / 2) within each run.
template <int Var>
void stream(const uint8_t* d, int64_t blocks, const float* sc, const uint16_t* x, float* out) {
  const int64_t bb = Var == kBf16 ? kK * 32 : kK * 16;  // block bytes
  const int64_t n = Var == kBf16 ? 8 : 16;
  for (int64_t r = 0; r + n <= blocks; r += n)
    for (int64_t q = 0; q < n / 2; ++q)
      pair<Var>(d + (r + q) * bb, d + (r + q + n / 2) * bb, sc, sc + 256, x, out);
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 1.0;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 15;
  const int64_t bytes = static_cast<int64_t>(gib * (1 << 30)) / (kK * 32 * 16) * (kK * 32 * 16);
  uint8_t* d = static_cast<uint8_t*>(std::aligned_alloc(2 << 20, bytes + 8192));
  // fp8 codes with a normal exponent field, one in 10^4 zero or subnormal (quantized weights: session 8);
  // the bf16 variant reads the same bytes as bf16 words (values do not change the timing).
#pragma omp parallel
  {
    std::mt19937 g(17 + omp_get_thread_num());
#pragma omp for schedule(static)
    for (int64_t i = 0; i < bytes + 8192; i += 4096)
      for (int64_t j = i; j < std::min(bytes + 8192, i + 4096); ++j) {
        uint8_t v = static_cast<uint8_t>(g());
        if (((v >> 3) & 15) == 0 && (g() % 10000) != 0) v |= 0x40;
        if ((v & 0x7F) == 0x7F) v &= 0xFE;
        d[j] = v;
      }
  }
  std::vector<float> sc(512, 1.0f);
  std::vector<uint16_t> x(kK + 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(0x3F00 + (i * 37) % 200);
  std::printf("%.2f GiB, %d rounds alternated, median GB/s (min-max)\n", bytes / double(1 << 30), rounds);
  for (int threads : {1, 2}) {
    std::vector<std::vector<double>> gbs(kVariants);
    float sink = 0;
    for (int r = 0; r < rounds; ++r)
      for (int v = 0; v < kVariants; ++v) {
        const double t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
        {
          alignas(64) float out[32] = {};
          const int t = omp_get_thread_num();
          const int64_t share = bytes / threads, blocks_f8 = share / (kK * 16), blocks_b = share / (kK * 32);
          const uint8_t* base = d + t * share;
          switch (v) {
            case kShift: stream<kShift>(base, blocks_f8, sc.data(), x.data(), out); break;
            case kMadd: stream<kMadd>(base, blocks_f8, sc.data(), x.data(), out); break;
            case kNoCheck: stream<kNoCheck>(base, blocks_f8, sc.data(), x.data(), out); break;
            case kRaw: stream<kRaw>(base, blocks_f8, sc.data(), x.data(), out); break;
            default: stream<kBf16>(base, blocks_b, sc.data(), x.data(), out); break;
          }
          sink += out[0] + out[17];
        }
        gbs[v].push_back(bytes / (now() - t0) / 1e9);
      }
    for (int v = 0; v < kVariants; ++v) {
      std::sort(gbs[v].begin(), gbs[v].end());
      std::printf("threads %d  %-8s %6.2f GB/s (%.2f-%.2f)  vs shift %.3fx\n", threads, kNames[v], gbs[v][rounds / 2],
                  gbs[v].front(), gbs[v].back(), gbs[v][rounds / 2] / gbs[kShift][rounds / 2]);
    }
    std::printf("(sink %g)\n", sink);
  }
  std::free(d);
}
