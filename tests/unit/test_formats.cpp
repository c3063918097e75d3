// Tests of moerun/formats.hpp: element codecs, expert weight stacks, (de)quantization.
//
// The codecs are checked against references written here from the published definitions: decoders
// as sign * 2^e * mantissa formulas, encoders as "nearest value in the table of every code, ties to
// the even code", which shares nothing with the bit manipulation under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "moerun/error.hpp"
#include "moerun/formats.hpp"

namespace moerun {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- reference decoders: value of a sign / exponent / mantissa code by formula ----------------------

// Where a format keeps its special values: IEEE (all-ones exponent: inf / NaN; fp16, bf16, e5m2),
// "fn" (NaN only at all-ones exponent and mantissa; e4m3fn), or none at all (e2m1).
enum class Specials { kIeee, kFn, kNone };

// A generic sign / exponent / mantissa decoder from exp_bits, man_bits and bias.
double ref_minifloat(uint32_t code, int exp_bits, int man_bits, int bias, Specials specials) {
  const uint32_t man = code & ((1u << man_bits) - 1u);
  const uint32_t exp = (code >> man_bits) & ((1u << exp_bits) - 1u);
  const bool neg = (code >> (exp_bits + man_bits)) & 1u;
  const uint32_t exp_max = (1u << exp_bits) - 1u;
  double mag;
  if (specials == Specials::kIeee && exp == exp_max) {
    mag = man ? kNaN : kInf;
  } else if (specials == Specials::kFn && exp == exp_max && man == (1u << man_bits) - 1u) {
    mag = kNaN;
  } else if (exp == 0) {
    mag = std::ldexp(static_cast<double>(man), 1 - bias - man_bits);
  } else {
    mag = std::ldexp(static_cast<double>((1u << man_bits) + man), static_cast<int>(exp) - bias - man_bits);
  }
  return neg ? -mag : mag;
}

double ref_fp16(uint32_t c) { return ref_minifloat(c, 5, 10, 15, Specials::kIeee); }
double ref_bf16(uint32_t c) { return ref_minifloat(c, 8, 7, 127, Specials::kIeee); }
double ref_e4m3(uint32_t c) { return ref_minifloat(c, 4, 3, 7, Specials::kFn); }
double ref_e5m2(uint32_t c) { return ref_minifloat(c, 5, 2, 15, Specials::kIeee); }
double ref_e2m1(uint32_t c) { return ref_minifloat(c & 0xF, 2, 1, 1, Specials::kNone); }
double ref_e8m0(uint32_t c) { return c == 0xFF ? kNaN : std::ldexp(1.0, static_cast<int>(c) - 127); }

// ---- reference encoder: nearest code by search, ties to the even code ------------------------------

struct RefCodec {
  uint32_t sign_bit;
  std::vector<std::pair<double, uint32_t>> table;  // non-negative finite values (+ overflow), sorted

  // codes: every positive-sign code; decode: the reference decoder. `overflow_code`, when set, sits at
  // the value one ulp past the largest finite one (IEEE: such values round to inf, ties to even).
  RefCodec(uint32_t sign, uint32_t codes, const std::function<double(uint32_t)>& decode,
           std::optional<uint32_t> overflow_code, double overflow_value)
      : sign_bit(sign) {
    for (uint32_t c = 0; c < codes; ++c) {
      const double v = decode(c);
      if (std::isfinite(v)) table.emplace_back(v, c);
    }
    if (overflow_code) table.emplace_back(overflow_value, *overflow_code);
    std::sort(table.begin(), table.end());
  }

  // The nearest table value to |f|, ties to the even code; values past the end take the last entry
  // (saturation, or the overflow code).
  uint32_t encode(double f) const {
    const double a = std::fabs(f);
    auto it = std::lower_bound(table.begin(), table.end(), std::make_pair(a, 0u));
    uint32_t code;
    if (it == table.end()) {
      code = table.back().second;
    } else if (it == table.begin() || it->first == a) {
      code = it->second;
    } else {
      const auto lo = *(it - 1), hi = *it;
      const double dlo = a - lo.first, dhi = hi.first - a;
      if (dlo < dhi) code = lo.second;
      else if (dhi < dlo) code = hi.second;
      else code = (lo.second & 1u) ? hi.second : lo.second;
    }
    return std::signbit(f) ? (code | sign_bit) : code;
  }

  // Every input worth checking: each table value, each midpoint between neighbours and the floats
  // just beside it, past-the-end values, and each of these negated.
  std::vector<float> probes() const {
    std::vector<float> out;
    auto add = [&out](float v) {
      out.push_back(v);
      out.push_back(-v);
    };
    for (size_t i = 0; i < table.size(); ++i) {
      const float v = static_cast<float>(table[i].first);
      add(v);
      add(std::nextafter(v, 0.0f));
      add(std::nextafter(v, std::numeric_limits<float>::infinity()));
      if (i + 1 < table.size()) {
        const double mid = (table[i].first + table[i + 1].first) / 2;
        const float fm = static_cast<float>(mid);
        EXPECT_EQ(static_cast<double>(fm), mid) << "midpoint not exact in f32";
        add(fm);
        add(std::nextafter(fm, 0.0f));
        add(std::nextafter(fm, std::numeric_limits<float>::infinity()));
      }
    }
    for (float v : {std::numeric_limits<float>::max(), 1e30f, 3.0e5f, 1e-30f,
                    std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()})
      add(v);
    return out;
  }
};

// Random finite floats spread over every exponent (random bit patterns), plus their halves.
std::vector<float> random_floats(uint32_t seed, int count) {
  std::mt19937 rng(seed);
  std::vector<float> out;
  while (static_cast<int>(out.size()) < count) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isfinite(f)) out.push_back(f);
  }
  return out;
}

uint32_t fresh_seed() { return std::random_device{}(); }

template <typename Encode>
void expect_encoder_matches(const RefCodec& ref, Encode encode, const std::vector<float>& inputs,
                            const char* what) {
  int failures = 0;
  for (float f : inputs) {
    const uint32_t want = ref.encode(f);
    const uint32_t got = encode(f);
    if (got != want && ++failures <= 10)
      ADD_FAILURE() << what << "(" << f << " = 0x" << std::hex << std::bit_cast<uint32_t>(f) << ") = 0x"
                    << got << ", reference 0x" << want << std::dec;
  }
  EXPECT_EQ(failures, 0) << what;
}

// ---- codecs: every code decodes as its formula and re-encodes to itself -----------------------------

