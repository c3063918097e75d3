#include "moerun/dtype.hpp"

#include <array>
#include <utility>

namespace moerun {
namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeInfo, 13> kTable{{
    {DType::kF64, "F64", 8}, {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
    {DType::kF8E8M0, "F8_E8M0", 1}, {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2}, {DType::kI8, "I8", 1}, {DType::kU8, "U8", 1}, {DType::kBool, "BOOL", 1},
}};
}  // namespace

// A value cast from outside the enum has no row: size 0 and the name "invalid".
size_t dtype_size(DType t) noexcept {
  const auto i = static_cast<size_t>(t);
  return i < kTable.size() ? kTable[i].size : 0;
}
std::string_view dtype_name(DType t) noexcept {
  const auto i = static_cast<size_t>(t);
  return i < kTable.size() ? kTable[i].name : std::string_view("invalid");
}
std::optional<DType> dtype_from_name(std::string_view name) noexcept {
  for (const auto& e : kTable)
    if (e.name == name) return e.type;
  return std::nullopt;
}

}  // namespace moerun
