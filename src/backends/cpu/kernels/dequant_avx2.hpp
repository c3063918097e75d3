// cpu/kernels/dequant_avx2.hpp — AVX2/F16C decoders of the packed weight encodings (kernels.hpp).
// Included only by translation units compiled for AVX2 + FMA + F16C.
//
// Each decoder turns one k pair (k = 2p, 2p + 1) of a 16-lane N-block into four vectors of 8 floats:
//   w[0] = k even, lanes 0-7   w[1] = k even, lanes 8-15   w[2] = k odd, lanes 0-7   w[3] = k odd, 8-15
// NOTES: fp8 e4m3 and e2m1 are decoded through fp16 bit patterns (exact: every e4m3 and e2m1 value is
// an fp16 value) and F16C's vcvtph2ps. e4m3 -> fp16 bits is (v << 7) with the sign moved to bit 15, which
// is (int16)(v << 8) >> 1 with bit 14 cleared; the value comes out 2^-8 too small, so fp8 scales carry
// a factor 256 (prepack folds it in). The e4m3 NaN (0x7F) would decode as 480: pack_stack refuses it.
// Measured on Zen 1 (one core, L1-resident, k pair = 32 e4m3 weights, 4 FMAs): this decoder 5.2 ns per
// pair; e4m3 built directly as f32 bits (vpmovsxbd, << 20, & 0x87F00000) then x 2^120 6.8 ns (and e4m3
// subnormals become f32 denormals there, which cost Zen 1 a microcode assist: 2.8x the fp16 decoder's
// time with 1/16 of the codes subnormal); half of each pair either way 6.1 ns; bf16 (shift/and, no
// conversion) 2.75 ns. Zen 1 runs vcvtph2ps ymm at about one per 2.5-3 cycles, which bounds every
// converted format's decode.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/kernels.hpp"

namespace moerun::cpu::kernels::avx2 {

inline __m128i load_lo64(const uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); }
inline __m128i load128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// 16 e4m3 bytes -> two vectors of 8 floats (value / 256).
inline void e4m3x16(__m128i v, __m256& lo, __m256& hi) {
  const __m128i z = _mm_setzero_si128(), m = _mm_set1_epi16(static_cast<short>(0xBFFF));
  __m128i a = _mm_and_si128(_mm_srai_epi16(_mm_unpacklo_epi8(z, v), 1), m);
  __m128i b = _mm_and_si128(_mm_srai_epi16(_mm_unpackhi_epi8(z, v), 1), m);
  lo = _mm256_cvtph_ps(a);
  hi = _mm256_cvtph_ps(b);
}

// e2m1 nibble -> high byte of the fp16 of its value (low byte is always 0): 0, .5, 1, 1.5, 2, 3, 4, 6.
inline __m128i e2m1_lut() {
  return _mm_setr_epi8(0x00, 0x38, 0x3C, 0x3E, 0x40, 0x42, 0x44, 0x46, static_cast<char>(0x80),
                       static_cast<char>(0xB8), static_cast<char>(0xBC), static_cast<char>(0xBE),
                       static_cast<char>(0xC0), static_cast<char>(0xC2), static_cast<char>(0xC4),
                       static_cast<char>(0xC6));
}

template <PackFmt F> struct Dec;

template <> struct Dec<PackFmt::kF32> {
  static inline void load2(const uint8_t* d, int64_t p, __m256 w[4]) {
    const float* f = reinterpret_cast<const float*>(d) + p * 32;
    w[0] = _mm256_loadu_ps(f);      w[1] = _mm256_loadu_ps(f + 8);
    w[2] = _mm256_loadu_ps(f + 16); w[3] = _mm256_loadu_ps(f + 24);
  }
};

template <> struct Dec<PackFmt::kF16> {
  static inline void load2(const uint8_t* d, int64_t p, __m256 w[4]) {
    const uint8_t* q = d + p * 64;
    w[0] = _mm256_cvtph_ps(load128(q));      w[1] = _mm256_cvtph_ps(load128(q + 16));
    w[2] = _mm256_cvtph_ps(load128(q + 32)); w[3] = _mm256_cvtph_ps(load128(q + 48));
  }
};