TEST(Formats, Fp16DecodeEveryCodeMatchesFormula) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const double want = ref_fp16(c);
    const float got = fp16_to_f32(static_cast<uint16_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << c;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << c;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hex << c;
    }
  }
}

TEST(Formats, Fp16RoundTripEveryCode) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const float f = fp16_to_f32(static_cast<uint16_t>(c));
    const uint16_t back = f32_to_fp16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_f32(back))) << std::hex << c;
    } else {
      ASSERT_EQ(back, c) << std::hex << c;
    }
  }
}

TEST(Formats, Fp16EncodeRoundsToNearestEven) {
  // IEEE: values at or past 65520 (halfway to the virtual 65536) round to inf.
  const RefCodec ref(0x8000, 0x8000, ref_fp16, 0x7C00u, 65536.0);
  expect_encoder_matches(ref, f32_to_fp16, ref.probes(), "f32_to_fp16");
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed = " + std::to_string(seed));
  expect_encoder_matches(ref, f32_to_fp16, random_floats(seed, 200000), "f32_to_fp16");
}

TEST(Formats, Bf16DecodeEveryCodeMatchesFormula) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const double want = ref_bf16(c);
    const float got = bf16_to_f32(static_cast<uint16_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << c;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << c;
    }
  }
}

TEST(Formats, Bf16RoundTripEveryCode) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const float f = bf16_to_f32(static_cast<uint16_t>(c));
    const uint16_t back = f32_to_bf16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(back))) << std::hex << c;
    } else {
      ASSERT_EQ(back, c) << std::hex << c;
    }
  }
}

TEST(Formats, Bf16EncodeRoundsToNearestEven) {
  const RefCodec ref(0x8000, 0x8000, ref_bf16, 0x7F80u, std::ldexp(1.0, 128));
  expect_encoder_matches(ref, f32_to_bf16, ref.probes(), "f32_to_bf16");
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed = " + std::to_string(seed));
  expect_encoder_matches(ref, f32_to_bf16, random_floats(seed, 200000), "f32_to_bf16");
}

TEST(Formats, E4m3DecodeEveryCodeMatchesFormula) {
  for (uint32_t c = 0; c < 0x100; ++c) {
    const double want = ref_e4m3(c);
    const float got = e4m3_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << std::hex << c;
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << std::hex << c;
    }
  }
}

TEST(Formats, E4m3RoundTripEveryCode) {
  int nans = 0;
  for (uint32_t c = 0; c < 0x100; ++c) {
    const float f = e4m3_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(f)) {
      ++nans;
      EXPECT_EQ(f32_to_e4m3(f), 0x7F);
    } else {
      EXPECT_EQ(f32_to_e4m3(f), c) << std::hex << c;
    }
  }
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF only: e4m3fn has no infinities
}

TEST(Formats, E4m3EncodeRoundsToNearestEvenAndSaturates) {
  const RefCodec ref(0x80, 0x80, ref_e4m3, std::nullopt, 0);
  expect_encoder_matches(ref, f32_to_e4m3, ref.probes(), "f32_to_e4m3");
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed = " + std::to_string(seed));
  expect_encoder_matches(ref, f32_to_e4m3, random_floats(seed, 200000), "f32_to_e4m3");
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7E);   // halfway to the 480 e4m3fn does not have
  EXPECT_EQ(f32_to_e4m3(1e6f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(0x1p-10f), 0x00);        // tie between 0 and 2^-9: even
  EXPECT_EQ(f32_to_e4m3(0x1.8p-9f), 0x02);       // tie between 2^-9 and 2^-8: even (0x02)
  EXPECT_EQ(f32_to_e4m3(0x1.1p0f), 0x38);        // 1.0625: tie between 1 and 1.125: even
  EXPECT_EQ(f32_to_e4m3(0x1.3p0f), 0x3A);        // 1.1875: tie between 1.125 and 1.25: even (0x3A)
}

TEST(Formats, E5m2DecodeEveryCodeMatchesFormula) {
  for (uint32_t c = 0; c < 0x100; ++c) {
    const double want = ref_e5m2(c);
    const float got = e5m2_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << std::hex << c;
    }
  }
}

TEST(Formats, E5m2RoundTripEveryCode) {
  for (uint32_t c = 0; c < 0x100; ++c) {
    const float f = e5m2_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(e5m2_to_f32(f32_to_e5m2(f)))) << std::hex << c;
    } else {
      EXPECT_EQ(f32_to_e5m2(f), c) << std::hex << c;  // includes +-inf
    }
  }
}

