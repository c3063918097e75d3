// cpu/kernels/bf16_decode.hpp — packed weights of one k pair decoded straight to 32 bf16 words in VNNI
// order (word 2l = k 2p of lane l, word 2l + 1 = k 2p + 1 of lane l): the operand order of VDPBF16PS and
// of an AMX B tile row. Shared by the AVX512-BF16 streaming kernel (gemm_avx512bf16.cpp) and the AMX
// decode stream (gemm_amx.cpp); how each format decodes is in gemm_avx512bf16.cpp's NOTES.
//
// Internal linkage (an unnamed namespace) like avx512_decode.hpp: the including files are compiled
// with different -m flags. Needs AVX-512F/BW (no vpermb since the VNNI-word layouts).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/kernels/avx512_decode.hpp"
#include "backends/cpu/kernels/kernels.hpp"

namespace moerun::cpu::kernels {
namespace {

inline __m512i ld512(const void* p) { return _mm512_load_si512(p); }

// ---- weight decoders: one k pair -> 32 bf16 in VNNI word order --------------------------------------
// decode_quad decodes pairs p .. p + 3 (p a multiple of 4): fp8 and e2m1 in VNNI words (kernels.hpp)
// through Dec<F>::quad, whose loads serve 2 or 4 pairs with no byte shuffle; bf16 pair by pair.
template <PackFmt F> struct Dec;

template <> struct Dec<PackFmt::kBF16> {
  __m512i operator()(const uint8_t* d, int64_t p) const { return _mm512_loadu_si512(d + p * 64); }
};

template <> struct Dec<PackFmt::kFp8> {
  // Two 64-byte loads hold four pairs' codes as the low and high bytes of VNNI words (kernels.hpp);
  // fp8_word_bf16 (avx512_decode.hpp) turns either byte of every word into bf16 in place. Where all
  // 128 codes are normal, the table lookup for zero and subnormal codes is left out (bitwise the same
  // words, 8 instead of 24 ops per quad with the check; NOTES in gemm_avx512bf16.cpp).
  const __m512i sub = ld512(kFp8Sub.v);
  void quad(const uint8_t* d, int64_t p, __m512i& w0, __m512i& w1, __m512i& w2, __m512i& w3) const {
    const __m512i a = _mm512_loadu_si512(d + (p / 2) * kVnniWordBytes);
    const __m512i b = _mm512_loadu_si512(d + (p / 2 + 1) * kVnniWordBytes);
    if (fp8_codes_normal(a, b)) [[likely]] {
      w0 = fp8_word_bf16_normal<false>(a);
      w1 = fp8_word_bf16_normal<true>(a);
      w2 = fp8_word_bf16_normal<false>(b);
      w3 = fp8_word_bf16_normal<true>(b);
      return;
    }
    w0 = fp8_word_bf16<false>(a, sub);
    w1 = fp8_word_bf16<true>(a, sub);
    w2 = fp8_word_bf16<false>(b, sub);
    w3 = fp8_word_bf16<true>(b, sub);
  }
};
template <> struct Dec<PackFmt::kFp8Block> : Dec<PackFmt::kFp8> {};

template <> struct Dec<PackFmt::kMxfp4> {
  // Pair p is nibble p % 4 of its quad's words: one shift and one vpermw (the table only reads the low
  // five bits of each word, and repeats its 16 entries, so the higher nibbles do not matter).
  const __m512i lut = ld512(kE2m1Words.v);
  void quad(const uint8_t* d, int64_t p, __m512i& w0, __m512i& w1, __m512i& w2, __m512i& w3) const {
    const __m512i w = _mm512_loadu_si512(d + (p / 4) * kVnniWordBytes);
    w0 = _mm512_permutexvar_epi16(w, lut);
    w1 = _mm512_permutexvar_epi16(_mm512_srli_epi16(w, 4), lut);
    w2 = _mm512_permutexvar_epi16(_mm512_srli_epi16(w, 8), lut);
    w3 = _mm512_permutexvar_epi16(_mm512_srli_epi16(w, 12), lut);
  }
};
template <> struct Dec<PackFmt::kNvfp4> : Dec<PackFmt::kMxfp4> {};

template <PackFmt F>
[[gnu::always_inline]] inline void decode_quad(const Dec<F>& dec, const uint8_t* d, int64_t p, __m512i& w0, __m512i& w1,
                                               __m512i& w2, __m512i& w3) {
  if constexpr (has_code_layout(F)) {  // fp8 and e2m1: VNNI words at these levels (kernels.hpp)
    dec.quad(d, p, w0, w1, w2, w3);
  } else {
    w0 = dec(d, p);
    w1 = dec(d, p + 1);
    w2 = dec(d, p + 2);
    w3 = dec(d, p + 3);
  }
}

}  // namespace
}  // namespace moerun::cpu::kernels
