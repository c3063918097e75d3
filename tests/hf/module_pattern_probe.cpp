// Reads (pattern, name) line pairs on stdin; prints per pair 1 or 0 (ModulePattern::match_prefix) or E
// (refused). Driven by module_pattern_vs_python.py against Python's own re.match.
#include <iostream>
#include <stdexcept>
#include <string>

#include "core/module_pattern.hpp"

int main() {
  std::string pattern, name;
  while (std::getline(std::cin, pattern) && std::getline(std::cin, name)) {
    try {
      const moerun::ModulePattern p(pattern);
      std::cout << (p.match_prefix(name) ? "1\n" : "0\n");
    } catch (const std::invalid_argument&) {
      std::cout << "E\n";
    }
  }
}