TEST(Formats, E5m2EncodeRoundsToNearestEvenSaturatesFiniteKeepsInf) {
  const RefCodec ref(0x80, 0x80, ref_e5m2, std::nullopt, 0);  // finite table: saturation
  expect_encoder_matches(ref, f32_to_e5m2, ref.probes(), "f32_to_e5m2");
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed = " + std::to_string(seed));
  expect_encoder_matches(ref, f32_to_e5m2, random_floats(seed, 200000), "f32_to_e5m2");
  EXPECT_EQ(f32_to_e5m2(61440.0f), 0x7B);  // halfway to 65536: saturates, does not become inf
  EXPECT_EQ(f32_to_e5m2(std::numeric_limits<float>::max()), 0x7B);
  EXPECT_EQ(f32_to_e5m2(-1e38f), 0xFB);
  EXPECT_EQ(f32_to_e5m2(std::numeric_limits<float>::infinity()), 0x7C);
  EXPECT_EQ(f32_to_e5m2(-std::numeric_limits<float>::infinity()), 0xFC);
  EXPECT_TRUE(std::isnan(e5m2_to_f32(f32_to_e5m2(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Formats, E2m1EveryCodeDecodesAndRoundTrips) {
  const float values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint32_t c = 0; c < 16; ++c) {
    const float want = (c & 8) ? -values[c & 7] : values[c & 7];
    const float got = e2m1_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(got, want) << c;
    EXPECT_EQ(std::signbit(got), (c & 8) != 0) << c;
    EXPECT_EQ(static_cast<double>(got), ref_e2m1(c)) << c;
    EXPECT_EQ(f32_to_e2m1(got), c) << c;
    EXPECT_EQ(e2m1_to_f32(static_cast<uint8_t>(c | 0xF0)), got) << "high bits ignored";
  }
}

TEST(Formats, E2m1EncodeRoundsToNearestEvenAndSaturates) {
  const RefCodec ref(0x8, 0x8, ref_e2m1, std::nullopt, 0);
  expect_encoder_matches(ref, f32_to_e2m1, ref.probes(), "f32_to_e2m1");
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed = " + std::to_string(seed));
  expect_encoder_matches(ref, f32_to_e2m1, random_floats(seed, 100000), "f32_to_e2m1");
  EXPECT_EQ(f32_to_e2m1(0.25f), 0x0);   // ties to even
  EXPECT_EQ(f32_to_e2m1(0.75f), 0x2);
  EXPECT_EQ(f32_to_e2m1(2.5f), 0x4);
  EXPECT_EQ(f32_to_e2m1(3.5f), 0x6);
  EXPECT_EQ(f32_to_e2m1(5.0f), 0x6);
  EXPECT_EQ(f32_to_e2m1(5.01f), 0x7);
  EXPECT_EQ(f32_to_e2m1(100.0f), 0x7);
  EXPECT_EQ(f32_to_e2m1(-100.0f), 0xF);
  EXPECT_EQ(f32_to_e2m1(std::numeric_limits<float>::infinity()), 0x7);
  EXPECT_EQ(f32_to_e2m1(std::numeric_limits<float>::quiet_NaN()), 0x0);
}

TEST(Formats, E8m0EveryCodeDecodesAndCeilRoundTrips) {
  for (uint32_t c = 0; c < 0x100; ++c) {
    const float f = e8m0_to_f32(static_cast<uint8_t>(c));
    if (c == 0xFF) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_EQ(f32_to_e8m0_ceil(f), 0xFF);
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), ref_e8m0(c)) << c;
    EXPECT_EQ(f32_to_e8m0_ceil(f), c) << c;
  }
}

TEST(Formats, E8m0CeilIsSmallestPowerOfTwoAtLeastF) {
  auto reference = [](float f) -> uint32_t {
    for (uint32_t c = 0; c < 254; ++c)
      if (ref_e8m0(c) >= static_cast<double>(f)) return c;
    return 254;  // clamped
  };
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed = " + std::to_string(seed));
  std::vector<float> inputs = random_floats(seed, 20000);
  for (uint32_t c = 0; c < 255; ++c) {
    const float p = e8m0_to_f32(static_cast<uint8_t>(c));
    inputs.push_back(std::nextafter(p, 0.0f));
    inputs.push_back(std::nextafter(p, std::numeric_limits<float>::infinity()));
  }
  inputs.push_back(std::numeric_limits<float>::denorm_min());
  inputs.push_back(std::numeric_limits<float>::max());
  for (float f : inputs) {
    f = std::fabs(f);
    if (f == 0.0f) continue;
    ASSERT_EQ(f32_to_e8m0_ceil(f), reference(f)) << f;
  }
  EXPECT_EQ(f32_to_e8m0_ceil(std::numeric_limits<float>::infinity()), 254);
}

TEST(Formats, PublishedValues) {
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x08), 0x1p-6f);
  EXPECT_EQ(e4m3_to_f32(0x07), 0x1.cp-7f);  // largest subnormal, 7 * 2^-9
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xFF)));
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);

  EXPECT_EQ(e5m2_to_f32(0x7B), 57344.0f);
  EXPECT_EQ(e5m2_to_f32(0x3C), 1.0f);
  EXPECT_EQ(e5m2_to_f32(0x04), 0x1p-14f);
  EXPECT_EQ(e5m2_to_f32(0x01), 0x1p-16f);
  EXPECT_EQ(e5m2_to_f32(0x7C), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(e5m2_to_f32(0x7D)));

  EXPECT_EQ(e2m1_to_f32(0x7), 6.0f);
  EXPECT_EQ(e2m1_to_f32(0xF), -6.0f);
  EXPECT_EQ(e2m1_to_f32(0x1), 0.5f);

  EXPECT_EQ(e8m0_to_f32(0x7F), 1.0f);
  EXPECT_EQ(e8m0_to_f32(0x00), 0x1p-127f);
  EXPECT_EQ(e8m0_to_f32(0xFE), 0x1p127f);
  EXPECT_EQ(f32_to_e8m0_ceil(3.0f), 0x81);
  EXPECT_EQ(f32_to_e8m0_ceil(0.75f), 0x7F);
  EXPECT_EQ(f32_to_e8m0_ceil(std::numeric_limits<float>::max()), 0xFE);  // clamped

  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_bf16(3.14159265f), 0x4049);
  EXPECT_EQ(bf16_to_f32(0x7F7F), 0x1.fep127f);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to inf, as IEEE does
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7F800001u)))));  // signalling

  EXPECT_EQ(f32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_f32(0x0400), 0x1p-14f);
  EXPECT_EQ(f32_to_fp16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7C00);
  EXPECT_EQ(f32_to_fp16(-1e10f), 0xFC00);
  EXPECT_EQ(f32_to_fp16(0x1p-25f), 0x0000);      // tie with the smallest subnormal: even
  EXPECT_EQ(f32_to_fp16(0x1.8p-24f), 0x0002);    // tie between 1 and 2 subnormal ulps: even
  EXPECT_EQ(f32_to_fp16(0x1.ffcp-15f), 0x0400);  // largest subnormal + half ulp: carries to normal
  EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(std::bit_cast<float>(0x7F800001u)))));
}

TEST(Formats, LoadAsF32EveryDtype) {
  const float f32[] = {1.5f, -2.0f};
  const uint16_t f16[] = {0x3C00, 0xC500};  // 1, -5
  const uint16_t bf16[] = {0x3F80, 0xC0A0};  // 1, -5
  const uint8_t e4m3[] = {0x38, 0x7E};
  const uint8_t e5m2[] = {0x3C, 0x7B};
  const int8_t i8[] = {-128, 127};
  const int32_t i32[] = {7, -100000};
  const double f64[] = {0.25, -8.0};
  const int64_t i64[] = {3, -4};
  const int16_t i16[] = {-300, 300};
  const uint8_t u8[] = {0, 255};
  const uint8_t e8m0[] = {127, 130};
  EXPECT_EQ(load_as_f32(f32, DType::kF32, 1), -2.0f);
  EXPECT_EQ(load_as_f32(f16, DType::kF16, 1), -5.0f);
  EXPECT_EQ(load_as_f32(bf16, DType::kBF16, 1), -5.0f);
  EXPECT_EQ(load_as_f32(e4m3, DType::kF8E4M3, 1), 448.0f);
  EXPECT_EQ(load_as_f32(e5m2, DType::kF8E5M2, 1), 57344.0f);
  EXPECT_EQ(load_as_f32(i8, DType::kI8, 0), -128.0f);
  EXPECT_EQ(load_as_f32(i32, DType::kI32, 1), -100000.0f);
  EXPECT_EQ(load_as_f32(f64, DType::kF64, 1), -8.0f);
  EXPECT_EQ(load_as_f32(i64, DType::kI64, 1), -4.0f);
  EXPECT_EQ(load_as_f32(i16, DType::kI16, 0), -300.0f);
  EXPECT_EQ(load_as_f32(u8, DType::kU8, 1), 255.0f);
  EXPECT_EQ(load_as_f32(e8m0, DType::kF8E8M0, 1), 8.0f);
  EXPECT_EQ(load_as_f32(f32, DType::kF32, 0), 1.5f);
}

