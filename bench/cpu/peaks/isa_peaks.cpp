// bench/cpu/peaks/isa_peaks.cpp — see isa_peaks.hpp. Everything in this file may use AVX-512 and AMX
// instructions (the compiler is told so), so it holds no static initializers and no code that runs
// before the caller checked the CPU.
#include "cpu/peaks/isa_peaks.hpp"
#include "cpu/peaks/best_rate.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/amx_tile_config.hpp"

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

// 16 independent chains (enough for 2 a cycle at a latency of 8), stepped in inline asm: written with
// the intrinsics, GCC moved every accumulator between two registers in each iteration (32 vmovdqa for
// 16 vpdpbusd, arrays or named variables alike), which read 20-36% under the instruction's rate on one
// thread of a Xeon (GCC 13; the Zen 4 hid them).
constexpr int kDotChains = 16;
#define MOERUN_PEAK_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
// (Two statements of 8 chains: an asm takes at most 30 operands, and each "+v" counts twice.)
#define MOERUN_PEAK_ASM8(op, x0, x1, x2, x3, x4, x5, x6, x7)                                                   \
  asm(op " %[b], %[b], %[c0]\n\t" op " %[b], %[b], %[c1]\n\t" op " %[b], %[b], %[c2]\n\t" op " %[b], %[b], %[c3]\n\t" \
      op " %[b], %[b], %[c4]\n\t" op " %[b], %[b], %[c5]\n\t" op " %[b], %[b], %[c6]\n\t" op " %[b], %[b], %[c7]"      \
      : [c0] "+v"(x0), [c1] "+v"(x1), [c2] "+v"(x2), [c3] "+v"(x3), [c4] "+v"(x4), [c5] "+v"(x5), [c6] "+v"(x6),        \
        [c7] "+v"(x7)                                                                                                  \
      : [b] "v"(b))
#define MOERUN_PEAK_ASM(op)                                  \
  do {                                                       \
    MOERUN_PEAK_ASM8(op, a0, a1, a2, a3, a4, a5, a6, a7);    \
    MOERUN_PEAK_ASM8(op, a8, a9, a10, a11, a12, a13, a14, a15); \
  } while (0)

float bf16_dot_loop(int64_t iters) {
#define DECL(i) __m512 a##i = _mm512_set1_ps(0.001f * (i));
  MOERUN_PEAK_CHAINS(DECL)
#undef DECL
  const __m512i b = _mm512_set1_epi32(0x3F803F80);  // (1, 1) in bf16
  for (int64_t it = 0; it < iters; ++it) MOERUN_PEAK_ASM("vdpbf16ps");
  __m512 t = _mm512_setzero_ps();
#define SUM(i) t = _mm512_add_ps(t, a##i);
  MOERUN_PEAK_CHAINS(SUM)
#undef SUM
  return _mm512_reduce_add_ps(t);
}

int64_t vnni_dot_loop(int64_t iters) {
#define DECL(i) __m512i a##i = _mm512_set1_epi32(i);
  MOERUN_PEAK_CHAINS(DECL)
#undef DECL
  const __m512i b = _mm512_set1_epi8(1);
  for (int64_t it = 0; it < iters; ++it) MOERUN_PEAK_ASM("vpdpbusd");
  __m512i t = _mm512_setzero_si512();
#define SUM(i) t = _mm512_add_epi32(t, a##i);
  MOERUN_PEAK_CHAINS(SUM)
#undef SUM
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, t);
  int64_t sum = 0;
  for (int32_t v : lanes) sum += v;
  return sum;
}
#undef MOERUN_PEAK_ASM
#undef MOERUN_PEAK_ASM8
#undef MOERUN_PEAK_CHAINS

using moerun::cpu::kernels::TileConfig;  // loaded with kernels::load_tile_config, never _tile_loadconfig

constexpr double kFlopsPerTdp = 2.0 * 16 * 16 * 32;

enum class AmxLoop { k2x2, k1x6, k2x2Loads, k2x2LoadsStrided, kLoadsOnly };

constexpr int kStridedLd = 4160;  // bytes between A rows in k2x2LoadsStrided (2048 bf16 + 32 of padding)

