// cpu/kernels/gemm_amx.cpp — AMX-BF16 tiles (kernels.hpp). Compiled with AMX + AVX512-BF16 flags; reached
// only when isa.cpp found AMX usable (CPUID, XCR0 tile state, and the Linux XTILEDATA permission).
//
// NOTES: one tile configuration for both kernels: 8 tiles of 16 rows x 64 bytes (palette 1).
// tile_amx (one N-block): C0..C3 = 4 x (16 tokens x 16 lanes f32), A = tile 4 (16 tokens x 32 k bf16),
// B = tile 5 (16 k-pairs x 16 lanes x 2: the VNNI panel, 1 KiB contiguous per 32 k). One pass covers 64
// tokens: per 32 k, 5 tile loads for 4 dot products (each A tile feeds one).
// tile_amx2 (two N-blocks, 2x2 register blocking): C0 = A4 B6, C1 = A4 B7, C2 = A5 B6, C3 = A5 B7 with
// A4 / A5 = tokens 0-15 / 16-31 of a 32-token pass and B6 / B7 the two blocks' panels: per 32 k, 4 tile
// loads for 4 dot products, and each A tile is loaded once for both blocks. A pass of 1-16 tokens
// uses A4 and C0, C1 only. Every C tile sees the same sequence of dot products (k ascending) as in
// tile_amx, so both kernels give bitwise the same accumulators.
//
// tile_amx4 (four N-blocks, calls of up to 16 tokens): C0..C3 = A4 x B of blocks 0..3, the B tiles rotating
// over 5 / 6 / 7: per 32 k, 5 tile loads for 4 dot products, and four weight streams in flight per
// call instead of two. Each C tile again sees tile_amx's sequence of products. Session 31, weights from
// memory, 2 threads (bench/results/2026-12-05_s31_dev-xeon/amx_down_1x4.log): at K = 768 and 4 / 8 /
// 16 rows 28.4-29.0 / 25.0-28.3 / 27.9-28.0 GB/s against tile_amx2's 26.7-27.7 / 24.0-26.5 /
// 24.9-25.8; at K = 2048 29.3-29.6 / 29.6 / 28.2-29.5 against 28.3-28.4 / 27.8-28.1 / 27.1-27.5.
//
// stream_amx_bf16 (the AMX decode stream, 2 or more tokens) has its own configurations, loaded when a
// thread switches between them and the tile kernels. Decoders write 16 k pairs as one bf16 B tile in L1
// (bf16_decode.hpp, the AVX512-BF16 kernel's) and TDPBF16PS multiplies it with
// the tokens' A tiles, so a weight is decoded once per call of up to 64 tokens and never goes through
// f32. On the H200 host's Xeon (one core, cached) that is 2.2-2.5 ns per mxfp4 or fp8-block pair for 1,
// 2 or 4 tokens, against 2.0, 3.0 and 5.0 ns (mxfp4) for the VDPBF16PS kernel, which therefore keeps
// one-token calls; against AMX tiles on converted panels (decoded to f32, rounded to bf16, a whole
// panel stored first) decoded formats stream faster up to 64 tokens per expert (isa.hpp). Converted
// panels are now decoded straight to bf16 (panel_bf16_vnni, 1.75-2.6x cheaper per block on the Xeon), so
// that crossover was measured against slower tiles and may have moved down; not measured again yet.
// - bf16 weights (reached only with MOERUN_CPU_STREAM_MAX_TOKENS: isa.hpp kAmxStreamMaxTokensBf16 sends
//   them to the tiles) are already tile images: their B tiles load straight from the block, with the
//   L1 prefetch alone. Session 30, 2 threads, 64 KiB blocks from memory: 31.5 / 29.3 / 29.2 / 22.9 GB/s
//   at 4 / 16 / 32 / 64 tokens against 28.6 / 26.4 / 23.9 / 20.1 when copied through an L1 image
//   (with the L2 prefetch as well: 31.3 / 28.2 / 24.7 / 21.5).
// - 2-16 tokens (stream_amx_t): C0 / C1 and A4 / A7 of m rows, B5 / B6 of 16 k pairs. Sets alternate by
//   step so that a tile is not reloaded while a product still reads it.
// - 17-64 tokens per pass (stream_wide_t): 2-4 row groups of 16 (the last of r rows): C0..C3 one group
//   each, A4 the full groups' rows, A7 the last group's, B5 / B6 alternating by step; longer calls take
//   passes of 64 tokens, each decoding the block again (from L2).
// - K groups: a group of 16 pairs (mxfp4) gets fresh C tiles each step, stored and scaled into the
//   accumulators by its group scale; longer groups (fp8 blocks) and ungrouped formats accumulate their
//   steps in the C tiles.
// - nvfp4's 8-pair groups would need half tiles, so its decoder applies the e4m3 group scale instead:
//   each e2m1 value (2 significant bits) times its lane's scale (4 significant bits, / 256) is exact in
//   bf16 (8 bits; exponents within the normal range), so f32 multiplies whose low halves are zero give
//   the bf16 words directly; the global scale multiplies the result. That is dequantize_row's order,
//   (e2m1 x block) x global with one rounding.
// - mxfp4 the same way in passes of 17-64 tokens, where BlockRef::e8m0_fold says every scale keeps
//   e2m1 x 2^(v - 127) a normal number (prepack checks the stack once): the product is exact, the C
//   tiles accumulate all of K, and the per-step tile store and fold of every token row go away. Fewer
//   tokens, and other stacks, keep the fold (stream_amx_any_m).
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/kernels/amx_tile_config.hpp"
#include "backends/cpu/kernels/avx512_decode.hpp"
#include "backends/cpu/kernels/bf16_decode.hpp"
#include "backends/cpu/kernels/kernels.hpp"

