// Probe (session 30): the AMX bf16 decode stream (stream_amx_bf16, 2-64 tokens per expert) copies each
// 1 KiB B step of a bf16 block into an L1 image before TILELOADD. A bf16 block already is a VNNI panel,
// so the B tile can load straight from the packed weights. Both, weights from memory: each thread
// walks 1 GiB of 64 KiB blocks (K = 2048, 16 lanes) in runs of 8 consecutive blocks (the runner's
// stream runs) in shuffled order, m token rows of 4160-byte stride.
//   g++ -O2 -std=c++20 -fopenmp -mamx-tile -mamx-bf16 -mavx512f -mavx512bf16 -I src -I include \
//       amx_stream_direct.cpp build/src/libmoerun.a -L/usr/local/cuda/lib64 -lcudart -lfmt -o /tmp/sd
//   /tmp/sd <threads> [reps] [m,m,...] [K]   (kinds 5-7: head prefetches, amx_k768_heads.log)
// Variant lists changed as the session went (NOTES.md section 1): amx_stream_direct.log had {plain read,
// library, direct with L1 1K + L2 4K / L1 1K / L1 2K + L2 6K / none}; amx_stream_direct_vs_tiles.log
// {plain read, library, direct L1 1K, tile_amx2}; amx_pair_interleaved.log and amx_k768.log this
// file's list. "library" is stream_amx_bf16 as linked: the L1-image copy before 93a95f7 (the first
// two logs), B from the block after it (the last two).
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/isa.hpp"
#include "backends/cpu/kernels/amx_tile_config.hpp"
#include "backends/cpu/kernels/kernels.hpp"
using namespace moerun::cpu;
using namespace moerun::cpu::kernels;

static double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Direct: C0 (+C1..C3) += A(m rows) x B straight from the packed block; m <= 64 in groups of 16.
// Prefetch: L1 pf1 and L2 pf2 bytes ahead of the step (into the next block of the run).
template <int NG>
static void direct_t(const BlockRef& b, const uint16_t* xb, int64_t ldx, int m, float* acc, int pf1, int pf2) {
  TileConfig c;
  const int r = m - 16 * (NG - 1);
  for (int t = 0; t < 4; ++t) { c.colsb[t] = t < NG ? 64 : 0; c.rows[t] = uint8_t(t < NG - 1 ? 16 : t == NG - 1 ? r : 0); }
  for (int t = 4; t < 8; ++t) { c.colsb[t] = 64; c.rows[t] = uint8_t(t == 7 ? r : 16); }
  load_tile_config(c);  // every call (about one tile product's time per 64 KiB block)
  _tile_zero(0);
  if constexpr (NG > 1) _tile_zero(1);
  if constexpr (NG > 2) _tile_zero(2);
  if constexpr (NG > 3) _tile_zero(3);
  const size_t stride = size_t(ldx) * 2;
  const char* w = reinterpret_cast<const char*>(b.data);
  for (int64_t j = 0; j < b.kp / 32; ++j) {
    const char* s = w + j * 1024;
    if (pf1) for (int l = 0; l < 1024; l += 64) _mm_prefetch(s + pf1 + l, _MM_HINT_T0);
    if (pf2) for (int l = 0; l < 1024; l += 64) _mm_prefetch(s + pf2 + l, _MM_HINT_T1);
    const uint16_t* x = xb + j * 32;
    if (j & 1) {
      _tile_loadd(6, s, 64);
      if constexpr (NG == 1) { _tile_loadd(7, x, stride); _tile_dpbf16ps(0, 7, 6); }
      else {
        _tile_loadd(4, x, stride); _tile_dpbf16ps(0, 4, 6);
        if constexpr (NG > 2) { _tile_loadd(4, x + 16 * ldx, stride); _tile_dpbf16ps(1, 4, 6); }
        if constexpr (NG > 3) { _tile_loadd(4, x + 32 * ldx, stride); _tile_dpbf16ps(2, 4, 6); }
        _tile_loadd(7, x + (NG - 1) * 16 * ldx, stride);
        if constexpr (NG == 2) _tile_dpbf16ps(1, 7, 6); else if constexpr (NG == 3) _tile_dpbf16ps(2, 7, 6); else _tile_dpbf16ps(3, 7, 6);
      }
    } else {
      _tile_loadd(5, s, 64);
      if constexpr (NG == 1) { _tile_loadd(7, x, stride); _tile_dpbf16ps(0, 7, 5); }
      else {
        _tile_loadd(4, x, stride); _tile_dpbf16ps(0, 4, 5);
        if constexpr (NG > 2) { _tile_loadd(4, x + 16 * ldx, stride); _tile_dpbf16ps(1, 4, 5); }
        if constexpr (NG > 3) { _tile_loadd(4, x + 32 * ldx, stride); _tile_dpbf16ps(2, 4, 5); }
        _tile_loadd(7, x + (NG - 1) * 16 * ldx, stride);
        if constexpr (NG == 2) _tile_dpbf16ps(1, 7, 5); else if constexpr (NG == 3) _tile_dpbf16ps(2, 7, 5); else _tile_dpbf16ps(3, 7, 5);
      }
    }
  }
  alignas(64) float ct[64 * 16];
  _tile_stored(0, ct, 64);
  if constexpr (NG > 1) _tile_stored(1, ct + 256, 64);
  if constexpr (NG > 2) _tile_stored(2, ct + 512, 64);
  if constexpr (NG > 3) _tile_stored(3, ct + 768, 64);
  std::memcpy(acc, ct, size_t(m) * 64);
}
static void direct(const BlockRef& b, const uint16_t* xb, int64_t ldx, int m, float* acc, int pf1, int pf2) {
  if (m > 64) {  // passes of 64 (the later ones from L2)
    for (int i = 0; i < m; i += 64) direct(b, xb + int64_t(i) * ldx, ldx, std::min(64, m - i), acc + i * 16, pf1, pf2);
    return;
  }
  switch ((m + 15) / 16) {
    case 1: direct_t<1>(b, xb, ldx, m, acc, pf1, pf2); break;
    case 2: direct_t<2>(b, xb, ldx, m, acc, pf1, pf2); break;
    case 3: direct_t<3>(b, xb, ldx, m, acc, pf1, pf2); break;
    default: direct_t<4>(b, xb, ldx, m, acc, pf1, pf2); break;
  }
}