// tile_amx2's 2x2 step: two A tiles of 16 rows kStridedLd bytes apart, two 1 KiB B tiles, four products
// (tiles A0 = 4, A1 = 5, B0 = 6, B1 = 7, C = 0..3: the intrinsics take literal tile numbers).
inline void step2x2(const uint16_t* a, const uint16_t* b0, const uint16_t* b1) {
  _tile_loadd(6, b0, 64);
  _tile_loadd(7, b1, 64);
  _tile_loadd(4, a, kStridedLd);
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 7);
  _tile_loadd(5, a + 16 * (kStridedLd / 2), kStridedLd);
  _tile_dpbf16ps(2, 5, 6);
  _tile_dpbf16ps(3, 5, 7);
}

// One thread: `loop` until `deadline`. Returns the number of tdpbf16ps (kLoadsOnly: of tileloadd).
int64_t amx_thread(AmxLoop loop, double deadline, float* sink) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {  // every tile 16 rows x 64 bytes: C 16x16 fp32, A 16x32 bf16, B 16x(2x16) bf16 pairs
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  moerun::cpu::kernels::load_tile_config(cfg);
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
      for (int i = 0; i < 256; ++i) step2x2(strided, b, a);
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
  return best_rate(threads, static_cast<double>(iters) * 12 * 32, [&] { return fma512_loop(iters); });
}

double avx512_bf16_dot_peak_gflops(int threads) {
  const int64_t iters = 5'000'000;
  // 16 lanes x 2 bf16 products, each a multiply and an add
  return best_rate(threads, static_cast<double>(iters) * kDotChains * 64, [&] { return bf16_dot_loop(iters); });
}