namespace moerun::cpu::kernels {
namespace {

// The tile configuration is loaded once per thread until amx_release or until the thread switches
// between the tile kernels and the decode stream (LDTILECFG costs as much as several tile dot products,
// and a forward calls a kernel once per N-block or pair). t_config: 0 none, 16 the tile kernels',
// 100 + m the decode stream's for m tokens.
thread_local int t_config = 0;

void load_config() {
  if (t_config == 16) return;
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  load_tile_config(c);
  t_config = 16;
}

void load_stream_config(int m) {
  if (t_config == 100 + m) return;
  TileConfig c;
  for (int t = 0; t < 8; ++t) {  // C0, C1, A4, A7: m rows; B5, B6: 16 k pairs; 2, 3 unused
    c.colsb[t] = t == 2 || t == 3 ? 0 : 64;
    c.rows[t] = static_cast<uint8_t>(t == 5 || t == 6 ? 16 : t == 2 || t == 3 ? 0 : m);
  }
  load_tile_config(c);
  t_config = 100 + m;
}

// The wide decode stream's, for a pass of mp = 17-64 tokens in ng = 2-4 row groups (the last of r rows):
// C0 .. C(ng-1) one group each (the last r rows), A4 a full group, A7 the last, B5 / B6 16 k pairs.
void load_wide_config(int mp) {
  if (t_config == 100 + mp) return;
  const int ng = (mp + 15) / 16, r = mp - 16 * (ng - 1);
  TileConfig c;
  for (int t = 0; t < 4; ++t) {
    c.colsb[t] = t < ng ? 64 : 0;
    c.rows[t] = static_cast<uint8_t>(t < ng - 1 ? 16 : t == ng - 1 ? r : 0);
  }
  for (int t = 4; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = static_cast<uint8_t>(t == 7 ? r : 16);
  }
  load_tile_config(c);
  t_config = 100 + mp;
}

// One k pair's decoded words w times the lane scales s (dword l = lane l), stored as bf16 words. Only
// for exact products (NOTES): their low 16 bits are zero, so the high halves are the bf16 values.
[[gnu::always_inline]] inline void store_scaled(uint16_t* out, __m512i w, __m512 s) {
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m512 ev = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), s);  // k even
  const __m512 od = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(w, hi)), s);   // k odd
  _mm512_store_si512(out, _mm512_or_si512(_mm512_castps_si512(od), _mm512_srli_epi32(_mm512_castps_si512(ev), 16)));
}

