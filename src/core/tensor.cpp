#include "moerun/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "moerun/error.hpp"

namespace moerun {

Shape::Shape(std::initializer_list<int64_t> d) {
  if (d.size() > static_cast<size_t>(kMaxRank))
    throw_error(ErrorKind::kInvalidArgument, "tensor rank " + std::to_string(d.size()) + " > 4");
  for (int64_t v : d) dims[static_cast<size_t>(rank++)] = v;
}

int64_t Shape::numel() const noexcept {
  if (!valid()) return -1;
  for (int i = 0; i < rank; ++i)
    if (dims[static_cast<size_t>(i)] == 0) return 0;  // (before any product can overflow)
  int64_t n = 1;
  for (int i = 0; i < rank; ++i)
    if (__builtin_mul_overflow(n, dims[static_cast<size_t>(i)], &n)) return std::numeric_limits<int64_t>::max();
  return n;
}

bool Shape::operator==(const Shape& o) const noexcept {
  if (rank != o.rank) return false;
  if (!valid()) return true;  // (the same invalid rank: nothing else can be compared)
  for (int i = 0; i < rank; ++i)
    if (dims[static_cast<size_t>(i)] != o.dims[static_cast<size_t>(i)]) return false;
  return true;
}

std::string Shape::str() const {
  if (!valid()) return "[invalid rank " + std::to_string(rank) + "]";
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[static_cast<size_t>(i)]);
  }
  return s + "]";
}

size_t TensorView::nbytes() const noexcept {
  const int64_t n = numel();
  return n > 0 ? static_cast<size_t>(n) * dtype_size(dtype) : 0;  // (an invalid rank: -1 elements, 0 bytes)
}

void HostTensor::Free::operator()(void* p) const noexcept { std::free(p); }

HostTensor::HostTensor(HostTensor&& o) noexcept
    : dtype_(o.dtype_), shape_(o.shape_), nbytes_(o.nbytes_), data_(std::move(o.data_)) {
  o.shape_ = Shape{};
  o.nbytes_ = 0;
}

HostTensor& HostTensor::operator=(HostTensor&& o) noexcept {
  if (this != &o) {
    dtype_ = o.dtype_;
    shape_ = o.shape_;
    nbytes_ = o.nbytes_;
    data_ = std::move(o.data_);
    o.shape_ = Shape{};
    o.nbytes_ = 0;
  }
  return *this;
}

HostTensor::HostTensor(DType dtype, Shape shape) : dtype_(dtype), shape_(shape) {
  if (!shape.valid()) throw_error(ErrorKind::kInvalidArgument, "tensor shape " + shape.str());
  if (dtype_size(dtype) == 0) throw_error(ErrorKind::kInvalidArgument, "not a dtype: " + std::to_string(static_cast<int>(dtype)));
  for (int i = 0; i < shape.rank; ++i)
    if (shape[i] < 0) throw_error(ErrorKind::kInvalidArgument, "negative dimension in " + shape.str());
  const int64_t n = shape.numel();
  if (n > 0 && static_cast<uint64_t>(n) > std::numeric_limits<size_t>::max() / 64)
    throw_error(ErrorKind::kInvalidArgument, "tensor too large: " + shape.str());
  nbytes_ = static_cast<size_t>(n) * dtype_size(dtype);
  if (nbytes_ == 0) return;
  const size_t rounded = (nbytes_ + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();  // the API's out-of-memory signal (layer.hpp), as random_weights' vectors give
  std::memset(p, 0, rounded);
  data_.reset(p);
}

TensorView HostTensor::view() const {
  TensorView v;
  v.data = data_.get();
  v.dtype = dtype_;
  v.shape = shape_;
  return v;
}

}  // namespace moerun
