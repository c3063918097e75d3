// Inline element codecs, private to the library: the bodies behind the codec functions of
// moerun/formats.hpp (which forward here), for hot loops that want them inlined (quantization,
// dequantization, reference kernels). Same contracts as the public functions.
//
// NOTES: every encoder works on the bits of the f32 input. The narrow formats share one rounding
// routine (round_magnitude below; e4m3 and e2m1, hot in quantization, have faster equivalents): it keeps the top kMan bits below the leading one, with extra bits
// dropped when the result is subnormal in the narrow format, and rounds the dropped bits to nearest
// even. Codes of a sign-magnitude float are ordered like the magnitudes they encode, so overflow is
// handled afterwards by comparing codes: saturate (fp8, fp4) or go to inf (fp16, as IEEE does).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace moerun::codec {


constexpr uint32_t kF32Inf = 0x7F800000u;
constexpr uint32_t kF32AbsMask = 0x7FFFFFFFu;

inline uint32_t bits_of(float f) noexcept { return std::bit_cast<uint32_t>(f); }
inline float float_of(uint32_t u) noexcept { return std::bit_cast<float>(u); }

// Rounds a finite magnitude (f32 bits, sign cleared) to the nearest value of a sign-magnitude float
// with kMan mantissa bits and exponent bias kBias, ties to even, and returns that value's code without
// its sign. The exponent width is not needed: a magnitude past the format's largest finite value
// yields a code past the largest finite code, which the caller saturates or turns into inf.
template <int kMan, int kBias>
inline uint32_t round_magnitude(uint32_t a) noexcept {
  constexpr int kMinNormalExp = 1 - kBias;  // unbiased exponent of the smallest normal
  int exp = static_cast<int>(a >> 23) - 127;
  uint32_t mant = a & 0x7FFFFFu;
  if (exp == -127) {
    exp = -126;  // f32 subnormal: no implicit bit
  } else {
    mant |= 0x800000u;
  }
  // mant * 2^(exp - 23) is the value; keep kMan bits after the leading one, or fewer when the result
  // is subnormal in the narrow format (its exponent is pinned at kMinNormalExp).
  // Past 25 the result is 0 anyway (mant < 2^24 <= half), and the shifts below stay defined.
  const int shift = std::min(23 - kMan + std::max(0, kMinNormalExp - exp), 25);
  // Round to nearest even without a branch (the rounding direction of data is unpredictable): add
  // just under half, plus one when the kept part is odd, so exact halves carry only from odd.
  const uint32_t half = 1u << (shift - 1);
  const uint32_t q = (mant + (half - 1u) + ((mant >> shift) & 1u)) >> shift;
  // q holds the implicit bit for normals, so adding it to (biased exponent - 1) << kMan both sets the
  // exponent and lets a mantissa carry (q == 2^(kMan+1)) bump it. Subnormals get exponent field 0.
  const int biased_minus_one = std::max(exp, kMinNormalExp) + kBias - 1;
  return (static_cast<uint32_t>(biased_minus_one) << kMan) + q;
}

inline float fp16_to_f32(uint16_t h) noexcept {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in f32
    return float_of(sign | bits_of(static_cast<float>(mant) * 0x1p-24f));
  }
  if (exp == 0x1F) return float_of(sign | kF32Inf | (mant << 13));  // inf, or NaN keeping its payload
  return float_of(sign | ((exp + 112u) << 23) | (mant << 13));       // rebias 15 -> 127
}

// IEEE binary16 conversion: overflow past 65504 rounds to inf (as every fp16 cast does), unlike the
// saturating fp8/fp4 quantizer encoders. NaN stays NaN (quieted, top payload bits kept).
inline uint16_t f32_to_fp16(float f) noexcept {
  const uint32_t x = bits_of(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & kF32AbsMask;
  if (a > kF32Inf) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a == kF32Inf) return static_cast<uint16_t>(sign | 0x7C00u);
  const uint32_t code = round_magnitude<10, 15>(a);
  return static_cast<uint16_t>(sign | std::min(code, 0x7C00u));
}

inline float bf16_to_f32(uint16_t b) noexcept { return float_of(static_cast<uint32_t>(b) << 16); }