// k pairs [p, p + 16) of block b as one B tile image (1 KiB, 64-byte rows). nvfp4, and mxfp4 with
// kFold (BlockRef::e8m0_fold), come with their group scales multiplied in (NOTES).
template <PackFmt F, bool kFold>
[[gnu::always_inline]] inline void decode_tile(const Dec<F>& dec, const BlockRef& b, int64_t p, uint16_t* out) {
  // the scales of the tile's pairs: nvfp4 two groups of 8 pairs, folded mxfp4 one group of 16
  __m512 s0 = _mm512_set1_ps(1.0f), s1 = s0;
  if constexpr (F == PackFmt::kNvfp4) {
    s0 = e4m3x16(ld128(b.gscale + (p / 8) * 16));
    s1 = e4m3x16(ld128(b.gscale + (p / 8 + 1) * 16));
  } else if constexpr (kFold) {
    static_assert(F == PackFmt::kMxfp4);
    s0 = s1 = group_scale<PackFmt::kMxfp4>(b.gscale, p / 16, 1.0f);
  }
#pragma GCC unroll 4
  for (int q = 0; q < 16; q += 4) {
    __m512i w[4];
    decode_quad(dec, b.data, p + q, w[0], w[1], w[2], w[3]);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      if constexpr (F == PackFmt::kNvfp4 || kFold) store_scaled(out + (q + j) * 32, w[j], q < 8 ? s0 : s1);
      else _mm512_store_si512(out + (q + j) * 32, w[j]);
    }
  }
}

// The B tile of stream step j (k pairs [16 j, 16 j + 16)), its weights prefetched ahead first: decoded
// into img, or for bf16 weights, which already are the tile image, the block's own 1 KiB (NOTES).
template <PackFmt F, bool kFold>
[[gnu::always_inline]] inline const uint16_t* step_tile(const Dec<F>& dec, const BlockRef& b, int64_t j, uint16_t* img) {
  prefetch_pair<16 * 2 * bytes_per_k(F)>(b, j);
  if constexpr (F == PackFmt::kBF16) {
    (void)dec;
    (void)img;
    return reinterpret_cast<const uint16_t*>(b.data) + j * 512;
  } else {
    decode_tile<F, kFold>(dec, b, j * 16, img);
    return img;
  }
}

// The K groups the stream folds after its C tiles: nvfp4's scales (and folded mxfp4 ones) are inside the
// decoded tiles.
template <PackFmt F, bool kFold>
constexpr int stream_group() {
  return F == PackFmt::kNvfp4 || kFold ? 0 : group_size(F);
}

// acc = the m rows of a stored C tile (nvfp4: times the global scale, which decode_tile leaves out).
template <PackFmt F>
[[gnu::always_inline]] inline void finish_rows(const float* c, int m, const BlockRef& b, float* acc) {
  if constexpr (F == PackFmt::kNvfp4) {
    const __m512 g = _mm512_set1_ps(b.gmul);
    for (int t = 0; t < m; ++t) _mm512_storeu_ps(acc + t * 16, _mm512_mul_ps(_mm512_load_ps(c + t * 16), g));
  } else {
    (void)b;
    std::memcpy(acc, c, static_cast<size_t>(m) * 16 * sizeof(float));
  }
}

// acc[t][16] += c[t][16] * scale for the m token rows of a stored C tile.
[[gnu::always_inline]] inline void fold_rows(const float* c, __m512 scale, int m, float* acc) {
  for (int t = 0; t < m; ++t)
    _mm512_storeu_ps(acc + t * 16, _mm512_fmadd_ps(_mm512_load_ps(c + t * 16), scale, _mm512_loadu_ps(acc + t * 16)));
}

