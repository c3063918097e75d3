#include "core/convert.hpp"

#include <cstring>

#include "moerun/error.hpp"
#include "moerun/formats.hpp"

namespace moerun {

void convert_to_f32(const TensorView& src, float* dst) {
  const int64_t n = src.numel();
  switch (src.dtype) {
    case DType::kF32: if (n) std::memcpy(dst, src.data, static_cast<size_t>(n) * 4); return;
    case DType::kF16: for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(src.as<const uint16_t>()[i]); return;
    case DType::kBF16: for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src.as<const uint16_t>()[i]); return;
    default: throw_error(ErrorKind::kInvalidArgument, "cannot read " + std::string(dtype_name(src.dtype)) + " activations (F32, F16, BF16)");
  }
}

void convert_from_f32(const float* src, const TensorView& dst) {
  const int64_t n = dst.numel();
  switch (dst.dtype) {
    case DType::kF32: if (n) std::memcpy(dst.data, src, static_cast<size_t>(n) * 4); return;
    case DType::kF16: for (int64_t i = 0; i < n; ++i) dst.as<uint16_t>()[i] = f32_to_fp16(src[i]); return;
    case DType::kBF16: for (int64_t i = 0; i < n; ++i) dst.as<uint16_t>()[i] = f32_to_bf16(src[i]); return;
    default: throw_error(ErrorKind::kInvalidArgument, "cannot write " + std::string(dtype_name(dst.dtype)) + " activations (F32, F16, BF16)");
  }
}

}  // namespace moerun
