// prefetch_probe.cpp — session 16's probe of how software prefetch lets a core overlap its memory
// stream with work between loads (bench/results/2026-12-02_s16_dev-xeon/NOTES.md, section 1).
// Each thread streams 1 GiB (2 MiB pages advised); per 128 bytes it does W rounds of two dependent
// ops on each of the two loaded lines, with no prefetch, PREFETCHT0 at 4 KiB / 1 KiB ahead, PREFETCHT1
// or PREFETCHT2 at 8 / 32 KiB ahead, or T0 at 1 KiB plus T2 at 4 KiB. Prints GB/s (best of 3).
//   g++ -O2 -march=sapphirerapids -fopenmp prefetch_probe.cpp -o prefetch_probe && ./prefetch_probe
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <sys/mman.h>
#include <omp.h>
// per 128 B: 2 loads, W rounds of 4 independent ternlog/shift ops on each, then xor into acc
template <int W, int HINT>
__attribute__((noinline)) __m512i run(const char* p, size_t n, size_t dist) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0;
  const __m512i c = _mm512_set1_epi32(0x5555);
  for (size_t i = 0; i < n; i += 128) {
    if (HINT == 3) { _mm_prefetch(p + i + dist, _MM_HINT_T0); _mm_prefetch(p + i + dist + 64, _MM_HINT_T0); }
    if (HINT == 2) { _mm_prefetch(p + i + dist, _MM_HINT_T1); _mm_prefetch(p + i + dist + 64, _MM_HINT_T1); }
    if (HINT == 1) { _mm_prefetch(p + i + dist, _MM_HINT_T2); _mm_prefetch(p + i + dist + 64, _MM_HINT_T2); }
    if (HINT == 4) { _mm_prefetch(p + i + dist, _MM_HINT_T0); _mm_prefetch(p + i + dist + 64, _MM_HINT_T0);
                     _mm_prefetch(p + i + 4*dist, _MM_HINT_T2); _mm_prefetch(p + i + 4*dist + 64, _MM_HINT_T2); }
    __m512i x = _mm512_load_si512(p + i), y = _mm512_load_si512(p + i + 64);
    for (int w = 0; w < W; ++w) {
      x = _mm512_ternarylogic_epi32(x, c, _mm512_srli_epi16(x, 3), 0x96);
      y = _mm512_ternarylogic_epi32(y, c, _mm512_srli_epi16(y, 3), 0x96);
    }
    a0 = _mm512_xor_si512(a0, x); a1 = _mm512_xor_si512(a1, y);
  }
  return _mm512_xor_si512(a0, a1);
}
volatile long g_sink;
template <int W, int H> double bw(char* buf, size_t per, int th, size_t dist) {
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    double t0 = omp_get_wtime();
    #pragma omp parallel num_threads(th)
    { __m512i v = run<W, H>(buf + per * omp_get_thread_num(), per, dist);
      g_sink += _mm512_reduce_add_epi32(v); }
    double t = omp_get_wtime() - t0; 
    best = std::max(best, per * th / t / 1e9);
  }
  return best;
}
template <int W> void row(char* buf, size_t per, int th) {
  std::printf("W=%2d th=%d  none %5.1f  t0-4k %5.1f  t0-1k %5.1f t1-8k %5.1f  t2-8k %5.1f t2-32k %5.1f  t0-1k+t2-4k %5.1f\n", W, th,
    bw<W,0>(buf, per, th, 0), bw<W,3>(buf, per, th, 4096), bw<W,3>(buf, per, th, 1024), bw<W,2>(buf, per, th, 8192), bw<W,1>(buf, per, th, 8192), bw<W,1>(buf, per, th, 32768), bw<W,4>(buf, per, th, 1024));
}
int main() {
  size_t total = size_t(2) << 30;
  char* buf = (char*)aligned_alloc(1 << 21, total);
  madvise(buf, total, MADV_HUGEPAGE);
  memset(buf, 1, total);
  for (int th : {1, 2}) {
    size_t per = total / 2;
    row<0>(buf, per, th); row<1>(buf, per, th); row<2>(buf, per, th); row<3>(buf, per, th); row<4>(buf, per, th); row<6>(buf, per, th);
  }
}
