#include "core/convert.hpp"

#include <cstring>

#include "moerun/error.hpp"
#include "moerun/formats.hpp"

namespace moerun {

namespace {
// Element i of 2-byte elements at any alignment (a view into a mapped file is aligned as its offsets).
uint16_t half_at(const void* p, int64_t i) {
  uint16_t v;
  std::memcpy(&v, static_cast<const char*>(p) + 2 * i, sizeof v);
  return v;
}
}  // namespace

void convert_to_f32(const TensorView& src, float* dst) {
  const int64_t n = src.numel();
  switch (src.dtype) {
    case DType::kF32: if (n) std::memcpy(dst, src.data, static_cast<size_t>(n) * 4); return;
    case DType::kF16: for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(half_at(src.data, i)); return;
    case DType::kBF16: for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(half_at(src.data, i)); return;
    default: throw_error(ErrorKind::kInvalidArgument, "cannot read " + std::string(dtype_name(src.dtype)) + " values as floats (F32, F16, BF16 only)");
  }
}

void convert_from_f32(const float* src, const TensorView& dst) {
  const int64_t n = dst.numel();
  switch (dst.dtype) {
    case DType::kF32: if (n) std::memcpy(dst.data, src, static_cast<size_t>(n) * 4); return;
    // (stores through memcpy, as the reads above: an output view may sit at any byte address)
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t v = f32_to_fp16(src[i]);
        std::memcpy(static_cast<char*>(dst.data) + 2 * i, &v, 2);
      }
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t v = f32_to_bf16(src[i]);
        std::memcpy(static_cast<char*>(dst.data) + 2 * i, &v, 2);
      }
      return;
    default: throw_error(ErrorKind::kInvalidArgument, "cannot write floats as " + std::string(dtype_name(dst.dtype)) + " values (F32, F16, BF16 only)");
  }
}

}  // namespace moerun