template <PackFmt F, bool kFold>
void stream_amx_t(const BlockRef& b, const uint16_t* xb, int64_t ldx, int m, float* acc) {
  load_stream_config(m);
  const Dec<F> dec;
  constexpr int G = stream_group<F, kFold>();
  const int64_t steps = b.kp / 32;                     // kp is a multiple of 32 (kKAlign)
  const size_t stride = static_cast<size_t>(ldx) * 2;
  alignas(64) uint16_t bt[2][16 * 32];
  alignas(64) float ct[2][16 * 16];
  // Step j: B tile from pairs [16 j, 16 j + 16), A tile = k [32 j, 32 j + 32) of the m tokens.
  auto load = [&](int64_t j, uint16_t* img) { return step_tile<F, kFold>(dec, b, j, img); };
  if constexpr (G == 32) {
    // One C tile per group (= step), alternating C0 / C1 with the A and B sets.
    std::memset(acc, 0, static_cast<size_t>(m) * 16 * sizeof(float));
    int64_t j = 0;
    for (; j + 2 <= steps; j += 2) {
      _tile_loadd(5, load(j, bt[0]), 64);
      _tile_loadd(4, xb + j * 32, stride);
      _tile_zero(0);
      _tile_dpbf16ps(0, 4, 5);
      _tile_loadd(6, load(j + 1, bt[1]), 64);
      _tile_loadd(7, xb + (j + 1) * 32, stride);
      _tile_zero(1);
      _tile_dpbf16ps(1, 7, 6);
      _tile_stored(0, ct[0], 64);
      fold_rows(ct[0], group_scale<F>(b.gscale, j, b.gmul), m, acc);
      _tile_stored(1, ct[1], 64);
      fold_rows(ct[1], group_scale<F>(b.gscale, j + 1, b.gmul), m, acc);
    }
    if (j < steps) {
      _tile_loadd(5, load(j, bt[0]), 64);
      _tile_loadd(4, xb + j * 32, stride);
      _tile_zero(0);
      _tile_dpbf16ps(0, 4, 5);
      _tile_stored(0, ct[0], 64);
      fold_rows(ct[0], group_scale<F>(b.gscale, j, b.gmul), m, acc);
    }
  } else {
    // C0 accumulates the steps of a group (all of K without groups); A / B sets alternate by step.
    const int64_t gsteps = G ? G / 32 : steps;  // fp8 blocks: 128 k = 4 steps
    if constexpr (G != 0) std::memset(acc, 0, static_cast<size_t>(m) * 16 * sizeof(float));
    for (int64_t g0 = 0; g0 < steps; g0 += gsteps) {
      const int64_t g1 = g0 + gsteps < steps ? g0 + gsteps : steps;
      _tile_zero(0);
      int64_t j = g0;
      for (; j + 2 <= g1; j += 2) {
        _tile_loadd(5, load(j, bt[0]), 64);
        _tile_loadd(4, xb + j * 32, stride);
        _tile_dpbf16ps(0, 4, 5);
        _tile_loadd(6, load(j + 1, bt[1]), 64);
        _tile_loadd(7, xb + (j + 1) * 32, stride);
        _tile_dpbf16ps(0, 7, 6);
      }
      if (j < g1) {
        _tile_loadd(5, load(j, bt[0]), 64);
        _tile_loadd(4, xb + j * 32, stride);
        _tile_dpbf16ps(0, 4, 5);
      }
      _tile_stored(0, ct[0], 64);
      if constexpr (G != 0) {
        fold_rows(ct[0], group_scale<F>(b.gscale, g0 / gsteps, b.gmul), m, acc);
      } else {
        finish_rows<F>(ct[0], m, b, acc);
      }
    }
  }
}

// ---- the wide decode stream: NG row groups multiply each decoded B tile ----------------------------
template <int NG>
[[gnu::always_inline]] inline void wide_zero() {
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (NG > 2) _tile_zero(2);
  if constexpr (NG > 3) _tile_zero(3);
}
// C_q += A(rows 16 q ..) B for every group q, B in tile 5 or 6 (kB6); x points at the step's first k
// of token 0. (The tile intrinsics paste their operands into the instruction text, so the tile numbers
// are literals, not template arguments.)
#define MOERUN_WIDE_PRODUCTS(B)                 \
  _tile_loadd(4, x, stride);                    \
  _tile_dpbf16ps(0, 4, B);                      \
  if constexpr (NG > 2) {                       \
    _tile_loadd(4, x + 16 * ldx, stride);       \
    _tile_dpbf16ps(1, 4, B);                    \
  }                                             \
  if constexpr (NG > 3) {                       \
    _tile_loadd(4, x + 32 * ldx, stride);       \
    _tile_dpbf16ps(2, 4, B);                    \
  }                                             \
  _tile_loadd(7, x + (NG - 1) * 16 * ldx, stride); \
  if constexpr (NG == 2) _tile_dpbf16ps(1, 7, B);  \
  else if constexpr (NG == 3) _tile_dpbf16ps(2, 7, B); \
  else _tile_dpbf16ps(3, 7, B);
