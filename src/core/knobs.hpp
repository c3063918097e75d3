// core/knobs.hpp — every MOERUN_* environment variable moerun reads, in one table.
//
// Two of them are settings a user may need in production: MOERUN_PLUGIN_PATH (out-of-tree backends)
// and MOERUN_CPU_ISA (a cap on the CPU's instruction set). The rest are measurement knobs: benchmarks
// set them to time two forms of a kernel side by side, and their defaults are what measured fastest.
//
// Why a table: a knob read with getenv at its point of use cannot tell a typo from "unset", so
// `MOERUN_CPU_PREFECH=2048` or `MOERUN_CPU_ROW_PAD=33` used to measure the default in silence. Here
// each knob states the values it takes, once, and
//   - the boundary (MoeLayer, the command line, the benchmark drivers) calls check_knob_environment(),
//     which refuses a known knob set to a value it does not take, and warns once about a MOERUN_* name
//     that is not a knob, naming the nearest one;
//   - the readers deep in the backends take the value through knob_count() / knob_choice(), which
//     parse by the same table and answer "unset" for a malformed value (they run inside kernels' set-up,
//     where an exception would be the wrong place to learn about the environment).
// `moerun knobs` prints the table with the values now set; docs/knobs.md is checked against it.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moerun {

struct Knob {
  enum class Kind {
    kCount,   // a decimal integer in [lo, hi], a multiple of step; `zero_too` also admits 0 below lo
    kChoice,  // one of the '|'-separated words of `choices`
    kRatio,   // a decimal number in (lo, hi)
    kText,    // any non-empty text (paths); its reader checks it
  };
  std::string_view name;
  std::string_view area;  // "core", "cpu" or "cuda": the code that reads it
  bool setting;           // true: for production; false: a measurement knob
  Kind kind;
  long lo = 0, hi = 0, step = 1;
  bool zero_too = false;
  std::string_view choices;
  std::string_view unset;  // what holds when it is not set
  std::string_view what;   // one line: what it changes
};

// MOERUN_* variables that the repository's scripts and tests read, not the library (scripts/run-tests.sh:
// seconds per fuzzer; the conformance suite's fresh-seed test: the seed to replay): not knobs, and no
// warning about them.
inline constexpr std::string_view kScriptVariables[] = {"MOERUN_FUZZ_SECONDS", "MOERUN_TEST_SEED"};

// Every knob, grouped by area, in the order `moerun knobs` prints them.
std::span<const Knob> knobs();

// The knob of that name, or nullptr.
const Knob* find_knob(std::string_view name);

// The values a knob takes, in words ("0..65536", "1 | 2 | 4", "a number in (0, 100)").
std::string knob_values(const Knob& k);

// Whether `value` is one the knob takes.
bool knob_accepts(const Knob& k, std::string_view value);

// The value set for a known knob, as the table parses it: nullopt when unset, empty or malformed
// (check_knob_environment reports the malformed ones). An unknown name is a bug in moerun: kInternal.
// None of them allocates: the cuda backend reads its knobs on every call.
std::optional<long> knob_count(std::string_view name);
// kChoice, kText: the text in the environment (valid until the variable changes).
std::optional<std::string_view> knob_choice(std::string_view name);
std::optional<double> knob_ratio(std::string_view name);
// A 0|1 switch: `unset` when unset or malformed, else whether it is "1".
bool knob_on(std::string_view name, bool unset);
// As knob_count / knob_choice, but a malformed value throws Error{kInvalidArgument}: for readers whose
// callers can take an exception (a runner's launch shapes), so no path of theirs runs the default.
std::optional<long> knob_count_strict(std::string_view name);
std::optional<std::string_view> knob_choice_strict(std::string_view name);

struct KnobProblem {
  std::string name, value;
  std::string message;  // one line, naming the values it takes or the nearest knob
  bool error;           // a known knob's bad value (an error); false: an unknown MOERUN_* name
};

// The MOERUN_* entries of `environment` (a NULL-terminated array of NAME=VALUE, as environ) that are
// not knobs or not values their knob takes.
std::vector<KnobProblem> knob_problems(char* const* environment);

// Checks the process environment: throws Error{kInvalidArgument} naming every malformed knob; prints
// one warning per unknown MOERUN_* name to stderr (once per process and name).
void check_knob_environment();

}  // namespace moerun
