// The fp8 word decoders of avx512_decode.hpp compared on every 16-bit word, both bytes: the normal
// path (fp8_word_bf16_normal) must give the full decoder's words wherever that byte's code is normal.
// Compiled with AVX-512 flags (tests/CMakeLists.txt) and holding no static initializers, so the test
// binary still starts on machines without AVX-512; the test calls it only where AVX-512 runs.
#include <cstdint>

#include "backends/cpu/kernels/avx512_decode.hpp"

namespace moerun::cpu::kernels {

int64_t fp8_word_decode_mismatches() {
  const __m512i sub = _mm512_load_si512(kFp8Sub.v);
  int64_t bad = 0;
  for (int base = 0; base < 65536; base += 32) {
    alignas(64) uint16_t in[32], full[32], fast[32];
    for (int i = 0; i < 32; ++i) in[i] = static_cast<uint16_t>(base + i);
    const __m512i w = _mm512_load_si512(in);
    for (int high = 0; high < 2; ++high) {
      _mm512_store_si512(full, high ? fp8_word_bf16<true>(w, sub) : fp8_word_bf16<false>(w, sub));
      _mm512_store_si512(fast, high ? fp8_word_bf16_normal<true>(w) : fp8_word_bf16_normal<false>(w));
      for (int i = 0; i < 32; ++i) {
        const int code = high ? in[i] >> 8 : in[i] & 0xFF;
        if ((code & 0x78) != 0 && full[i] != fast[i]) ++bad;
      }
    }
  }
  return bad;
}

}  // namespace moerun::cpu::kernels
