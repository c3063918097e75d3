// module_pattern.hpp — the regular expressions quantization configs write for module names
// (compressed-tensors' "re:.*mlp\.gate$"), matched in time linear in the name.
//
// Why not std::regex: its backtracking executor is exponential on hostile patterns ((a*)*b), its
// automaton mode (libstdc++'s __polynomial) still runs nested lookaheads exponentially and lets
// counted repetition blow up memory, and its ECMAScript syntax silently misreads Python's ([]a],
// \Z). A config file is input: a pattern must be read as Python reads it or refused, and matching it
// must cost at most (program size x name length) steps.
//
// The syntax read is the part of Python's `re` these configs use: literals, `.`, classes `[...]`
// (ranges, negation, a leading `]`, escapes), `\d \w \s \D \W \S`, escaped punctuation, groups
// `(...)` and `(?:...)`, `|`, `* + ?` and `{n} {n,} {,m} {n,m}` (lazy forms too: a yes/no match does
// not care), anchors `^ $ \A \Z`. Anything else (lookarounds, back-references, named groups, inline
// flags, \b, non-ASCII characters, which Python matches as characters and this matcher would match
// as bytes) is refused with a message, never guessed. Module names are ASCII.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moerun {

class ModulePattern {
 public:
  // Compiles `pattern` (Python syntax, without the "re:" prefix); throws std::invalid_argument with a
  // one-line reason for syntax outside the subset above or a program over kMaxProgram instructions.
  explicit ModulePattern(std::string_view pattern);

  // Python's re.match(pattern, name) is not None: a match that starts at the name's first character
  // (and may end before its last).
  bool match_prefix(std::string_view name) const;

  // Instructions of the compiled program: matching a name costs at most size() x (name length + 1) steps.
  size_t size() const { return prog_.size(); }

  static constexpr size_t kMaxProgram = 4096;

  struct Inst {
    enum Op : uint8_t { kByte, kClass, kSplit, kJump, kBegin, kEnd, kMatch } op;
    uint8_t byte = 0;
    int a = 0, b = 0;  // kSplit: both targets; kJump: a; kClass: index into classes_
  };

 private:
  std::vector<Inst> prog_;
  std::vector<std::vector<bool>> classes_;  // 256 flags each
  friend class PatternCompiler;
};

}  // namespace moerun
