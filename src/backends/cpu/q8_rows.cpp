// cpu/q8_rows.cpp — q8_rows.hpp.
#include "backends/cpu/q8_rows.hpp"

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
