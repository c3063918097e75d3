// moerun/tensor.hpp — non-owning tensor views and an owning, aligned host buffer.
//
// Kernels below src/backends/*/kernels/ take raw pointers; everything above them passes TensorView,
// which is a pointer, a dtype, a row-major contiguous shape and the device the memory lives on.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "moerun/dtype.hpp"

namespace moerun {

enum class DeviceKind : uint8_t { kCpu, kCuda };

inline constexpr int kMaxRank = 4;

// rank is public, so a caller can set it past kMaxRank: such a shape is invalid (numel() -1, str()
// names it, equal to any shape of the same invalid rank) and never read past dims.
struct Shape {
  int rank = 0;
  std::array<int64_t, kMaxRank> dims{};

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t operator[](int i) const { return dims[static_cast<size_t>(i)]; }
  bool valid() const noexcept { return rank >= 0 && rank <= kMaxRank; }
  // The product of the dims: -1 for an invalid rank, INT64_MAX where the product overflows (so "has
  // elements" checks still see it, and an allocation of it is refused as too large).
  int64_t numel() const noexcept;
  bool operator==(const Shape& o) const noexcept;
  std::string str() const;  // "[64, 2048]"
};

// A view of contiguous row-major memory. Never owns; a null data pointer is allowed only for numel 0.
// empty(): no data (a view of zero elements may still carry a shape; HostTensor::empty() is "no bytes").
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;
  DeviceKind device = DeviceKind::kCpu;
  int device_index = 0;

  bool empty() const noexcept { return data == nullptr; }
  int64_t numel() const noexcept { return shape.numel(); }
  size_t nbytes() const noexcept;
  template <typename T> T* as() const { return static_cast<T*>(data); }
};

// An owning, 64-byte aligned host allocation that hands out TensorViews of itself. A moved-from
// HostTensor is empty: no shape, no bytes (it keeps its dtype).
class HostTensor {
 public:
  HostTensor() = default;
  // Zero-filled. Throws Error{kInvalidArgument} for a bad shape or dtype or a size past what size_t
  // counts, std::bad_alloc when the memory is not there.
  HostTensor(DType dtype, Shape shape);
  HostTensor(HostTensor&& o) noexcept;
  HostTensor& operator=(HostTensor&& o) noexcept;
  TensorView view() const;
  DType dtype() const noexcept { return dtype_; }
  const Shape& shape() const noexcept { return shape_; }
  size_t nbytes() const noexcept { return nbytes_; }
  void* data() const noexcept { return data_.get(); }
  template <typename T> T* as() const { return static_cast<T*>(data()); }
  bool empty() const noexcept { return nbytes_ == 0; }

 private:
  struct Free { void operator()(void* p) const noexcept; };
  DType dtype_ = DType::kF32;
  Shape shape_;
  size_t nbytes_ = 0;
  std::unique_ptr<void, Free> data_;
};

}  // namespace moerun
