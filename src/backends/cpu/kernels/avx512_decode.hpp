// cpu/kernels/avx512_decode.hpp — AVX-512 helpers shared by gemm_avx512.cpp, gemm_avx512bf16.cpp and
// gemm_amx.cpp: packed weights of one k pair decoded to f32 (every PackFmt), fp8 and e2m1 codes to bf16
// words, and the per-K-group scale vector.
//
// Everything here has internal linkage (an unnamed namespace): the two including files are compiled
// with different -m flags, and an inline function with external linkage could be merged by the linker
// into the copy built for the wider ISA, which the narrower level must never execute.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/kernels/kernels.hpp"

namespace moerun::cpu::kernels {
namespace {

inline __m128i ld128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// 16 e4m3 bytes -> 16 floats (value / 256), through fp16 bits (see dequant_avx2.hpp NOTES).
inline __m512 e4m3x16(__m128i v) {
  __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(v), 8);
  h = _mm256_and_si256(_mm256_srai_epi16(h, 1), _mm256_set1_epi16(static_cast<short>(0xBFFF)));
  return _mm512_cvtph_ps(h);
}

// 32-word vpermw tables, built at compile time: entry i = fn(i) for i < n, zero after.
struct alignas(64) WordTable {
  uint16_t v[32];
};
template <typename Fn>
constexpr WordTable word_table(int n, Fn fn) {
  WordTable t{};
  for (int i = 0; i < n; ++i) t.v[i] = fn(i);
  return t;
}
// bf16 of the e2m1 code in a word's low nibble (32 entries: bit 4 of the index free).
constexpr WordTable kE2m1Words = word_table(32, [](int i) { return e2m1_bf16(i); });
static_assert(kE2m1Words.v[7] == 0x40C0 && kE2m1Words.v[9] == 0xBF00 && kE2m1Words.v[16 + 5] == 0x4040,
              "e2m1 6, -0.5, 3");

// bf16 bits of n * 2^q for 0 <= n < 256 (exact: at most 8 significant bits), assuming a normal result.
constexpr uint16_t bf16_bits(int n, int q) {
  if (n == 0) return 0;
  int top = 7;
  while (!((n >> top) & 1)) --top;
  const int biased = top + q + 127;
  const int mant = (n << (7 - top)) & 0x7F;
  return static_cast<uint16_t>((biased << 7) | mant);
}
// e4m3 magnitude code c (0..127) / 256: normal (8 + m) * 2^(e - 18), subnormal m * 2^-17.
constexpr uint16_t e4m3_mag_bf16(int c) {
  const int e = c >> 3, m = c & 7;
  return bf16_bits(e ? 8 + m : m, (e ? e : 1) - 18);
}
static_assert(e4m3_mag_bf16(0x38) == 0x3B80, "e4m3 1.0 / 256 = 2^-8");
static_assert(e4m3_mag_bf16(0x01) == 0x3700, "e4m3 2^-9 (smallest subnormal) / 256 = 2^-17");
static_assert(e4m3_mag_bf16(0x07) == 0x3860, "e4m3 7 * 2^-9 / 256 = 1.75 * 2^-15");
static_assert(e4m3_mag_bf16(0x7E) == 0x3FE0, "e4m3 448 / 256 = 1.75");

// The e4m3 codes 0-7 (zero and the subnormals) / 256 as bf16.
constexpr WordTable kFp8Sub = word_table(8, [](int c) { return e4m3_mag_bf16(c); });

// The e4m3 code in the low (kHigh false) or high byte of every word of w -> bf16(value / 256) in the
// word; sub = kFp8Sub. Normal codes by arithmetic: the code's 7 magnitude bits shifted to bits 4-10 put
// e and m where bf16 keeps them, and OR-ing 0x3800 adds the exponent bias difference (127 - 7 - 8: the
// / 256 convention) without a carry. Zero and subnormal codes (exponent field 0) come from the table by
// one masked vpermw; the sign is OR-ed in last. Six ops, two of them on the shuffle port. The e4m3 NaN
// (0x7F) would decode as 480, as everywhere in these kernels: pack_stack refuses stacks holding it.
template <bool kHigh>
[[gnu::always_inline]] inline __m512i fp8_word_bf16(__m512i w, __m512i sub) {
  const __m512i em = _mm512_set1_epi16(0x07F0), bias = _mm512_set1_epi16(0x3800);
  const __m512i sign = _mm512_set1_epi16(static_cast<short>(0x8000));
  if constexpr (!kHigh) {
    __m512i r = _mm512_ternarylogic_epi32(_mm512_slli_epi16(w, 4), em, bias, 0xEA);  // (w << 4 & em) | bias
    r = _mm512_mask_permutexvar_epi16(r, _mm512_testn_epi16_mask(w, _mm512_set1_epi16(0x0078)), w, sub);
    return _mm512_ternarylogic_epi32(r, _mm512_slli_epi16(w, 8), sign, 0xF8);  // r | (w << 8 & sign)
  } else {
    __m512i r = _mm512_ternarylogic_epi32(_mm512_srli_epi16(w, 4), em, bias, 0xEA);
    r = _mm512_mask_permutexvar_epi16(r, _mm512_testn_epi16_mask(w, _mm512_set1_epi16(0x7800)),
                                      _mm512_srli_epi16(w, 8), sub);
    return _mm512_ternarylogic_epi32(r, w, sign, 0xF8);
  }
}

// fp8_word_bf16 for words whose code in that byte is normal (exponent field not 0): the same words
// without the table lookup. A word holding 16 x the sign-extended code puts its 7 magnitude bits at
// 4-10 and copies its sign into bits 11-15, so one vpternlog keeping bits 4-10 and 15 and OR-ing the
// bias finishes the word. The high byte gets there by an arithmetic shift right by 4; the low byte by
// vpmaddubsw with 16 in every even byte slot and 0 in the odd ones (16 x the signed low byte, at most
// 2048 in magnitude: no saturation). Two ops a byte, none on the shuffle port. Checked against
// fp8_word_bf16 on all 65536 words (tests: Fp8WordDecodeAllWords). Zero and subnormal codes would come
// out wrong, so callers check first (fp8_codes_normal).
template <bool kHigh>
[[gnu::always_inline]] inline __m512i fp8_word_bf16_normal(__m512i w) {
  const __m512i keep = _mm512_set1_epi16(static_cast<short>(0x87F0)), bias = _mm512_set1_epi16(0x3800);
  // (vpmaddubsw takes the unsigned operand first: 16 and 0 in each word's two bytes)
  const __m512i s = kHigh ? _mm512_srai_epi16(w, 4) : _mm512_maddubs_epi16(_mm512_set1_epi16(16), w);
  return _mm512_ternarylogic_epi32(s, keep, bias, 0xEA);  // (s & keep) | bias
}
// Whether every e4m3 byte of a (and b) is a normal code (exponent field, bits 3-6, not 0).
[[gnu::always_inline]] inline bool fp8_codes_normal(__m512i a) {
  return _mm512_testn_epi8_mask(a, _mm512_set1_epi8(0x78)) == 0;
}
[[gnu::always_inline]] inline bool fp8_codes_normal(__m512i a, __m512i b) {
  const __m512i e = _mm512_set1_epi8(0x78);
  return (_mm512_testn_epi8_mask(a, e) | _mm512_testn_epi8_mask(b, e)) == 0;
}

// fp8 formats, whose VNNI words hold two pairs (kernels.hpp).
template <PackFmt F>
inline constexpr bool kFp8Words = F == PackFmt::kFp8 || F == PackFmt::kFp8Block;

// k pair p -> we (k = 2p, 16 lanes), wo (k = 2p + 1).
template <PackFmt F>
inline void load2(const uint8_t* d, int64_t p, __m512& we, __m512& wo) {
  if constexpr (F == PackFmt::kF32) {
    const float* f = reinterpret_cast<const float*>(d) + p * 32;
    we = _mm512_loadu_ps(f);
    wo = _mm512_loadu_ps(f + 16);
  } else if constexpr (F == PackFmt::kF16) {
    const uint8_t* q = d + p * 64;
    we = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
    wo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32)));
  } else if constexpr (F == PackFmt::kBF16) {
    const __m512i z = _mm512_loadu_si512(d + p * 64);
    we = _mm512_castsi512_ps(_mm512_slli_epi32(z, 16));
    wo = _mm512_castsi512_ps(_mm512_and_si512(z, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  } else if constexpr (kFp8Words<F>) {
    static_assert(F != F, "fp8 VNNI words hold two pairs: load2x2");
  } else if constexpr (F == PackFmt::kInt8) {
    we = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(ld128(d + p * 32)));
    wo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(ld128(d + p * 32 + 16)));
  } else {  // e2m1 in VNNI words (kernels.hpp): pair p is nibble p % 4 of each word, decoded to bf16
    const __m512i w = _mm512_loadu_si512(d + (p / 4) * kVnniWordBytes);
    const __m512i c = _mm512_srl_epi16(w, _mm_cvtsi32_si128(static_cast<int>(4 * (p % 4))));
    const __m512i v = _mm512_permutexvar_epi16(c, _mm512_load_si512(kE2m1Words.v));
    we = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));  // word 2l: k even of lane l
    wo = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
}

