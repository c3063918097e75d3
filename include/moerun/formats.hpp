// moerun/formats.hpp — weight formats: exact element codecs, expert weight stacks, (de)quantization.
//
// Element codecs follow the published definitions bit for bit:
//   fp16 / bf16   IEEE 754 binary16 / bfloat16; float -> half rounds to nearest even.
//   fp8 e4m3      OCP FP8 E4M3 "fn": bias 7, no infinities, 0x7F/0xFF are NaN, max finite 448.
//   fp8 e5m2      OCP FP8 E5M2: bias 15, IEEE-like infinities and NaNs, max finite 57344.
//   e8m0          OCP MX shared scale: 2^(x-127), 0xFF is NaN.
//   e2m1 (fp4)    OCP MX FP4: values {0, 0.5, 1, 1.5, 2, 3, 4, 6} with a sign bit; two per byte,
//                 element 2i in the low nibble, 2i+1 in the high nibble (as gpt-oss and ModelOpt store).
// Encoders saturate to the largest finite value (the convention of every quantizer in use), map NaN to
// the format's NaN where it has one, and round to nearest even. Exceptions: fp16 and bf16 are IEEE
// conversions (as every cast does), so overflow rounds to inf; e5m2 saturates finite overflow but keeps
// inf as inf; e4m3fn and e2m1 have no inf and saturate it; e2m1 has no NaN and encodes it as 0.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moerun/spec.hpp"
#include "moerun/tensor.hpp"

namespace moerun {

// ---- element codecs ---------------------------------------------------------------------------------

float fp16_to_f32(uint16_t h) noexcept;
uint16_t f32_to_fp16(float f) noexcept;
float bf16_to_f32(uint16_t b) noexcept;
uint16_t f32_to_bf16(float f) noexcept;
float e4m3_to_f32(uint8_t v) noexcept;
uint8_t f32_to_e4m3(float f) noexcept;
float e5m2_to_f32(uint8_t v) noexcept;
uint8_t f32_to_e5m2(float f) noexcept;
float e8m0_to_f32(uint8_t v) noexcept;
uint8_t f32_to_e8m0_ceil(float f) noexcept;   // smallest power of two >= f (f > 0), as MX quantizers pick
float e2m1_to_f32(uint8_t nibble) noexcept;   // low 4 bits used
uint8_t f32_to_e2m1(float f) noexcept;        // returns a nibble

inline constexpr float kE4m3Max = 448.0f;
inline constexpr float kE2m1Max = 6.0f;
inline constexpr int kFp8BlockSize = 128;      // fp8 block weights: 128 x 128
inline constexpr int kActQuantGroup = 128;     // dynamic activation quant: 1 x 128 per token
inline constexpr int kActQuantGroupInt8 = 32;  // int8 activation quant: 1 x 32 per token
inline constexpr int kMxfp4Group = 32;
inline constexpr int kNvfp4Group = 16;

// Reads element i of a tensor of dtype t (F32/F16/BF16/F8E4M3/F8E5M2/I8/I32) as float.
float load_as_f32(const void* data, DType t, int64_t i) noexcept;

// ---- expert weight stacks ---------------------------------------------------------------------------

// E matrices of [N, K] (N output rows, K contiguous) in one weight format, with their scales:
//
//   format            data                     scale                              global_scale
//   kF32/kF16/kBF16   F32/F16/BF16 [E, N, K]   —                                  —
//   kFp8PerTensor     F8E4M3 [E, N, K]         F32 [E]                            —
//   kFp8PerChannel    F8E4M3 [E, N, K]         F32 [E, N]                         —
//   kFp8Block         F8E4M3 [E, N, K]         F32 [E, ceil(N/128), ceil(K/128)]  —
//   kMxfp4            U8 [E, N, K/2]           U8 (e8m0) [E, N, K/32]             —
//   kNvfp4            U8 [E, N, K/2]           F8E4M3 [E, N, K/16]                F32 [E]
//   kInt8PerChannel   I8 [E, N, K]             F32 [E, N]                         —
//
// Dequantized value: w = decode(data) * scale (* global_scale for nvfp4). For fp8 block weights the
// scale is a multiplier (Hugging Face names it "weight_scale_inv" but stores the dequant multiplier).
struct ExpertMatrix {
  WeightFormat format = WeightFormat::kBF16;
  int64_t experts = 0, rows = 0, cols = 0;  // E, N, K
  TensorView data, scale, global_scale;
  // Layout tag: "canonical" is the table above. A backend that repacks records its own tag here and
  // refuses a stack whose tag it does not know (never runs a layout it did not prepare).
  std::string layout = "canonical";
  std::vector<std::shared_ptr<const void>> keepalive;  // owners of the memory the views point to

