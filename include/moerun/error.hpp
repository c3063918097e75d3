// moerun/error.hpp — the one exception type at the API boundary.
//
// Every failure a caller can cause (a bad spec, a corrupt file, an unknown backend, a plan that cannot
// run) is reported as moerun::Error with a category and a one-line message that names the problem and,
// where one exists, what would work instead. Internal invariants that cannot fail use MOERUN_ASSERT.
#pragma once

#include <stdexcept>
#include <string>

namespace moerun {

enum class ErrorKind {
  kInvalidSpec,      // a MoeSpec field is out of range or inconsistent
  kInvalidArgument,  // a tensor, shape or option passed to a call is wrong
  kParse,            // config JSON, platform description or CLI text could not be read
  kFormat,           // a file (safetensors) is corrupt or does not match the spec
  kIo,               // the operating system refused a file operation
  kUnsupported,      // no backend (or not the requested one) can run this spec here
  kNotFound,         // a named thing (backend, preset, tensor, layer) does not exist
  kRegistry,         // registration refused (bad name, duplicate, override not allowed)
  kPlugin,           // a plugin library could not be loaded or initialised, or an out-of-tree backend failed
  kDevice,           // a device call (CUDA, cuBLAS) failed
  kInternal,         // a bug in moerun: please report it
};

const char* error_kind_name(ErrorKind kind) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] void throw_error(ErrorKind kind, const std::string& message);

}  // namespace moerun

// MOERUN_ASSERT is for states that cannot happen; it reports file and line as an internal error.
#define MOERUN_ASSERT(cond)                                                                          \
  do {                                                                                               \
    if (!(cond))                                                                                     \
      ::moerun::throw_error(::moerun::ErrorKind::kInternal,                                          \
                            std::string("internal error: ") + #cond + " failed at " + __FILE__ +    \
                                ":" + std::to_string(__LINE__));                                     \
  } while (0)
