// cpu/kernels/bf16_decode.hpp — packed weights of one k pair decoded straight to 32 bf16 words in VNNI
// order (word 2l = k 2p of lane l, word 2l + 1 = k 2p + 1 of lane l): the operand order of VDPBF16PS and
// of an AMX B tile row. Shared by the AVX512-BF16 streaming kernel (gemm_avx512bf16.cpp) and the AMX
// decode stream (gemm_amx.cpp); how each format decodes is in gemm_avx512bf16.cpp's NOTES.
//
// Internal linkage (an unnamed namespace) like avx512_decode.hpp: the including files are compiled
// with different -m flags. Needs AVX-512F/BW and AVX512-VBMI.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/kernels/avx512_decode.hpp"
#include "backends/cpu/kernels/kernels.hpp"

namespace moerun::cpu::kernels {
namespace {

// ---- tables ----------------------------------------------------------------------------------------
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

struct alignas(64) Tables {
  uint8_t fp8_spread[64] = {};                 // vpermb index: byte j <- code of its word
  uint16_t fp8_sub[32] = {};                   // e4m3 subnormal magnitude m (index m < 8) / 256 as bf16
};

constexpr Tables make_tables() {
  Tables t;
  for (int c = 0; c < 8; ++c) t.fp8_sub[c] = e4m3_mag_bf16(c);
  for (int j = 0; j < 64; ++j) {
    const int word = j / 2, lane = word / 2, odd = word & 1;
    // fp8 pair: bytes 0-15 = k even of lanes 0-15, bytes 16-31 = k odd.
    t.fp8_spread[j] = static_cast<uint8_t>(odd * 16 + lane);
  }
  return t;
}
constexpr Tables kTab = make_tables();

static_assert(e4m3_mag_bf16(0x38) == 0x3B80, "e4m3 1.0 / 256 = 2^-8");
static_assert(e4m3_mag_bf16(0x01) == 0x3700, "e4m3 2^-9 (smallest subnormal) / 256 = 2^-17");
static_assert(e4m3_mag_bf16(0x07) == 0x3860, "e4m3 7 * 2^-9 / 256 = 1.75 * 2^-15");
static_assert(e4m3_mag_bf16(0x7E) == 0x3FE0, "e4m3 448 / 256 = 1.75");
static_assert(kE2m1Words.v[7] == 0x40C0 && kE2m1Words.v[9] == 0xBF00 && kE2m1Words.v[16 + 5] == 0x4040,
              "e2m1 6, -0.5, 3");

inline __m512i ld512(const void* p) { return _mm512_load_si512(p); }

// ---- weight decoders: one k pair -> 32 bf16 in VNNI word order --------------------------------------
// Dec<F>(d, p) decodes pair p; decode_quad decodes pairs p .. p + 3 (p a multiple of 4), which the
// kernels use: e2m1 quads (kernels.hpp) share one load and need no byte shuffle there.
template <PackFmt F> struct Dec;

template <> struct Dec<PackFmt::kBF16> {
  __m512i operator()(const uint8_t* d, int64_t p) const { return _mm512_loadu_si512(d + p * 64); }
};

template <> struct Dec<PackFmt::kFp8> {
  // Normal codes by arithmetic: |code| << 4 puts e and m where bf16 keeps them, and OR-ing 0x3800 adds
  // the exponent bias difference (127 - 7 - 8: the / 256 convention) without a carry (|code| << 4 <
  // 0x800). Zero and subnormal codes (exponent field 0) come from a table by one masked vpermw. Three
  // shuffle-port ops per 32 weights (vpermb, vptestnmw, vpermw) instead of the two-table vpermi2b
  // lookups (each several shuffle uops on Intel cores).
  static constexpr __mmask64 kEvenBytes = 0x5555555555555555ull;
  const __m512i spread = ld512(kTab.fp8_spread);
  const __m512i sub = ld512(kTab.fp8_sub);
  const __m512i em = _mm512_set1_epi16(0x07F0), bias = _mm512_set1_epi16(0x3800);
  const __m512i expo = _mm512_set1_epi16(0x0078), sign = _mm512_set1_epi16(static_cast<short>(0x8000));
  __m512i operator()(const uint8_t* d, int64_t p) const {
    // Upper 256 bits undefined: the spread indices are all below 32.
    const __m512i src = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + p * 32)));
    const __m512i w = _mm512_maskz_permutexvar_epi8(kEvenBytes, spread, src);      // word = code (0..255)
    __m512i r = _mm512_ternarylogic_epi32(_mm512_slli_epi16(w, 4), em, bias, 0xEA);  // (w << 4 & em) | bias
    r = _mm512_mask_permutexvar_epi16(r, _mm512_testn_epi16_mask(w, expo), w, sub);   // e == 0: table[m]
    return _mm512_ternarylogic_epi32(r, _mm512_slli_epi16(w, 8), sign, 0xF8);          // r | (w << 8 & sign)
  }
};
template <> struct Dec<PackFmt::kFp8Block> : Dec<PackFmt::kFp8> {};

template <> struct Dec<PackFmt::kMxfp4> {
  // Pair p is nibble p % 4 of its quad's words: one shift and one vpermw (the table only reads the low
  // five bits of each word, and repeats its 16 entries, so the higher nibbles do not matter).
  const __m512i lut = ld512(kE2m1Words.v);
  __m512i operator()(const uint8_t* d, int64_t p) const {
    const __m512i w = _mm512_loadu_si512(d + (p / 4) * kFp4QuadBytes);
    return _mm512_permutexvar_epi16(_mm512_srl_epi16(w, _mm_cvtsi32_si128(static_cast<int>(4 * (p % 4)))), lut);
  }
  void quad(const uint8_t* d, int64_t p, __m512i& w0, __m512i& w1, __m512i& w2, __m512i& w3) const {
    const __m512i w = _mm512_loadu_si512(d + (p / 4) * kFp4QuadBytes);
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
  if constexpr (F == PackFmt::kMxfp4 || F == PackFmt::kNvfp4) {
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
