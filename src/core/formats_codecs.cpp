// Element codecs (formats.hpp): fp16, bf16, fp8 e4m3fn / e5m2, e8m0, e2m1, and load_as_f32.
//
// NOTES: every encoder works on the bits of the f32 input. The narrow formats share one rounding
// routine (round_magnitude below): it keeps the top kMan bits below the leading one, with extra bits
// dropped when the result is subnormal in the narrow format, and rounds the dropped bits to nearest
// even. Codes of a sign-magnitude float are ordered like the magnitudes they encode, so overflow is
// handled afterwards by comparing codes: saturate (fp8, fp4) or go to inf (fp16, as IEEE does).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "moerun/formats.hpp"

namespace moerun {
namespace {

constexpr uint32_t kF32Inf = 0x7F800000u;
constexpr uint32_t kF32AbsMask = 0x7FFFFFFFu;

inline uint32_t bits_of(float f) noexcept { return std::bit_cast<uint32_t>(f); }
inline float float_of(uint32_t u) noexcept { return std::bit_cast<float>(u); }

template <typename T>
T read_as(const void* data, int64_t i) noexcept {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(data) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

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
  const int shift = 23 - kMan + std::max(0, kMinNormalExp - exp);
  if (shift > 24) return 0;  // below half the smallest subnormal (mant < 2^24 <= half)
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  // q holds the implicit bit for normals, so adding it to (biased exponent - 1) << kMan both sets the
  // exponent and lets a mantissa carry (q == 2^(kMan+1)) bump it. Subnormals get exponent field 0.
  const int biased_minus_one = std::max(exp, kMinNormalExp) + kBias - 1;
  return (static_cast<uint32_t>(biased_minus_one) << kMan) + q;
}

}  // namespace

float fp16_to_f32(uint16_t h) noexcept {
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
uint16_t f32_to_fp16(float f) noexcept {
  const uint32_t x = bits_of(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & kF32AbsMask;
  if (a > kF32Inf) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a == kF32Inf) return static_cast<uint16_t>(sign | 0x7C00u);
  const uint32_t code = round_magnitude<10, 15>(a);
  return static_cast<uint16_t>(sign | std::min(code, 0x7C00u));
}

float bf16_to_f32(uint16_t b) noexcept { return float_of(static_cast<uint32_t>(b) << 16); }

// bfloat16 is the top half of an f32, so rounding is one add: the carry out of the dropped 16 bits
// propagates into the exponent and, past the largest finite value, into inf (IEEE behaviour).
uint16_t f32_to_bf16(float f) noexcept {
  const uint32_t x = bits_of(f);
  if ((x & kF32AbsMask) > kF32Inf) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

float e4m3_to_f32(uint8_t v) noexcept {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xFu;
  const uint32_t mant = v & 0x7u;
  if ((v & 0x7Fu) == 0x7Fu) return float_of(sign | 0x7FC00000u);  // the only NaN codes
  if (exp == 0) return float_of(sign | bits_of(static_cast<float>(mant) * 0x1p-9f));
  return float_of(sign | ((exp + 120u) << 23) | (mant << 20));  // rebias 7 -> 127
}

uint8_t f32_to_e4m3(float f) noexcept {
  const uint32_t x = bits_of(f);
  const auto sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t a = x & kF32AbsMask;
  if (a > kF32Inf) return 0x7F;
  if (a == kF32Inf) return static_cast<uint8_t>(sign | 0x7Eu);  // no inf in e4m3fn: saturate
  const uint32_t code = round_magnitude<3, 7>(a);
  return static_cast<uint8_t>(sign | std::min(code, 0x7Eu));  // 0x7F would be NaN: saturate to 448
}

// e5m2 is the top byte of an fp16 (same exponent, 2 of its 10 mantissa bits), so decoding is exact
// through fp16. Encoding is not (double rounding), hence its own round_magnitude instance.
float e5m2_to_f32(uint8_t v) noexcept { return fp16_to_f32(static_cast<uint16_t>(v << 8)); }

uint8_t f32_to_e5m2(float f) noexcept {
  const uint32_t x = bits_of(f);
  const auto sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t a = x & kF32AbsMask;
  if (a > kF32Inf) return 0x7F;
  if (a == kF32Inf) return static_cast<uint8_t>(sign | 0x7Cu);  // inf stays inf
  const uint32_t code = round_magnitude<2, 15>(a);
  return static_cast<uint8_t>(sign | std::min(code, 0x7Bu));  // finite overflow saturates to 57344
}

float e8m0_to_f32(uint8_t v) noexcept {
  if (v == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  if (v == 0) return float_of(0x00400000u);  // 2^-127 is an f32 subnormal
  return float_of(static_cast<uint32_t>(v) << 23);
}

// e8m0 and f32 share the exponent bias (127), so for a normal f32 the answer is its exponent field,
// plus one when any mantissa bit is set. Returns 0 (2^-127) for f <= 0, 254 (2^127) for values past
// 2^127 including inf, and 0xFF (NaN) for NaN.
uint8_t f32_to_e8m0_ceil(float f) noexcept {
  const uint32_t x = bits_of(f);
  if ((x & kF32AbsMask) > kF32Inf) return 0xFF;
  if ((x & 0x80000000u) || x == 0) return 0;
  const uint32_t exp = x >> 23;
  const uint32_t mant = x & 0x7FFFFFu;
  if (exp == 0) return mant <= 0x00400000u ? 0 : 1;  // f32 subnormal: 2^-127 or 2^-126
  return static_cast<uint8_t>(std::min(exp + (mant != 0 ? 1u : 0u), 254u));
}

float e2m1_to_f32(uint8_t nibble) noexcept {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kValues[nibble & 0x7u];
  return (nibble & 0x8u) ? -v : v;
}

// e2m1 is a minifloat with 1 mantissa bit and bias 1 (code 1 is the subnormal 0.5), so it rounds like
// the others. A value that rounds to zero keeps its sign (0x8), which makes every code round-trip.
uint8_t f32_to_e2m1(float f) noexcept {
  const uint32_t x = bits_of(f);
  const auto sign = static_cast<uint8_t>((x >> 28) & 0x8u);
  const uint32_t a = x & kF32AbsMask;
  if (a > kF32Inf) return 0;  // no NaN in e2m1
  if (a == kF32Inf) return static_cast<uint8_t>(sign | 0x7u);
  const uint32_t code = round_magnitude<1, 1>(a);
  return static_cast<uint8_t>(sign | std::min(code, 0x7u));
}

float load_as_f32(const void* data, DType t, int64_t i) noexcept {
  switch (t) {
    case DType::kF64: return static_cast<float>(read_as<double>(data, i));
    case DType::kF32: return read_as<float>(data, i);
    case DType::kF16: return fp16_to_f32(read_as<uint16_t>(data, i));
    case DType::kBF16: return bf16_to_f32(read_as<uint16_t>(data, i));
    case DType::kF8E4M3: return e4m3_to_f32(read_as<uint8_t>(data, i));
    case DType::kF8E5M2: return e5m2_to_f32(read_as<uint8_t>(data, i));
    case DType::kF8E8M0: return e8m0_to_f32(read_as<uint8_t>(data, i));
    case DType::kI64: return static_cast<float>(read_as<int64_t>(data, i));
    case DType::kI32: return static_cast<float>(read_as<int32_t>(data, i));
    case DType::kI16: return static_cast<float>(read_as<int16_t>(data, i));
    case DType::kI8: return static_cast<float>(read_as<int8_t>(data, i));
    case DType::kU8: return static_cast<float>(read_as<uint8_t>(data, i));
    case DType::kBool: return read_as<uint8_t>(data, i) != 0 ? 1.0f : 0.0f;
  }
  return std::numeric_limits<float>::quiet_NaN();
}

}  // namespace moerun
