// Element codecs (formats.hpp): the public functions forward to the inline bodies in
// formats_codecs.hpp; load_as_f32 reads one element of any numeric dtype.
#include <cstring>
#include <limits>

#include "core/formats_codecs.hpp"
#include "moerun/formats.hpp"

namespace moerun {
namespace {

template <typename T>
T read_as(const void* data, int64_t i) noexcept {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(data) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

}  // namespace

float fp16_to_f32(uint16_t h) noexcept { return codec::fp16_to_f32(h); }
uint16_t f32_to_fp16(float f) noexcept { return codec::f32_to_fp16(f); }
float bf16_to_f32(uint16_t b) noexcept { return codec::bf16_to_f32(b); }
uint16_t f32_to_bf16(float f) noexcept { return codec::f32_to_bf16(f); }
float e4m3_to_f32(uint8_t v) noexcept { return codec::e4m3_to_f32(v); }
uint8_t f32_to_e4m3(float f) noexcept { return codec::f32_to_e4m3(f); }
float e5m2_to_f32(uint8_t v) noexcept { return codec::e5m2_to_f32(v); }
uint8_t f32_to_e5m2(float f) noexcept { return codec::f32_to_e5m2(f); }
float e8m0_to_f32(uint8_t v) noexcept { return codec::e8m0_to_f32(v); }
uint8_t f32_to_e8m0_ceil(float f) noexcept { return codec::f32_to_e8m0_ceil(f); }
float e2m1_to_f32(uint8_t nibble) noexcept { return codec::e2m1_to_f32(nibble); }
uint8_t f32_to_e2m1(float f) noexcept { return codec::f32_to_e2m1(f); }

float load_as_f32(const void* data, DType t, int64_t i) noexcept {
  switch (t) {
    case DType::kF64: return static_cast<float>(read_as<double>(data, i));
    case DType::kF32: return read_as<float>(data, i);
    case DType::kF16: return codec::fp16_to_f32(read_as<uint16_t>(data, i));
    case DType::kBF16: return codec::bf16_to_f32(read_as<uint16_t>(data, i));
    case DType::kF8E4M3: return codec::e4m3_to_f32(read_as<uint8_t>(data, i));
    case DType::kF8E5M2: return codec::e5m2_to_f32(read_as<uint8_t>(data, i));
    case DType::kF8E8M0: return codec::e8m0_to_f32(read_as<uint8_t>(data, i));
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