// ---- expert stacks ----------------------------------------------------------------------------------

const WeightFormat kAllFormats[] = {
    WeightFormat::kF32,          WeightFormat::kF16,           WeightFormat::kBF16,
    WeightFormat::kFp8PerTensor, WeightFormat::kFp8PerChannel, WeightFormat::kFp8Block,
    WeightFormat::kMxfp4,        WeightFormat::kNvfp4,         WeightFormat::kInt8PerChannel,
};

std::string name_of(WeightFormat f) { return "format #" + std::to_string(static_cast<int>(f)); }

// Random weights with rows of very different magnitudes (so per-row and per-block scales matter),
// exact zeros, one all-zero row in expert 1 and an all-zero last expert.
std::vector<float> random_weights(uint32_t seed, int64_t E, int64_t N, int64_t K) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-8, 8);
  std::uniform_int_distribution<int> pick(0, 19);
  std::vector<float> w(static_cast<size_t>(E * N * K));
  for (int64_t e = 0; e < E; ++e)
    for (int64_t n = 0; n < N; ++n) {
      const float mag = std::ldexp(1.0f, exponent(rng));
      const bool zero_row = (E > 1 && e == 1 && n == N / 2) || (E > 2 && e == E - 1);
      for (int64_t k = 0; k < K; ++k) {
        float v = normal(rng) * mag;
        if (zero_row || pick(rng) == 0) v = 0.0f;
        w[static_cast<size_t>((e * N + n) * K + k)] = v;
      }
    }
  return w;
}

std::vector<float> dequantize_all(const ExpertMatrix& m) {
  std::vector<float> out(static_cast<size_t>(m.experts * m.rows * m.cols));
  for (int64_t e = 0; e < m.experts; ++e)
    for (int64_t n = 0; n < m.rows; ++n) dequantize_row(m, e, n, out.data() + (e * m.rows + n) * m.cols);
  return out;
}

// The multiplier of element (e, n, k), read with this test's own index arithmetic from the table in
// formats.hpp (1 for formats without scales).
double scale_of(const ExpertMatrix& m, int64_t e, int64_t n, int64_t k) {
  const int64_t N = m.rows, K = m.cols;
  switch (m.format) {
    case WeightFormat::kFp8PerTensor: return m.scale.as<float>()[e];
    case WeightFormat::kFp8PerChannel:
    case WeightFormat::kInt8PerChannel: return m.scale.as<float>()[e * N + n];
    case WeightFormat::kFp8Block: {
      const int64_t nb = (N + 127) / 128, kb = (K + 127) / 128;
      return m.scale.as<float>()[(e * nb + n / 128) * kb + k / 128];
    }
    case WeightFormat::kMxfp4: return ref_e8m0(m.scale.as<uint8_t>()[(e * N + n) * (K / 32) + k / 32]);
    case WeightFormat::kNvfp4:
      return ref_e4m3(m.scale.as<uint8_t>()[(e * N + n) * (K / 16) + k / 16]) * m.global_scale.as<float>()[e];
    default: return 1.0;
  }
}

// The element code of (e, n, k) decoded with the reference decoders.
double element_of(const ExpertMatrix& m, int64_t e, int64_t n, int64_t k) {
  const int64_t i = (e * m.rows + n) * m.cols + k;
  switch (m.format) {
    case WeightFormat::kF32: return m.data.as<float>()[i];
    case WeightFormat::kF16: return ref_fp16(m.data.as<uint16_t>()[i]);
    case WeightFormat::kBF16: return ref_bf16(m.data.as<uint16_t>()[i]);
    case WeightFormat::kFp8PerTensor:
    case WeightFormat::kFp8PerChannel:
    case WeightFormat::kFp8Block: return ref_e4m3(m.data.as<uint8_t>()[i]);
    case WeightFormat::kInt8PerChannel: return m.data.as<int8_t>()[i];
    case WeightFormat::kMxfp4:
    case WeightFormat::kNvfp4: {
      const uint8_t byte = m.data.as<uint8_t>()[i / 2];  // K is even, so i / 2 stays in the row
      return ref_e2m1((i & 1) ? byte >> 4 : byte & 0xF);
    }
  }
  return kNaN;
}

// Largest error |dequant - w| allowed for w in units of its scale (x = |w| / scale): half a step of
// the element grid at x, plus whatever saturation cuts off above the format's max.
double error_bound_in_steps(WeightFormat f, double x) {
  switch (f) {
    case WeightFormat::kFp8PerTensor:
    case WeightFormat::kFp8PerChannel:
    case WeightFormat::kFp8Block: return std::max(x * 0x1p-4, 0x1p-10) + std::max(0.0, x - 448.0);
    case WeightFormat::kMxfp4:
    case WeightFormat::kNvfp4: return std::max(0.25, x / 4) + std::max(0.0, x - 6.0);
    case WeightFormat::kInt8PerChannel: return 0.5 + std::max(0.0, x - 127.0);
    case WeightFormat::kF16: return std::max(x * 0x1p-11, 0x1p-25);
    case WeightFormat::kBF16: return x * 0x1p-8;
    case WeightFormat::kF32: return 0.0;
  }
  return 0.0;
}

struct Shape3 {
  int64_t E, N, K;
};
// Odd shapes: partial 128-blocks in both directions, more than one row of blocks, K a multiple of 32.
const Shape3 kShapes[] = {{3, 33, 160}, {2, 257, 288}, {1, 1, 32}};