// Pairs p and p + 1 (p even): fp8 VNNI words are decoded from one load, low then high byte, with no
// branch on p's parity; other formats pair by pair.
template <PackFmt F>
[[gnu::always_inline]] inline void load2x2(const uint8_t* d, int64_t p, __m512& we0, __m512& wo0, __m512& we1,
                                           __m512& wo1) {
  if constexpr (kFp8Words<F>) {
    const __m512i w = _mm512_loadu_si512(d + (p / 2) * kVnniWordBytes);
    const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    __m512i v0, v1;
    if (fp8_codes_normal(w)) [[likely]] {  // no zero or subnormal code: no table (the same words)
      v0 = fp8_word_bf16_normal<false>(w);
      v1 = fp8_word_bf16_normal<true>(w);
    } else {
      const __m512i sub = _mm512_load_si512(kFp8Sub.v);
      v0 = fp8_word_bf16<false>(w, sub);
      v1 = fp8_word_bf16<true>(w, sub);
    }
    we0 = _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16));
    wo0 = _mm512_castsi512_ps(_mm512_and_si512(v0, hi));
    we1 = _mm512_castsi512_ps(_mm512_slli_epi32(v1, 16));
    wo1 = _mm512_castsi512_ps(_mm512_and_si512(v1, hi));
  } else {
    load2<F>(d, p, we0, wo0);
    load2<F>(d, p + 1, we1, wo1);
  }
}

