// ModulePattern against Python's re.match (a table recorded with Python 3), its refusals, and its
// linear time on patterns that make a backtracking matcher take exponential time.
#include <stdexcept>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "core/module_pattern.hpp"

namespace moerun {
namespace {

// Python's re.match over these names, recorded with Python 3 (tests/unit/test_module_pattern.cpp's table).
const char* const kNames[] = {"model.layers.0.mlp.experts.0.gate_proj", "model.layers.12.mlp.experts.127.down_proj", "model.layers.3.mlp.gate", "model.layers.3.mlp.shared_expert_gate", "lm_head", "model.layers.10.self_attn.q_proj", "a{2}", "x]y", "", "mlp.gate\n"};
const std::pair<const char*, const char*> kCases[] = {
    {".*mlp.gate$", "0010000001"},
    {".*mlp\\.gate$", "0010000001"},
    {"model\\.layers\\.[0-9]+\\.mlp\\.experts", "1100000000"},
    {"model\\.layers\\.\\d{1,2}\\.mlp", "1111000000"},
    {".*(gate|up)_proj$", "1000000000"},
    {".*experts\\.\\d+\\.(?:gate|up)_proj", "1000000000"},
    {"lm_head", "0000100000"},
    {"lm", "0000100000"},
    {"\\Alm_head\\Z", "0000100000"},
    {"^lm_head$", "0000100000"},
    {"[]m]odel", "1111010000"},
    {"[^a-z]", "0000000000"},
    {"[a-z_.0-9]*$", "1111110011"},
    {"model\\.layers\\.1[0-9]?\\.", "0100010000"},
    {"a{2}", "0000000000"},
    {"a\\{2\\}", "0000001000"},
    {"a{,2}\\{", "0000001000"},
    {"a{2,}", "0000000000"},
    {"x]y", "0000000100"},
    {"(.*)*x", "1101000100"},
    {".*?proj", "1100010000"},
    {"(a|)+b", "0000000000"},
    {"\\w+\\.layers", "1111010000"},
    {"[\\w.]+proj$", "1100010000"},
    {"model.layers.(3|12).mlp.(gate|experts)", "0110000000"},
    {"", "1111111111"},
    {"()", "1111111111"},
    {"mlp.gate$", "0000000001"},
    {"mlp.gate\\Z", "0000000000"},
    {"[[:alpha:]]", "0000000000"},
    {"m{0}odel", "0000000000"},
    {"(?:model\\.)?layers", "1111010000"},
    {".*\\.(\\d)\\.", "1011000000"},
    {"[.-]", "0000000000"},
    {".*_expert_gate", "0001000000"},
    {"a{1,2}{", "0000001000"},
    {"{a", "0000000000"},
};

TEST(ModulePattern, MatchesAsPythonsReMatch) {
  for (const auto& [pattern, expected] : kCases) {
    const ModulePattern p(pattern);
    for (size_t i = 0; i < std::size(kNames); ++i)
      EXPECT_EQ(p.match_prefix(kNames[i]), expected[i] == '1') << "pattern \"" << pattern << "\" name \"" << kNames[i] << "\"";
  }
}

TEST(ModulePattern, RefusesWhatItDoesNotReadAsPythonDoes) {
  for (const char* bad : {"(?=x)", "(?!x)", "(?<=x)", "(?P<n>x)", "(?i)x", "(a)\\1", "\\bproj", "a**", "*a", "+a", "{2}a",
                          "(a", "a)", "[a", "[]", "[\\A]", "a{2}+", "a*+", "\\x4", "[z-a]", "a{3,2}", "\\", "\\q",
                          "((a{100}){100})", "\xc3\xa9?x", "[\xc3\xa9]", "\\xe9", "[\\d-z]", "(){4294967296}",
                          "a{100001,100000}"}) {
    try {
      ModulePattern p(bad);
      ADD_FAILURE() << "\"" << bad << "\" compiled to " << p.size() << " instructions";
    } catch (const std::invalid_argument& e) {
      EXPECT_FALSE(std::string(e.what()).empty());
    }
  }
}

TEST(ModulePattern, EmptyBodiesAndPythonsWhitespace) {
  // A repeated body that emits nothing compiles to nothing (Python compiles these instantly too).
  const ModulePattern empty("(((){99999}){99999}){99999}x");
  EXPECT_EQ(empty.size(), 2u);  // x, match
  EXPECT_TRUE(empty.match_prefix("xy"));
  // Python's \s on str includes the information separators 0x1c-0x1f.
  EXPECT_TRUE(ModulePattern("\\s").match_prefix("\x1c"));
  EXPECT_FALSE(ModulePattern("\\S").match_prefix("\x1f"));
}

TEST(ModulePattern, HostilePatternsRunAsAnAutomaton) {
  // (a*)*b and nested groups: a backtracking matcher takes 2^n steps on n a's without a b; this one
  // visits each of size() instructions at most once per character (a hang here is the failure).
  const ModulePattern p("((a*)*)*(a|aa)*(a?){16}b");
  EXPECT_FALSE(p.match_prefix(std::string(4000, 'a')));
  EXPECT_TRUE(p.match_prefix(std::string(4000, 'a') + "b"));
  EXPECT_LE(p.size(), ModulePattern::kMaxProgram);
}

}  // namespace
}  // namespace moerun
