// cpu/kernels/gemm_avx512bf16.cpp — the AVX512-BF16 streaming kernel (kernels.hpp): bf16 activations,
// weights decoded straight to bf16 VNNI pairs with integer shuffles, one VDPBF16PS per k pair (32
// weights) and token. Compiled with AVX-512F/BW/VL/DQ + AVX512-BF16 + AVX512-VBMI; reached only at
// CpuIsa::kAvx512Bf16 and above (isa.cpp requires VBMI for those levels).
//
// NOTES
// - VDPBF16PS treats denormal bf16 inputs as zero and flushes denormal results, whatever MXCSR says. So
//   every weight becomes the bf16 of its true value (fp8: value / 256, the convention of the other
//   kernels, which the packed fp8 scales undo): those are zero or normal bf16 numbers, the e4m3
//   subnormals included (m * 2^-17 after the / 256), and their products with normal activations stay
//   far from the f32 denormal range.
// - A product of two bf16 numbers is exact in f32. Against stream_avx512 on the same bf16-rounded x the
//   results differ only in the order of the f32 additions and in that a K group's scale multiplies the
//   group's sum (one FMA per group and token) instead of every weight; for nvfp4 that is the e4m3
//   scale alone, two groups' converted at once, and the global scale multiplies the finished sums.
// - Word order of a k pair p (what VDPBF16PS pairs up): word 2l = k 2p of lane l, word 2l + 1 = k 2p + 1
//   of lane l; the x operand is the token's (x[2p], x[2p + 1]) bf16 pair broadcast as one dword.
// - fp8 e4m3, per 2 k pairs (one 64-byte load of VNNI words, kernels.hpp): six ops per pair
//   (fp8_word_bf16 in avx512_decode.hpp, two of them on the shuffle port). The per-k layout before
//   needed a vpermb per pair to spread the codes over words first: 2.52-2.58 against 2.12-2.29 ns per
//   pair on the H200 host's Xeon (one thread, one token, in L2; the session-8 probe).
//   Only zero and subnormal codes (exponent field 0) need the table. Quantized weights rarely have
//   them (a code is subnormal below 2^-6 of its scale unit, about 1 weight in 10^4), so a quad whose
//   128 codes are all normal, tested with two vptestnmb, takes fp8_word_bf16_normal: bitwise the same
//   words without the table. First 3.5 ops per pair (a logical shift to put the magnitude at bits 4-10,
//   a vpternlog for mask and bias, a second shift and vpternlog for the sign): on this development
//   machine's Xeon (one token, cached, one thread) 1.47 -> 1.17 ns per pair; in the layer,
//   qwen3-30b-a3b fp8-block at 2 threads, M = 1 1.47-1.54 -> 1.34-1.44 ms and M = 4 1.08x. Now 2.5
//   (session 18): an arithmetic shift right by 4 of a word whose high byte is the code puts the
//   magnitude at 4-10 and copies the sign into 11-15, so one vpternlog keeps 4-10 and 15 and ORs the
//   bias (the low byte is shifted up by 8 first). Cached 1.24-1.35 -> 1.16-1.20 ns per pair; in the
//   layer at one token it ties (1.42-1.51 ms either way, A/B): the stream reads 13.2 GB/s a thread
//   against bf16's 15.2 there, with the decode now about half of a pair's read time. Now 2 (session 50):
//   the low byte's word comes from one vpmaddubsw (16 x the signed code: what the shift up by 8 and
//   the arithmetic shift by 4 gave), so a 64-byte load of two pairs takes 4 decode ops, not 5. It
//   ties: in the layer, qwen3-30b-a3b fp8-block at one token alternated with the shift form, 1.003x on
//   the GPU host's Xeon (1.001x at 4 threads) and 0.994x on the Zen 4. A probe of the one-token pair
//   stream (bench/results/2026-12-07_s50_gpu/fp8_decode_probe.cpp; 1 GiB, alternated) says why: on
//   that Xeon the shift decode read 26.5 GB/s at 2 threads, no decode at all 27.0 and bf16 27.1, so
//   the decode costs the stream 2-3% there (and nothing on the Zen 4), and the layer's gap to bf16's
//   byte rate (fp8-block 26.2 against 28.4 GB/s) lies mostly outside the kernel's loop. Part of it was
//   bytes the byte rate did not count: the block scales, one f32 per lane and K group (3% of the
//   codes), now a few slots a block (kernels.hpp, group_scales_bytes; 1.7-2.1% faster, session 51).
// - e2m1, per 4 k pairs (7 ops): one 64-byte load of the quad (kernels.hpp), then per pair a vpsrlw by 0,
//   4, 8 or 12 and a vpermw mapping each word's low nibble to bf16 (every e2m1 value is a bf16 value;
//   the 32-entry table repeats the 16, so bit 4 of the index does not matter). The pair-major layout
//   before needed a vpermb to spread the nibbles over words first: on the H200 host's Xeon (one thread,
//   one token, in L2) 1.74-1.89 against 1.35-1.43 ns per pair for the VNNI words.
// - bf16 weights: the packed block already is in that word order.
// - f32, f16 and int8 weights are not bf16-exact (int8 is, but its decode costs more than it saves):
//   they take an f32 FMA loop here (x widened from bf16, exact), so the kernel accepts every format;
//   the runner keeps them on stream_avx512 (kernels::bf16_stream_native).
// - Tokens run in register groups (every weight vector decoded once per group, each group one pass
//   over the block). Every K group (8, 16 or 64 k pairs; K is padded to 16 pairs) is a multiple of the
//   4-pair step.
// - Token groups (session 39, on an AMD Zen 4, where VDPBF16PS issues once a cycle with a latency of
//   about 6 and the AVX512-BF16 level streams every call: isa.hpp kBf16DotFullRate):
//   - Chains. A group of 3-5 tokens had one accumulator chain a token, so it waited on the latency:
//     3 tokens 118 GFLOP/s a core against 227 at 8 (bf16, block in L2, cpu_kernel_bench). Two chains a
//     token: 197-234 at 3-5 tokens (bf16 1.19-1.67x, fp8-block 1.12-1.45x, mxfp4 1.06-1.19x). nvfp4
//     keeps one: its 8-pair K groups fold the chains twice as often, and it lost 5% at 4-5 tokens.
//   - Up to 16 tokens a group for bf16 and fp8 (max_group_tokens), split evenly (17 = 9 + 8, not 8 + 8
//     + 1). A block's first pass streams it from memory at a core's bandwidth, the later ones read it
//     from L2; one pass for 9-16 tokens keeps the dots busy under the stream instead. From memory, one
//     core: bf16 12 tokens 1.21-1.36x, 16 tokens 1.07-1.10x; fp8-block 1.09-1.11x / 1.01x. In L2 a 16-token
//     group is 4% slower for bf16 (the 16 row pointers no longer fit the general registers) and even
//     for fp8-block. Past 8 tokens the K groups' sums live in acc, not registers; for the 4-bit formats
//     (K groups of 16 and 32 k) that cost 10-20%, so they keep groups of 8.
//   - In the layer, 2 threads, alternated with MOERUN_CPU_DOT_TOKENS=8 in one process: qwen3-30b-a3b
//     bf16 M = 256 57.1 against 65.5 ms (1.15x), M = 64 1.02x, M = 1024 1.02x; fp8-block M = 256 1.06x,
//     M = 1024 1.03x; deepseek-v2-lite bf16 M = 256 1.07x, M = 1024 0.99x
//     (bench/results/2026-12-06_s39_dev-epyc/).
//   - Measuring this needs activation rows that do not share L1 sets: at K = 2048 bf16 rows exactly
//     4 KiB apart all map to one set, and past 8 tokens a group's rows evicted each other (16 tokens
//     2.4x slower). The runner's rows are padded (kRowPad); cpu_kernel_bench's now are too.
// - Stream pairs (stream2_avx512bf16, session 37): at one token a core reading one block at a time does
//   not keep memory busy once the decode takes a share of each line's time. Alone, one thread, from
//   memory (2026-12-05_s37_dev-xeon): fp8 13.3 GB/s against bf16's 15.4; with the decode left out
//   14.3-15.0; with the normal-code check left out 12.4 (fewer ops, slower: the stream is sensitive to
//   the loop's shape, which prefetch distances of 128 B to 2 KiB did not change). Two blocks far apart
//   interleaved step by step: fp8 14.3-14.8, mxfp4 / nvfp4 13.1-13.8 against 11.4-11.8, bf16 +1-2%.
//   Adjacent blocks gain little: each stream's prefetch then runs into the block the other one reads.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backends/cpu/kernels/act_avx512.hpp"
#include "backends/cpu/kernels/avx512_decode.hpp"
#include "backends/cpu/kernels/bf16_decode.hpp"
#include "backends/cpu/kernels/kernels.hpp"

