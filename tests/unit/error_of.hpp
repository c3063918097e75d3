// error_of(f): the message of the moerun::Error that f throws ("" when it throws none), and its kind
// through `kind`; expect_refused(f, kind, part): the same as a GoogleTest expectation. Shared by the
// unit and GPU tests that check refusals by their words.
#pragma once

#include <string>
#include <utility>

#include <gtest/gtest.h>

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

// Expects f to throw a moerun::Error of `kind` whose message holds `part`; returns the message.
template <typename F>
std::string expect_refused(F&& f, ErrorKind kind, const std::string& part) {
  ErrorKind got{};
  const std::string msg = error_of(std::forward<F>(f), &got);
  EXPECT_FALSE(msg.empty()) << "nothing was refused; expected an error holding: " << part;
  if (!msg.empty()) EXPECT_EQ(got, kind) << msg;
  EXPECT_NE(msg.find(part), std::string::npos) << msg;
  return msg;
}

}  // namespace moerun
