// moerun/dtype.hpp — element types of tensors, as safetensors and Hugging Face checkpoints name them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace moerun {

// Storage element types. Sub-byte types (e2m1) are stored packed two per byte in kU8 tensors, exactly
// as checkpoints store them; kF8E8M0 is the mxfp4 shared exponent (some checkpoints store it as kU8).
enum class DType : uint8_t {
  kF64, kF32, kF16, kBF16, kF8E4M3, kF8E5M2, kF8E8M0, kI64, kI32, kI16, kI8, kU8, kBool,
};

// Bytes per element (1 for the fp8 types, kU8 and kBool).
size_t dtype_size(DType t) noexcept;

// The safetensors spelling: "F32", "BF16", "F8_E4M3", "U8", ...
std::string_view dtype_name(DType t) noexcept;

// Parses a safetensors dtype name; nullopt for a name moerun does not know.
std::optional<DType> dtype_from_name(std::string_view name) noexcept;

}  // namespace moerun
