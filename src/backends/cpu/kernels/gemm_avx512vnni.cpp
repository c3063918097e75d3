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
// - Tokens run in register groups of up to 8, one integer and one f32 accumulator each; a single token
//   uses two integer chains (low and high nibbles) so that VPDPBUSD's latency overlaps.
// - One token (one int8 row, or a token's two 15-bit rows) on two blocks at once: stream2_q8_avx512vnni,
//   the stream pairs of gemm_avx512bf16.cpp's NOTES, with the same chains per block.
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

#define MOERUN_T8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

template <PackFmt F, int MT>
void q8_t(const BlockRef& b, const Q8Rows& x, float* acc) {
  static_assert(q8_stream_native(F) && MT >= 1 && MT <= 8);
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
#define INIT(t) __m512i i##t = _mm512_set1_epi32(bias##t[g]);
    MOERUN_T8(INIT)
#undef INIT
    __m512i i_hi = _mm512_setzero_si512();  // one token: the high nibbles' chain
    for (int v = 0; v < kQuads; ++v) {
      const int64_t quad = g * kQuads + v;
      prefetch_pair<kVnniWordBytes>(b, quad);  // one line per quad, b.prefetch bytes ahead
      const __m512i w = _mm512_load_si512(b.data + quad * kVnniWordBytes);
      const __m512i lo = _mm512_permutexvar_epi8(w, lut);
      const __m512i hi = _mm512_permutexvar_epi8(_mm512_srli_epi16(w, 4), lut);
      const int64_t k0 = quad * 8;
      if constexpr (MT == 1) {
        i0 = _mm512_dpbusd_epi32(i0, lo, bcast_dword(r0.q + k0));
        i_hi = _mm512_dpbusd_epi32(i_hi, hi, bcast_dword(r0.q + k0 + 4));
      } else {
#define DOT(t)                                                          \
        if constexpr (MT > (t)) {                                       \
          i##t = _mm512_dpbusd_epi32(i##t, lo, bcast_dword(r##t.q + k0)); \
          i##t = _mm512_dpbusd_epi32(i##t, hi, bcast_dword(r##t.q + k0 + 4)); \
        }
        MOERUN_T8(DOT)
#undef DOT
      }
    }
    if constexpr (MT == 1) i0 = _mm512_add_epi32(i0, i_hi);
    __m512 sw;
    if constexpr (F == PackFmt::kNvfp4) {
      if ((g & 1) == 0) nvfp4_scale_pair(b.gscale, g, sw, sc_odd);
      else sw = sc_odd;
    } else {
      sw = group_scale<F>(b.gscale, g, b.gmul);
    }
    const int64_t ag = g / kPerActGroup;
#define FOLD(t)                                                                                           \
    if constexpr (MT > (t))                                                                               \
      f##t = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(i##t), sw), _mm512_set1_ps(r##t.scale[ag]), f##t);
    MOERUN_T8(FOLD)
#undef FOLD
  }
  // The weights were decoded doubled; nvfp4's global scale (gmul = 256 x global, the e4m3 scales being
  // value / 256) multiplies the finished sums.
  const __m512 post = _mm512_set1_ps(F == PackFmt::kNvfp4 ? 0.5f * b.gmul : 0.5f);
#define STORE(t) if constexpr (MT > (t)) _mm512_storeu_ps(acc + (t) * 16, _mm512_mul_ps(f##t, post));
  MOERUN_T8(STORE)
#undef STORE
}

