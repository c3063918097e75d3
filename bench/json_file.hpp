// bench/json_file.hpp — the bench drivers' --json file: checked before the run, rewritten as rows come.
//   - json_path_writable: the check before minutes of measuring must not empty an earlier result at
//     that path (opened to append; a file it created is removed again).
//   - write_json_file: written beside the path and renamed over it, so a run stopped by a timeout in
//     the middle of a write leaves the previous version whole, never a truncated file.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

namespace moerun_bench {

inline bool json_path_writable(const std::string& path) {
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec);
  if (!std::ofstream(path, std::ios::app)) return false;
  if (!existed) std::filesystem::remove(path, ec);
  return true;
}

// Prints what failed (prefixed by `who`) and returns false.
inline bool write_json_file(const std::string& path, const nlohmann::json& j, int indent, const char* who) {
  const std::string part = path + ".part";
  {
    std::ofstream f(part);
    f << j.dump(indent) << "\n";
    if (!f) {
      std::fprintf(stderr, "%s: cannot write %s\n", who, part.c_str());
      return false;
    }
  }
  std::error_code ec;
  std::filesystem::rename(part, path, ec);
  if (ec) std::fprintf(stderr, "%s: cannot rename %s to %s: %s\n", who, part.c_str(), path.c_str(), ec.message().c_str());
  return !ec;
}

}  // namespace moerun_bench