TEST(Formats, QuantizeDequantizeWithinErrorBound) {
  const uint32_t seed = fresh_seed();
  for (const Shape3 s : kShapes) {
    const std::vector<float> w = random_weights(seed, s.E, s.N, s.K);
    for (WeightFormat f : kAllFormats) {
      SCOPED_TRACE("seed = " + std::to_string(seed) + ", " + name_of(f) + ", E=" + std::to_string(s.E) +
                   " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K));
      const ExpertMatrix m = quantize_experts(f, w.data(), s.E, s.N, s.K);
      EXPECT_NO_THROW(check_expert_matrix(m, "w"));
      const std::vector<float> d = dequantize_all(m);
      int failures = 0;
      for (int64_t e = 0; e < s.E; ++e)
        for (int64_t n = 0; n < s.N; ++n)
          for (int64_t k = 0; k < s.K; ++k) {
            const size_t i = static_cast<size_t>((e * s.N + n) * s.K + k);
            const double scale = scale_of(m, e, n, k);
            const double err = std::fabs(static_cast<double>(d[i]) - w[i]);
            // The final f32 product rounds once more: allow an ulp of the result.
            const double bound = scale > 0 ? error_bound_in_steps(f, std::fabs(w[i]) / scale) * scale
                                           : std::fabs(w[i]);
            const double slack = std::fabs(static_cast<double>(d[i])) * 0x1p-23;
            if (!(err <= bound + slack) && ++failures <= 5)
              ADD_FAILURE() << "e=" << e << " n=" << n << " k=" << k << ": w=" << w[i] << " dequant=" << d[i]
                            << " scale=" << scale << " err=" << err << " bound=" << bound;
          }
      EXPECT_EQ(failures, 0);
    }
  }
}

TEST(Formats, DequantizeRowIsDecodeTimesScale) {
  // dequantize_row must equal decode(data) * scale computed from the raw bytes with the test's own
  // index arithmetic (nibble order, scale indices), rounded once to f32.
  const uint32_t seed = fresh_seed();
  for (const Shape3 s : kShapes) {
    const std::vector<float> w = random_weights(seed, s.E, s.N, s.K);
    for (WeightFormat f : kAllFormats) {
      SCOPED_TRACE("seed = " + std::to_string(seed) + ", " + name_of(f));
      const ExpertMatrix m = quantize_experts(f, w.data(), s.E, s.N, s.K);
      std::vector<float> row(static_cast<size_t>(s.K));
      for (int64_t e = 0; e < s.E; ++e)
        for (int64_t n = 0; n < s.N; ++n) {
          dequantize_row(m, e, n, row.data());
          for (int64_t k = 0; k < s.K; ++k) {
            // element x scale is exact in double (at most 24 + 24 significant bits).
            const float want = static_cast<float>(element_of(m, e, n, k) * scale_of(m, e, n, k));
            ASSERT_EQ(row[static_cast<size_t>(k)], want) << "e=" << e << " n=" << n << " k=" << k;
          }
        }
    }
  }
}

TEST(Formats, ScalesFollowTheReferenceRecipe) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed = " + std::to_string(seed));
  const int64_t E = 3, N = 33, K = 160;
  const std::vector<float> w = random_weights(seed, E, N, K);
  auto absmax = [&](int64_t e, int64_t n0, int64_t n1, int64_t k0, int64_t k1) {
    float m = 0.0f;
    for (int64_t n = n0; n < std::min(n1, N); ++n)
      for (int64_t k = k0; k < std::min(k1, K); ++k) m = std::max(m, std::fabs(w[static_cast<size_t>((e * N + n) * K + k)]));
    return m;
  };
  auto or_one = [](float s) { return s > 0 ? s : 1.0f; };
  const ExpertMatrix pt = quantize_experts(WeightFormat::kFp8PerTensor, w.data(), E, N, K);
  const ExpertMatrix pc = quantize_experts(WeightFormat::kFp8PerChannel, w.data(), E, N, K);
  const ExpertMatrix bl = quantize_experts(WeightFormat::kFp8Block, w.data(), E, N, K);
  const ExpertMatrix i8 = quantize_experts(WeightFormat::kInt8PerChannel, w.data(), E, N, K);
  const ExpertMatrix mx = quantize_experts(WeightFormat::kMxfp4, w.data(), E, N, K);
  const ExpertMatrix nv = quantize_experts(WeightFormat::kNvfp4, w.data(), E, N, K);
  for (int64_t e = 0; e < E; ++e) {
    EXPECT_EQ(pt.scale.as<float>()[e], or_one(absmax(e, 0, N, 0, K) / 448.0f));
    const float g = or_one(absmax(e, 0, N, 0, K) / (448.0f * 6.0f));
    EXPECT_EQ(nv.global_scale.as<float>()[e], g);
    for (int64_t kb = 0; kb < 2; ++kb)
      EXPECT_EQ(bl.scale.as<float>()[e * 2 + kb], or_one(absmax(e, 0, 128, kb * 128, kb * 128 + 128) / 448.0f));
    for (int64_t n = 0; n < N; ++n) {
      EXPECT_EQ(pc.scale.as<float>()[e * N + n], or_one(absmax(e, n, n + 1, 0, K) / 448.0f));
      EXPECT_EQ(i8.scale.as<float>()[e * N + n], or_one(absmax(e, n, n + 1, 0, K) / 127.0f));
      for (int64_t b = 0; b < K / 32; ++b) {
        const float a = absmax(e, n, n + 1, b * 32, b * 32 + 32);
        const uint8_t code = mx.scale.as<uint8_t>()[(e * N + n) * (K / 32) + b];
        if (a == 0.0f) {
          EXPECT_EQ(code, 127);
        } else {  // the smallest power of two with absmax / scale <= 6
          EXPECT_LE(a / e8m0_to_f32(code), 6.0f);
          EXPECT_GT(a / e8m0_to_f32(static_cast<uint8_t>(code - 1)), 6.0f);
        }
      }
      for (int64_t b = 0; b < K / 16; ++b)
        EXPECT_EQ(nv.scale.as<uint8_t>()[(e * N + n) * (K / 16) + b],
                  f32_to_e4m3(absmax(e, n, n + 1, b * 16, b * 16 + 16) / (6.0f * g)));
    }
  }
}

TEST(Formats, RequantizingDequantizedWeightsIsExact) {
  // dequantize(quantize(w)) lies on the format's grid: quantizing it again gives the same bytes.
  const uint32_t seed = fresh_seed();
  for (const Shape3 s : kShapes) {
    const std::vector<float> w = random_weights(seed, s.E, s.N, s.K);
    for (WeightFormat f : {WeightFormat::kFp8PerTensor, WeightFormat::kFp8PerChannel, WeightFormat::kFp8Block,
                           WeightFormat::kInt8PerChannel, WeightFormat::kF16, WeightFormat::kBF16}) {
      SCOPED_TRACE("seed = " + std::to_string(seed) + ", " + name_of(f));
      const ExpertMatrix a = quantize_experts(f, w.data(), s.E, s.N, s.K);
      const std::vector<float> d = dequantize_all(a);
      const ExpertMatrix b = quantize_experts(f, d.data(), s.E, s.N, s.K);
      ASSERT_EQ(a.data.nbytes(), b.data.nbytes());
      EXPECT_EQ(std::memcmp(a.data.data, b.data.data, a.data.nbytes()), 0);
      for (int64_t i = 0; !a.scale.empty() && i < a.scale.numel(); ++i) {
        const float sa = a.scale.as<float>()[i], sb = b.scale.as<float>()[i];
        EXPECT_LE(std::fabs(sa - sb), std::fabs(sa) * 0x1p-22) << i;  // an ulp at most
      }
    }
  }
}

