// Probe (session 32): AMX tile calls of 32-128 token rows (an expert's rows at M = 256-1024), weights from
// memory, as the runner walks them: an item is one expert's run of G0 contiguous N-blocks (bf16 VNNI
// panels of K x 16), items in shuffled order, 1 GiB of weights a thread, 2 threads.
//   lib 2x2   : tile_amx2 as in the library: per block pair, passes of 32 rows over all of K (later
//               passes read the pair's panels again from L2, and A from L2).
//   4x1 kc=K  : tile_amx's 64-row passes (MOERUN_CPU_AMX_NBLOCKS=1): one B load for 4 products, A from L2.
//   4x1 kc=KC g=G : K in chunks of KC; per chunk, for each of G blocks, every 64-row pass: C tiles loaded
//               from an L1 buffer (zeroed at the first chunk), then per 32 k one B load (the stream,
//               loaded once for all rows) and up to 4 A loads from the chunk of A (in L1), stored back.
//   2x2 kc=KC : per block pair and chunk, the 32-row passes, so that later passes find B in L1.
//   read      : a plain zmm read of the same blocks (what the access pattern allows).
// L1 prefetch 1 KiB ahead in every panel, as the library.
//   g++ -O2 -std=c++20 -fopenmp -mamx-tile -mamx-bf16 -mavx512f amx_tall.cpp -o /tmp/p && /tmp/p 2 3
// (-DKK=768: the down shape, runs of 16 blocks of 24 KiB.)
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
#include <string>
#include <vector>

struct alignas(64) Cfg { uint8_t palette = 1, start = 0, res[14] = {}; uint16_t colsb[16] = {}; uint8_t rows[16] = {}; };
static void cfg() {
  Cfg c;
  for (int t = 0; t < 8; ++t) { c.colsb[t] = 64; c.rows[t] = 16; }
  asm volatile("ldtilecfg %0" : : "m"(c));
}
static double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

#ifndef KK
#define KK 2048
#endif
constexpr int64_t K = KK, kBlockElems = K * 16, kGroup = KK == 768 ? 16 : 8;

// PF_T0 bytes ahead into L1 (1 KiB: the library), PF_T2 bytes ahead into L2 as well (0: none).
static int64_t g_pf0 = 1024, g_pf2 = 0;
static bool g_cached = false;
static bool g_diag = getenv("DIAG") != nullptr;  // CACHED=1: every item reads group 0 (weights from L2: the compute rate)
static inline void pf(const uint16_t* p, int64_t k) {
  if (g_pf0 >= 0)
    for (int l = 0; l < 1024; l += 64) _mm_prefetch((const char*)p + k * 32 + g_pf0 + l, _MM_HINT_T0);
  if (g_pf2)
    for (int l = 0; l < 1024; l += 64) _mm_prefetch((const char*)p + k * 32 + g_pf2 + l, _MM_HINT_T1);
}