template <int NG, bool kB6>
[[gnu::always_inline]] inline void wide_products(const uint16_t* x, int64_t ldx, size_t stride) {
  if constexpr (kB6) {
    MOERUN_WIDE_PRODUCTS(6)
  } else {
    MOERUN_WIDE_PRODUCTS(5)
  }
}
#undef MOERUN_WIDE_PRODUCTS
// The groups' C tiles as rows [0, mp) of ct[64][16] (group q at row 16 q).
template <int NG>
[[gnu::always_inline]] inline void wide_store(float* ct) {
  _tile_stored(0, ct, 64);
  _tile_stored(1, ct + 256, 64);
  if constexpr (NG > 2) _tile_stored(2, ct + 512, 64);
  if constexpr (NG > 3) _tile_stored(3, ct + 768, 64);
}

// One pass of mp = 16 (NG - 1) + 1 .. 16 NG tokens (17-64): each B tile is decoded once into L1 and
// multiplied with all NG groups' A tiles; a K group (or all of K) accumulates in the C tiles, which are
// then stored and folded (scaled) into acc like stream_amx_t's.
template <PackFmt F, int NG, bool kFold>
void stream_wide_t(const BlockRef& b, const uint16_t* xb, int64_t ldx, int mp, float* acc) {
  static_assert(NG >= 2 && NG <= 4);
  load_wide_config(mp);
  const Dec<F> dec;
  constexpr int G = stream_group<F, kFold>();
  static_assert(G % 32 == 0, "a K group is a whole number of 16-pair steps");
  const int64_t steps = b.kp / 32;
  const int64_t gsteps = G ? G / 32 : steps;
  const size_t stride = static_cast<size_t>(ldx) * 2;
  alignas(64) uint16_t bt[2][16 * 32];
  alignas(64) float ct[64 * 16];
  auto load = [&](int64_t j, uint16_t* img) { return step_tile<F, kFold>(dec, b, j, img); };
  if constexpr (G != 0) std::memset(acc, 0, static_cast<size_t>(mp) * 16 * sizeof(float));
  for (int64_t g0 = 0; g0 < steps; g0 += gsteps) {
    const int64_t g1 = g0 + gsteps < steps ? g0 + gsteps : steps;
    wide_zero<NG>();
    int64_t j = g0;
    for (; j + 2 <= g1; j += 2) {
      _tile_loadd(5, load(j, bt[0]), 64);
      wide_products<NG, false>(xb + j * 32, ldx, stride);
      _tile_loadd(6, load(j + 1, bt[1]), 64);
      wide_products<NG, true>(xb + (j + 1) * 32, ldx, stride);
    }
    if (j < g1) {
      _tile_loadd(5, load(j, bt[0]), 64);
      wide_products<NG, false>(xb + j * 32, ldx, stride);
    }
    wide_store<NG>(ct);
    if constexpr (G != 0) fold_rows(ct, group_scale<F>(b.gscale, g0 / gsteps, b.gmul), mp, acc);
    else finish_rows<F>(ct, mp, b, acc);
  }
}

// kFold (mxfp4 scales multiplied into the tiles) only for passes of 17 or more tokens: per 16-pair step
// the scaled decode costs ~80 more vector ops, the fold it saves ~3 per token row. On the H200 host's
// Xeon (gpt-oss-20b mxfp4, one process) folding gained 1.32x at 32 tokens per expert, tied at 16 and
// lost 4-5% at 2 and 8.
template <PackFmt F, bool kFold = false>
void stream_amx_any_m(const BlockRef& b, const uint16_t* xb, int64_t ldx, int m, float* acc) {
  // Passes of 64 tokens, then the rest (a rest of up to 16 takes the one-group kernel).
  for (int i = 0; i < m; i += 64) {
    const int mp = m - i < 64 ? m - i : 64;
    const uint16_t* x = xb + static_cast<int64_t>(i) * ldx;
    float* a = acc + static_cast<int64_t>(i) * 16;
    switch ((mp + 15) / 16) {
      case 4: stream_wide_t<F, 4, kFold>(b, x, ldx, mp, a); break;
      case 3: stream_wide_t<F, 3, kFold>(b, x, ldx, mp, a); break;
      case 2: stream_wide_t<F, 2, kFold>(b, x, ldx, mp, a); break;
      default: stream_amx_t<F, false>(b, x, ldx, mp, a); break;
    }
  }
}