TEST(Formats, Fp4PackingLowNibbleFirst) {
  // One row of 32 with absmax 6: mxfp4 scale 1 (code 127), values encode exactly.
  std::vector<float> w(32, 0.0f);
  w[0] = 0.5f;  // element 0 -> low nibble of byte 0
  w[1] = -6.0f; // element 1 -> high nibble of byte 0
  w[2] = 3.0f;
  const ExpertMatrix m = quantize_experts(WeightFormat::kMxfp4, w.data(), 1, 1, 32);
  EXPECT_EQ(m.scale.as<uint8_t>()[0], 127);
  EXPECT_EQ(m.data.as<uint8_t>()[0], 0xF1);
  EXPECT_EQ(m.data.as<uint8_t>()[1], 0x05);
  w[1] = -6.5f;  // absmax 6.5 needs scale 2
  const ExpertMatrix m2 = quantize_experts(WeightFormat::kMxfp4, w.data(), 1, 1, 32);
  EXPECT_EQ(m2.scale.as<uint8_t>()[0], 128);
  // nvfp4 of the same row: global = 6.5 / 2688, block scale e4m3(448) = 0x7E.
  const ExpertMatrix n = quantize_experts(WeightFormat::kNvfp4, w.data(), 1, 1, 32);
  EXPECT_EQ(n.global_scale.as<float>()[0], 6.5f / 2688.0f);
  EXPECT_EQ(n.scale.as<uint8_t>()[0], 0x7E);
  EXPECT_EQ(n.scale.as<uint8_t>()[1], 0x00);  // all-zero second block
  EXPECT_EQ(n.data.as<uint8_t>()[0] >> 4, 0xF);  // -6.5 saturates to -6
}

TEST(Formats, BytesPerExpert) {
  struct Case {
    WeightFormat f;
    int64_t bytes;
  };
  const int64_t N = 257, K = 288;
  const Case cases[] = {
      {WeightFormat::kF32, N * K * 4},
      {WeightFormat::kF16, N * K * 2},
      {WeightFormat::kBF16, N * K * 2},
      {WeightFormat::kFp8PerTensor, N * K + 4},
      {WeightFormat::kFp8PerChannel, N * K + N * 4},
      {WeightFormat::kFp8Block, N * K + 3 * 3 * 4},
      {WeightFormat::kMxfp4, N * K / 2 + N * K / 32},
      {WeightFormat::kNvfp4, N * K / 2 + N * K / 16 + 4},
      {WeightFormat::kInt8PerChannel, N * K + N * 4},
  };
  const std::vector<float> w(static_cast<size_t>(2 * N * K), 1.0f);
  for (const Case& c : cases) {
    const ExpertMatrix m = quantize_experts(c.f, w.data(), 2, N, K);
    EXPECT_EQ(m.bytes_per_expert(), c.bytes) << name_of(c.f);
    ExpertMatrix shape_only;  // no tensors yet: from the table
    shape_only.format = c.f;
    shape_only.experts = 2;
    shape_only.rows = N;
    shape_only.cols = K;
    EXPECT_EQ(shape_only.bytes_per_expert(), c.bytes) << name_of(c.f);
  }
  EXPECT_EQ(ExpertMatrix{}.bytes_per_expert(), 0);
}

// Runs fn, expects Error of `kind` whose message is exactly `message`.
template <typename Fn>
void expect_error(Fn fn, ErrorKind kind, const std::string& message) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(Formats, CheckExpertMatrixMessages) {
  const std::vector<float> w(8 * 200 * 256, 0.5f);
  const ExpertMatrix good = quantize_experts(WeightFormat::kFp8Block, w.data(), 8, 200, 256);
  EXPECT_NO_THROW(check_expert_matrix(good, "layers.0.w13"));

  ExpertMatrix m = good;
  const HostTensor bf(DType::kBF16, {8, 2, 2});
  m.scale = bf.view();
  expect_error([&] { check_expert_matrix(m, "layers.0.w13"); }, ErrorKind::kFormat,
               "expected F32 [8, 2, 2], got BF16 [8, 2, 2] for layers.0.w13.scale");

  const HostTensor wrong_shape(DType::kF32, {8, 16, 2});
  m.scale = wrong_shape.view();
  expect_error([&] { check_expert_matrix(m, "w2"); }, ErrorKind::kFormat,
               "expected F32 [8, 2, 2], got F32 [8, 16, 2] for w2.scale");

  m.scale = TensorView{};
  expect_error([&] { check_expert_matrix(m, "w2"); }, ErrorKind::kFormat,
               "missing w2.scale (fp8-block needs F32 [E, ceil(N/128), ceil(K/128)])");

  m = good;
  const HostTensor f16(DType::kF16, {8, 200, 256});
  m.data = f16.view();
  expect_error([&] { check_expert_matrix(m, "w2"); }, ErrorKind::kFormat,
               "expected F8_E4M3 [8, 200, 256], got F16 [8, 200, 256] for w2.data");

  m = good;
  const HostTensor g(DType::kF32, {8});
  m.global_scale = g.view();
  expect_error([&] { check_expert_matrix(m, "w2"); }, ErrorKind::kFormat,
               "unexpected w2.global_scale: fp8-block has no such tensor");

  ExpertMatrix nv = quantize_experts(WeightFormat::kNvfp4, w.data(), 8, 200, 256);
  EXPECT_NO_THROW(check_expert_matrix(nv, "w13"));
  nv.global_scale = TensorView{};
  expect_error([&] { check_expert_matrix(nv, "w13"); }, ErrorKind::kFormat,
               "missing w13.global_scale (nvfp4 needs F32 [E])");

  m = good;
  m.scale.device = DeviceKind::kCuda;
  expect_error([&] { check_expert_matrix(m, "w2"); }, ErrorKind::kFormat,
               "w2: scales and data live on different devices");

  // mxfp4 scales may be typed F8_E8M0 as some checkpoints do.
  ExpertMatrix mx = quantize_experts(WeightFormat::kMxfp4, w.data(), 8, 200, 256);
  mx.scale.dtype = DType::kF8E8M0;
  EXPECT_NO_THROW(check_expert_matrix(mx, "w13"));
  mx.data.dtype = DType::kF8E8M0;  // the codes are U8: the allowance is the scales' alone
  expect_error([&] { check_expert_matrix(mx, "w13"); }, ErrorKind::kFormat, "expected U8 [8, 200, 128], got F8_E8M0 [8, 200, 128] for w13.data");
  mx.data.dtype = DType::kU8;
  mx.cols = 250;
  expect_error([&] { check_expert_matrix(mx, "w13"); }, ErrorKind::kFormat,
               "w13: mxfp4 needs K (columns) to be a multiple of its scale group of 32 along K; got K = 250");
}