template <> struct Dec<PackFmt::kBF16> {
  // A 32-bit word holds (k even, k odd) of one lane: k even is word << 16, k odd is word & 0xFFFF0000.
  static inline void load2(const uint8_t* d, int64_t p, __m256 w[4]) {
    const __m256i* q = reinterpret_cast<const __m256i*>(d + p * 64);
    const __m256i a = _mm256_loadu_si256(q), b = _mm256_loadu_si256(q + 1);
    const __m256i hm = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    w[0] = _mm256_castsi256_ps(_mm256_slli_epi32(a, 16));
    w[1] = _mm256_castsi256_ps(_mm256_slli_epi32(b, 16));
    w[2] = _mm256_castsi256_ps(_mm256_and_si256(a, hm));
    w[3] = _mm256_castsi256_ps(_mm256_and_si256(b, hm));
  }
};

template <> struct Dec<PackFmt::kFp8> {
  static inline void load2(const uint8_t* d, int64_t p, __m256 w[4]) {
    const uint8_t* q = d + p * 32;
    e4m3x16(load128(q), w[0], w[1]);
    e4m3x16(load128(q + 16), w[2], w[3]);
  }
};
template <> struct Dec<PackFmt::kFp8Block> : Dec<PackFmt::kFp8> {};

template <> struct Dec<PackFmt::kInt8> {
  static inline void load2(const uint8_t* d, int64_t p, __m256 w[4]) {
    const uint8_t* q = d + p * 32;
    w[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load_lo64(q)));
    w[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load_lo64(q + 8)));
    w[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load_lo64(q + 16)));
    w[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load_lo64(q + 24)));
  }
};

template <> struct Dec<PackFmt::kMxfp4> {
  // 16 bytes = k even (bytes 0-7) and k odd (bytes 8-15); low nibbles are lanes 0-7, high lanes 8-15.
  static inline void load2(const uint8_t* d, int64_t p, __m256 w[4]) {
    const __m128i x = load128(d + p * 16), nib = _mm_set1_epi8(0x0F), z = _mm_setzero_si128();
    const __m128i lut = e2m1_lut();
    const __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(x, nib));
    const __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(x, 4), nib));
    w[0] = _mm256_cvtph_ps(_mm_unpacklo_epi8(z, lo));
    w[1] = _mm256_cvtph_ps(_mm_unpacklo_epi8(z, hi));
    w[2] = _mm256_cvtph_ps(_mm_unpackhi_epi8(z, lo));
    w[3] = _mm256_cvtph_ps(_mm_unpackhi_epi8(z, hi));
  }
};
template <> struct Dec<PackFmt::kNvfp4> : Dec<PackFmt::kMxfp4> {};

// Group scale of group g, lanes 0-7 -> s0, lanes 8-15 -> s1.
template <PackFmt F>
inline void group_scale(const uint8_t* gs, int64_t g, float gmul, __m256& s0, __m256& s1) {
  if constexpr (F == PackFmt::kFp8Block) {  // each lane's slot (kernels.hpp, group_scales_bytes)
    static_assert(kFp8ScaleSlots == 4, "one 128-bit load of slots a group");
    const __m256 slots = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(gs + kLanes) + g);
    s0 = _mm256_permutevar8x32_ps(slots, _mm256_cvtepu8_epi32(load_lo64(gs)));
    s1 = _mm256_permutevar8x32_ps(slots, _mm256_cvtepu8_epi32(load_lo64(gs + 8)));
  } else if constexpr (F == PackFmt::kMxfp4) {
    // e8m0 -> f32: bits e << 23; e = 0 is 2^-127 (a subnormal), e = 255 is NaN.
    auto cvt = [](__m128i b) {
      const __m256i e = _mm256_cvtepu8_epi32(b);
      __m256 v = _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
      const __m256 sub = _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000));
      v = _mm256_blendv_ps(v, sub, _mm256_castsi256_ps(_mm256_cmpeq_epi32(e, _mm256_setzero_si256())));
      v = _mm256_blendv_ps(v, _mm256_set1_ps(__builtin_nanf("")),
                           _mm256_castsi256_ps(_mm256_cmpeq_epi32(e, _mm256_set1_epi32(255))));
      return v;
    };
    const uint8_t* q = gs + g * 16;
    s0 = cvt(load_lo64(q));
    s1 = cvt(load_lo64(q + 8));
  } else if constexpr (F == PackFmt::kNvfp4) {
    e4m3x16(load128(gs + g * 16), s0, s1);
    const __m256 m = _mm256_set1_ps(gmul);
    s0 = _mm256_mul_ps(s0, m);
    s1 = _mm256_mul_ps(s1, m);
  } else {
    (void)gs; (void)g; (void)gmul;
    s0 = s1 = _mm256_set1_ps(1.0f);
  }
}

}  // namespace moerun::cpu::kernels::avx2