// `step` (every tile kernel): the pass's next_step (kernels.hpp: amx_prefetch_offset), 0 for passes
// that are not a call's last.
template <int NT>
void tiles_t(const uint16_t* panel, int64_t kp, const uint16_t* xb, int64_t ldx, float* out /*[NT*16][16]*/,
             int prefetch, int64_t step) {
  _tile_zero(0);
  if constexpr (NT > 1) _tile_zero(1);
  if constexpr (NT > 2) _tile_zero(2);
  if constexpr (NT > 3) _tile_zero(3);
  const size_t stride = static_cast<size_t>(ldx) * 2;
  const uintptr_t pf = reinterpret_cast<uintptr_t>(panel);  // addresses as integers: they may pass the end
  for (int64_t k = 0; k < kp; k += 32) {
    if (prefetch > 0)  // the B tile `prefetch` bytes ahead: 1 KiB = 16 lines per k step
      for (int l = 0; l < 1024; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(pf + amx_prefetch_offset(kp, prefetch, k, l, step)), _MM_HINT_T0);
    _tile_loadd(5, panel + k * 16, 64);
    _tile_loadd(4, xb + k, stride);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (NT > 1) { _tile_loadd(4, xb + 16 * ldx + k, stride); _tile_dpbf16ps(1, 4, 5); }
    if constexpr (NT > 2) { _tile_loadd(4, xb + 32 * ldx + k, stride); _tile_dpbf16ps(2, 4, 5); }
    if constexpr (NT > 3) { _tile_loadd(4, xb + 48 * ldx + k, stride); _tile_dpbf16ps(3, 4, 5); }
  }
  _tile_stored(0, out, 64);
  if constexpr (NT > 1) _tile_stored(1, out + 256, 64);
  if constexpr (NT > 2) _tile_stored(2, out + 512, 64);
  if constexpr (NT > 3) _tile_stored(3, out + 768, 64);
}

// Two N-blocks, one pass of up to 32 tokens (kTwoA: 17-32 rows, A tiles 4 and 5; else 1-16 rows, A
// tile 4). out0 / out1 receive [16 or 32][16] floats of block 0 / block 1.
template <bool kTwoA>
void tiles2_t(const uint16_t* panel0, const uint16_t* panel1, int64_t kp, const uint16_t* xb, int64_t ldx,
              float* out0, float* out1, int prefetch, int64_t step) {
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (kTwoA) {
    _tile_zero(2);
    _tile_zero(3);
  }
  const size_t stride = static_cast<size_t>(ldx) * 2;
  // `prefetch` bytes ahead in each panel (may pass the end: prefetches never fault)
  const uintptr_t pf0 = reinterpret_cast<uintptr_t>(panel0);
  const uintptr_t pf1 = reinterpret_cast<uintptr_t>(panel1);
  for (int64_t k = 0; k < kp; k += 32) {
    if (prefetch > 0)
      for (int l = 0; l < 1024; l += 64) {
        const auto o = static_cast<uintptr_t>(amx_prefetch_offset(kp, prefetch, k, l, step));
        _mm_prefetch(reinterpret_cast<const char*>(pf0 + o), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(pf1 + o), _MM_HINT_T0);
      }
    _tile_loadd(6, panel0 + k * 16, 64);
    _tile_loadd(7, panel1 + k * 16, 64);
    _tile_loadd(4, xb + k, stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (kTwoA) {
      _tile_loadd(5, xb + 16 * ldx + k, stride);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, out0, 64);
  _tile_stored(1, out1, 64);
  if constexpr (kTwoA) {
    _tile_stored(2, out0 + 256, 64);
    _tile_stored(3, out1 + 256, 64);
  }
}

}  // namespace

namespace {

// Interleave for vnni_pair: word 2l of the result = word l (k even of lane l), word 2l + 1 = word 16 + l.
inline __m512i vnni_interleave() {
  return _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20,
                          4, 19, 3, 18, 2, 17, 1, 16, 0);
}
// One k pair's 16 lanes of k even (we) and k odd (wo), rounded to bf16 (nearest even), as 32 VNNI words.
[[gnu::always_inline]] inline void vnni_pair(__m512 we, __m512 wo, __m512i idx, uint16_t* out) {
  const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(wo, we);  // [0,16) = even, [16,32) = odd
  _mm512_storeu_si512(out, _mm512_permutexvar_epi16(idx, both));
}

// dequant_panel_avx512's values (for_each_panel_pair), rounded to bf16 as they are decoded instead of
// stored as an f32 panel first.
template <PackFmt F>
void panel_vnni_t(const BlockRef& b, uint16_t* out) {
  const __m512i idx = vnni_interleave();
  for_each_panel_pair<F>(b, [out, idx](int64_t p, __m512 we, __m512 wo) { vnni_pair(we, wo, idx, out + p * 32); });
}

}  // namespace