// Two blocks, one token (stream2_q8_avx512vnni): one row (int8 layers) or a token's two 15-bit rows, q8_t<F,
// MT>'s integer chains, folds and store for each block, the two blocks' quads interleaved so that two
// weight streams are in flight (gemm_avx512bf16.cpp's stream pairs). Bitwise q8_t's accumulators.
template <PackFmt F, int MT>
void q8_pair_t(const BlockRef& b0, const BlockRef& b1, const Q8Rows& x, float* acc0, float* acc1) {
  static_assert(q8_stream_native(F) && (MT == 1 || MT == 2));
  constexpr int G = group_size(F);
  constexpr int kQuads = G / 8;
  constexpr int kPerActGroup = 32 / G;
  const int64_t groups = b0.kp / G;
  const __m512i lut = _mm512_load_si512(kQ8E2m1.v);
  const __m512 z = _mm512_setzero_ps();
  const Q8Rows r0 = x, r1 = x.rows_from(MT - 1);  // (MT = 1: r1 unused)
  const int32_t* bias0 = G == 32 ? r0.bias32 : r0.bias16;
  const int32_t* bias1 = G == 32 ? r1.bias32 : r1.bias16;
  __m512 f00 = z, f01 = z, f10 = z, f11 = z;  // f<block><row>
  __m512 odd0 = z, odd1 = z;
  const auto fold = [](__m512 f, __m512i i, __m512 sw, float scale) {
    return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(i), sw), _mm512_set1_ps(scale), f);
  };
  for (int64_t g = 0; g < groups; ++g) {
    // MT = 1: <block>0 the low nibbles' chain (from the bias), <block>1 the high ones'; MT = 2: per row.
    __m512i i00 = _mm512_set1_epi32(bias0[g]), i10 = i00;
    __m512i i01 = MT == 1 ? _mm512_setzero_si512() : _mm512_set1_epi32(bias1[g]), i11 = i01;
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
      if constexpr (MT == 1) {
        i00 = _mm512_dpbusd_epi32(i00, lo0, xl0);
        i10 = _mm512_dpbusd_epi32(i10, lo1, xl0);
        i01 = _mm512_dpbusd_epi32(i01, hi0, xh0);
        i11 = _mm512_dpbusd_epi32(i11, hi1, xh0);
      } else {
        const __m512i xl1 = bcast_dword(r1.q + k0), xh1 = bcast_dword(r1.q + k0 + 4);
        i00 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(i00, lo0, xl0), hi0, xh0);
        i10 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(i10, lo1, xl0), hi1, xh0);
        i01 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(i01, lo0, xl1), hi0, xh1);
        i11 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(i11, lo1, xl1), hi1, xh1);
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
    if constexpr (MT == 1) {
      f00 = fold(f00, _mm512_add_epi32(i00, i01), sw0, r0.scale[ag]);
      f10 = fold(f10, _mm512_add_epi32(i10, i11), sw1, r0.scale[ag]);
    } else {
      f00 = fold(f00, i00, sw0, r0.scale[ag]);
      f01 = fold(f01, i01, sw0, r1.scale[ag]);
      f10 = fold(f10, i10, sw1, r0.scale[ag]);
      f11 = fold(f11, i11, sw1, r1.scale[ag]);
    }
  }
  const __m512 post0 = _mm512_set1_ps(F == PackFmt::kNvfp4 ? 0.5f * b0.gmul : 0.5f);
  const __m512 post1 = _mm512_set1_ps(F == PackFmt::kNvfp4 ? 0.5f * b1.gmul : 0.5f);
  _mm512_storeu_ps(acc0, _mm512_mul_ps(f00, post0));
  _mm512_storeu_ps(acc1, _mm512_mul_ps(f10, post1));
  if constexpr (MT == 2) {
    _mm512_storeu_ps(acc0 + 16, _mm512_mul_ps(f01, post0));
    _mm512_storeu_ps(acc1 + 16, _mm512_mul_ps(f11, post1));
  }
}

template <PackFmt F>
void stream_f(const BlockRef& b, const Q8Rows& x, int m, float* acc) {
  int i = 0;
  for (; m - i >= 8; i += 8) q8_t<F, 8>(b, x.rows_from(i), acc + i * 16);
  const Q8Rows r = x.rows_from(i);
  float* a = acc + i * 16;
  switch (m - i) {
    case 7: q8_t<F, 7>(b, r, a); break;
    case 6: q8_t<F, 6>(b, r, a); break;
    case 5: q8_t<F, 5>(b, r, a); break;
    case 4: q8_t<F, 4>(b, r, a); break;
    case 3: q8_t<F, 3>(b, r, a); break;
    case 2: q8_t<F, 2>(b, r, a); break;
    case 1: q8_t<F, 1>(b, r, a); break;
    default: break;
  }
}

}  // namespace

void stream2_q8_avx512vnni(const BlockRef& b0, const BlockRef& b1, const Q8Rows& x, int m, float* acc0, float* acc1) {
  const bool mx = b0.fmt == PackFmt::kMxfp4, nv = b0.fmt == PackFmt::kNvfp4;
  if (m == 1 && mx) return q8_pair_t<PackFmt::kMxfp4, 1>(b0, b1, x, acc0, acc1);
  if (m == 2 && mx) return q8_pair_t<PackFmt::kMxfp4, 2>(b0, b1, x, acc0, acc1);
  if (m == 1 && nv) return q8_pair_t<PackFmt::kNvfp4, 1>(b0, b1, x, acc0, acc1);
  if (m == 2 && nv) return q8_pair_t<PackFmt::kNvfp4, 2>(b0, b1, x, acc0, acc1);
  stream_q8_avx512vnni(b0, x, m, acc0);  // (other row counts and formats: block by block)
  stream_q8_avx512vnni(b1, x, m, acc1);
}

void stream_q8_avx512vnni(const BlockRef& b, const Q8Rows& x, int m, float* acc) {
  switch (b.fmt) {
    case PackFmt::kMxfp4: stream_f<PackFmt::kMxfp4>(b, x, m, acc); break;
    case PackFmt::kNvfp4: stream_f<PackFmt::kNvfp4>(b, x, m, acc); break;
    default:  // the runner calls it for q8_stream_native formats only; anything else must not look valid
      std::fill(acc, acc + static_cast<int64_t>(m) * 16, __builtin_nanf(""));
      break;
  }
}

}  // namespace moerun::cpu::kernels
