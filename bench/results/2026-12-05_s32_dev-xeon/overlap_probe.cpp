// Probe (session 32): do AMX dot products overlap a weight stream from memory at all?
// Per 1 KiB of stream (one B tile's bytes), N TDPBF16PS on tiles that stay in registers (no tile loads),
// with the stream read by (a) zmm loads, (b) one tileloadd of the streamed KiB into tile 7 that no
// product uses, (c) tileloadd into the B tile the products use. 1 GiB a thread, 2 threads, L1 prefetch
// 1 KiB ahead. Time additive in N => products and the stream do not overlap.
//   g++ -O2 -std=c++20 -fopenmp -mamx-tile -mamx-bf16 -mavx512f overlap_probe.cpp -o /tmp/o && /tmp/o 2
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

struct alignas(64) Cfg { uint8_t palette = 1, start = 0, res[14] = {}; uint16_t colsb[16] = {}; uint8_t rows[16] = {}; };
static void cfg() {
  Cfg c;
  for (int t = 0; t < 8; ++t) { c.colsb[t] = 64; c.rows[t] = 16; }
  asm volatile("ldtilecfg %0" : : "m"(c));
}
static double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// MODE 3: as 2, and every product loads its A tile first (tiles 4 / 6 alternating): rows g_lda bytes
// apart, walking k over g_kspan bytes of the rows (64 rows x K bf16 + pad: A from L2 when large).
static int64_t g_lda = 4160, g_kspan = 4096;
static const uint16_t* g_a = nullptr;
static int g_spill = 4, g_ring = 4;
static int64_t g_pf0 = 1024, g_pf2 = 0;
static size_t g_wmask = ~size_t(0);  // WKIB=n (a power of 2): the stream re-reads its first n KiB (cached)  // PF_T0 / PF_T2: bytes ahead into L1 / into L2 (0: none)
alignas(64) static thread_local float g_c[8][4][256];  // per thread (shared lines would ping-pong)
template <int N, int MODE>
static float run(const uint16_t* w, size_t n_kib, float* o) {
  int64_t ka = 0;
  __m512 s = _mm512_setzero_ps();
  for (size_t i = 0; i < n_kib; ++i) {
    const char* p = (const char*)w + (i & g_wmask) * 1024;
    for (int l = 0; l < 1024; l += 64) _mm_prefetch(p + g_pf0 + l, _MM_HINT_T0);
    if (g_pf2)
      for (int l = 0; l < 1024; l += 64) _mm_prefetch(p + g_pf2 + l, _MM_HINT_T1);
    if constexpr (MODE == 0)
      for (int l = 0; l < 1024; l += 64) s = _mm512_add_ps(s, _mm512_castsi512_ps(_mm512_load_si512(p + l)));
    if constexpr (MODE == 1) _tile_loadd(7, p, 64);
    if constexpr (MODE >= 2) _tile_loadd(5, p, 64);
    if constexpr (MODE >= 4) {  // 4: store + reload; 5: store, then zero; 6: reload only
      if (i % g_spill == 0) {
        const int r = int(i / g_spill) % g_ring, r1 = (r + 1) % g_ring;
        if constexpr (MODE != 6) {
          _tile_stored(0, g_c[r][0], 64); _tile_stored(1, g_c[r][1], 64);
          _tile_stored(2, g_c[r][2], 64); _tile_stored(3, g_c[r][3], 64);
        }
        if constexpr (MODE == 5) { _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); }
        else {
          _tile_loadd(0, g_c[r1][0], 64); _tile_loadd(1, g_c[r1][1], 64);
          _tile_loadd(2, g_c[r1][2], 64); _tile_loadd(3, g_c[r1][3], 64);
        }
      }
    }
    if constexpr (MODE >= 3) {
      const char* a = (const char*)g_a + ka;
      ka = ka + 64 == g_kspan ? 0 : ka + 64;
      static_assert(N <= 4 || MODE < 3);
      if constexpr (N >= 1) { _tile_loadd(4, a, g_lda); _tile_dpbf16ps(0, 4, 5); }
      if constexpr (N >= 2) { _tile_loadd(6, a + 16 * g_lda, g_lda); _tile_dpbf16ps(1, 6, 5); }
      if constexpr (N >= 3) { _tile_loadd(4, a + 32 * g_lda, g_lda); _tile_dpbf16ps(2, 4, 5); }
      if constexpr (N >= 4) { _tile_loadd(6, a + 48 * g_lda, g_lda); _tile_dpbf16ps(3, 6, 5); }
      continue;
    }
    if constexpr (N >= 1) _tile_dpbf16ps(0, 4, 5);
    if constexpr (N >= 2) _tile_dpbf16ps(1, 6, 5);
    if constexpr (N >= 3) _tile_dpbf16ps(2, 4, 5);
    if constexpr (N >= 4) _tile_dpbf16ps(3, 6, 5);
    if constexpr (N >= 8) {
      _tile_dpbf16ps(0, 6, 5);
      _tile_dpbf16ps(1, 4, 5);
      _tile_dpbf16ps(2, 6, 5);
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  _tile_stored(0, o, 64);
  return _mm512_reduce_add_ps(s) + o[5];
}

int main(int argc, char** argv) {
  if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) { std::puts("no AMX permission"); return 1; }
  const int threads = argc > 1 ? atoi(argv[1]) : 2;
  const size_t bytes = size_t(1) << 30, n_kib = bytes / 1024;
  std::vector<uint16_t*> w(threads);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    w[t] = (uint16_t*)std::aligned_alloc(2 << 20, bytes);
    for (size_t i = 0; i < bytes / 2; ++i) w[t][i] = uint16_t(0x3a80 + (i & 7));
  }
  volatile float sink = 0;
  const char* modes[] = {"zmm read", "tileloadd (unused)", "tileloadd (B of the products)", "B + A tile loads", "B + A + C spills", "B + A + C stores", "B + A + C reloads"};
  g_a = (const uint16_t*)std::aligned_alloc(64, 80 * 4160 * 2);
  for (int64_t i = 0; i < 80 * 4160; ++i) const_cast<uint16_t*>(g_a)[i] = 0x3a80;
  const int mode0 = argc > 2 ? atoi(argv[2]) : 0;
  if (argc > 3) g_lda = atoll(argv[3]);
  if (argc > 4) g_kspan = atoll(argv[4]);
  if (argc > 5) g_spill = atoi(argv[5]);
  if (const char* e = getenv("PF_T0")) g_pf0 = atoll(e);
  if (const char* e = getenv("PF_T2")) g_pf2 = atoll(e);
  if (const char* e = getenv("WKIB")) g_wmask = size_t(atoll(e)) - 1;
  std::printf("prefetch: L1 %lld bytes ahead, L2 %lld\n", (long long)g_pf0, (long long)g_pf2);
  if (argc > 6) g_ring = atoi(argv[6]);
  std::printf("A rows %lld bytes apart, k over %lld bytes; C spilled every %d KiB over %d buffers\n", (long long)g_lda, (long long)g_kspan, g_spill, g_ring);
  for (int rep = 0; rep < 2; ++rep)
    for (int mode = mode0; mode < 7; ++mode)
      for (int n : {0, 1, 2, 4, 8}) {
        if (mode >= 3 && n > 4) continue;
        double tmax = 0;
#pragma omp parallel num_threads(threads) reduction(max : tmax)
        {
          const int t = omp_get_thread_num();
          cfg();
          alignas(64) static thread_local uint16_t a[1024];
          alignas(64) float o[256];
          for (int i = 0; i < 1024; ++i) a[i] = 0x3a80;
          _tile_loadd(4, a, 64); _tile_loadd(6, a, 64); _tile_loadd(5, a, 64);
          _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
#pragma omp barrier
          const double t0 = now_s();
          float r = 0;
#define CASE(N) \
  if (n == N) r = mode == 0 ? run<N, 0>(w[t], n_kib, o) : mode == 1 ? run<N, 1>(w[t], n_kib, o) : run<N, 2>(w[t], n_kib, o);
#define CASE3(N) if (n == N) r = mode == 3 ? run<N, 3>(w[t], n_kib, o) : mode == 4 ? run<N, 4>(w[t], n_kib, o) : mode == 5 ? run<N, 5>(w[t], n_kib, o) : run<N, 6>(w[t], n_kib, o);
          if (mode < 3) { CASE(0) CASE(1) CASE(2) CASE(4) CASE(8) }
          else { CASE3(0) CASE3(1) CASE3(2) CASE3(4) }
          tmax = now_s() - t0;
          sink = sink + r;
          _tile_release();
        }
        const double per_kib_ns = tmax / n_kib * 1e9;
        std::printf("%-30s N=%d  %5.1f GB/s  %6.1f ns per KiB a thread\n", modes[mode], n, threads * double(bytes) / tmax / 1e9, per_kib_ns);
        std::fflush(stdout);
      }
}