// ---- the library's 2x2 (tiles2_t) ----
template <bool kTwoA>
static void tiles2(const uint16_t* p0, const uint16_t* p1, int64_t k0, int64_t k1, const uint16_t* xb, int64_t ldx,
                   float* c, bool first) {
  if (first) { _tile_zero(0); _tile_zero(1); if (kTwoA) { _tile_zero(2); _tile_zero(3); } }
  else { _tile_loadd(0, c, 64); _tile_loadd(1, c + 256, 64); if (kTwoA) { _tile_loadd(2, c + 512, 64); _tile_loadd(3, c + 768, 64); } }
  for (int64_t k = k0; k < k1; k += 32) {
    pf(p0, k); pf(p1, k);
    _tile_loadd(6, p0 + k * 16, 64);
    _tile_loadd(7, p1 + k * 16, 64);
    _tile_loadd(4, xb + k, ldx * 2);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (kTwoA) {
      _tile_loadd(5, xb + 16 * ldx + k, ldx * 2);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, 64); _tile_stored(1, c + 256, 64);
  if (kTwoA) { _tile_stored(2, c + 512, 64); _tile_stored(3, c + 768, 64); }
}

// The library's 2x2 with its prefetch running on into the next call's pair: an address past panel q's
// end (which would be the other panel of this pair, already streaming) moves on by one block, so that it
// lands on the next pair's block q.
template <bool kTwoA>
static void tiles2_next(const uint16_t* p0, const uint16_t* p1, const uint16_t* xb, int64_t ldx, float* c) {
  _tile_zero(0); _tile_zero(1); if (kTwoA) { _tile_zero(2); _tile_zero(3); }
  // (per line: a step's KiB straddles the panel's end unless the distance is a multiple of 1 KiB; the
  // first version decided per step, so its runs at 256 / 512 bytes never jumped: NOTES)  // steps whose prefetch stays within the panel
  for (int64_t k = 0; k < K; k += 32) {
    for (int l = 0; l < 1024; l += 64) {
      const int64_t skip = k * 32 + g_pf0 + l < K * 32 ? 0 : kBlockElems;
      _mm_prefetch((const char*)(p0 + skip) + k * 32 + g_pf0 + l, _MM_HINT_T0);
      _mm_prefetch((const char*)(p1 + skip) + k * 32 + g_pf0 + l, _MM_HINT_T0);
    }
    _tile_loadd(6, p0 + k * 16, 64);
    _tile_loadd(7, p1 + k * 16, 64);
    _tile_loadd(4, xb + k, ldx * 2);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (kTwoA) {
      _tile_loadd(5, xb + 16 * ldx + k, ldx * 2);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, 64); _tile_stored(1, c + 256, 64);
  if (kTwoA) { _tile_stored(2, c + 512, 64); _tile_stored(3, c + 768, 64); }
}

// tiles2_next, and when nx is set (the last call before the A rows change) each k step also prefetches
// the next call's A rows at the same k (one line per row: 64 bytes = the step's 32 k), hint NXH.
static int g_nxh = 1;  // 0: T0, 1: T1
template <bool kTwoA>
static void tiles2_nexta(const uint16_t* p0, const uint16_t* p1, const uint16_t* xb, int64_t ldx, float* c,
                         const uint16_t* nx, int nrows) {
  _tile_zero(0); _tile_zero(1); if (kTwoA) { _tile_zero(2); _tile_zero(3); }
  // (per line: a step's KiB straddles the panel's end unless the distance is a multiple of 1 KiB; the
  // first version decided per step, so its runs at 256 / 512 bytes never jumped: NOTES)
  for (int64_t k = 0; k < K; k += 32) {
    for (int l = 0; l < 1024; l += 64) {
      const int64_t skip = k * 32 + g_pf0 + l < K * 32 ? 0 : kBlockElems;
      _mm_prefetch((const char*)(p0 + skip) + k * 32 + g_pf0 + l, _MM_HINT_T0);
      _mm_prefetch((const char*)(p1 + skip) + k * 32 + g_pf0 + l, _MM_HINT_T0);
    }
    if (nx != nullptr) {
      if (g_nxh == 0)
        for (int r = 0; r < nrows; ++r) _mm_prefetch((const char*)(nx + r * ldx + k), _MM_HINT_T0);
      else
        for (int r = 0; r < nrows; ++r) _mm_prefetch((const char*)(nx + r * ldx + k), _MM_HINT_T1);
    }
    _tile_loadd(6, p0 + k * 16, 64);
    _tile_loadd(7, p1 + k * 16, 64);
    _tile_loadd(4, xb + k, ldx * 2);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (kTwoA) {
      _tile_loadd(5, xb + 16 * ldx + k, ldx * 2);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, 64); _tile_stored(1, c + 256, 64);
  if (kTwoA) { _tile_stored(2, c + 512, 64); _tile_stored(3, c + 768, 64); }
}

// tiles2_next with the two-A pass's products reordered so that B6 is free after the second product
// (C0 = A4 B6, C2 = A5 B6, C1 = A4 B7, C3 = A5 B7: each C tile's sequence is unchanged), letting the
// next step's first B load start one product earlier.
template <bool kTwoA>
static void tiles2_reorder(const uint16_t* p0, const uint16_t* p1, const uint16_t* xb, int64_t ldx, float* c) {
  _tile_zero(0); _tile_zero(1); if (kTwoA) { _tile_zero(2); _tile_zero(3); }
  // (per line: a step's KiB straddles the panel's end unless the distance is a multiple of 1 KiB; the
  // first version decided per step, so its runs at 256 / 512 bytes never jumped: NOTES)
  for (int64_t k = 0; k < K; k += 32) {
    for (int l = 0; l < 1024; l += 64) {
      const int64_t skip = k * 32 + g_pf0 + l < K * 32 ? 0 : kBlockElems;
      _mm_prefetch((const char*)(p0 + skip) + k * 32 + g_pf0 + l, _MM_HINT_T0);
      _mm_prefetch((const char*)(p1 + skip) + k * 32 + g_pf0 + l, _MM_HINT_T0);
    }
    if constexpr (kTwoA) {
      _tile_loadd(6, p0 + k * 16, 64);
      _tile_loadd(4, xb + k, ldx * 2);
      _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(5, xb + 16 * ldx + k, ldx * 2);
      _tile_dpbf16ps(2, 5, 6);
      _tile_loadd(7, p1 + k * 16, 64);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(3, 5, 7);
    } else {
      _tile_loadd(6, p0 + k * 16, 64);
      _tile_loadd(4, xb + k, ldx * 2);
      _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(7, p1 + k * 16, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
  }
  _tile_stored(0, c, 64); _tile_stored(1, c + 256, 64);
  if (kTwoA) { _tile_stored(2, c + 512, 64); _tile_stored(3, c + 768, 64); }
}

// tiles2_next, and in a later pass (from L2, when memory would idle) also PREFETCHT1 of the next pair's
// panels [x0, x0 + xlen) bytes, spread evenly over the pass's k steps (paced: about what memory delivers
// while the pass computes).
static int64_t g_pfx = 16384;
template <bool kTwoA>
static void tiles2_pace(const uint16_t* p0, const uint16_t* p1, const uint16_t* xb, int64_t ldx, float* c,
                        const uint16_t* n0, const uint16_t* n1, int64_t x0, int64_t xlen) {
  _tile_zero(0); _tile_zero(1); if (kTwoA) { _tile_zero(2); _tile_zero(3); }
  // (per line: a step's KiB straddles the panel's end unless the distance is a multiple of 1 KiB; the
  // first version decided per step, so its runs at 256 / 512 bytes never jumped: NOTES)
  const int64_t steps = K / 32, per = xlen / steps;  // bytes per panel per step (a multiple of 64 here)
  for (int64_t k = 0; k < K; k += 32) {
    for (int l = 0; l < 1024; l += 64) {
      const int64_t skip = k * 32 + g_pf0 + l < K * 32 ? 0 : kBlockElems;
      _mm_prefetch((const char*)(p0 + skip) + k * 32 + g_pf0 + l, _MM_HINT_T0);
      _mm_prefetch((const char*)(p1 + skip) + k * 32 + g_pf0 + l, _MM_HINT_T0);
    }
    if (xlen > 0)
      for (int64_t l = 0; l < per; l += 64) {
        _mm_prefetch((const char*)n0 + x0 + (k / 32) * per + l, _MM_HINT_T1);
        _mm_prefetch((const char*)n1 + x0 + (k / 32) * per + l, _MM_HINT_T1);
      }
    _tile_loadd(6, p0 + k * 16, 64);
    _tile_loadd(7, p1 + k * 16, 64);
    _tile_loadd(4, xb + k, ldx * 2);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (kTwoA) {
      _tile_loadd(5, xb + 16 * ldx + k, ldx * 2);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, 64); _tile_stored(1, c + 256, 64);
  if (kTwoA) { _tile_stored(2, c + 512, 64); _tile_stored(3, c + 768, 64); }
}

// ---- 4x1: NT row tiles, one B tile a step (5 / 7 alternating), A tiles alternating 4 / 6 ----
#define DP(r, A, B)                                                          \
  if constexpr (NT > r) {                                                    \
    _tile_loadd(A, x + (r)*16 * ldx + k, ldx * 2);                           \
    _tile_dpbf16ps(r, A, B);                                                 \
  }
template <int NT>
static void tiles4x1(const uint16_t* b, int64_t k0, int64_t k1, const uint16_t* x, int64_t ldx, float* c, bool first) {
  if (first) { _tile_zero(0); if (NT > 1) _tile_zero(1); if (NT > 2) _tile_zero(2); if (NT > 3) _tile_zero(3); }
  else {
    _tile_loadd(0, c, 64);
    if (NT > 1) _tile_loadd(1, c + 256, 64);
    if (NT > 2) _tile_loadd(2, c + 512, 64);
    if (NT > 3) _tile_loadd(3, c + 768, 64);
  }
  for (int64_t k = k0; k < k1; k += 64) {  // k1 - k0 is a multiple of 64
    pf(b, k);
    _tile_loadd(5, b + k * 16, 64);
    DP(0, 4, 5) DP(1, 6, 5) DP(2, 4, 5) DP(3, 6, 5)
    pf(b, k + 32);
    const int64_t kk = k + 32;
    {
      const int64_t k = kk;
      _tile_loadd(7, b + k * 16, 64);
      DP(0, 4, 7) DP(1, 6, 7) DP(2, 4, 7) DP(3, 6, 7)
    }
  }
  _tile_stored(0, c, 64);
  if (NT > 1) _tile_stored(1, c + 256, 64);
  if (NT > 2) _tile_stored(2, c + 512, 64);
  if (NT > 3) _tile_stored(3, c + 768, 64);
}
static void pass4x1(const uint16_t* b, int64_t k0, int64_t k1, const uint16_t* x, int64_t ldx, int rows, float* c, bool first) {
  switch ((rows + 15) / 16) {
    case 4: tiles4x1<4>(b, k0, k1, x, ldx, c, first); break;
    case 3: tiles4x1<3>(b, k0, k1, x, ldx, c, first); break;
    case 2: tiles4x1<2>(b, k0, k1, x, ldx, c, first); break;
    default: tiles4x1<1>(b, k0, k1, x, ldx, c, first); break;
  }
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

struct Variant { const char* name; int kind; int64_t kc; int g; };

int main(int argc, char** argv) {
  if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) { std::puts("no AMX permission"); return 1; }
  const int threads = argc > 1 ? atoi(argv[1]) : 2;
  const int reps = argc > 2 ? atoi(argv[2]) : 3;
  if (const char* e = getenv("PF_T0")) g_pf0 = atoll(e);
  if (const char* e = getenv("PF_T2")) g_pf2 = atoll(e);
  if (const char* e = getenv("PFX")) g_pfx = atoll(e);
  if (const char* e = getenv("NXH")) g_nxh = atoi(e);
  g_cached = getenv("CACHED") && atoi(getenv("CACHED")) == 1;
  std::printf("prefetch: L1 %lld bytes ahead, L2 %lld\n", (long long)g_pf0, (long long)g_pf2);
  const int64_t ldx = K + 32;
  const size_t group_bytes = size_t(kGroup) * kBlockElems * 2;
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
  std::vector<Variant> vs = {{"lib 2x2", 0, K, 0}, {"2x2 pf into next", 5, K, 0}, {"2x2 next + paced L2", 6, K, 0}, {"2x2 next, reordered", 7, K, 0}, {"2x2 next + next A", 8, K, 0}, {"rows split between threads", 9, K, 0},         {"4x1 kc=K", 1, K, 1},
                             {"4x1 kc=256 g=4", 1, 256, 4}, {"4x1 kc=128 g=4", 1, 128, 4},
                             {"4x1 kc=256 g=2", 1, 256, 2}, {"4x1 kc=128 g=8", 1, 128, 8},
                             {"2x2 kc=256", 2, 256, 0},     {"2x2 kc=128", 2, 128, 0},
                             {"4x1 lin kc=128 g=4", 4, 128, 4}, {"4x1 lin kc=256 g=2", 4, 256, 2},
                             {"4x1 lin kc=128 g=8", 4, 128, 8}, {"4x1 lin kc=64 g=8", 4, 64, 8},
                             {"read", 3, K, 0}};
  if (K % 256) vs.erase(std::remove_if(vs.begin(), vs.end(), [](const Variant& v) { return K % v.kc != 0; }), vs.end());
  if (const char* e = getenv("ONLY")) {
    const std::string only = e;
    vs.erase(std::remove_if(vs.begin(), vs.end(), [&](const Variant& v) { return (","+only+",").find(","+std::string(v.name)+",") == std::string::npos; }), vs.end());
  }
  volatile float sink = 0;
  std::vector<int> ms = {32, 48, 64, 80, 96, 128};
  if (argc > 3) { ms.clear(); for (int i = 3; i < argc; ++i) ms.push_back(atoi(argv[i])); }
  for (int m : ms) {
    for (int r = 0; r < reps; ++r)
      for (const Variant& v : vs) {
        double tmax = 0;
#pragma omp parallel num_threads(threads) reduction(max : tmax)
        {
          const int t = omp_get_thread_num();
          cfg();
          // ABUF=n: n distinct A buffers, group i multiplying buffer i % n (n large: A from L3 / memory
          // at each group's first call, as the down GEMM's rows of a new expert)
          const int nabuf = getenv("ABUF") ? std::max(1, atoi(getenv("ABUF"))) : 1;
          const size_t abuf = size_t(m + 16) * ldx;
          uint16_t* xball = (uint16_t*)std::aligned_alloc(64, nabuf * abuf * 2);
          for (size_t i = 0; i < nabuf * abuf; ++i) xball[i] = 0x3a80;
          uint16_t* xb = xball;
          float* cb = (float*)std::aligned_alloc(64, size_t(kGroup) * 8 * 1024 * 4);
          float acc = 0;
#pragma omp barrier
          const double t0 = now_s();
          for (size_t i = 0; i < ngroups; ++i) {
            const uint16_t* g = w[t] + (g_cached ? 0 : size_t(order[t][i]) * group_bytes / 2);
            xb = xball + (i % nabuf) * abuf;
            if (v.kind == 0) {
              for (int b = 0; b < kGroup; b += 2)
                for (int i0 = 0; i0 < m; i0 += 32) {
                  if (m - i0 > 16) tiles2<true>(g + b * kBlockElems, g + (b + 1) * kBlockElems, 0, K, xb + i0 * ldx, ldx, cb, true);
                  else tiles2<false>(g + b * kBlockElems, g + (b + 1) * kBlockElems, 0, K, xb + i0 * ldx, ldx, cb, true);
                  acc += cb[3];
                }
            } else if (v.kind == 1) {
              const int np = (m + 63) / 64;
              for (int b0 = 0; b0 < kGroup; b0 += v.g)
                for (int64_t k0 = 0; k0 < K; k0 += v.kc)
                  for (int b = b0; b < b0 + v.g; ++b)
                    for (int p = 0; p < np; ++p) {
                      const int rows = std::min(64, m - p * 64);
                      pass4x1(g + b * kBlockElems, k0, k0 + v.kc, xb + p * 64 * ldx, ldx, rows,
                              cb + ((b - b0) * np + p) * 1024, k0 == 0);
                    }
              acc += cb[3];
            } else if (v.kind == 5) {
              for (int b = 0; b < kGroup; b += 2)
                for (int i0 = 0; i0 < m; i0 += 32) {
                  if (m - i0 > 16) tiles2_next<true>(g + b * kBlockElems, g + (b + 1) * kBlockElems, xb + i0 * ldx, ldx, cb);
                  else tiles2_next<false>(g + b * kBlockElems, g + (b + 1) * kBlockElems, xb + i0 * ldx, ldx, cb);
                  acc += cb[3];
                }
            } else if (v.kind == 9) {
              // rows split between the threads: both walk thread 0's groups in the same order, thread t
              // takes rows [t * 32, t * 32 + 32) of every call in one pass, so each weight byte comes
              // from memory once and to the other core from L3 (if the host's L3 is shared and they
              // keep in step: a barrier every 8 groups)
              const uint16_t* g0 = w[0] + size_t(order[0][i]) * group_bytes / 2;
              const uint16_t* x = xb + t * 32 * ldx;
              const int rows = std::min(32, m - t * 32);
              for (int b = 0; b < kGroup; b += 2) {
                if (rows > 16) tiles2_next<true>(g0 + b * kBlockElems, g0 + (b + 1) * kBlockElems, x, ldx, cb);
                else if (rows > 0) tiles2_next<false>(g0 + b * kBlockElems, g0 + (b + 1) * kBlockElems, x, ldx, cb);
                acc += cb[3];
              }
              if (i % 8 == 7) {
#pragma omp barrier
              }
            } else if (v.kind == 8) {
              const uint16_t* nxa = xball + ((i + 1) % nabuf) * abuf;  // the next group's A rows
              for (int b = 0; b < kGroup; b += 2)
                for (int i0 = 0; i0 < m; i0 += 32) {
                  const bool last = b + 2 >= kGroup && i0 + 32 >= m;
                  const uint16_t* nx = last ? nxa : nullptr;
                  const int nr = (m + 15) / 16 * 16;
                  if (m - i0 > 16) tiles2_nexta<true>(g + b * kBlockElems, g + (b + 1) * kBlockElems, xb + i0 * ldx, ldx, cb, nx, nr);
                  else tiles2_nexta<false>(g + b * kBlockElems, g + (b + 1) * kBlockElems, xb + i0 * ldx, ldx, cb, nx, nr);
                  acc += cb[3];
                }
            } else if (v.kind == 7) {
              for (int b = 0; b < kGroup; b += 2)
                for (int i0 = 0; i0 < m; i0 += 32) {
                  if (m - i0 > 16) tiles2_reorder<true>(g + b * kBlockElems, g + (b + 1) * kBlockElems, xb + i0 * ldx, ldx, cb);
                  else tiles2_reorder<false>(g + b * kBlockElems, g + (b + 1) * kBlockElems, xb + i0 * ldx, ldx, cb);
                  acc += cb[3];
                }
            } else if (v.kind == 6) {
              for (int b = 0; b < kGroup; b += 2) {
                const uint16_t* n0 = g + (b + 2) * kBlockElems;  // (past the group: the next one in memory)
                const uint16_t* n1 = g + (b + 3) * kBlockElems;
                for (int i0 = 0, p = 0; i0 < m; i0 += 32, ++p) {
                  const int64_t x0 = p == 0 ? 0 : (p - 1) * g_pfx, xl = p == 0 ? 0 : std::min<int64_t>(g_pfx, K * 32 - x0);
                  if (m - i0 > 16) tiles2_pace<true>(g + b * kBlockElems, g + (b + 1) * kBlockElems, xb + i0 * ldx, ldx, cb, n0, n1, x0, std::max<int64_t>(0, xl));
                  else tiles2_pace<false>(g + b * kBlockElems, g + (b + 1) * kBlockElems, xb + i0 * ldx, ldx, cb, n0, n1, x0, std::max<int64_t>(0, xl));
                  acc += cb[3];
                }
              }
            } else if (v.kind == 4) {
              // chunk-major layout: the group's G-block sub-runs stored chunk by chunk, so that the
              // weights stream linearly: [b0 group][chunk][block in group][kc x 16]
              const int np = (m + 63) / 64;
              for (int b0 = 0; b0 < kGroup; b0 += v.g) {
                const uint16_t* gg = g + b0 * kBlockElems;
                for (int64_t k0 = 0; k0 < K; k0 += v.kc)
                  for (int b = 0; b < v.g; ++b) {
                    // chunk (k0 / kc) of block b: its kc x 16 elements; pass4x1 indexes b + k * 16
                    const uint16_t* cb0 = gg + ((k0 / v.kc) * v.g + b) * v.kc * 16 - k0 * 16;
                    for (int p = 0; p < np; ++p) {
                      const int rows = std::min(64, m - p * 64);
                      // DIAG=1: every chunk multiplies A's first chunk (wrong sums: only for timing)
                      const uint16_t* xa = xb + p * 64 * ldx + (g_diag ? -k0 : 0);
                      pass4x1(cb0, k0, k0 + v.kc, xa, ldx, rows, cb + (b * np + p) * 1024, k0 == 0);
                    }
                  }
              }
              acc += cb[3];
            } else if (v.kind == 2) {
              const int np = (m + 31) / 32;
              for (int b = 0; b < kGroup; b += 2)
                for (int64_t k0 = 0; k0 < K; k0 += v.kc)
                  for (int p = 0; p < np; ++p) {
                    const uint16_t* x = xb + p * 32 * ldx;
                    if (m - p * 32 > 16) tiles2<true>(g + b * kBlockElems, g + (b + 1) * kBlockElems, k0, k0 + v.kc, x, ldx, cb + p * 1024, k0 == 0);
                    else tiles2<false>(g + b * kBlockElems, g + (b + 1) * kBlockElems, k0, k0 + v.kc, x, ldx, cb + p * 1024, k0 == 0);
                  }
              acc += cb[3];
            } else {
              for (int b = 0; b < kGroup; b += 2) acc += read2(g + b * kBlockElems, g + (b + 1) * kBlockElems);
            }
          }
          tmax = now_s() - t0;
          sink = sink + acc;
          std::free(xball);
          std::free(cb);
          _tile_release();
        }
        // (rows split: the threads share one copy of the weights, so the distinct bytes are one thread's)
        std::printf("K=%lld threads %d m=%3d %-16s %5.1f GB/s\n", (long long)K, threads, m, v.name,
                    (v.kind == 9 ? 1 : threads) * double(ngroups * group_bytes) / tmax / 1e9);
        std::fflush(stdout);
      }
  }
}
