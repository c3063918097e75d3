// cpu/kernels/gemm_avx512vnni.cpp — the int8-activation streaming kernel for 4-bit weights (kernels.hpp:
// stream_q8_avx512vnni). Compiled with AVX-512F/BW/VL/DQ + AVX512-VNNI + AVX512-VBMI; reached only at
// CpuIsa::kAvx512Bf16 and above (isa.cpp requires VNNI and VBMI for those levels).
//
// NOTES
// - Why: with bf16 activations a one-token call of mxfp4 weights spends about 3.5 cycles per 32 weights
//   on the H200 host's Xeon, 2 of them in VDPBF16PS alone (it issues once per 2 cycles there), which is
//   as long as the 4.25-bit weights take to arrive from memory. VPDPBUSD multiplies 64 byte pairs per
//   instruction, so with int8 activations the dot product costs a quarter of a cycle per 32 weights and
//   the decode is two vpermb and a shift per 128 weights: the call becomes bound by memory alone.
// - The codes: a VNNI-word quad (kernels.hpp: 64 bytes, 16 lanes x k pairs 4q .. 4q + 3) holds, in the
//   dword of lane l, the nibbles of k = 8q + {0, 2, 4, 6} (low word) and 8q + {1, 3, 5, 7} (high word).
//   The low nibble of each byte is k 8q + {0, 4, 1, 5}, the high nibble 8q + {2, 6, 3, 7}: one vpermb
//   over the bytes (a 64-entry table that repeats the 16, so index bits 4-5 do not matter) decodes the
//   low nibbles, a 16-bit shift by 4 and a second vpermb the high ones, with no mask. q8_rows.cpp lays
//   the activation codes out in that k order, so each dword of a row is one broadcast operand.
// - Signs: VPDPBUSD multiplies unsigned by signed bytes. The weights decode to 2 * e2m1 + 12 in [0, 24]
//   and the activations stay signed; each group's integer sum starts at -12 x (sum of the activation
//   codes), which the row packer stores, so the sum is exactly 2 x the e2m1 dot product. The 2 is undone
//   with the global factors at the end.
// - Per K group and token: the exact integer sum, converted once, times the weights' group scale, then
//   fused into the f32 sum with the activation group's scale. Two powers of two for mxfp4 (exact unless
//   the product leaves the f32 range), an e4m3 / 256 and a power of two for nvfp4 (global scale at the
//   end, as in gemm_avx512bf16.cpp).
// - Rows run in register groups of up to 8, one integer and one f32 accumulator each; groups of up to 4
//   rows give each row two integer chains (low and high nibbles) so that VPDPBUSD's latency overlaps.
// - A token's two 15-bit rows (stream_q15_avx512vnni): the high row's scale is 2^7 times the low one's,
//   so per K group the two exact integer sums join into one, 128 x high + low (under 2^24 in magnitude,
//   so exact in f32 too), and fold once: half the conversions and multiplies of folding each row and
//   adding the rows' results after. Layer, Zen 4, alternated with MOERUN_CPU_Q15_JOIN=0: qwen3 mxfp4 /
//   nvfp4 one token 1.02x / 1.04x, four tokens 1.03x / 1.04x, gpt-oss-20b 1.01x. (gemm_avx2.cpp's q8
//   kernel joins them the same way: at the AVX2 level 1.00-1.03x.)
// - One token (one int8 row, or a token's two 15-bit rows) on two blocks at once: stream2_q8_avx512vnni,
//   the stream pairs of gemm_avx512bf16.cpp's NOTES, with the same chains per block.
// - Tried on Zen 4 and not kept: vpshufb + a mask for the two vpermb (tied, or up to 1.4x slower in L2 in
//   one of two rounds); a software prefetch of the group scales, which lie apart from the codes (1 KiB a
//   gate_up block): tied in the layer at 256 B to 1 KiB ahead.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels/avx512_decode.hpp"
#include "backends/cpu/kernels/kernels.hpp"