  bool empty() const noexcept { return experts == 0; }
  // Bytes one expert's matrix occupies, data and scales together (for bandwidth accounting).
  int64_t bytes_per_expert() const noexcept;
};

// Quantizes E dense fp32 [N, K] matrices (row-major, contiguous) into `format`, computing scales the
// way the reference quantizers of each format do (absmax / format max; e8m0 rounds its scale up).
// Throws Error{kInvalidArgument} when K is not a multiple of the format's group (32 mxfp4, 16 nvfp4), for
// a non-finite weight in a scaled format, and for a finite weight past f16's range in f16 (NaN and inf
// pass through into f32, f16 and bf16 as they are).
ExpertMatrix quantize_experts(WeightFormat format, const float* w, int64_t experts, int64_t rows,
                              int64_t cols);

// Writes the K dequantized values of row n of expert e into out[0..K).
void dequantize_row(const ExpertMatrix& m, int64_t expert, int64_t row, float* out);

// Checks dtypes and shapes of data/scale/global_scale against the table above; on mismatch throws
// Error{kFormat} "expected F32 [8, 16, 2], got BF16 [8, 16, 2] for <what>.scale".
void check_expert_matrix(const ExpertMatrix& m, const std::string& what);

// ---- dynamic activation quantization ----------------------------------------------------------------

// Quantizes each row of x [M, K] to e4m3 with one scale per 128 columns (scale = absmax / 448, or 1
// for an all-zero group), then writes the dequantized values back into x (what a kernel computing with
// the fp8 activations sees). The reference uses this so that it quantizes exactly as kernels do.
void fake_quantize_act_fp8_per_token_group(float* x, int64_t m, int64_t k);

// int8 activation quantization (ActQuant::kInt8PerTokenGroup), one group of n <= 32 values: codes
// q[i] = round-half-even(x[i] / 2^e) in [-127, 127] with the smallest e >= -126 such that
// absmax <= 127 * 2^e (e = 0 for an all-zero group), e at most 121: a group with absmax above
// 127 * 2^121 (within 1% of FLT_MAX) saturates its largest values to +-127 * 2^121. Returns 2^e. Every q * 2^e is a normal
// (or zero) f32 and bf16 number, so a kernel computing with the codes and one computing with bf16
// copies of the dequantized values see the same operands. A group holding a NaN or an infinity
// returns NaN and zero codes: its outputs become NaN, never a finite guess.
float quantize_act_int8_group(const float* x, int n, int8_t* q) noexcept;

// Quantizes each row of x [M, K] with quantize_act_int8_group over 32-column groups (the last one
// partial when K is not a multiple of 32), then writes q * scale back (NaN for a non-finite group).
// The reference uses this so that it quantizes exactly as kernels do.
void fake_quantize_act_int8_per_token_group(float* x, int64_t m, int64_t k);

// The fake quantization of `q` (the two above; nothing for ActQuant::kNone) on rows of x [M, K].
void fake_quantize_act(ActQuant q, float* x, int64_t m, int64_t k);

}  // namespace moerun