namespace moerun::cpu::kernels {
namespace {

// ---- the bf16 dot-product kernel ---------------------------------------------------------------------
inline int32_t pair_of(const uint16_t* x, int64_t p) {
  int32_t v;
  std::memcpy(&v, x + 2 * p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline __m512 dot(__m512 acc, __m512i w, const uint16_t* x, int64_t p) {
  return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)_mm512_set1_epi32(pair_of(x, p)));
}

template <int I>
[[gnu::always_inline]] inline __m512i pick4(__m512i w0, __m512i w1, __m512i w2, __m512i w3) {
  if constexpr (I == 0) return w0;
  else if constexpr (I == 1) return w1;
  else if constexpr (I == 2) return w2;
  else return w3;
}
// Accumulators are named variables (GCC keeps arrays of vectors in memory; see gemm_avx2.cpp): slots
// a0..a15, passed around as MOERUN_A16.
#define MOERUN_S8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define MOERUN_S16(X) MOERUN_S8(X) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define MOERUN_A16 a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15
#define MOERUN_A16_PARAMS                                                                                    \
  __m512 a0, __m512 a1, __m512 a2, __m512 a3, __m512 a4, __m512 a5, __m512 a6, __m512 a7, __m512 a8, __m512 a9, \
      __m512 a10, __m512 a11, __m512 a12, __m512 a13, __m512 a14, __m512 a15
template <int I>
[[gnu::always_inline]] inline __m512 pick16(MOERUN_A16_PARAMS) {
  static_assert(I >= 0 && I < 16);
#define PICK(i) if constexpr (I == (i)) return a##i;
  MOERUN_S16(PICK)
#undef PICK
  __builtin_unreachable();
}
// Sum of token T's NA accumulator chains (slots T * NA .. T * NA + NA - 1).
template <int NA, int T>
[[gnu::always_inline]] inline __m512 token_sum(MOERUN_A16_PARAMS) {
  if constexpr (NA == 1) {
    return pick16<T>(MOERUN_A16);
  } else if constexpr (NA == 2) {
    return _mm512_add_ps(pick16<2 * T>(MOERUN_A16), pick16<2 * T + 1>(MOERUN_A16));
  } else {
    static_assert(NA == 4);
    return _mm512_add_ps(_mm512_add_ps(pick16<4 * T>(MOERUN_A16), pick16<4 * T + 1>(MOERUN_A16)),
                         _mm512_add_ps(pick16<4 * T + 2>(MOERUN_A16), pick16<4 * T + 3>(MOERUN_A16)));
  }
}

// Accumulator chains per token in a register group of MT tokens: enough independent VDPBF16PS chains
// to cover the instruction's latency (NOTES: 6 or more on Zen 4, where one issues every cycle), except
// for nvfp4, whose 8-pair groups fold every chain into the sums twice as often as it gains.
// kG8: the rule of the kernel with groups of at most 8 (MOERUN_CPU_DOT_TOKENS=8, and variant v1).
template <PackFmt F, int MT, bool kG8>
constexpr int chains_per_token() {
  if constexpr (MT == 1) return 4;
  else if constexpr (kG8 || F == PackFmt::kNvfp4) return MT == 2 ? 2 : 1;
  else return MT <= 5 ? 2 : 1;
}
// Most tokens per register group: 16 where a block's K groups are long or absent (bf16, fp8), so that
// one pass from memory serves them all; 8 for the 4-bit formats, whose short groups would fold 16
// tokens' sums through memory (NOTES).
template <PackFmt F>
constexpr int max_group_tokens() {
  return group_size(F) == 0 || group_size(F) >= 128 ? kMaxGroupTokens : 8;
}

template <PackFmt F, int MT, int NA>
void dot_t(const BlockRef& b, const uint16_t* xb, int64_t ldx, float* acc) {
  static_assert(MT >= 1 && MT <= 16 && MT * NA <= 16);
  constexpr int G = group_size(F);
  // Past 8 tokens the 16 chains leave no registers for the tokens' group sums: acc holds them (the same
  // f32 operations in the same order, so the same bits as register sums would give).
  constexpr bool kMemSums = G != 0 && MT > 8;
  const int64_t pairs = b.kp / 2, gp = G ? G / 2 : pairs;
  const Dec<F> dec;
  constexpr int kStepBytes = 4 * 2 * bytes_per_k(F);  // weight bytes per step of 4 k pairs
  const __m512 z = _mm512_setzero_ps();
  // slot s: token s / NA, chain s % NA (k pairs p with p % NA == s % NA)
#define DECL(s) __m512 a##s = z; const uint16_t* x##s = (s) < MT * NA ? xb + ((s) / NA) * ldx : xb;
  MOERUN_S16(DECL)
#undef DECL
#define DECL(t) __m512 sum##t = z;
  MOERUN_S8(DECL)
#undef DECL
  if constexpr (kMemSums)
    for (int t = 0; t < MT; ++t) _mm512_storeu_ps(acc + t * 16, z);
  __m512 sc_odd = z;  // nvfp4: the scale of the odd group, converted with the even one's
  for (int64_t p0 = 0; p0 < pairs; p0 += gp) {
    const int64_t pe = std::min(p0 + gp, pairs);  // pe - p0 is a multiple of 8 (see NOTES)
    for (int64_t p = p0; p < pe; p += 4) {
      prefetch_pair<kStepBytes>(b, p / 4);  // every weight line once, b.prefetch bytes ahead
      __m512i w0, w1, w2, w3;
      decode_quad(dec, b.data, p, w0, w1, w2, w3);
      // pair p + j goes to the slots of chain j % NA, in ascending p within each chain
#define STEP(s) \
      if constexpr (MT * NA > (s) && (s) % NA == J % NA) a##s = dot(a##s, pick4<J>(w0, w1, w2, w3), x##s, p + J);
#define PAIR(j) { constexpr int J = (j); MOERUN_S16(STEP) }
      PAIR(0) PAIR(1) PAIR(2) PAIR(3)
#undef PAIR
#undef STEP
    }
    if constexpr (G != 0) {
      __m512 sc;
      if constexpr (F == PackFmt::kNvfp4) {  // two groups' scales per conversion, gmul after the loop
        if (((p0 / gp) & 1) == 0) nvfp4_scale_pair(b.gscale, p0 / gp, sc, sc_odd);
        else sc = sc_odd;
      } else {
        sc = group_scale<F>(b.gscale, p0 / gp, b.gmul);
      }
      if constexpr (kMemSums) {
#define FOLD(t)                                                                                              \
        if constexpr (MT > (t))                                                                              \
          _mm512_storeu_ps(acc + (t) * 16, _mm512_fmadd_ps(token_sum<NA, ((t) < MT ? (t) : 0)>(MOERUN_A16), sc, \
                                                           _mm512_loadu_ps(acc + (t) * 16)));
        MOERUN_S16(FOLD)
#undef FOLD
      } else {
#define FOLD(t) if constexpr (MT > (t)) sum##t = _mm512_fmadd_ps(token_sum<NA, ((t) < MT ? (t) : 0)>(MOERUN_A16), sc, sum##t);
        MOERUN_S8(FOLD)
#undef FOLD
      }
#define ZERO(s) a##s = z;
      MOERUN_S16(ZERO)
#undef ZERO
    }
  }
  if constexpr (kMemSums && F == PackFmt::kNvfp4) {
    const __m512 gm = _mm512_set1_ps(b.gmul);
    for (int t = 0; t < MT; ++t) _mm512_storeu_ps(acc + t * 16, _mm512_mul_ps(_mm512_loadu_ps(acc + t * 16), gm));
  } else if constexpr (kMemSums) {
    // (the sums are in place)
  } else if constexpr (F == PackFmt::kNvfp4) {
    const __m512 gm = _mm512_set1_ps(b.gmul);
#define STORE(t) if constexpr (MT > (t)) _mm512_storeu_ps(acc + (t) * 16, _mm512_mul_ps(sum##t, gm));
    MOERUN_S8(STORE)
#undef STORE
  } else if constexpr (G != 0) {
#define STORE(t) if constexpr (MT > (t)) _mm512_storeu_ps(acc + (t) * 16, sum##t);
    MOERUN_S8(STORE)
#undef STORE
  } else {
#define STORE(t) if constexpr (MT > (t)) _mm512_storeu_ps(acc + (t) * 16, token_sum<NA, ((t) < MT ? (t) : 0)>(MOERUN_A16));
    MOERUN_S16(STORE)
#undef STORE
  }
}

// ---- two blocks at one token (stream2_avx512bf16) -----------------------------------------------------
// dot_t<F, 1, 4>'s four chains, folds and stores for each block, the two blocks' steps interleaved so that
// two weight streams are in flight (NOTES). The same operations in the same order per block: bitwise
// dot_t<F, 1, 4>'s accumulators.
template <PackFmt F>
void dot2_t(const BlockRef& b0, const BlockRef& b1, const uint16_t* x, float* acc0, float* acc1) {
  constexpr int G = group_size(F);
  const int64_t pairs = b0.kp / 2, gp = G ? G / 2 : pairs;
  const Dec<F> dec;
  constexpr int kStepBytes = 4 * 2 * bytes_per_k(F);
  const __m512 z = _mm512_setzero_ps();
  __m512 a0 = z, a1 = z, a2 = z, a3 = z, c0 = z, c1 = z, c2 = z, c3 = z;  // block 0's chains, block 1's
  __m512 sum0 = z, sum1 = z, odd0 = z, odd1 = z;
  const auto chains = [](__m512 v0, __m512 v1, __m512 v2, __m512 v3) {  // token_sum<4, 0>'s order
    return _mm512_add_ps(_mm512_add_ps(v0, v1), _mm512_add_ps(v2, v3));
  };
  for (int64_t p0 = 0; p0 < pairs; p0 += gp) {
    const int64_t pe = std::min(p0 + gp, pairs);
    for (int64_t p = p0; p < pe; p += 4) {
      prefetch_pair<kStepBytes>(b0, p / 4);
      prefetch_pair<kStepBytes>(b1, p / 4);
      __m512i w0, w1, w2, w3, v0, v1, v2, v3;
      decode_quad(dec, b0.data, p, w0, w1, w2, w3);
      decode_quad(dec, b1.data, p, v0, v1, v2, v3);
      a0 = dot(a0, w0, x, p);
      c0 = dot(c0, v0, x, p);
      a1 = dot(a1, w1, x, p + 1);
      c1 = dot(c1, v1, x, p + 1);
      a2 = dot(a2, w2, x, p + 2);
      c2 = dot(c2, v2, x, p + 2);
      a3 = dot(a3, w3, x, p + 3);
      c3 = dot(c3, v3, x, p + 3);
    }
    if constexpr (G != 0) {
      __m512 s0, s1;
      if constexpr (F == PackFmt::kNvfp4) {
        if (((p0 / gp) & 1) == 0) {
          nvfp4_scale_pair(b0.gscale, p0 / gp, s0, odd0);
          nvfp4_scale_pair(b1.gscale, p0 / gp, s1, odd1);
        } else {
          s0 = odd0;
          s1 = odd1;
        }
      } else {
        s0 = group_scale<F>(b0.gscale, p0 / gp, b0.gmul);
        s1 = group_scale<F>(b1.gscale, p0 / gp, b1.gmul);
      }
      sum0 = _mm512_fmadd_ps(chains(a0, a1, a2, a3), s0, sum0);
      sum1 = _mm512_fmadd_ps(chains(c0, c1, c2, c3), s1, sum1);
      a0 = a1 = a2 = a3 = c0 = c1 = c2 = c3 = z;
    }
  }
  if constexpr (F == PackFmt::kNvfp4) {
    _mm512_storeu_ps(acc0, _mm512_mul_ps(sum0, _mm512_set1_ps(b0.gmul)));
    _mm512_storeu_ps(acc1, _mm512_mul_ps(sum1, _mm512_set1_ps(b1.gmul)));
  } else if constexpr (G != 0) {
    _mm512_storeu_ps(acc0, sum0);
    _mm512_storeu_ps(acc1, sum1);
  } else {
    _mm512_storeu_ps(acc0, chains(a0, a1, a2, a3));
    _mm512_storeu_ps(acc1, chains(c0, c1, c2, c3));
  }
}

// ---- f32 FMA fallback for f32 / f16 / int8 weights (x widened from bf16: exact) ----------------------
template <PackFmt F, int MT>
void fma_t(const BlockRef& b, const uint16_t* xb, int64_t ldx, float* acc) {
  static_assert(group_size(F) == 0);
  const int64_t pairs = b.kp / 2;
  const __m512 z = _mm512_setzero_ps();
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
#define DECL(t) __m512 e##t = z, o##t = z; const uint16_t* x##t = (t) < MT ? xb + (t) * ldx : xb;
  MOERUN_S8(DECL)
#undef DECL
  for (int64_t p = 0; p < pairs; ++p) {
    __m512 we, wo;
    load2<F>(b.data, p, we, wo);
#define STEP(t)                                                                                 \
    if constexpr (MT > (t)) {                                                                   \
      const __m512i xp = _mm512_set1_epi32(pair_of(x##t, p));                                   \
      e##t = _mm512_fmadd_ps(we, _mm512_castsi512_ps(_mm512_slli_epi32(xp, 16)), e##t);         \
      o##t = _mm512_fmadd_ps(wo, _mm512_castsi512_ps(_mm512_and_si512(xp, hi)), o##t);          \
    }
    MOERUN_S8(STEP)
#undef STEP
  }
#define STORE(t) if constexpr (MT > (t)) _mm512_storeu_ps(acc + (t) * 16, _mm512_add_ps(e##t, o##t));
  MOERUN_S8(STORE)
#undef STORE
}

// One register group of MT tokens (fma_t takes at most 8).
template <PackFmt F, int MT, bool kG8>
void block_t(const BlockRef& b, const uint16_t* xb, int64_t ldx, float* acc) {
  if constexpr (bf16_stream_native(F) && MT <= max_group_tokens<F>()) dot_t<F, MT, chains_per_token<F, MT, kG8>()>(b, xb, ldx, acc);
  else if constexpr (!bf16_stream_native(F) && MT <= 8) fma_t<F, MT>(b, xb, ldx, acc);
}

template <PackFmt F, bool kG8>
void group_t(const BlockRef& b, const uint16_t* x, int64_t ldx, int mt, float* a) {
  switch (mt) {
#define CASE(t) case (t) + 1: return block_t<F, (t) + 1, kG8>(b, x, ldx, a);
    MOERUN_S16(CASE)
#undef CASE
    default: return;
  }
}

// The tokens in register groups of at most max_group_tokens (8 with kG8 and for the f32 FMA formats),
// as few and as even as can be (17 tokens: 9 + 8), each group one pass over the block: the first pass
// streams the block from memory, later ones find it in L2. kG8: groups of 8 and the remainder.
template <PackFmt F, bool kG8>
void stream_f(const BlockRef& b, const uint16_t* xb, int64_t ldx, int m, float* acc) {
  constexpr int kMax = kG8 || !bf16_stream_native(F) ? 8 : max_group_tokens<F>();
  const int groups = (m + kMax - 1) / kMax;
  for (int g = 0, i = 0; g < groups; ++g) {
    const int mt = kG8 ? std::min(kMax, m - i) : (m - i) / (groups - g);
    group_t<F, kG8>(b, xb + i * ldx, ldx, mt, acc + i * 16);
    i += mt;
  }
}

template <bool kG8>
void stream_fmt(const BlockRef& b, const uint16_t* xb, int64_t ldx, int m, float* acc) {
  switch (b.fmt) {
    case PackFmt::kF32: return stream_f<PackFmt::kF32, kG8>(b, xb, ldx, m, acc);
    case PackFmt::kF16: return stream_f<PackFmt::kF16, kG8>(b, xb, ldx, m, acc);
    case PackFmt::kBF16: return stream_f<PackFmt::kBF16, kG8>(b, xb, ldx, m, acc);
    case PackFmt::kFp8: return stream_f<PackFmt::kFp8, kG8>(b, xb, ldx, m, acc);
    case PackFmt::kFp8Block: return stream_f<PackFmt::kFp8Block, kG8>(b, xb, ldx, m, acc);
    case PackFmt::kInt8: return stream_f<PackFmt::kInt8, kG8>(b, xb, ldx, m, acc);
    case PackFmt::kMxfp4: return stream_f<PackFmt::kMxfp4, kG8>(b, xb, ldx, m, acc);
    case PackFmt::kNvfp4: return stream_f<PackFmt::kNvfp4, kG8>(b, xb, ldx, m, acc);
  }
}

// Seconds for kIters rounds of 16 independent VDPBF16PS (kDot) or VFMADD231PS chains on register
// operands: more chains than any core's latency x issue rate, and no call inside the loop even
// unoptimized, so that the time is the instruction's issue rate alone.
template <bool kDot>
double chains_seconds() {
  constexpr int kIters = 2048;
  __m512 a[16];
  for (__m512& v : a) v = _mm512_set1_ps(1e-3f);
  const __m512 u = _mm512_set1_ps(1e-3f);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kIters; ++i) {
#define MOERUN_OP(j)                                                                                             \
    if constexpr (kDot)                                                                                          \
      a[j] = _mm512_dpbf16_ps(a[j], (__m512bh)_mm512_castps_si512(u), (__m512bh)_mm512_castps_si512(u));         \
    else                                                                                                         \
      a[j] = _mm512_fmadd_ps(u, u, a[j]);
    MOERUN_OP(0) MOERUN_OP(1) MOERUN_OP(2) MOERUN_OP(3) MOERUN_OP(4) MOERUN_OP(5) MOERUN_OP(6) MOERUN_OP(7)
    MOERUN_OP(8) MOERUN_OP(9) MOERUN_OP(10) MOERUN_OP(11) MOERUN_OP(12) MOERUN_OP(13) MOERUN_OP(14) MOERUN_OP(15)
#undef MOERUN_OP
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  __m512 sum = a[0];
  for (int j = 1; j < 16; ++j) sum = _mm512_add_ps(sum, a[j]);
  volatile float sink = _mm512_reduce_add_ps(sum);  // keeps the chains
  (void)sink;
  return s;
}

}  // namespace

double bf16_dot_fma_rate_ratio() {
  double t_dot = 1e9, t_fma = 1e9;
  for (int r = 0; r < 5; ++r) {  // the fastest of five alternated runs each (a busy core slows both)
    t_dot = std::min(t_dot, chains_seconds<true>());
    t_fma = std::min(t_fma, chains_seconds<false>());
  }
  return t_fma / t_dot;
}

void act_rows_bf16_avx512(Act a, const float* acc, int64_t rows, int n, float alpha, float limit, uint16_t* out,
                          int64_t ldo) {
  const auto mask = [](int c) { return static_cast<__mmask16>((1u << c) - 1); };
  act_rows_16(
      a, acc, rows, n, alpha, limit,
      [&](__m512 v, int64_t i, int c) {  // c <= 8: words 0-7 to row i, 8-15 to row i + 1
        const __m256i w = (__m256i)_mm512_cvtneps_pbh(v);
        const __mmask8 m = static_cast<__mmask8>(mask(c));
        _mm_mask_storeu_epi16(out + i * ldo, m, _mm256_castsi256_si128(w));
        _mm_mask_storeu_epi16(out + (i + 1) * ldo, m, _mm256_extracti128_si256(w, 1));
      },
      [&](__m512 v, int64_t i, int c) {
        _mm256_mask_storeu_epi16(out + i * ldo, mask(c), (__m256i)_mm512_cvtneps_pbh(v));
      },
      [&](const float* v, int64_t i, int c) {
        _mm256_mask_storeu_epi16(out + i * ldo, mask(c), (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask(c), v)));
      });
}

void stream2_avx512bf16(const BlockRef& b0, const BlockRef& b1, const uint16_t* xb, float* acc0, float* acc1) {
  switch (b0.fmt) {
    case PackFmt::kBF16: return dot2_t<PackFmt::kBF16>(b0, b1, xb, acc0, acc1);
    case PackFmt::kFp8: return dot2_t<PackFmt::kFp8>(b0, b1, xb, acc0, acc1);
    case PackFmt::kFp8Block: return dot2_t<PackFmt::kFp8Block>(b0, b1, xb, acc0, acc1);
    case PackFmt::kMxfp4: return dot2_t<PackFmt::kMxfp4>(b0, b1, xb, acc0, acc1);
    case PackFmt::kNvfp4: return dot2_t<PackFmt::kNvfp4>(b0, b1, xb, acc0, acc1);
    default:  // (formats the dots do not take: block by block)
      stream_avx512bf16(b0, xb, 0, 1, acc0);
      stream_avx512bf16(b1, xb, 0, 1, acc1);
  }
}

void stream_avx512bf16(const BlockRef& b, const uint16_t* xb, int64_t ldx, int m, float* acc) {
  stream_fmt<false>(b, xb, ldx, m, acc);
}

void stream_avx512bf16_g8(const BlockRef& b, const uint16_t* xb, int64_t ldx, int m, float* acc) {
  stream_fmt<true>(b, xb, ldx, m, acc);
}

}  // namespace moerun::cpu::kernels