// The 16 lanes' scale of K group g: fp8 block (f32 times 256, each lane's from its scale slot:
// kernels.hpp, group_scales_bytes), mxfp4 (e8m0: 2^(e - 127), e = 0 -> 2^-127, e = 255 -> NaN), nvfp4
// (e4m3 / 256 times gmul = 256 * global scale); 1 otherwise.
template <PackFmt F>
inline __m512 group_scale(const uint8_t* gs, int64_t g, float gmul) {
  if constexpr (F == PackFmt::kFp8Block) {
    static_assert(kFp8ScaleSlots == 4, "one 128-bit load of slots a group");
    const __m512 slots = _mm512_broadcast_f32x4(_mm_loadu_ps(reinterpret_cast<const float*>(gs + kLanes) + g * kFp8ScaleSlots));
    return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(ld128(gs)), slots);
  } else if constexpr (F == PackFmt::kMxfp4) {
    const __m512i e = _mm512_cvtepu8_epi32(ld128(gs + g * 16));
    __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
    v = _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                           _mm512_castsi512_ps(_mm512_set1_epi32(0x00400000)));
    v = _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(255)), _mm512_set1_ps(__builtin_nanf("")));
    return v;
  } else if constexpr (F == PackFmt::kNvfp4) {
    return _mm512_mul_ps(e4m3x16(ld128(gs + g * 16)), _mm512_set1_ps(gmul));
  } else {
    (void)gs; (void)g; (void)gmul;
    return _mm512_set1_ps(1.0f);
  }
}

// A dequantized panel's values, pair by pair: put(p, we, wo) for every k pair p of block b in order, with
// we / wo the 16 lanes of k = 2p / 2p + 1 in f32 and the K group's scale multiplied in. The AVX-512 f32
// panel (dequant_panel_avx512) stores them; the AMX tiles' bf16 panel (panel_bf16_vnni) rounds them to
// bf16 words, so the two panels hold the same values by construction.
template <PackFmt F, typename Put>
[[gnu::always_inline]] inline void for_each_panel_pair(const BlockRef& b, Put&& put) {
  constexpr int G = group_size(F);
  const int64_t pairs = b.kp / 2, gp = G ? G / 2 : pairs;
  for (int64_t p0 = 0; p0 < pairs; p0 += gp) {
    __m512 s = _mm512_set1_ps(1.0f);
    if constexpr (G != 0) s = group_scale<F>(b.gscale, p0 / gp, b.gmul);
    const int64_t pe = p0 + gp < pairs ? p0 + gp : pairs;
    if constexpr (kFp8Words<F>) {  // two pairs a load (kp is a multiple of kKAlign, so pairs is even)
      for (int64_t p = p0; p < pe; p += 2) {
        __m512 w[4];
        load2x2<F>(b.data, p, w[0], w[1], w[2], w[3]);
        if constexpr (G != 0)
          for (int j = 0; j < 4; ++j) w[j] = _mm512_mul_ps(w[j], s);
        put(p, w[0], w[1]);
        put(p + 1, w[2], w[3]);
      }
    } else {
      for (int64_t p = p0; p < pe; ++p) {
        __m512 we, wo;
        load2<F>(b.data, p, we, wo);
        if constexpr (G != 0) {
          we = _mm512_mul_ps(we, s);
          wo = _mm512_mul_ps(wo, s);
        }
        put(p, we, wo);
      }
    }
  }
}

// nvfp4: the scales of K groups g and g + 1 (g even) from one 32-byte load, as e4m3 / 256 without the
// global scale, which the caller multiplies into its sums once. A block always has an even number of
// nvfp4 groups (BlockRef::kp is a multiple of kKAlign = 2 groups; prepack pads K so). The conversion
// is e4m3x16's on 32 bytes at once. Against group_scale per group this saves one conversion and the
// gmul product per group: on the H200 host's Xeon, one token in L2, 1.63-1.85 against 1.84-2.06 ns
// per k pair (bench/results/2026-11-30_s9_h200-and-host-xeon, call 2).
inline void nvfp4_scale_pair(const uint8_t* gs, int64_t g, __m512& s0, __m512& s1) {
  static_assert(kKAlign % (2 * group_size(PackFmt::kNvfp4)) == 0, "an even number of nvfp4 groups per block");
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(gs + g * 16));
  __m512i h = _mm512_slli_epi16(_mm512_cvtepu8_epi16(v), 8);
  h = _mm512_and_si512(_mm512_srai_epi16(h, 1), _mm512_set1_epi16(static_cast<short>(0xBFFF)));
  s0 = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  s1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

}  // namespace
}  // namespace moerun::cpu::kernels
