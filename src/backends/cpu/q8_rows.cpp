// cpu/q8_rows.cpp — q8_rows.hpp.
#include "backends/cpu/q8_rows.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
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

// 2^e as a float, for e in [-126, 127] (a normal number: exact, no libm call).
inline float pow2(int e) noexcept { return std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23); }

// The q15 exponent of a group whose largest magnitude is amax (finite, > 0): the smallest e in
// [kMinE, kMaxE] with kQ15Max x 2^e >= amax. e in [-126, 114]: 2^-e is a normal float, and
// kQ15Max x 2^114 = 2^128 - 2^114 is finite; values above it (within 2^-14 of FLT_MAX) saturate there,
// as in the int8 case.
constexpr int kMinE = -126, kMaxE = 114;
inline int q15_exponent(float amax) noexcept {
  const uint32_t u = std::bit_cast<uint32_t>(amax);
  int b = static_cast<int>(u >> 23) - 126;  // amax = f x 2^b with f in [0.5, 1), for a normal amax
  if (u < 0x00800000u) std::frexp(amax, &b);  // subnormal (rare): the library's normalisation
  int e = std::clamp(b - 14, kMinE, kMaxE);
  // kQ15Max x 2^e is exact (14 significant bits, e >= -126): the same tests ldexp would make
  while (e < kMaxE && static_cast<float>(kQ15Max) * pow2(e) < amax) ++e;
  while (e > kMinE && static_cast<float>(kQ15Max) * pow2(e - 1) >= amax) --e;
  return e;
}

}  // namespace

void pack_q15_rows(const float* x, int64_t kp, const Q8Slots& out) {
  if (kp % 32 != 0 || kp > out.ld)
    throw_error(ErrorKind::kInternal, "pack_q15_rows: " + std::to_string(kp) + " columns for a row stride of " +
                                          std::to_string(out.ld) + " (needs a multiple of 32 that fits)");
  static constexpr int kSlot[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // as in pack_q8_row
  const Q8Slots hi = out.row(0), lo = out.row(1);
  // Branch-free loops over each group's 32 columns (the compiler vectorizes them; the per-element
  // isfinite / clamp and the ldexp calls of a plainer form took 6.2 us per 2048 columns, 8 such rows
  // per one-token forward of qwen3-30b-a3b).
  for (int64_t g = 0; g < kp / 32; ++g) {
    const float* xg = x + g * 32;
    // |x| as bits: for non-negative floats the integer order is the float order, and NaN / infinity
    // are the patterns from 0x7f800000 up.
    uint32_t umax = 0;
    for (int i = 0; i < 32; ++i) umax = std::max(umax, std::bit_cast<uint32_t>(xg[i]) & 0x7fffffffu);
    int8_t* qh = hi.q + g * 32;
    int8_t* ql = lo.q + g * 32;
    if (umax >= 0x7f800000u) {  // a NaN or an infinity: NaN scales, zero codes
      for (int i = 0; i < 32; ++i) qh[i] = ql[i] = 0;
      hi.scale[g] = lo.scale[g] = std::numeric_limits<float>::quiet_NaN();
      for (const Q8Slots* o : {&hi, &lo}) o->bias16[2 * g] = o->bias16[2 * g + 1] = o->bias32[g] = 0;
      continue;
    }
    const int e = umax == 0 ? kMinE : q15_exponent(std::bit_cast<float>(umax));
    hi.scale[g] = pow2(e + 7);
    lo.scale[g] = pow2(e);
    const float inv = pow2(-e);
    constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: round half to even (never built with -ffast-math)
    int32_t q[32];
    for (int i = 0; i < 32; ++i)
      q[i] = std::clamp(static_cast<int32_t>((xg[i] * inv + kRound) - kRound), -kQ15Max, kQ15Max);
    int32_t sh[2] = {0, 0}, sl[2] = {0, 0};
    for (int i = 0; i < 32; ++i) {
      const int32_t h = q[i] >> 7;  // arithmetic: floor(q / 128), in [-128, 127]
      const int32_t l = q[i] & 127;  // q - 128 h, in [0, 127]
      const int at = (i / 8) * 8 + kSlot[i % 8];
      qh[at] = static_cast<int8_t>(h);
      ql[at] = static_cast<int8_t>(l);
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

void copy_q8_rows(const Q8Slots& all, int64_t from, int64_t to, int64_t n, int64_t kp) {
  for (int64_t i = 0; i < n; ++i) {
    const Q8Slots s = all.row(from + i), d = all.row(to + i);
    std::memcpy(d.q, s.q, static_cast<size_t>(kp));
    std::memcpy(d.scale, s.scale, static_cast<size_t>(kp / 32) * sizeof(float));
    std::memcpy(d.bias16, s.bias16, static_cast<size_t>(kp / 16) * sizeof(int32_t));
    std::memcpy(d.bias32, s.bias32, static_cast<size_t>(kp / 32) * sizeof(int32_t));
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
