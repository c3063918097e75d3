// cpu/q8_rows.hpp — int8 activation rows (ActQuant::kInt8PerTokenGroup) in the layout the q8 kernel
// reads (kernels::Q8Rows), and the buffers a runner keeps them in.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/kernels/kernels.hpp"

namespace moerun::cpu {

// Writable rows in kernels::Q8Rows's layout (what a Q8Buffer hands out).
struct Q8Slots {
  int8_t* q = nullptr;
  float* scale = nullptr;
  int32_t* bias16 = nullptr;
  int32_t* bias32 = nullptr;
  int64_t ld = 0;
  Q8Slots row(int64_t r) const noexcept {
    return {q + r * ld, scale + r * (ld / 32), bias16 + r * (ld / 16), bias32 + r * (ld / 32), ld};
  }
  kernels::Q8Rows view() const noexcept { return {q, scale, bias16, bias32, ld}; }
};

// Quantizes one row of kp activations (kp a multiple of 32, at most out.ld; the columns past the true K
// zero) with moerun::quantize_act_int8_group per 32 columns, the codes the reference's fake quantization
// uses, into row 0 of `out` (permuted codes, scales, bias sums).
// With `fake` (which may be x itself) it also writes the kp dequantized values code x scale there, what
// moerun::fake_quantize_act_int8_per_token_group gives (and NaN over a whole group that held a NaN or an
// infinity, padding columns included): the kernels that take the f32 or bf16 row see the same values.
// Throws Error{kInternal} when kp is not a multiple of 32 or exceeds out.ld.
void pack_q8_row(const float* x, int64_t kp, const Q8Slots& out, float* fake = nullptr);

// Activations that the spec does not quantize (act_quant none, bf16), held for the q8 kernel at 15 bits:
// per 32 columns, q = round(x / 2^e) with the smallest e that keeps |q| <= kQ15Max, split into a high
// row (q >> 7, scale 2^(e + 7)) and a low row (q & 127, scale 2^e), rows 0 and 1 of `out`. The kernels
// add the two rows' products back into x's (per row scale, or at AVX-512 as the exact integer 128 x high +
// low: kernels.hpp stream_q15_avx512vnni, which relies on these two scales): one token costs two int8 rows, and each
// value is off by at most half a step, 2^(e - 1), under 1/16383 of the group's largest magnitude (bf16's
// own rounding of that largest value is up to 2^-9 of it); the bf16 inputs within 2^6 of the group's
// largest come through exactly. Values past kQ15Max x 2^114 (within 2^-14 of FLT_MAX) saturate there. A
// group holding a NaN or an infinity gets NaN scales (the kernel's outputs for that token turn NaN, as a
// dot product with an infinity mostly does). Same preconditions as pack_q8_row.
inline constexpr int kQ15Max = 16383;
void pack_q15_rows(const float* x, int64_t kp, const Q8Slots& out);

// Copies rows [from, from + n) of `all` (codes of the first kp columns, their scales and bias sums) to
// rows [to, to + n): the rows of a token that another row already packed.
void copy_q8_rows(const Q8Slots& all, int64_t from, int64_t to, int64_t n, int64_t kp);

// Owner of rows of int8 activations; grows only (the steady-state forward allocates nothing).
class Q8Buffer {
 public:
  // Room for `rows` rows with a stride of ld codes (a multiple of 32); returns the view of row 0, whose
  // pointers stay valid until the next reserve of more.
  Q8Slots reserve(int64_t rows, int64_t ld);

 private:
  std::vector<int8_t> q_;
  std::vector<float> scale_;
  std::vector<int32_t> bias16_, bias32_;
};

}  // namespace moerun::cpu