namespace moerun::cpu::kernels {
namespace {

// 2 * e2m1(c) + kQ8E2m1Offset for the code c in an index's low 4 bits (bits 4-5 free).
constexpr auto kQ8E2m1 = q8_e2m1_table<64>();
static_assert(kQ8E2m1.v[7] == 24 && kQ8E2m1.v[15] == 0 && kQ8E2m1.v[8] == 12 && kQ8E2m1.v[16 + 9] == 11,
              "e2m1 6, -6, -0 and -0.5 doubled and offset");

inline __m512i bcast_dword(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}

// Rows of a register group up to which each row keeps two integer chains (the low and the high nibbles'):
// VPDPBUSD has a latency of 4-5 cycles, so a row with one chain of two dots a quad waits on it in small
// groups. (On Zen 4 only the one-token q15 call gained, 2-10% in L2: larger groups are bound by the
// instruction's throughput either way.)
constexpr int kSplitChainsMaxRows = 4;

#define MOERUN_T8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define MOERUN_P4(X) X(0, 1) X(2, 3) X(4, 5) X(6, 7)

// A token's 15-bit rows (q8_rows.hpp pack_q15_rows: the high row's scale is 2^7 times the low one's) as one
// integer sum: 128 x high + low, exact (|sum| <= 32 x 12 x 16383 < 2^24, so its f32 conversion is too).
inline __m512i join_q15(__m512i hi, __m512i lo) { return _mm512_add_epi32(_mm512_slli_epi32(hi, 7), lo); }
inline __m512 fold_group(__m512 f, __m512i i, __m512 sw, float scale) {
  return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(i), sw), _mm512_set1_ps(scale), f);
}