TEST(Formats, KNotMultipleOfGroupThrows) {
  const std::vector<float> w(2 * 3 * 48, 1.0f);
  expect_error([&] { quantize_experts(WeightFormat::kMxfp4, w.data(), 2, 3, 48); }, ErrorKind::kInvalidArgument,
               "mxfp4 needs K (columns) to be a multiple of its scale group of 32 along K; got K = 48");
  expect_error([&] { quantize_experts(WeightFormat::kNvfp4, w.data(), 2, 3, 40); }, ErrorKind::kInvalidArgument,
               "nvfp4 needs K (columns) to be a multiple of its scale group of 16 along K; got K = 40");
  EXPECT_NO_THROW(quantize_experts(WeightFormat::kNvfp4, w.data(), 2, 3, 48));
  EXPECT_NO_THROW(quantize_experts(WeightFormat::kFp8Block, w.data(), 2, 3, 48));
}

// A finite weight f16 cannot hold would become inf; NaN and inf pass through, as in f32 and bf16.
TEST(Formats, F16RefusesWeightsPastItsRange) {
  std::vector<float> w(2 * 3 * 16, 0.5f);
  w[static_cast<size_t>((1 * 3 + 2) * 16 + 7)] = 70000.0f;
  expect_error([&] { quantize_experts(WeightFormat::kF16, w.data(), 2, 3, 16); }, ErrorKind::kInvalidArgument,
               "cannot store weight 70000.000000 as f16 (largest 65504) at expert 1, row 2, column 7");
  w[static_cast<size_t>((1 * 3 + 2) * 16 + 7)] = 65504.0f;
  w[3] = std::numeric_limits<float>::infinity();
  EXPECT_NO_THROW(quantize_experts(WeightFormat::kF16, w.data(), 2, 3, 16));
  EXPECT_NO_THROW(quantize_experts(WeightFormat::kBF16, w.data(), 2, 3, 16));
}

TEST(Formats, QuantizeRejectsNonFiniteWeights) {
  std::vector<float> w(2 * 4 * 32, 1.0f);
  w[static_cast<size_t>((1 * 4 + 2) * 32 + 5)] = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { quantize_experts(WeightFormat::kFp8PerChannel, w.data(), 2, 4, 32); },
               ErrorKind::kInvalidArgument, "cannot quantize a non-finite weight (nan) at expert 1, row 2, column 5");
  // Experts are quantized in parallel; the error reported is still the lowest expert's.
  w[static_cast<size_t>((0 * 4 + 3) * 32 + 31)] = std::numeric_limits<float>::infinity();
  expect_error([&] { quantize_experts(WeightFormat::kNvfp4, w.data(), 2, 4, 32); },
               ErrorKind::kInvalidArgument, "cannot quantize a non-finite weight (inf) at expert 0, row 3, column 31");
  w[static_cast<size_t>((0 * 4 + 3) * 32 + 31)] = 1.0f;
  w[static_cast<size_t>((1 * 4 + 2) * 32 + 5)] = -std::numeric_limits<float>::infinity();
  for (WeightFormat f : {WeightFormat::kFp8PerTensor, WeightFormat::kFp8Block, WeightFormat::kMxfp4,
                         WeightFormat::kNvfp4, WeightFormat::kInt8PerChannel})
    EXPECT_THROW(quantize_experts(f, w.data(), 2, 4, 32), Error) << name_of(f);
}

TEST(Formats, EmptyStacksAndBadArguments) {
  for (WeightFormat f : kAllFormats) {
    const ExpertMatrix m = quantize_experts(f, nullptr, 0, 64, 128);
    EXPECT_TRUE(m.empty());
    EXPECT_NO_THROW(check_expert_matrix(m, "w")) << name_of(f);
  }
  EXPECT_THROW(quantize_experts(WeightFormat::kF32, nullptr, -1, 4, 4), Error);
  const std::vector<float> w(16, 1.0f);
  const ExpertMatrix m = quantize_experts(WeightFormat::kFp8PerTensor, w.data(), 1, 4, 4);
  std::vector<float> row(4);
  EXPECT_THROW(dequantize_row(m, 1, 0, row.data()), Error);
  EXPECT_THROW(dequantize_row(m, 0, 4, row.data()), Error);
  ExpertMatrix repacked = m;
  repacked.layout = "cpu-vnni";
  EXPECT_THROW(dequantize_row(repacked, 0, 0, row.data()), Error);
}

// ---- activation fake quantization -------------------------------------------------------------------

TEST(Formats, FakeQuantizeActPerTokenGroup) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed = " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const int64_t M = 5, K = 300;  // groups of 128, 128, 44
  std::vector<float> x(static_cast<size_t>(M * K));
  for (float& v : x) v = normal(rng);
  for (int64_t c = 128; c < 256; ++c) x[static_cast<size_t>(2 * K + c)] = 0.0f;  // all-zero group
  std::vector<float> y = x;
  fake_quantize_act_fp8_per_token_group(y.data(), M, K);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t c0 = 0; c0 < K; c0 += 128) {
      const int64_t c1 = std::min(K, c0 + 128);
      float amax = 0.0f;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[static_cast<size_t>(i * K + c)]));
      const float s = amax > 0 ? amax / 448.0f : 1.0f;
      for (int64_t c = c0; c < c1; ++c) {
        const float xi = x[static_cast<size_t>(i * K + c)], yi = y[static_cast<size_t>(i * K + c)];
        ASSERT_EQ(yi, static_cast<float>(ref_e4m3(f32_to_e4m3(xi / s)) * s)) << i << "," << c;
        ASSERT_LE(std::fabs(yi - xi), error_bound_in_steps(WeightFormat::kFp8PerTensor, std::fabs(xi) / s) * s * 1.0001)
            << i << "," << c;
      }
    }
  // Fake quantization is idempotent: the result is already on the grid.
  std::vector<float> z = y;
  fake_quantize_act_fp8_per_token_group(z.data(), M, K);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(z[i], y[i], std::fabs(y[i]) * 0x1p-22) << i;
}