// bfloat16 is the top half of an f32, so rounding is one add: the carry out of the dropped 16 bits
// propagates into the exponent and, past the largest finite value, into inf (IEEE behaviour).
inline uint16_t f32_to_bf16(float f) noexcept {
  const uint32_t x = bits_of(f);
  if ((x & kF32AbsMask) > kF32Inf) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

inline float e4m3_to_f32(uint8_t v) noexcept {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xFu;
  const uint32_t mant = v & 0x7u;
  if ((v & 0x7Fu) == 0x7Fu) return float_of(sign | 0x7FC00000u);  // the only NaN codes
  if (exp == 0) return float_of(sign | bits_of(static_cast<float>(mant) * 0x1p-9f));
  return float_of(sign | ((exp + 120u) << 23) | (mant << 20));  // rebias 7 -> 127
}

// The hot encoder of fp8 quantization, so it is specialised and free of data-dependent branches:
//  - e4m3 normals (|f| >= 2^-6) keep the top 3 mantissa bits of the f32: round to nearest even at
//    bit 20 with one add, shift, and rebias the exponent (127 -> 7, i.e. subtract 120 << 3);
//  - e4m3 subnormals are multiples of 2^-9: adding 2^14, whose ulp is 2^-9, makes the FPU round |f|
//    to one (nearest even, the default mode), and the code is the distance in ulps from 2^14;
//  - past the largest finite value (including inf) saturate to 448; NaN becomes 0x7F.
inline uint8_t f32_to_e4m3(float f) noexcept {
  const uint32_t x = bits_of(f);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t a = x & kF32AbsMask;
  const uint32_t normal = ((a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20) - (120u << 3);
  const uint32_t subnormal = bits_of(float_of(a) + 16384.0f) - 0x46800000u;  // 0x46800000 = 2^14
  // Selections by mask rather than ?: so that loops over this function vectorize (GCC will not
  // if-convert a branch around the FP add under the default -ftrapping-math).
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(a < 0x3C800000u);  // 0x3C800000 = 2^-6
  const uint32_t code = std::min((subnormal & is_subnormal) | (normal & ~is_subnormal), 0x7Eu);
  const uint32_t is_nan = 0u - static_cast<uint32_t>(a > kF32Inf);
  return static_cast<uint8_t>((0x7Fu & is_nan) | ((sign | code) & ~is_nan));
}

// e5m2 is the top byte of an fp16 (same exponent, 2 of its 10 mantissa bits), so decoding is exact
// through fp16. Encoding is not (double rounding), hence its own round_magnitude instance.
inline float e5m2_to_f32(uint8_t v) noexcept { return fp16_to_f32(static_cast<uint16_t>(v << 8)); }

inline uint8_t f32_to_e5m2(float f) noexcept {
  const uint32_t x = bits_of(f);
  const auto sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t a = x & kF32AbsMask;
  if (a > kF32Inf) return 0x7F;
  if (a == kF32Inf) return static_cast<uint8_t>(sign | 0x7Cu);  // inf stays inf
  const uint32_t code = round_magnitude<2, 15>(a);
  return static_cast<uint8_t>(sign | std::min(code, 0x7Bu));  // finite overflow saturates to 57344
}

inline float e8m0_to_f32(uint8_t v) noexcept {
  if (v == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  if (v == 0) return float_of(0x00400000u);  // 2^-127 is an f32 subnormal
  return float_of(static_cast<uint32_t>(v) << 23);
}

// e8m0 and f32 share the exponent bias (127), so for a normal f32 the answer is its exponent field,
// plus one when any mantissa bit is set. Returns 0 (2^-127) for f <= 0, 254 (2^127) for values past
// 2^127 including inf, and 0xFF (NaN) for NaN.
inline uint8_t f32_to_e8m0_ceil(float f) noexcept {
  const uint32_t x = bits_of(f);
  if ((x & kF32AbsMask) > kF32Inf) return 0xFF;
  if ((x & 0x80000000u) || x == 0) return 0;
  const uint32_t exp = x >> 23;
  const uint32_t mant = x & 0x7FFFFFu;
  if (exp == 0) return mant <= 0x00400000u ? 0 : 1;  // f32 subnormal: 2^-127 or 2^-126
  return static_cast<uint8_t>(std::min(exp + (mant != 0 ? 1u : 0u), 254u));
}

inline float e2m1_to_f32(uint8_t nibble) noexcept {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return float_of(bits_of(kValues[nibble & 0x7u]) | (static_cast<uint32_t>(nibble & 0x8u) << 28));
}

// e2m1 has only eight magnitudes, so its code is the number of rounding boundaries |f| passes. The
// boundaries are the midpoints between neighbours; at a midpoint the even code wins, hence ">" where
// the lower neighbour's code is even and ">=" where it is odd. NaN passes none (0); inf passes all
// (6, saturated). A value that rounds to zero keeps its sign (0x8), so every code round-trips.
inline uint8_t f32_to_e2m1(float f) noexcept {
  const float a = std::fabs(f);
  const uint32_t code = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                        (a >= 3.5f) + (a > 5.0f);
  const uint32_t not_nan = 0u - static_cast<uint32_t>(a == a);  // a mask, so that loops vectorize
  return static_cast<uint8_t>(((bits_of(f) >> 28) & 0x8u & not_nan) | code);
}

}  // namespace moerun::codec