// One register group of MT rows on block b: acc gets a row of 16 per row, or with Q15 (MT even) per
// token, rows 2t and 2t + 1 being token t's high and low 15-bit rows.
template <PackFmt F, int MT, bool Q15>
void q8_t(const BlockRef& b, const Q8Rows& x, float* acc) {
  static_assert(q8_stream_native(F) && MT >= 1 && MT <= 8 && (!Q15 || MT % 2 == 0));
  constexpr int G = group_size(F);   // weight group: 32 (mxfp4) or 16 (nvfp4) k
  constexpr int kQuads = G / 8;      // 64-byte quads per weight group
  constexpr int kPerActGroup = 32 / G;  // weight groups per 32-k activation group
  const int64_t groups = b.kp / G;
  const __m512i lut = _mm512_load_si512(kQ8E2m1.v);
  const __m512 z = _mm512_setzero_ps();
#define DECL(t)                                                                           \
  __m512 f##t = z;                                                                        \
  const Q8Rows r##t = x.rows_from((t) < MT ? (t) : 0);                                    \
  const int32_t* bias##t = G == 32 ? r##t.bias32 : r##t.bias16;
  MOERUN_T8(DECL)
#undef DECL
  __m512 sc_odd = z;  // nvfp4: the odd group's scale, converted with the even one's
  for (int64_t g = 0; g < groups; ++g) {
#define INIT(t) __m512i i##t = _mm512_set1_epi32(bias##t[g]), h##t = _mm512_setzero_si512();
    MOERUN_T8(INIT)
#undef INIT
    for (int v = 0; v < kQuads; ++v) {
      const int64_t quad = g * kQuads + v;
      prefetch_pair<kVnniWordBytes>(b, quad);  // one line per quad, b.prefetch bytes ahead
      const __m512i w = _mm512_load_si512(b.data + quad * kVnniWordBytes);
      const __m512i lo = _mm512_permutexvar_epi8(w, lut);
      const __m512i hi = _mm512_permutexvar_epi8(_mm512_srli_epi16(w, 4), lut);
      const int64_t k0 = quad * 8;
#define DOT(t)                                                                               \
      if constexpr (MT > (t)) {                                                            \
        i##t = _mm512_dpbusd_epi32(i##t, lo, bcast_dword(r##t.q + k0));                    \
        if constexpr (MT <= kSplitChainsMaxRows)                                           \
          h##t = _mm512_dpbusd_epi32(h##t, hi, bcast_dword(r##t.q + k0 + 4));              \
        else                                                                               \
          i##t = _mm512_dpbusd_epi32(i##t, hi, bcast_dword(r##t.q + k0 + 4));              \
      }
      MOERUN_T8(DOT)
#undef DOT
    }
#define JOIN(t) if constexpr (MT > (t) && MT <= kSplitChainsMaxRows) i##t = _mm512_add_epi32(i##t, h##t);
    MOERUN_T8(JOIN)
#undef JOIN
    __m512 sw;
    if constexpr (F == PackFmt::kNvfp4) {
      if ((g & 1) == 0) nvfp4_scale_pair(b.gscale, g, sw, sc_odd);
      else sw = sc_odd;
    } else {
      sw = group_scale<F>(b.gscale, g, b.gmul);
    }
    const int64_t ag = g / kPerActGroup;
    if constexpr (Q15) {
#define FOLD(t, u) if constexpr (MT > (t)) f##t = fold_group(f##t, join_q15(i##t, i##u), sw, r##u.scale[ag]);
      MOERUN_P4(FOLD)
#undef FOLD
    } else {
#define FOLD(t) if constexpr (MT > (t)) f##t = fold_group(f##t, i##t, sw, r##t.scale[ag]);
      MOERUN_T8(FOLD)
#undef FOLD
    }
  }
  // The weights were decoded doubled; nvfp4's global scale (gmul = 256 x global, the e4m3 scales being
  // value / 256) multiplies the finished sums.
  const __m512 post = _mm512_set1_ps(F == PackFmt::kNvfp4 ? 0.5f * b.gmul : 0.5f);
  constexpr int kRowsPerToken = Q15 ? 2 : 1;  // (Q15: token t's sums are in f<2t>)
#define STORE(t)                                  \
  if constexpr (MT > (t) && (t) % kRowsPerToken == 0) \
    _mm512_storeu_ps(acc + (t) / kRowsPerToken * 16, _mm512_mul_ps(f##t, post));
  MOERUN_T8(STORE)
#undef STORE
}

// Two blocks, one token (stream2_q8_avx512vnni / stream2_q15_avx512vnni): one row (int8 layers) or a
// token's two 15-bit rows, each block's quads with q8_t<F, MT, Q15>'s chains, folds and store, the two
// blocks' quads interleaved so that two weight streams are in flight (gemm_avx512bf16.cpp's stream pairs).
// Bitwise q8_t's accumulators (the integer sums are exact in any order).
template <PackFmt F, int MT, bool Q15>
void q8_pair_t(const BlockRef& b0, const BlockRef& b1, const Q8Rows& x, float* acc0, float* acc1) {
  static_assert(q8_stream_native(F) && (MT == 1 || MT == 2) && (!Q15 || MT == 2));
  constexpr int G = group_size(F);
  constexpr int kQuads = G / 8;
  constexpr int kPerActGroup = 32 / G;
  const int64_t groups = b0.kp / G;
  const __m512i lut = _mm512_load_si512(kQ8E2m1.v);
  const __m512 z = _mm512_setzero_ps();
  const __m512i zi = _mm512_setzero_si512();
  const Q8Rows r0 = x, r1 = x.rows_from(MT - 1);  // (MT = 1: r1 unused)
  const int32_t* bias0 = G == 32 ? r0.bias32 : r0.bias16;
  const int32_t* bias1 = G == 32 ? r1.bias32 : r1.bias16;
  __m512 f00 = z, f01 = z, f10 = z, f11 = z;  // f<block><row>
  __m512 odd0 = z, odd1 = z;
  for (int64_t g = 0; g < groups; ++g) {
    // Integer chains c<block><row> (low nibbles, from the bias) and d<block><row> (high nibbles).
    __m512i c00 = _mm512_set1_epi32(bias0[g]), c10 = c00, d00 = zi, d10 = zi;
    __m512i c01 = MT == 1 ? zi : _mm512_set1_epi32(bias1[g]), c11 = c01, d01 = zi, d11 = zi;
    for (int v = 0; v < kQuads; ++v) {
      const int64_t quad = g * kQuads + v;
      prefetch_pair<kVnniWordBytes>(b0, quad);
      prefetch_pair<kVnniWordBytes>(b1, quad);
      const __m512i w0 = _mm512_load_si512(b0.data + quad * kVnniWordBytes);
      const __m512i w1 = _mm512_load_si512(b1.data + quad * kVnniWordBytes);
      const __m512i lo0 = _mm512_permutexvar_epi8(w0, lut), hi0 = _mm512_permutexvar_epi8(_mm512_srli_epi16(w0, 4), lut);
      const __m512i lo1 = _mm512_permutexvar_epi8(w1, lut), hi1 = _mm512_permutexvar_epi8(_mm512_srli_epi16(w1, 4), lut);
      const int64_t k0 = quad * 8;
      const __m512i xl0 = bcast_dword(r0.q + k0), xh0 = bcast_dword(r0.q + k0 + 4);
      c00 = _mm512_dpbusd_epi32(c00, lo0, xl0);
      d00 = _mm512_dpbusd_epi32(d00, hi0, xh0);
      c10 = _mm512_dpbusd_epi32(c10, lo1, xl0);
      d10 = _mm512_dpbusd_epi32(d10, hi1, xh0);
      if constexpr (MT == 2) {
        const __m512i xl1 = bcast_dword(r1.q + k0), xh1 = bcast_dword(r1.q + k0 + 4);
        c01 = _mm512_dpbusd_epi32(c01, lo0, xl1);
        d01 = _mm512_dpbusd_epi32(d01, hi0, xh1);
        c11 = _mm512_dpbusd_epi32(c11, lo1, xl1);
        d11 = _mm512_dpbusd_epi32(d11, hi1, xh1);
      }
    }
    __m512 sw0, sw1;
    if constexpr (F == PackFmt::kNvfp4) {
      if ((g & 1) == 0) {
        nvfp4_scale_pair(b0.gscale, g, sw0, odd0);
        nvfp4_scale_pair(b1.gscale, g, sw1, odd1);
      } else {
        sw0 = odd0;
        sw1 = odd1;
      }
    } else {
      sw0 = group_scale<F>(b0.gscale, g, b0.gmul);
      sw1 = group_scale<F>(b1.gscale, g, b1.gmul);
    }
    const int64_t ag = g / kPerActGroup;
    const __m512i s00 = _mm512_add_epi32(c00, d00), s10 = _mm512_add_epi32(c10, d10);
    if constexpr (MT == 1) {
      f00 = fold_group(f00, s00, sw0, r0.scale[ag]);
      f10 = fold_group(f10, s10, sw1, r0.scale[ag]);
    } else {
      const __m512i s01 = _mm512_add_epi32(c01, d01), s11 = _mm512_add_epi32(c11, d11);
      if constexpr (Q15) {
        f00 = fold_group(f00, join_q15(s00, s01), sw0, r1.scale[ag]);
        f10 = fold_group(f10, join_q15(s10, s11), sw1, r1.scale[ag]);
      } else {
        f00 = fold_group(f00, s00, sw0, r0.scale[ag]);
        f01 = fold_group(f01, s01, sw0, r1.scale[ag]);
        f10 = fold_group(f10, s10, sw1, r0.scale[ag]);
        f11 = fold_group(f11, s11, sw1, r1.scale[ag]);
      }
    }
  }
  const __m512 post0 = _mm512_set1_ps(F == PackFmt::kNvfp4 ? 0.5f * b0.gmul : 0.5f);
  const __m512 post1 = _mm512_set1_ps(F == PackFmt::kNvfp4 ? 0.5f * b1.gmul : 0.5f);
  _mm512_storeu_ps(acc0, _mm512_mul_ps(f00, post0));
  _mm512_storeu_ps(acc1, _mm512_mul_ps(f10, post1));
  if constexpr (MT == 2 && !Q15) {
    _mm512_storeu_ps(acc0 + 16, _mm512_mul_ps(f01, post0));
    _mm512_storeu_ps(acc1 + 16, _mm512_mul_ps(f11, post1));
  }
}

// m rows (Q15: m tokens, two rows each) in register groups of at most 8 rows.
template <PackFmt F, bool Q15>
void stream_f(const BlockRef& b, const Q8Rows& x, int m, float* acc) {
  constexpr int kRowsPer = Q15 ? 2 : 1;
  const int rows = m * kRowsPer;
  int i = 0;
  for (; rows - i >= 8; i += 8) q8_t<F, 8, Q15>(b, x.rows_from(i), acc + i / kRowsPer * 16);
  const Q8Rows r = x.rows_from(i);
  float* a = acc + i / kRowsPer * 16;
  switch (rows - i) {
    case 6: q8_t<F, 6, Q15>(b, r, a); break;
    case 4: q8_t<F, 4, Q15>(b, r, a); break;
    case 2: q8_t<F, 2, Q15>(b, r, a); break;
    default:
      if constexpr (!Q15) {
        switch (rows - i) {
          case 7: q8_t<F, 7, false>(b, r, a); break;
          case 5: q8_t<F, 5, false>(b, r, a); break;
          case 3: q8_t<F, 3, false>(b, r, a); break;
          case 1: q8_t<F, 1, false>(b, r, a); break;
          default: break;
        }
      }
      break;
  }
}

template <bool Q15>
void stream_any(const BlockRef& b, const Q8Rows& x, int m, float* acc) {
  switch (b.fmt) {
    case PackFmt::kMxfp4: stream_f<PackFmt::kMxfp4, Q15>(b, x, m, acc); break;
    case PackFmt::kNvfp4: stream_f<PackFmt::kNvfp4, Q15>(b, x, m, acc); break;
    default:  // the runner calls it for q8_stream_native formats only; anything else must not look valid
      for (int64_t i = 0; i < static_cast<int64_t>(m) * 16; ++i) acc[i] = __builtin_nanf("");
      break;
  }
}

}  // namespace

void stream2_q8_avx512vnni(const BlockRef& b0, const BlockRef& b1, const Q8Rows& x, int m, float* acc0, float* acc1) {
  const bool mx = b0.fmt == PackFmt::kMxfp4, nv = b0.fmt == PackFmt::kNvfp4;
  if (m == 1 && mx) return q8_pair_t<PackFmt::kMxfp4, 1, false>(b0, b1, x, acc0, acc1);
  if (m == 2 && mx) return q8_pair_t<PackFmt::kMxfp4, 2, false>(b0, b1, x, acc0, acc1);
  if (m == 1 && nv) return q8_pair_t<PackFmt::kNvfp4, 1, false>(b0, b1, x, acc0, acc1);
  if (m == 2 && nv) return q8_pair_t<PackFmt::kNvfp4, 2, false>(b0, b1, x, acc0, acc1);
  stream_q8_avx512vnni(b0, x, m, acc0);  // (other row counts and formats: block by block)
  stream_q8_avx512vnni(b1, x, m, acc1);
}

void stream_q8_avx512vnni(const BlockRef& b, const Q8Rows& x, int m, float* acc) { stream_any<false>(b, x, m, acc); }

void stream2_q15_avx512vnni(const BlockRef& b0, const BlockRef& b1, const Q8Rows& x, int m, float* acc0, float* acc1) {
  if (m == 1 && b0.fmt == PackFmt::kMxfp4) return q8_pair_t<PackFmt::kMxfp4, 2, true>(b0, b1, x, acc0, acc1);
  if (m == 1 && b0.fmt == PackFmt::kNvfp4) return q8_pair_t<PackFmt::kNvfp4, 2, true>(b0, b1, x, acc0, acc1);
  stream_q15_avx512vnni(b0, x, m, acc0);
  stream_q15_avx512vnni(b1, x, m, acc1);
}

void stream_q15_avx512vnni(const BlockRef& b, const Q8Rows& x, int m, float* acc) { stream_any<true>(b, x, m, acc); }

}  // namespace moerun::cpu::kernels