double avx512_vnni_dot_peak_gops(int threads) {
  const int64_t iters = 5'000'000;
  // 64 byte products accumulated into 16 int32 lanes: a multiply and an add each
  return best_rate(threads, static_cast<double>(iters) * kDotChains * 128, [&] { return vnni_dot_loop(iters); });
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

namespace {

enum class Place { kL1, kAL2BL2, kAL1BL2, kAL2BL1, kAL1BMem, kAL2BMem, kAL1BL2Spill, kTokens64 };
constexpr const char* kPlaceNames[] = {"A L1, B L1", "A L2, B L2", "A L1, B L2", "A L2, B L1",
                                       "A L1, B mem", "A L2, B mem", "A L1, B L2, C spilled / 8 steps"};
constexpr int kPlaceCount = 7;

// 64 tokens per expert with the weights streamed from memory: the kernel design, and how it prefetches.
enum class Design { kTwoPass, kOneBlock, kOneBlockDB, kInterleaved, kChunked4A };
enum class Next { kNone, kT0, kT2 };  // prefetch of the next data (next chunk / block / pair), and its hint
struct Tokens64 {
  const char* name;
  Design design;
  int ahead;  // bytes of the current panel(s) prefetched ahead with T0 (0: none)
  Next next;
  int64_t chunk = 8;  // kInterleaved: k steps per K chunk
};
constexpr Tokens64 kTokens64[] = {
    {"64 tok: 2 passes of 32, pf 4K", Design::kTwoPass, 4096, Next::kNone},
    {"64 tok: 2 passes of 32, pf 1K (now)", Design::kTwoPass, 1024, Next::kNone},
    {"64 tok: 2 passes, pass 2 pf next pair T2", Design::kTwoPass, 4096, Next::kT2},
    {"64 tok: 1 block x 4 A, pf 4K", Design::kOneBlock, 4096, Next::kNone},
    {"64 tok: 1 block x 4 A, no pf", Design::kOneBlock, 0, Next::kNone},
    {"64 tok: 1 block x 4 A, pf 16K", Design::kOneBlock, 16384, Next::kNone},
    {"64 tok: 1 block x 4 A, pf 4K + next T2", Design::kOneBlock, 4096, Next::kT2},
    // B alternating tmm6 / tmm7 by step and A tmm4 / tmm5 within a step: no tile register is reloaded
    // while a product may still read it, so the next step's B load need not wait for this step's products.
    {"64 tok: 1 block x 4 A, B and A double-buffered, pf 4K", Design::kOneBlockDB, 4096, Next::kNone},
    {"64 tok: 1 block x 4 A, B and A double-buffered, no pf", Design::kOneBlockDB, 0, Next::kNone},
    {"64 tok: 1 block x 4 A, B and A double-buffered, pf 1K", Design::kOneBlockDB, 1024, Next::kNone},
    {"64 tok: 1 block x 4 A, B and A double-buffered, pf 8K", Design::kOneBlockDB, 8192, Next::kNone},
    {"64 tok: groups alternate / 8", Design::kInterleaved, 4096, Next::kNone},
    {"64 tok: groups alternate, g1 pf next T0", Design::kInterleaved, 4096, Next::kT0},
    {"64 tok: groups alternate, g1 pf next T2", Design::kInterleaved, 4096, Next::kT2},
    {"64 tok: groups alternate / 8, pf 1K", Design::kInterleaved, 1024, Next::kNone},
    {"64 tok: groups alternate / 4, pf 1K", Design::kInterleaved, 1024, Next::kNone, 4},
    {"64 tok: groups alternate / 16, pf 1K", Design::kInterleaved, 1024, Next::kNone, 16},
    {"64 tok: groups alternate / 8, pf 1K, g1 next T2", Design::kInterleaved, 1024, Next::kT2},
    {"64 tok: groups alternate / 4, pf 1K, g1 next T2", Design::kInterleaved, 1024, Next::kT2, 4},
    {"64 tok: groups alternate / 8, pf 1K, g1 next T0", Design::kInterleaved, 1024, Next::kT0},
    // Two blocks, per K chunk: block 0 then block 1, each 4 A tiles (all 64 tokens) x its B tile, C tiles
    // stored and reloaded around its chunk; the chunk's A rows come from L2 for block 0 and L1 for block 1.
    {"64 tok: 4 A x 1 B chunked / 4, 2 blocks, pf 1K", Design::kChunked4A, 1024, Next::kNone, 4},
    {"64 tok: 4 A x 1 B chunked / 8, 2 blocks, pf 1K", Design::kChunked4A, 1024, Next::kNone, 8},
    {"64 tok: 4 A x 1 B chunked / 4, 2 blocks, no pf", Design::kChunked4A, 0, Next::kNone, 4},
    {"64 tok: 4 A x 1 B chunked / 4, 2 blocks, pf 2K", Design::kChunked4A, 2048, Next::kNone, 4},
    {"64 tok: 4 A x 1 B chunked / 2, 2 blocks, pf 1K", Design::kChunked4A, 1024, Next::kNone, 2},
};
constexpr int kTokens64Count = sizeof(kTokens64) / sizeof(kTokens64[0]);
constexpr int64_t kSteps = 64;                     // k steps of 32 in one pass over K = 2048
constexpr int64_t kChunkSteps = 8;                 // A re-read from L1: a K chunk of 256
constexpr size_t kPanelBytes = kSteps * 1024;      // one weight panel (16 lanes x K bf16)
constexpr size_t kMemBytes = size_t{256} << 20;    // per thread, far beyond the caches

// One thread's buffers; `mem_at` carries the memory walk across slices so every slice reads fresh lines.
struct PlaceBuffers {
  uint16_t* a = nullptr;    // 64 token rows x kStridedLd bytes (the 2x2 steps read rows 0-31)
  uint16_t* b = nullptr;    // two panels
  uint16_t* mem = nullptr;  // kMemBytes of panel pairs
  float* c = nullptr;       // 4 C tiles
  size_t mem_at = 0;        // byte offset of the next pair in mem
  bool ok() const { return a && b && mem && c; }
};

PlaceBuffers place_buffers() {
  PlaceBuffers p;
  p.a = static_cast<uint16_t*>(std::aligned_alloc(64, 64 * kStridedLd));
  p.b = static_cast<uint16_t*>(std::aligned_alloc(64, 2 * kPanelBytes));
  p.mem = static_cast<uint16_t*>(std::aligned_alloc(64, kMemBytes));
  p.c = static_cast<float*>(std::aligned_alloc(64, 8 * 1024));
  if (!p.ok()) return p;
  // Small bf16 values (about 1e-3) everywhere, so the accumulators never overflow; writing them also
  // maps every page before timing.
  for (size_t i = 0; i < 64 * kStridedLd / 2; ++i) p.a[i] = static_cast<uint16_t>(0x3a80 + (i & 7));
  for (size_t i = 0; i < kPanelBytes; ++i) p.b[i] = static_cast<uint16_t>(0x3a80 + ((i >> 3) & 7));
  for (size_t i = 0; i < kMemBytes / 2; ++i) p.mem[i] = static_cast<uint16_t>(0x3a80 + ((i >> 5) & 7));
  return p;
}

void free_buffers(PlaceBuffers& p) {
  std::free(p.a);
  std::free(p.b);
  std::free(p.mem);
  std::free(p.c);
  p = PlaceBuffers{};
}

// The next panel pair (`blocks` panels) of the memory walk.
const uint16_t* next_mem(PlaceBuffers& buf, int blocks) {
  const size_t bytes = static_cast<size_t>(blocks) * kPanelBytes;
  if (buf.mem_at + bytes > kMemBytes) buf.mem_at = 0;
  const uint16_t* p = buf.mem + buf.mem_at / 2;
  buf.mem_at += bytes;
  return p;
}

// The B tile `ahead` bytes past step s of a panel, with T0 (tile_amx2 prefetches 4 KiB ahead).
inline void prefetch_ahead(const uint16_t* panel, int64_t s, int ahead) {
  if (ahead <= 0) return;
  const char* p = reinterpret_cast<const char*>(panel + s * 512) + ahead;
  for (int l = 0; l < 1024; l += 64) _mm_prefetch(p + l, _MM_HINT_T0);
}
// `lines` lines from p with the hint of `next`.
inline void prefetch_lines(const void* p, int lines, Next next) {
  const char* c = static_cast<const char*>(p);
  for (int l = 0; l < lines; ++l) {
    if (next == Next::kT0) _mm_prefetch(c + 64 * l, _MM_HINT_T0);
    else if (next == Next::kT2) _mm_prefetch(c + 64 * l, _MM_HINT_T2);
  }
}

void store_c(float* c) {
  _tile_stored(0, c, 64);
  _tile_stored(1, c + 256, 64);
  _tile_stored(2, c + 512, 64);
  _tile_stored(3, c + 768, 64);
}
void load_c(const float* c) {
  _tile_loadd(0, c, 64);
  _tile_loadd(1, c + 256, 64);
  _tile_loadd(2, c + 512, 64);
  _tile_loadd(3, c + 768, 64);
}

// A K chunk's C tiles: zero for the first chunk, else reloaded from where the last chunk stored them.
void start_c(bool first, const float* c) {
  if (!first) return load_c(c);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

// 64 tokens (A rows 0-63) times fresh weights from memory (kTokens64[v]); returns tdpbf16ps done. The
// memory walk is laid out as the runner's panels: a block's panel is kPanelBytes contiguous, a pair's two
// panels adjacent, the next pair after them.
int64_t sixty_four_tokens(const Tokens64& v, PlaceBuffers& buf) {
  const uint16_t* a1 = buf.a + 32 * (kStridedLd / 2);  // token rows 32-63
  if (v.design == Design::kOneBlock) {  // tiles_t<4>: one panel, C0..C3 = four 16-token groups
    const uint16_t* b = next_mem(buf, 1);
    const uint16_t* nb = b + kPanelBytes / 2;  // the next block (next call's panel)
    for (int64_t s = 0; s < kSteps; ++s) {
      prefetch_ahead(b, s, v.ahead);
      prefetch_lines(nb + s * 512, 16, v.next);
      _tile_loadd(6, b + s * 512, 64);
      _tile_loadd(4, buf.a + s * 32, kStridedLd);
      _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(4, buf.a + 16 * (kStridedLd / 2) + s * 32, kStridedLd);
      _tile_dpbf16ps(1, 4, 6);
      _tile_loadd(4, a1 + s * 32, kStridedLd);
      _tile_dpbf16ps(2, 4, 6);
      _tile_loadd(4, a1 + 16 * (kStridedLd / 2) + s * 32, kStridedLd);
      _tile_dpbf16ps(3, 4, 6);
    }
    store_c(buf.c);
    return kSteps * 4;
  }
  if (v.design == Design::kOneBlockDB) {
    const uint16_t* b = next_mem(buf, 1);
    const uint16_t* r1 = buf.a + 16 * (kStridedLd / 2);
    const uint16_t* r3 = a1 + 16 * (kStridedLd / 2);
// (The tile intrinsics paste their operands into the instruction text: B must be a literal.)
#define MOERUN_DB_STEP(s, B)                         \
  prefetch_ahead(b, s, v.ahead);                     \
  _tile_loadd(B, b + (s) * 512, 64);                 \
  _tile_loadd(4, buf.a + (s) * 32, kStridedLd);      \
  _tile_loadd(5, r1 + (s) * 32, kStridedLd);         \
  _tile_dpbf16ps(0, 4, B);                           \
  _tile_dpbf16ps(1, 5, B);                           \
  _tile_loadd(4, a1 + (s) * 32, kStridedLd);         \
  _tile_loadd(5, r3 + (s) * 32, kStridedLd);         \
  _tile_dpbf16ps(2, 4, B);                           \
  _tile_dpbf16ps(3, 5, B);
    for (int64_t s = 0; s < kSteps; s += 2) {
      MOERUN_DB_STEP(s, 6)
      MOERUN_DB_STEP(s + 1, 7)
    }
#undef MOERUN_DB_STEP
    store_c(buf.c);
    return kSteps * 4;
  }
  const uint16_t* b0 = next_mem(buf, 2);
  const uint16_t* b1 = b0 + kPanelBytes / 2;
  const uint16_t* np = b0 + kPanelBytes;  // the next pair
  if (v.design == Design::kChunked4A) {
    const uint16_t* r1 = buf.a + 16 * (kStridedLd / 2);
    const uint16_t* r3 = a1 + 16 * (kStridedLd / 2);
    for (int64_t c0 = 0; c0 < kSteps; c0 += v.chunk)
      for (int j = 0; j < 2; ++j) {
        const uint16_t* b = j ? b1 : b0;
        start_c(c0 == 0, buf.c + j * 1024);
        for (int64_t s = c0; s < c0 + v.chunk; ++s) {
          prefetch_ahead(b, s, v.ahead);
          _tile_loadd(6, b + s * 512, 64);
          _tile_loadd(4, buf.a + s * 32, kStridedLd);
          _tile_loadd(5, r1 + s * 32, kStridedLd);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 5, 6);
          _tile_loadd(4, a1 + s * 32, kStridedLd);
          _tile_loadd(5, r3 + s * 32, kStridedLd);
          _tile_dpbf16ps(2, 4, 6);
          _tile_dpbf16ps(3, 5, 6);
        }
        store_c(buf.c + j * 1024);
      }
    return 2 * kSteps * 4;
  }
  if (v.design == Design::kTwoPass) {  // tile_amx2: tokens 0-31 over all of K (B from memory), then 32-63 (B from L2)
    for (int g = 0; g < 2; ++g) {
      const uint16_t* a = g ? a1 : buf.a;
      for (int64_t s = 0; s < kSteps; ++s) {
        prefetch_ahead(b0, s, v.ahead);
        prefetch_ahead(b1, s, v.ahead);
        if (g == 1) prefetch_lines(np + s * 1024, 32, v.next);  // the next pair's 128 KiB over pass 2
        step2x2(a + s * 32, b0 + s * 512, b1 + s * 512);
      }
      store_c(buf.c + g * 1024);
    }
    return 2 * kSteps * 4;
  }
  // kInterleaved: per K chunk of 8 steps, tokens 0-31 (B from memory) then 32-63 (B from L1), each
  // group's C tiles stored and reloaded around its chunk; group 1 may prefetch the next chunk's B.
  for (int64_t c0 = 0; c0 < kSteps; c0 += v.chunk)
    for (int g = 0; g < 2; ++g) {
      const uint16_t* a = g ? a1 : buf.a;
      start_c(c0 == 0, buf.c + g * 1024);
      for (int64_t s = c0; s < c0 + v.chunk; ++s) {
        if (g == 0) {
          prefetch_ahead(b0, s, v.ahead);
          prefetch_ahead(b1, s, v.ahead);
        } else {  // step s's share (2 x 16 lines) of the next chunk: both panels' tiles v.chunk ahead
          const int64_t ns = s + v.chunk;
          const uint16_t* p0 = ns < kSteps ? b0 + ns * 512 : np + (ns - kSteps) * 512;
          const uint16_t* p1 = ns < kSteps ? b1 + ns * 512 : np + kPanelBytes / 2 + (ns - kSteps) * 512;
          prefetch_lines(p0, 16, v.next);
          prefetch_lines(p1, 16, v.next);
        }
        step2x2(a + s * 32, b0 + s * 512, b1 + s * 512);
      }
      store_c(buf.c + g * 1024);
    }
  return 2 * kSteps * 4;
}

// Passes of kSteps steps until `deadline`; returns the tdpbf16ps count.
int64_t place_thread(Place pl, int variant, PlaceBuffers& buf, double deadline) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  moerun::cpu::kernels::load_tile_config(cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const bool a_l1 = pl == Place::kL1 || pl == Place::kAL1BL2 || pl == Place::kAL1BMem || pl == Place::kAL1BL2Spill;
  const bool b_mem = pl == Place::kAL1BMem || pl == Place::kAL2BMem;
  const bool b_l1 = pl == Place::kL1 || pl == Place::kAL2BL1;
  int64_t n = 0;
  if (pl == Place::kTokens64) {
    do n += sixty_four_tokens(kTokens64[variant], buf);
    while (now_s() < deadline);
    _tile_release();
    return n;
  }
  do {
    const uint16_t* b0 = buf.b;
    if (b_mem) {
      if (buf.mem_at + 2 * kPanelBytes > kMemBytes) buf.mem_at = 0;
      b0 = buf.mem + buf.mem_at / 2;
      buf.mem_at += 2 * kPanelBytes;
    }
    const uint16_t* b1 = b0 + kPanelBytes / 2;
    for (int64_t s = 0; s < kSteps; ++s) {
      const int64_t sa = a_l1 ? s % kChunkSteps : s;  // A: k offset 32 * sa of the rows
      const int64_t sb = b_l1 ? 0 : s;
      if (b_mem)
        for (int l = 0; l < 1024; l += 64) {  // tile_amx2's prefetch, 4 KiB ahead in each panel
          _mm_prefetch(reinterpret_cast<const char*>(b0 + (s + 4) * 512) + l, _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(b1 + (s + 4) * 512) + l, _MM_HINT_T0);
        }
      step2x2(buf.a + sa * 32, b0 + sb * 512, b1 + sb * 512);
      if (pl == Place::kAL1BL2Spill && s % kChunkSteps == kChunkSteps - 1) {
        _tile_stored(0, buf.c, 64);
        _tile_stored(1, buf.c + 256, 64);
        _tile_stored(2, buf.c + 512, 64);
        _tile_stored(3, buf.c + 768, 64);
        _tile_loadd(0, buf.c, 64);
        _tile_loadd(1, buf.c + 256, 64);
        _tile_loadd(2, buf.c + 512, 64);
        _tile_loadd(3, buf.c + 768, 64);
      }
    }
    n += kSteps * 4;
  } while (now_s() < deadline);
  _tile_stored(0, buf.c, 64);
  _tile_release();
  return n;
}

}  // namespace

std::vector<AmxPlacement> amx_operand_placement(int threads, double seconds) {
  std::vector<PlaceBuffers> bufs(static_cast<size_t>(threads));
  bool ok = true;
#pragma omp parallel num_threads(threads) reduction(&& : ok)
  {
    // first touch by the thread that reads them
    bufs[static_cast<size_t>(omp_get_thread_num())] = place_buffers();
    ok = bufs[static_cast<size_t>(omp_get_thread_num())].ok();
  }
  std::vector<AmxPlacement> out;
  if (ok) {
    constexpr int kRounds = 8;
    constexpr int kAll = kPlaceCount + kTokens64Count;
    int64_t n[kAll] = {};
    double dt[kAll] = {};
    for (int r = 0; r < kRounds; ++r)
      for (int i = 0; i < kAll; ++i) {
        const Place pl = i < kPlaceCount ? static_cast<Place>(i) : Place::kTokens64;
        const int variant = i < kPlaceCount ? 0 : i - kPlaceCount;
        int64_t total = 0;
        const double t0 = now_s(), deadline = t0 + seconds / kRounds / kAll;
        double t_end = t0;
#pragma omp parallel num_threads(threads) reduction(+ : total) reduction(max : t_end)
        {
          total += place_thread(pl, variant, bufs[static_cast<size_t>(omp_get_thread_num())], deadline);
          t_end = now_s();
        }
        n[i] += total;
        dt[i] += t_end - t0;
      }
    for (int i = 0; i < kAll; ++i)
      out.push_back({i < kPlaceCount ? kPlaceNames[i] : kTokens64[i - kPlaceCount].name,
                     static_cast<double>(n[i]) * kFlopsPerTdp / dt[i] / 1e9});
  }
#pragma omp parallel num_threads(threads)
  free_buffers(bufs[static_cast<size_t>(omp_get_thread_num())]);
  return out;
}

}  // namespace moerun_bench