void panel_to_bf16_vnni(const float* panel, int64_t kp, uint16_t* out) {
  const __m512i idx = vnni_interleave();
  for (int64_t p = 0; p < kp / 2; ++p)
    vnni_pair(_mm512_loadu_ps(panel + p * 32), _mm512_loadu_ps(panel + p * 32 + 16), idx, out + p * 32);
}

void panel_bf16_vnni(const BlockRef& b, uint16_t* out) {
  switch (b.fmt) {
    case PackFmt::kF32: panel_vnni_t<PackFmt::kF32>(b, out); break;
    case PackFmt::kF16: panel_vnni_t<PackFmt::kF16>(b, out); break;
    case PackFmt::kBF16: std::memcpy(out, b.data, static_cast<size_t>(b.kp) * 16 * sizeof(uint16_t)); break;
    case PackFmt::kFp8: panel_vnni_t<PackFmt::kFp8>(b, out); break;
    case PackFmt::kFp8Block: panel_vnni_t<PackFmt::kFp8Block>(b, out); break;
    case PackFmt::kInt8: panel_vnni_t<PackFmt::kInt8>(b, out); break;
    case PackFmt::kMxfp4: panel_vnni_t<PackFmt::kMxfp4>(b, out); break;
    case PackFmt::kNvfp4: panel_vnni_t<PackFmt::kNvfp4>(b, out); break;
  }
}

void f32_to_bf16_row(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256i v = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i));
    _mm256_mask_storeu_epi16(out + i, m, v);
  }
}

void tile_amx(const uint16_t* panel, int64_t kp, const uint16_t* xb, int64_t ldx, int m, float* acc,
              int prefetch, int64_t next_step) {
  load_config();
  alignas(64) float out[64 * 16];
  for (int i = 0; i < m; i += 64) {
    const int rows = m - i < 64 ? m - i : 64;
    const int nt = (rows + 15) / 16;
    const uint16_t* x = xb + static_cast<int64_t>(i) * ldx;
    // Only the last pass's prefetches run on into the next call; earlier ones run straight past the
    // panel's end (into the block after it), since the next pass rereads this panel from L2.
    const int64_t step = i + 64 >= m ? next_step : 0;
    switch (nt) {
      case 4: tiles_t<4>(panel, kp, x, ldx, out, prefetch, step); break;
      case 3: tiles_t<3>(panel, kp, x, ldx, out, prefetch, step); break;
      case 2: tiles_t<2>(panel, kp, x, ldx, out, prefetch, step); break;
      default: tiles_t<1>(panel, kp, x, ldx, out, prefetch, step); break;
    }
    std::memcpy(acc + static_cast<int64_t>(i) * 16, out, static_cast<size_t>(rows) * 16 * sizeof(float));
  }
}

