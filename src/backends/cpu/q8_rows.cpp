// cpu/q8_rows.cpp — q8_rows.hpp.
#include "backends/cpu/q8_rows.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "moerun/error.hpp"
#include "moerun/formats.hpp"

namespace moerun::cpu {

static_assert(kActQuantGroupInt8 == 32 && kernels::kKAlign % 32 == 0, "a padded row holds whole 32-k groups");

void pack_q8_row(const float* x, int64_t kp, const Q8Slots& out, float* fake) {
  if (kp % 32 != 0 || kp > out.ld)
    throw_error(ErrorKind::kInternal, "pack_q8_row: " + std::to_string(kp) + " columns for a row stride of " +
                                          std::to_string(out.ld) + " (needs a multiple of 32 that fits)");
  // Position within an 8-k chunk of the code of k = 8j + i (kernels.hpp: order 0, 4, 1, 5, 2, 6, 3, 7).
  static constexpr int kSlot[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  int8_t codes[32];
  for (int64_t g = 0; g < kp / 32; ++g) {
    const float s = quantize_act_int8_group(x + g * 32, 32, codes);
    out.scale[g] = s;
    int32_t sum[2] = {0, 0};
    for (int i = 0; i < 32; ++i) {
      out.q[g * 32 + (i / 8) * 8 + kSlot[i % 8]] = codes[i];
      sum[i / 16] += codes[i];
    }
    out.bias16[2 * g] = -kernels::kQ8E2m1Offset * sum[0];
    out.bias16[2 * g + 1] = -kernels::kQ8E2m1Offset * sum[1];
    out.bias32[g] = -kernels::kQ8E2m1Offset * (sum[0] + sum[1]);
    if (fake)
      for (int i = 0; i < 32; ++i) fake[g * 32 + i] = static_cast<float>(codes[i]) * s;
  }
}

namespace {

// One 32-column group at 15 bits (q8_rows.hpp); returns e, or INT_MIN for a group with a NaN or infinity.
int quantize_q15_group(const float* x, int16_t* q) noexcept {
  float amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < 32; ++i) {
    finite = finite && std::isfinite(x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  if (!finite) {
    for (int i = 0; i < 32; ++i) q[i] = 0;
    return std::numeric_limits<int>::min();
  }
  // e in [-126, 114]: 2^-e is a normal float, and kQ15Max * 2^114 = 2^128 - 2^114 is finite; values
  // above it (within 2^-14 of FLT_MAX) saturate there, as in the int8 case.
  constexpr int kMinE = -126, kMaxE = 114;
  int e = kMinE;
  if (amax > 0.0f) {
    int b = 0;
    std::frexp(amax, &b);  // amax = f * 2^b, f in [0.5, 1)
    e = std::clamp(b - 14, kMinE, kMaxE);
    while (e < kMaxE && std::ldexp(static_cast<float>(kQ15Max), e) < amax) ++e;
    while (e > kMinE && std::ldexp(static_cast<float>(kQ15Max), e - 1) >= amax) --e;
  }
  const float inv = std::ldexp(1.0f, -e);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: round half to even (never built with -ffast-math)
  for (int i = 0; i < 32; ++i)
    q[i] = static_cast<int16_t>(std::clamp(static_cast<int>((x[i] * inv + kRound) - kRound), -kQ15Max, kQ15Max));
  return e;
}

}  // namespace

void pack_q15_rows(const float* x, int64_t kp, const Q8Slots& out) {
  if (kp % 32 != 0 || kp > out.ld)
    throw_error(ErrorKind::kInternal, "pack_q15_rows: " + std::to_string(kp) + " columns for a row stride of " +
                                          std::to_string(out.ld) + " (needs a multiple of 32 that fits)");
  static constexpr int kSlot[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // as in pack_q8_row
  const Q8Slots hi = out.row(0), lo = out.row(1);
  int16_t q[32];
  for (int64_t g = 0; g < kp / 32; ++g) {
    const int e = quantize_q15_group(x + g * 32, q);
    const bool nan = e == std::numeric_limits<int>::min();
    hi.scale[g] = nan ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, e + 7);
    lo.scale[g] = nan ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, e);
    int32_t sh[2] = {0, 0}, sl[2] = {0, 0};
    for (int i = 0; i < 32; ++i) {
      const int h = q[i] >> 7;  // arithmetic: floor(q / 128), in [-128, 127]
      const int l = q[i] - h * 128;  // in [0, 127]
      const int64_t at = g * 32 + (i / 8) * 8 + kSlot[i % 8];
      hi.q[at] = static_cast<int8_t>(h);
      lo.q[at] = static_cast<int8_t>(l);
      sh[i / 16] += h;
      sl[i / 16] += l;
    }
    for (int r = 0; r < 2; ++r) {
      const Q8Slots& o = r == 0 ? hi : lo;
      const int32_t* sum = r == 0 ? sh : sl;
      o.bias16[2 * g] = -kernels::kQ8E2m1Offset * sum[0];
      o.bias16[2 * g + 1] = -kernels::kQ8E2m1Offset * sum[1];
      o.bias32[g] = -kernels::kQ8E2m1Offset * (sum[0] + sum[1]);
    }
  }
}

Q8Slots Q8Buffer::reserve(int64_t rows, int64_t ld) {
  if (ld % 32 != 0 || rows < 0)
    throw_error(ErrorKind::kInternal, "Q8Buffer::reserve: a row stride of " + std::to_string(ld) + " (needs a multiple of 32)");
  const size_t n = static_cast<size_t>(rows * ld);
  if (q_.size() < n) q_.resize(n);
  if (scale_.size() < n / 32) scale_.resize(n / 32);
  if (bias16_.size() < n / 16) bias16_.resize(n / 16);
  if (bias32_.size() < n / 32) bias32_.resize(n / 32);
  return {q_.data(), scale_.data(), bias16_.data(), bias32_.data(), ld};
}

}  // namespace moerun::cpu
