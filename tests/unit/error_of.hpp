// error_of(f): the message of the moerun::Error that f throws ("" when it throws none), and its kind
// through `kind`. Shared by the unit tests that check refusals by their words.
#pragma once

#include <string>

#include "moerun/error.hpp"

namespace moerun {

template <typename F>
std::string error_of(F&& f, ErrorKind* kind = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "";
}

}  // namespace moerun