// int8 activation quantization: the smallest power-of-two scale 2^e (e >= -126) with absmax <= 127 x 2^e,
// codes rounded half to even, every dequantized value exact in bf16; zero groups give scale 1, groups
// with a NaN or infinity give NaN; partial last groups; idempotent.
TEST(Formats, Int8ActQuantPowerOfTwoScales) {
  int8_t q[32];
  const float ones[4] = {1.0f, -0.5f, 0.25f, 0.0f};
  EXPECT_EQ(quantize_act_int8_group(ones, 4, q), 0x1p-6f);  // 127/64 >= 1 > 127/128
  EXPECT_EQ(q[0], 64);
  EXPECT_EQ(q[1], -32);
  const float edge[2] = {127.0f, 63.5f};  // absmax exactly 127: scale 1; 63.5 rounds half to even: 64
  EXPECT_EQ(quantize_act_int8_group(edge, 2, q), 1.0f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], 64);
  const float above[1] = {127.5f};  // just above 127: scale 2, code 64 (63.75 rounds up)
  EXPECT_EQ(quantize_act_int8_group(above, 1, q), 2.0f);
  EXPECT_EQ(q[0], 64);
  const float zeros[3] = {0.0f, -0.0f, 0.0f};
  EXPECT_EQ(quantize_act_int8_group(zeros, 3, q), 1.0f);
  EXPECT_EQ(q[0] | q[1] | q[2], 0);
  const float tiny[2] = {1e-40f, -3e-41f};  // subnormal: the scale stops at 2^-126 (normal)
  EXPECT_EQ(quantize_act_int8_group(tiny, 2, q), 0x1p-126f);
  const float huge[1] = {3e38f};
  EXPECT_EQ(quantize_act_int8_group(huge, 1, q), 0x1p+121f);
  EXPECT_EQ(q[0], 113);  // 3e38 / 2^121 = 112.85
  // Past 127 * 2^121 the scale stops (64 * 2^122 would be infinite) and the codes saturate: finite.
  const float top[3] = {std::numeric_limits<float>::max(), -3.38e38f, 1.0e38f};
  EXPECT_EQ(quantize_act_int8_group(top, 3, q), 0x1p+121f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[2], 38);  // 1e38 / 2^121 = 37.6
  std::vector<float> top_row(top, top + 3);
  fake_quantize_act_int8_per_token_group(top_row.data(), 1, 3);
  for (float v : top_row) EXPECT_TRUE(std::isfinite(v)) << v;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    const float g[3] = {1.0f, bad, 2.0f};
    EXPECT_TRUE(std::isnan(quantize_act_int8_group(g, 3, q)));
    std::vector<float> row = {1.0f, bad, 2.0f};
    fake_quantize_act_int8_per_token_group(row.data(), 1, 3);
    for (float v : row) EXPECT_TRUE(std::isnan(v));
  }

  const uint32_t seed = fresh_seed();
  SCOPED_TRACE("seed = " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-60, 60);
  const int64_t M = 4, K = 200;  // groups of 32, the last of 8
  std::vector<float> x(static_cast<size_t>(M * K));
  for (int64_t i = 0; i < M * K; ++i) x[static_cast<size_t>(i)] = std::ldexp(normal(rng), (i / 32) % 3 == 0 ? expo(rng) : 0);
  std::vector<float> y = x;
  fake_quantize_act_int8_per_token_group(y.data(), M, K);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t c0 = 0; c0 < K; c0 += 32) {
      const int n = static_cast<int>(std::min<int64_t>(32, K - c0));
      float amax = 0.0f;
      for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[static_cast<size_t>(i * K + c0 + j)]));
      const float s = quantize_act_int8_group(x.data() + i * K + c0, n, q);
      int e = 0;
      std::frexp(s, &e);
      --e;  // s = 2^e
      ASSERT_EQ(s, std::ldexp(1.0f, e));
      ASSERT_GE(127.0 * s, amax);
      if (e > -126) ASSERT_LT(127.0 * s / 2, amax);  // the smallest such power of two
      for (int j = 0; j < n; ++j) {
        const float xi = x[static_cast<size_t>(i * K + c0 + j)], yi = y[static_cast<size_t>(i * K + c0 + j)];
        ASSERT_EQ(yi, q[j] * s);
        ASSERT_LE(std::fabs(yi - xi), 0.5f * s);
        ASSERT_EQ(yi, bf16_to_f32(f32_to_bf16(yi))) << "exact in bf16";
      }
    }
  std::vector<float> z = y;
  fake_quantize_act_int8_per_token_group(z.data(), M, K);
  EXPECT_EQ(z, y);
  // fake_quantize_act dispatches on the spec's choice.
  std::vector<float> w = x;
  fake_quantize_act(ActQuant::kInt8PerTokenGroup, w.data(), M, K);
  EXPECT_EQ(w, y);
  fake_quantize_act(ActQuant::kNone, w.data(), M, K);
  EXPECT_EQ(w, y);
}

// A weight of FLT_MAX stays finite through every format's scale (int8: FLT_MAX / 127 rounds up, and 127
// times it would overflow to infinity; mxfp4: its codes of 4 and 6 at a scale of 2^126 saturate at 3).
TEST(Formats, LargestFiniteWeightDequantizesFinite) {
  const int64_t E = 1, N = 16, K = 128;
  std::vector<float> w(static_cast<size_t>(N * K), 0.5f);
  w[3] = FLT_MAX;
  w[K + 7] = -FLT_MAX;
  for (WeightFormat f : {WeightFormat::kInt8PerChannel, WeightFormat::kFp8PerChannel, WeightFormat::kFp8PerTensor,
                         WeightFormat::kFp8Block, WeightFormat::kNvfp4, WeightFormat::kMxfp4}) {
    const ExpertMatrix m = quantize_experts(f, w.data(), E, N, K);
    std::vector<float> row(static_cast<size_t>(K));
    for (int64_t r = 0; r < 2; ++r) {
      dequantize_row(m, 0, r, row.data());
      for (float v : row) EXPECT_TRUE(std::isfinite(v)) << to_string(f) << " row " << r;
    }
    dequantize_row(m, 0, 0, row.data());
    // (mxfp4's grid at a scale of 2^126 ends at 3 x 2^126: the next value, 4 x 2^126, is past FLT_MAX)
    EXPECT_GT(row[3], (f == WeightFormat::kMxfp4 ? 0.74f : 0.99f) * FLT_MAX) << to_string(f);
  }
}

}  // namespace
}  // namespace moerun
