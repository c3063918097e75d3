// bench/cpu/peaks/isa_peaks.cpp — see isa_peaks.hpp. Everything in this file may use AVX-512 and AMX
// instructions (the compiler is told so), so it holds no static initializers and no code that runs
// before the caller checked the CPU.
#include "cpu/peaks/isa_peaks.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <utility>

namespace moerun_bench {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

float fma512_loop(int64_t iters) {
  constexpr int kChains = 12;  // 2 FMA ports x 4-cycle latency needs 8; a few spare
  __m512 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 b = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(0.0001f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChains; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
  __m512 s = a[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

// The AMX tile configuration (palette 1): byte 0 palette, byte 1 start row, bytes 16..47 bytes per row of
// tiles 0..15, bytes 48..63 rows of tiles 0..15.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

constexpr double kFlopsPerTdp = 2.0 * 16 * 16 * 32;

enum class AmxLoop { k2x2, k1x6, k2x2Loads, k2x2LoadsStrided, kLoadsOnly };

constexpr int kStridedLd = 4160;  // bytes between A rows in k2x2LoadsStrided (2048 bf16 + 32 of padding)

// One thread: `loop` until `deadline`. Returns the number of tdpbf16ps (kLoadsOnly: of tileloadd).
int64_t amx_thread(AmxLoop loop, double deadline, float* sink) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {  // every tile 16 rows x 64 bytes: C 16x16 fp32, A 16x32 bf16, B 16x(2x16) bf16 pairs
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  for (int i = 0; i < 16 * 32; ++i) {
    a[i] = 0x3a80 + static_cast<uint16_t>(i & 7);  // about 1e-3: the accumulators stay far from overflow
    b[i] = 0x3a80 + static_cast<uint16_t>((i >> 3) & 7);
  }
  int64_t n = 0;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  if (loop == AmxLoop::k2x2Loads) {
    do {
      for (int i = 0; i < 256; ++i) {
        _tile_loadd(6, b, 64);
        _tile_loadd(7, a, 64);
        _tile_loadd(4, a, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, b, 64);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      n += 256 * 4;
    } while (now_s() < deadline);
  } else if (loop == AmxLoop::k2x2LoadsStrided) {
    // Two A tiles of 16 rows kStridedLd bytes apart, each row 64-byte aligned like the runner's (only the
    // first 64 bytes of a row are read).
    auto* strided = static_cast<uint16_t*>(std::aligned_alloc(64, 32 * kStridedLd));
    if (strided == nullptr) {  // no memory: no units, the diagnostic reads "absent"
      _tile_release();
      return 0;
    }
    for (int r = 0; r < 32; ++r)
      for (int c = 0; c < 32; ++c) strided[r * (kStridedLd / 2) + c] = a[(r % 16) * 32 + c];
    do {
      for (int i = 0; i < 256; ++i) {
        _tile_loadd(6, b, 64);
        _tile_loadd(7, a, 64);
        _tile_loadd(4, strided, kStridedLd);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, strided + 16 * (kStridedLd / 2), kStridedLd);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      n += 256 * 4;
    } while (now_s() < deadline);
    std::free(strided);
  } else if (loop == AmxLoop::kLoadsOnly) {
    do {
      for (int i = 0; i < 256; ++i) {
        _tile_loadd(4, a, 64);
        _tile_loadd(5, b, 64);
        _tile_loadd(6, b, 64);
        _tile_loadd(7, a, 64);
      }
      n += 256 * 4;
    } while (now_s() < deadline);
  } else if (loop == AmxLoop::k2x2) {
    _tile_loadd(4, a, 64);
    _tile_loadd(5, b, 64);  // a second A tile (any bf16 data)
    _tile_loadd(6, b, 64);
    _tile_loadd(7, a, 64);  // a second B tile
    do {
      for (int i = 0; i < 256; ++i) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      n += 256 * 4;
    } while (now_s() < deadline);
  } else {
    _tile_zero(4);
    _tile_zero(5);
    _tile_loadd(6, a, 64);
    _tile_loadd(7, b, 64);
    do {
      for (int i = 0; i < 256; ++i) {
        _tile_dpbf16ps(0, 6, 7);
        _tile_dpbf16ps(1, 6, 7);
        _tile_dpbf16ps(2, 6, 7);
        _tile_dpbf16ps(3, 6, 7);
        _tile_dpbf16ps(4, 6, 7);
        _tile_dpbf16ps(5, 6, 7);
      }
      n += 256 * 6;
    } while (now_s() < deadline);
  }
  alignas(64) float c[16 * 16];
  _tile_stored(0, c, 64);
  *sink = c[0];
  _tile_release();
  return n;
}

// `loop` on `threads` threads for about `seconds`: {units done (tdpbf16ps, or tileloadd for kLoadsOnly),
// seconds taken}.
std::pair<int64_t, double> amx_count(int threads, double seconds, AmxLoop loop) {
  int64_t total = 0;
  float sink = 0;
  const double t0 = now_s(), deadline = t0 + seconds;
  double t_end = t0;
#pragma omp parallel num_threads(threads) reduction(+ : total, sink) reduction(max : t_end)
  {
    float s = 0;
    total += amx_thread(loop, deadline, &s);
    sink += s;
    t_end = now_s();
  }
  if (sink == -1.0f) total += 1;  // keeps the stores alive
  return {total, t_end - t0};
}

double per_unit(AmxLoop loop) { return loop == AmxLoop::kLoadsOnly ? 1024.0 : kFlopsPerTdp; }

// Per second over all threads: tdpbf16ps FLOPs / 1e9, or for kLoadsOnly tile bytes / 1e9.
double amx_run(int threads, double seconds, AmxLoop loop) {
  const auto [n, dt] = amx_count(threads, seconds, loop);
  return static_cast<double>(n) * per_unit(loop) / dt / 1e9;
}

}  // namespace

double avx512_fma_peak_gflops(int threads) {
  const int64_t iters = 20'000'000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    float sink = 0;
    const double t0 = now_s();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += fma512_loop(iters);
    const double dt = now_s() - t0;
    if (sink == 12345.0f) best += 1e-9;
    best = std::max(best, static_cast<double>(threads) * static_cast<double>(iters) * 12 * 32 / dt / 1e9);
  }
  return best;
}

double avx512_bf16_dot_peak_gflops(int threads) {
  const int64_t iters = 5'000'000;
  constexpr int kChains = 16;  // enough for 2 per cycle at a latency of 8
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    float sink = 0;
    const double t0 = now_s();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      __m512 a[kChains];
      for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
      const __m512bh b = (__m512bh)_mm512_set1_epi32(0x3F803F80);  // (1, 1) in bf16
      for (int64_t it = 0; it < iters; ++it)
        for (int i = 0; i < kChains; ++i) a[i] = _mm512_dpbf16_ps(a[i], b, b);
      __m512 t = a[0];
      for (int i = 1; i < kChains; ++i) t = _mm512_add_ps(t, a[i]);
      sink += _mm512_reduce_add_ps(t);
    }
    const double dt = now_s() - t0;
    if (sink == 12345.0f) best += 1e-9;
    // 16 lanes x 2 bf16 products, each a multiply and an add
    best = std::max(best, static_cast<double>(threads) * static_cast<double>(iters) * kChains * 64 / dt / 1e9);
  }
  return best;
}

AmxPeak amx_bf16_peak(int threads, double seconds) {
  AmxPeak p;
  amx_run(threads, 0.02, AmxLoop::k2x2);  // wake the tile units (and the clocks) before timing
  p.gflops_2x2 = amx_run(threads, seconds, AmxLoop::k2x2);
  p.gflops_1x6 = amx_run(threads, seconds, AmxLoop::k1x6);
  p.gflops = std::max(p.gflops_2x2, p.gflops_1x6);
  // The diagnostics alternate in short slices with the 2x2 loop they are read against: this host's tile
  // throughput changes within seconds, so loops timed one after another are not comparable.
  constexpr int kRounds = 8;
  const AmxLoop diag[] = {AmxLoop::k2x2, AmxLoop::k2x2Loads, AmxLoop::k2x2LoadsStrided, AmxLoop::kLoadsOnly};
  int64_t n[4] = {};
  double dt[4] = {};
  for (int r = 0; r < kRounds; ++r)
    for (int i = 0; i < 4; ++i) {
      const auto [c, t] = amx_count(threads, seconds / kRounds, diag[i]);
      n[i] += c;
      dt[i] += t;
    }
  const auto rate = [&](int i) { return static_cast<double>(n[i]) * per_unit(diag[i]) / dt[i] / 1e9; };
  p.gflops_2x2_alternated = rate(0);
  p.gflops_2x2_l1 = rate(1);
  p.gflops_2x2_l1_strided = rate(2);
  p.tileload_gbs = rate(3);
  return p;
}

}  // namespace moerun_bench
