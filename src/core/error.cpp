#include "moerun/error.hpp"

namespace moerun {

const char* error_kind_name(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::kInvalidSpec: return "invalid spec";
    case ErrorKind::kInvalidArgument: return "invalid argument";
    case ErrorKind::kParse: return "parse error";
    case ErrorKind::kFormat: return "format error";
    case ErrorKind::kIo: return "I/O error";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kNotFound: return "not found";
    case ErrorKind::kRegistry: return "registry error";
    case ErrorKind::kPlugin: return "plugin error";
    case ErrorKind::kDevice: return "device error";
    case ErrorKind::kInternal: return "internal error";
  }
  return "error";
}

void throw_error(ErrorKind kind, const std::string& message) { throw Error(kind, message); }

}  // namespace moerun
