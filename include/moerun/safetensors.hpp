// moerun/safetensors.hpp — strict safetensors reading (memory-mapped) and writing.
//
// The reader validates before it trusts: the 8-byte header length against a cap (100 MiB) and the file
// size, the header as JSON, every tensor's dtype, shape (no negative dims, no overflow of
// numel * element size), and data offsets (in bounds, non-overlapping, contiguous, covering the data
// section exactly). Any violation throws Error{kFormat} with the file and tensor named.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "moerun/tensor.hpp"

namespace moerun {

class SafetensorsFile {
 public:
  // Maps the file read-only and validates it. Throws Error{kIo} / Error{kFormat}.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  // Validates an in-memory image (used by the fuzzer and tests); the bytes are copied.
  static std::shared_ptr<SafetensorsFile> from_bytes(std::string_view bytes, std::string origin);

  const std::string& path() const noexcept { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(std::string_view name) const;
  // Throws Error{kNotFound} "no tensor 'x' in file.safetensors". The view points into this object's
  // read-only memory (a PROT_READ mapping for open()): never write through it, and keep this object
  // alive while the view is used. Its alignment is whatever the file's offsets give (write_safetensors
  // starts the data 8-byte aligned); read elements with memcpy when in doubt.
  TensorView get(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  ~SafetensorsFile();
  // Held by shared_ptr only: a copy would unmap the original's memory when it went, leaving every view
  // from the original dangling.
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

 private:
  SafetensorsFile() = default;
  void parse();
  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::string owned_;  // from_bytes
  std::map<std::string, TensorView, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors (host memory) in name order with an optional __metadata__ map; atomically (a temp
// file renamed into place). Throws Error{kIo} / Error{kInvalidArgument}.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, TensorView>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

inline constexpr uint64_t kSafetensorsMaxHeader = 100ull << 20;

}  // namespace moerun