void tile_amx2(const uint16_t* panel0, const uint16_t* panel1, int64_t kp, const uint16_t* xb, int64_t ldx, int m,
               float* acc0, float* acc1, int prefetch, int64_t next_step) {
  load_config();
  alignas(64) float out0[32 * 16], out1[32 * 16];
  for (int i = 0; i < m; i += 32) {
    const int rows = m - i < 32 ? m - i : 32;
    const uint16_t* x = xb + static_cast<int64_t>(i) * ldx;
    const int64_t step = i + 32 >= m ? next_step : 0;  // (the last pass only: tile_amx)
    if (rows > 16) tiles2_t<true>(panel0, panel1, kp, x, ldx, out0, out1, prefetch, step);
    else tiles2_t<false>(panel0, panel1, kp, x, ldx, out0, out1, prefetch, step);
    const size_t bytes = static_cast<size_t>(rows) * 16 * sizeof(float);
    std::memcpy(acc0 + static_cast<int64_t>(i) * 16, out0, bytes);
    std::memcpy(acc1 + static_cast<int64_t>(i) * 16, out1, bytes);
  }
}

void tile_amx4(const uint16_t* const panels[4], int64_t kp, const uint16_t* xb, int64_t ldx, int m, float* acc,
               int64_t acc_stride, int prefetch, int64_t next_step) {
  load_config();
  alignas(64) float out[4][16 * 16];
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const size_t stride = static_cast<size_t>(ldx) * 2;
  // `prefetch` bytes ahead in each panel, as integers (may pass the end: prefetches never fault)
  uintptr_t pf[4];
  for (int q = 0; q < 4; ++q) pf[q] = reinterpret_cast<uintptr_t>(panels[q]);
  for (int64_t k = 0; k < kp; k += 32) {
    if (prefetch > 0)
      for (int q = 0; q < 4; ++q)
        for (int l = 0; l < 1024; l += 64)
          _mm_prefetch(reinterpret_cast<const char*>(pf[q] + static_cast<uintptr_t>(
                                                                 amx_prefetch_offset(kp, prefetch, k, l, next_step))),
                       _MM_HINT_T0);
    // One A tile for four products; the B tiles rotate over 5, 6, 7, so that a panel's load waits only
    // for the product two before it.
    _tile_loadd(4, xb + k, stride);
    _tile_loadd(5, panels[0] + k * 16, 64);
    _tile_dpbf16ps(0, 4, 5);
    _tile_loadd(6, panels[1] + k * 16, 64);
    _tile_dpbf16ps(1, 4, 6);
    _tile_loadd(7, panels[2] + k * 16, 64);
    _tile_dpbf16ps(2, 4, 7);
    _tile_loadd(5, panels[3] + k * 16, 64);
    _tile_dpbf16ps(3, 4, 5);
  }
  _tile_stored(0, out[0], 64);
  _tile_stored(1, out[1], 64);
  _tile_stored(2, out[2], 64);
  _tile_stored(3, out[3], 64);
  for (int q = 0; q < 4; ++q)
    std::memcpy(acc + q * acc_stride, out[q], static_cast<size_t>(m) * 16 * sizeof(float));
}

void stream_amx_bf16(const BlockRef& b, const uint16_t* xb, int64_t ldx, int m, float* acc) {
  if (m >= 2) {  // one token: the VDPBF16PS kernel measured faster (see NOTES)
    switch (b.fmt) {
      case PackFmt::kMxfp4:
        if (b.e8m0_fold) stream_amx_any_m<PackFmt::kMxfp4, true>(b, xb, ldx, m, acc);
        else stream_amx_any_m<PackFmt::kMxfp4, false>(b, xb, ldx, m, acc);
        return;
      case PackFmt::kFp8: stream_amx_any_m<PackFmt::kFp8>(b, xb, ldx, m, acc); return;
      case PackFmt::kFp8Block: stream_amx_any_m<PackFmt::kFp8Block>(b, xb, ldx, m, acc); return;
      case PackFmt::kNvfp4: stream_amx_any_m<PackFmt::kNvfp4>(b, xb, ldx, m, acc); return;
      case PackFmt::kBF16: {  // no L2 prefetch ahead of tile loads that read the block itself (NOTES)
        BlockRef direct = b;
        direct.prefetch_l2 = 0;
        stream_amx_any_m<PackFmt::kBF16>(direct, xb, ldx, m, acc);
        return;
      }
      default: break;
    }
  }
  stream_avx512bf16(b, xb, ldx, m, acc);
}

void amx_release() {
  _tile_release();
  t_config = 0;
}

}  // namespace moerun::cpu::kernels
