// The session-18 fp8 decode (arithmetic shift) against the one before it on all 65536 words, standalone:
//   g++ -O2 -mavx512f -mavx512bw -std=c++20 fp8_word_decode_check_standalone.cpp && ./a.out
// (the library's test, Fp8WordDecodeAllWords, compares the new fast path with the table path instead).
#include <immintrin.h>
#include <cstdio>
#include <cstdint>
template <bool kHigh> __m512i old_(__m512i w) {
  const __m512i em = _mm512_set1_epi16(0x07F0), bias = _mm512_set1_epi16(0x3800);
  const __m512i sign = _mm512_set1_epi16((short)0x8000);
  if constexpr (!kHigh) {
    const __m512i r = _mm512_ternarylogic_epi32(_mm512_slli_epi16(w, 4), em, bias, 0xEA);
    return _mm512_ternarylogic_epi32(r, _mm512_slli_epi16(w, 8), sign, 0xF8);
  } else {
    const __m512i r = _mm512_ternarylogic_epi32(_mm512_srli_epi16(w, 4), em, bias, 0xEA);
    return _mm512_ternarylogic_epi32(r, w, sign, 0xF8);
  }
}
template <bool kHigh> __m512i new_(__m512i w) {
  const __m512i keep = _mm512_set1_epi16((short)0x87F0), bias = _mm512_set1_epi16(0x3800);
  const __m512i s = kHigh ? _mm512_srai_epi16(w, 4) : _mm512_srai_epi16(_mm512_slli_epi16(w, 8), 4);
  return _mm512_ternarylogic_epi32(s, keep, bias, 0xEA);
}
int main() {
  long bad = 0;
  for (int base = 0; base < 65536; base += 32) {
    alignas(64) uint16_t in[32], a[32], b[32];
    for (int i = 0; i < 32; ++i) in[i] = base + i;
    __m512i w = _mm512_load_si512(in);
    _mm512_store_si512(a, old_<false>(w)); _mm512_store_si512(b, new_<false>(w));
    for (int i = 0; i < 32; ++i) if (a[i] != b[i]) ++bad;
    _mm512_store_si512(a, old_<true>(w)); _mm512_store_si512(b, new_<true>(w));
    for (int i = 0; i < 32; ++i) if (a[i] != b[i]) ++bad;
  }
  printf("mismatches %ld\n", bad);
}