// tile_amx2's loop on two blocks interleaved per 32-k step ([step][block 0: 1 KiB][block 1: 1 KiB]):
// one sequential stream instead of two 64 KiB apart. pf: L1 prefetch distance in the pair's stream.
template <bool kTwoA>
static void inter_pass(const uint16_t* w, int64_t kp, const uint16_t* xb, int64_t ldx, float* o0, float* o1, int pf) {
  _tile_zero(0); _tile_zero(1);
  if constexpr (kTwoA) { _tile_zero(2); _tile_zero(3); }
  const size_t stride = size_t(ldx) * 2;
  const char* base = reinterpret_cast<const char*>(w);
  for (int64_t k = 0; k < kp; k += 32) {
    const char* s = base + k * 64;  // 2 KiB a step
    if (pf) for (int l = 0; l < 2048; l += 64) _mm_prefetch(s + pf + l, _MM_HINT_T0);
    _tile_loadd(6, s, 64);
    _tile_loadd(7, s + 1024, 64);
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
static void inter2(const uint16_t* w, int64_t kp, const uint16_t* xb, int64_t ldx, int m, float* acc0, float* acc1, int pf) {
  TileConfig c;
  for (int t = 0; t < 8; ++t) { c.colsb[t] = 64; c.rows[t] = 16; }
  load_tile_config(c);
  alignas(64) float o0[32 * 16], o1[32 * 16];
  for (int i = 0; i < m; i += 32) {
    const int rows = std::min(32, m - i);
    if (rows > 16) inter_pass<true>(w, kp, xb + int64_t(i) * ldx, ldx, o0, o1, pf);
    else inter_pass<false>(w, kp, xb + int64_t(i) * ldx, ldx, o0, o1, pf);
    std::memcpy(acc0 + i * 16, o0, size_t(rows) * 64);
    std::memcpy(acc1 + i * 16, o1, size_t(rows) * 64);
  }
}

int main(int argc, char** argv) {
  if (detected_isa() != moerun::CpuIsa::kAmx) { std::puts("no AMX"); return 1; }
  const int threads = argc > 1 ? atoi(argv[1]) : 2;
  const int reps = argc > 2 ? atoi(argv[2]) : 2;
  const int64_t K = argc > 4 ? atoi(argv[4]) : 2048, ldx = K + 32;
  const size_t blk = K * 16 * 2;                        // 64 KiB
  const size_t nblk = (size_t(1) << 30) / blk, run = 8;  // 1 GiB a thread, runs of 8 blocks
  std::vector<uint16_t*> w(threads);
  std::vector<std::vector<uint32_t>> order(threads);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    w[t] = (uint16_t*)std::aligned_alloc(size_t(2) << 20, nblk * blk);
    madvise(w[t], nblk * blk, MADV_HUGEPAGE);  // as the runner's weights (huge_pages.cpp)
    for (size_t i = 0; i < nblk * blk / 2; ++i) w[t][i] = 0x3a80 + (i & 7);
    for (size_t i = 0; i < nblk / run; ++i) order[t].push_back(uint32_t(i));
    std::mt19937 g(t + 1);
    std::shuffle(order[t].begin(), order[t].end(), g);
  }
  struct V { const char* name; int kind; int pf1, pf2; };  // kind 0: library stream_amx_bf16, 1: direct, 2: read
  const V vs[] = {{"plain read (zmm sum)", 2, 0, 0}, {"library (copy to L1)", 0, 1024, 4096},
                  {"tile_amx2 pf 1K", 3, 1024, 0}, {"interleaved pf 2K", 4, 2048, 0}, {"interleaved pf 1K", 4, 1024, 0},
                  {"tile_amx2 + heads T0 1K", 5, 1024, 1024}, {"tile_amx2 + next heads T2 4K", 6, 1024, 4096},
                  {"tile_amx2 + next heads T0 1K", 7, 1024, 1024}};
  std::vector<int> ms = {4, 16, 32, 48, 64, 96, 128};
  if (argc > 3) { ms.clear(); for (char* q = argv[3]; *q;) { ms.push_back(int(strtol(q, &q, 10))); if (*q == ',') ++q; } }
  for (int m : ms) {
    for (int rep = 0; rep < reps; ++rep)
      for (const V& v : vs) {
        double tmax = 0;
#pragma omp parallel num_threads(threads) reduction(max : tmax)
        {
          const int t = omp_get_thread_num();
          uint16_t* xb = (uint16_t*)std::aligned_alloc(64, (m + 16) * ldx * 2);
          for (int64_t i = 0; i < (m + 16) * ldx; ++i) xb[i] = 0x3a80;
          float* acc = (float*)std::aligned_alloc(64, (m + 80) * 64 * 2);
          BlockRef b;
          b.fmt = PackFmt::kBF16; b.kp = K; b.prefetch = v.pf1; b.prefetch_l2 = v.pf2;
#pragma omp barrier
          const double t0 = now_s();
          for (uint32_t r : order[t])
            for (size_t i = 0; i < run; ++i) {
              if (v.kind == 4) {
                const uint16_t* p0 = w[t] + (size_t(r) * run + i) * blk / 2;
                inter2(p0, K, xb, ldx, m, acc, acc + (m + 16) * 16, v.pf1);
                ++i;
                continue;
              }
              if (v.kind >= 5 && v.kind <= 7) {  // head prefetch of this (5) or the next (6, 7) call's panels
                const uint16_t* p0 = w[t] + (size_t(r) * run + i) * blk / 2;
                const char* h = reinterpret_cast<const char*>(v.kind == 5 ? p0 : p0 + 2 * K * 16);
                const int hint = v.kind == 6 ? _MM_HINT_T2 : _MM_HINT_T0;
                for (int l = 0; l < v.pf2; l += 64) {
                  if (hint == _MM_HINT_T0) { _mm_prefetch(h + l, _MM_HINT_T0); _mm_prefetch(h + blk + l, _MM_HINT_T0); }
                  else { _mm_prefetch(h + l, _MM_HINT_T2); _mm_prefetch(h + blk + l, _MM_HINT_T2); }
                }
                tile_amx2(p0, p0 + K * 16, K, xb, ldx, m, acc, acc + (m + 16) * 16, v.pf1);
                ++i;
                continue;
              }
              if (v.kind == 3) {
                const uint16_t* p0 = w[t] + (size_t(r) * run + i) * blk / 2;
                tile_amx2(p0, p0 + K * 16, K, xb, ldx, m, acc, acc + (m + 16) * 16, v.pf1);
                ++i;
                continue;
              }
              b.data = reinterpret_cast<const uint8_t*>(w[t]) + (size_t(r) * run + i) * blk;
              if (v.kind == 2) {
                __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
                const float* f = reinterpret_cast<const float*>(b.data);
                for (size_t q = 0; q < blk / 4; q += 64) {
                  s0 = _mm512_add_ps(s0, _mm512_load_ps(f + q)); s1 = _mm512_add_ps(s1, _mm512_load_ps(f + q + 16));
                  s2 = _mm512_add_ps(s2, _mm512_load_ps(f + q + 32)); s3 = _mm512_add_ps(s3, _mm512_load_ps(f + q + 48));
                }
                _mm512_store_ps(acc, _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
              } else if (v.kind == 0) stream_amx_bf16(b, xb, ldx, m, acc);
              else direct(b, xb, ldx, m, acc, v.pf1, v.pf2);
            }
          tmax = now_s() - t0;
          amx_release();
          std::free(xb); std::free(acc);
        }
        std::printf("threads %d m=%2d %-22s %5.1f GB/s %6.2f us/block\n", threads, m, v.name,
                    threads * double(nblk * blk) / tmax / 1e9, tmax / nblk * 1e6);
        std::fflush(stdout);
      }
  }
}
