// cuda/cuda_check.hpp — checked CUDA runtime calls and an owning device buffer.
//
// Every CUDA call in the cuda and cublas backends goes through MOERUN_CUDA_CHECK: a failure throws
// moerun::Error{kDevice} naming the call, the error's name and text, and the file and line. The
// runtime also keeps a failed call's error as the thread's last error, which the kernel launchers read
// after their launches (cudaGetLastError): throw_cuda clears it, so that moerun's failure does not
// surface again in the caller's own next launch check (a forward also clears it first:
// DeviceMoe::begin).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "moerun/error.hpp"

namespace moerun::cuda_detail {

[[noreturn]] inline void throw_cuda(cudaError_t err, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // (a sticky error stays: every later call reports it, as it should)
  throw_error(ErrorKind::kDevice, std::string("CUDA call ") + call + " failed with " +
                                      cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                                      ") at " + file + ":" + std::to_string(line));
}

inline void check(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess) throw_cuda(err, call, file, line);
}

// Owns one cudaMalloc allocation. Grows only through reserve(); never shrinks.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }

  // Makes room for at least `bytes`; returns true when it had to allocate (forbidden while a stream
  // is being captured: the caller checks that first). Old contents are not kept.
  bool reserve(size_t bytes);
  void upload(const void* host, size_t bytes);  // reserve(bytes) + synchronous copy
  void* get() const noexcept { return ptr_; }
  template <typename T> T* as() const noexcept { return static_cast<T*>(ptr_); }
  size_t capacity() const noexcept { return bytes_; }
  void release() noexcept;
  // Hands the allocation to the caller (who then frees it with cudaFree) and leaves this one empty.
  void* detach() noexcept {
    void* p = ptr_;
    ptr_ = nullptr;
    bytes_ = 0;
    return p;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Makes `device` the calling thread's current device for the scope and restores the one the caller had:
// a runner on GPU 1 called from a thread working on GPU 0 must not leave that thread's later
// allocations and launches on GPU 1.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check(cudaGetDevice(&saved_), "cudaGetDevice(&saved_)", __FILE__, __LINE__);
    if (saved_ != device) check(cudaSetDevice(device), "cudaSetDevice(device)", __FILE__, __LINE__);
  }
  ~DeviceScope() {
    int now = saved_;
    if (cudaGetDevice(&now) == cudaSuccess && now != saved_) cudaSetDevice(saved_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int saved_ = 0;
};

// The device an object's CUDA resources live on, current while they are made and freed. Declared as
// the object's first member, so that it is destroyed last: enter() at the top of the constructor body
// and leave() at its end make the device current while the constructor allocates; when the
// constructor throws, or the object is destroyed (enter_noexcept() at the top of the destructor), the
// caller's device comes back only after every later member has freed its memory, streams and handles
// on the object's device (cublasDestroy synchronizes the current device; a cudaFree on a thread that
// never used CUDA would create a context on device 0).
class RunnerDevice {
 public:
  RunnerDevice() = default;
  RunnerDevice(const RunnerDevice&) = delete;
  RunnerDevice& operator=(const RunnerDevice&) = delete;
  ~RunnerDevice() { leave(); }

  void enter(int device) {
    check(cudaGetDevice(&saved_), "cudaGetDevice(&saved_)", __FILE__, __LINE__);
    if (saved_ == device) return;
    check(cudaSetDevice(device), "cudaSetDevice(device)", __FILE__, __LINE__);
    entered_ = true;
  }
  void enter_noexcept(int device) noexcept {  // (its own failure is cleared, not left for the caller's check)
    if (cudaGetDevice(&saved_) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (saved_ == device) return;
    entered_ = cudaSetDevice(device) == cudaSuccess;
    if (!entered_) (void)cudaGetLastError();
  }
  void leave() noexcept {
    if (entered_ && cudaSetDevice(saved_) != cudaSuccess) (void)cudaGetLastError();
    entered_ = false;
  }

 private:
  int saved_ = 0;
  bool entered_ = false;
};

}  // namespace moerun::cuda_detail

#define MOERUN_CUDA_CHECK(call) ::moerun::cuda_detail::check((call), #call, __FILE__, __LINE__)
