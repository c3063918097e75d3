// module_pattern.cpp — a recursive-descent parser of the Python `re` subset (module_pattern.hpp) into a
// Thompson program, and a breadth-first (Pike) simulation of it: every program counter is visited at
// most once per name position, so a match costs at most size() x (length + 1) steps.
#include "core/module_pattern.hpp"

#include <cctype>
#include <optional>
#include <stdexcept>
#include <string>

namespace moerun {

using Inst = ModulePattern::Inst;

class PatternCompiler {
 public:
  PatternCompiler(std::string_view p, ModulePattern& out) : p_(p), out_(out) {}

  void compile() {
    const Node root = parse_alt();
    if (i_ < p_.size()) fail("an unbalanced ')'");  // parse_alt stops only at ')' or the end
    emit(root);
    push({Inst::kMatch});
  }

 private:
  // The parsed form: a sequence, alternatives, a repeat, or a leaf instruction.
  struct Node {
    enum Kind { kLeaf, kSeq, kAlt, kRepeat } kind = kSeq;
    Inst leaf{};
    std::vector<Node> kids;
    int min = 0, max = 0;  // kRepeat; max -1: unbounded
  };

  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument(what + " at position " + std::to_string(i_));
  }
  bool at_end() const { return i_ >= p_.size(); }
  char peek() const { return p_[i_]; }

  Node leaf(Inst::Op op, uint8_t byte = 0, int cls = 0) const {
    Node n;
    n.kind = Node::kLeaf;
    n.leaf.op = op;
    n.leaf.byte = byte;
    n.leaf.a = cls;
    return n;
  }
  int add_class(const std::vector<bool>& set) {
    out_.classes_.push_back(set);
    return static_cast<int>(out_.classes_.size() - 1);
  }
  static std::vector<bool> class_of(char e) {  // \d \w \s and their complements, ASCII
    std::vector<bool> s(256, false);
    for (int c = 0; c < 256; ++c) {
      const bool d = c >= '0' && c <= '9';
      const bool w = d || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
      const bool sp = c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);  // as Python's str \s
      const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(e)));
      const bool in = lower == 'd' ? d : lower == 'w' ? w : sp;
      s[static_cast<size_t>(c)] = std::isupper(static_cast<unsigned char>(e)) ? !in : in;
    }
    return s;
  }

  // A backslash escape outside or inside a class: a byte, or a class (\d ...) through `set`.
  // Returns nullopt for \A and \Z (anchors), which the caller handles.
  std::optional<uint8_t> escape(std::vector<bool>* set, bool in_class) {
    if (at_end()) fail("a trailing backslash");
    const char e = p_[i_++];
    if (std::string_view("dDwWsS").find(e) != std::string_view::npos) {
      *set = class_of(e);
      return std::nullopt;
    }
    switch (e) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case 'f': return '\f';
      case 'v': return '\v';
      case 'a': return '\a';
      case 'x': {
        if (i_ + 2 > p_.size() || !std::isxdigit(static_cast<unsigned char>(p_[i_])) ||
            !std::isxdigit(static_cast<unsigned char>(p_[i_ + 1])))
          fail("\\x without two hex digits");
        const int v = std::stoi(std::string(p_.substr(i_, 2)), nullptr, 16);
        i_ += 2;
        if (v >= 0x80) fail("a non-ASCII \\x escape (Python means a character, not a byte)");
        return static_cast<uint8_t>(v);
      }
      default: break;
    }
    if ((e == 'A' || e == 'Z') && !in_class) {
      set->clear();
      return std::nullopt;
    }
    if (std::isalnum(static_cast<unsigned char>(e)))
      fail(std::string("the escape \\") + e + " (" +
           (std::isdigit(static_cast<unsigned char>(e)) ? "a back-reference" : "not read here") + ")");
    return static_cast<uint8_t>(e);
  }

  Node parse_class() {  // after '['
    std::vector<bool> set(256, false);
    bool negate = false;
    if (!at_end() && peek() == '^') {
      negate = true;
      ++i_;
    }
    bool first = true;
    while (true) {
      if (at_end()) fail("an unterminated character class");
      if (peek() == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      // One element: a byte (possibly the start of a range) or an escaped class.
      int lo = -1;
      if (peek() == '\\') {
        ++i_;
        std::vector<bool> cls;
        const std::optional<uint8_t> b = escape(&cls, /*in_class=*/true);
        if (!b) {
          if (i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') fail("a range starting at a class escape");
          for (int c = 0; c < 256; ++c) set[static_cast<size_t>(c)] = set[static_cast<size_t>(c)] || cls[static_cast<size_t>(c)];
          continue;
        }
        lo = *b;
      } else {
        lo = static_cast<uint8_t>(p_[i_++]);
        if (lo >= 0x80) fail("a non-ASCII character (Python matches characters, moerun bytes)");
      }
      int hi = lo;
      if (i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        if (peek() == '\\') {
          ++i_;
          std::vector<bool> cls;
          const std::optional<uint8_t> b = escape(&cls, true);
          if (!b) fail("a range ending in a class escape");
          hi = *b;
        } else {
          hi = static_cast<uint8_t>(p_[i_++]);
          if (hi >= 0x80) fail("a non-ASCII character (Python matches characters, moerun bytes)");
        }
        if (hi < lo) fail("a reversed range in a character class");
      }
      for (int c = lo; c <= hi; ++c) set[static_cast<size_t>(c)] = true;
    }
    if (negate) set.flip();
    return leaf(Inst::kClass, 0, add_class(set));
  }

  // A counted repeat {n}, {n,}, {,m}, {n,m} at i_ (on '{'): its bounds, or nullopt when the braces
  // do not form one (Python then reads '{' as a literal).
  std::optional<std::pair<int, int>> counted() {
    size_t j = i_ + 1;
    // Python refuses counts of 2^32 - 1 and more; below that, programs past kMaxProgram are refused when
    // emitted, so a count is kept up to a cap that is already far past it.
    auto number = [&](long long* v) {
      const size_t s = j;
      long long x = 0;
      while (j < p_.size() && std::isdigit(static_cast<unsigned char>(p_[j]))) x = std::min(x * 10 + (p_[j++] - '0'), 1LL << 40);
      *v = x;
      return j > s;
    };
    long long n = 0, m = 0;
    const bool has_n = number(&n);
    if (j < p_.size() && p_[j] == '}') {
      if (!has_n) return std::nullopt;
      i_ = j + 1;
      return bounded(n, n);
    }
    if (j >= p_.size() || p_[j] != ',') return std::nullopt;
    ++j;
    const bool has_m = number(&m);
    if (j >= p_.size() || p_[j] != '}') return std::nullopt;
    i_ = j + 1;
    if (!has_n) n = 0;
    if (!has_m) m = -1;
    return bounded(n, m);
  }
  std::pair<int, int> bounded(long long n, long long m) const {
    if (m >= 0 && m < n) fail("a repeat whose maximum is below its minimum");
    if (n >= 4294967295LL || m >= 4294967295LL) fail("a repeat count of 2^32 - 1 or more");
    constexpr long long kCap = 100000;  // past kMaxProgram for any body that emits an instruction
    return {static_cast<int>(std::min(n, kCap)), m < 0 ? -1 : static_cast<int>(std::min(m, kCap))};
  }

  Node parse_atom() {
    const char c = p_[i_++];
    switch (c) {
      case '.': {
        std::vector<bool> set(256, true);
        set['\n'] = false;
        return leaf(Inst::kClass, 0, add_class(set));
      }
      case '^': return leaf(Inst::kBegin);
      case '$': return leaf(Inst::kEnd, /*byte=*/1);  // Python's $: the end, or before a final newline
      case '[': return parse_class();
      case '(': {
        if (!at_end() && peek() == '?') {
          if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
            i_ += 2;
          } else {
            fail("a '(?' construct (lookaround, named group or inline flag)");
          }
        }
        Node inner = parse_alt();
        if (at_end() || peek() != ')') fail("a missing ')'");
        ++i_;
        return inner;
      }
      case '\\': {
        const char e = at_end() ? 0 : peek();
        std::vector<bool> cls;
        const std::optional<uint8_t> b = escape(&cls, false);
        if (b) return leaf(Inst::kByte, *b);
        if (e == 'A') return leaf(Inst::kBegin);
        if (e == 'Z') return leaf(Inst::kEnd, /*byte=*/0);
        return leaf(Inst::kClass, 0, add_class(cls));
      }
      case '*': case '+': case '?': --i_; fail("nothing to repeat");
      case '{': {
        --i_;
        if (counted()) fail("nothing to repeat");
        ++i_;
        return leaf(Inst::kByte, '{');
      }
      default:
        if (static_cast<uint8_t>(c) >= 0x80) fail("a non-ASCII character (Python matches characters, moerun bytes)");
        return leaf(Inst::kByte, static_cast<uint8_t>(c));
    }
  }

  Node parse_repeat() {
    Node atom = parse_atom();
    bool repeated = false;
    while (!at_end()) {
      const char c = peek();
      std::optional<std::pair<int, int>> bounds;
      if (c == '*') bounds = std::make_pair(0, -1), ++i_;
      else if (c == '+') bounds = std::make_pair(1, -1), ++i_;
      else if (c == '?') bounds = std::make_pair(0, 1), ++i_;
      else if (c == '{') bounds = counted();
      if (!bounds) break;
      if (repeated) fail("a repeat of a repeat");
      if (atom.kind == Node::kLeaf && (atom.leaf.op == Inst::kBegin || atom.leaf.op == Inst::kEnd))
        fail("nothing to repeat (an anchor)");  // as Python: ^* and \Z+ are errors, (^)* is not
      repeated = true;
      if (!at_end() && peek() == '?') ++i_;  // lazy: the same yes/no answer
      else if (!at_end() && peek() == '+') fail("a possessive repeat");
      Node r;
      r.kind = Node::kRepeat;
      r.min = bounds->first;
      r.max = bounds->second;
      r.kids.push_back(std::move(atom));
      atom = std::move(r);
    }
    return atom;
  }

  Node parse_seq() {
    Node seq;
    while (!at_end() && peek() != '|' && peek() != ')') seq.kids.push_back(parse_repeat());
    return seq;
  }

  Node parse_alt() {
    Node first = parse_seq();
    if (at_end() || peek() != '|') return first;
    Node alt;
    alt.kind = Node::kAlt;
    alt.kids.push_back(std::move(first));
    while (!at_end() && peek() == '|') {
      ++i_;
      alt.kids.push_back(parse_seq());
    }
    return alt;
  }

  int push(Inst in) {
    if (out_.prog_.size() >= ModulePattern::kMaxProgram)
      throw std::invalid_argument("a program over " + std::to_string(ModulePattern::kMaxProgram) +
                                  " instructions (counted repeats copy what they repeat)");
    out_.prog_.push_back(in);
    return static_cast<int>(out_.prog_.size() - 1);
  }
  int here() const { return static_cast<int>(out_.prog_.size()); }
  static bool emits_nothing(const Node& n) {
    switch (n.kind) {
      case Node::kLeaf: return false;
      case Node::kSeq:
        for (const Node& k : n.kids)
          if (!emits_nothing(k)) return false;
        return true;
      case Node::kAlt: return false;  // its splits and jumps
      case Node::kRepeat: return n.max == 0 || emits_nothing(n.kids[0]);
    }
    return false;
  }

  void emit(const Node& n) {
    switch (n.kind) {
      case Node::kLeaf: push(n.leaf); return;
      case Node::kSeq:
        for (const Node& k : n.kids) emit(k);
        return;
      case Node::kAlt: {
        std::vector<int> jumps;
        for (size_t k = 0; k < n.kids.size(); ++k) {
          if (k + 1 == n.kids.size()) {
            emit(n.kids[k]);
            break;
          }
          const int split = push({Inst::kSplit});
          out_.prog_[static_cast<size_t>(split)].a = here();
          emit(n.kids[k]);
          jumps.push_back(push({Inst::kJump}));
          out_.prog_[static_cast<size_t>(split)].b = here();
        }
        for (int j : jumps) out_.prog_[static_cast<size_t>(j)].a = here();
        return;
      }
      case Node::kRepeat: {
        const Node& x = n.kids[0];
        // A body that emits nothing matches only the empty string, however often it repeats: emitting
        // nothing in a loop of 1e5^depth turns would never reach the instruction cap.
        if (emits_nothing(x)) return;
        for (int k = 0; k < n.min; ++k) emit(x);
        if (n.max < 0) {  // x*: L: split body, out; body; jump L
          const int split = push({Inst::kSplit});
          out_.prog_[static_cast<size_t>(split)].a = here();
          emit(x);
          const int back = push({Inst::kJump});
          out_.prog_[static_cast<size_t>(back)].a = split;
          out_.prog_[static_cast<size_t>(split)].b = here();
          return;
        }
        std::vector<int> splits;  // (x(x(x)?)?)?: each optional copy may exit to the end
        for (int k = n.min; k < n.max; ++k) {
          const int split = push({Inst::kSplit});
          out_.prog_[static_cast<size_t>(split)].a = here();
          splits.push_back(split);
          emit(x);
        }
        for (int s : splits) out_.prog_[static_cast<size_t>(s)].b = here();
        return;
      }
    }
  }

  std::string_view p_;
  size_t i_ = 0;
  ModulePattern& out_;
};

ModulePattern::ModulePattern(std::string_view pattern) {
  PatternCompiler(pattern, *this).compile();
}

bool ModulePattern::match_prefix(std::string_view name) const {
  const size_t n = name.size();
  std::vector<int> cur, next, stack;
  std::vector<size_t> seen(prog_.size(), SIZE_MAX);  // the position each pc was last added at
  // Adds pc's closure at position pos to `list` (byte-consuming instructions only); true on a match.
  auto add = [&](std::vector<int>& list, int start, size_t pos) {
    stack.assign(1, start);
    while (!stack.empty()) {
      const int pc = stack.back();
      stack.pop_back();
      if (seen[static_cast<size_t>(pc)] == pos) continue;
      seen[static_cast<size_t>(pc)] = pos;
      const Inst& in = prog_[static_cast<size_t>(pc)];
      switch (in.op) {
        case Inst::kMatch: return true;
        case Inst::kJump: stack.push_back(in.a); break;
        case Inst::kSplit:
          stack.push_back(in.b);
          stack.push_back(in.a);
          break;
        case Inst::kBegin:
          if (pos == 0) stack.push_back(pc + 1);
          break;
        case Inst::kEnd:
          if (pos == n || (in.byte && pos + 1 == n && name[pos] == '\n')) stack.push_back(pc + 1);
          break;
        case Inst::kByte:
        case Inst::kClass: list.push_back(pc); break;
      }
    }
    return false;
  };
  if (add(cur, 0, 0)) return true;
  for (size_t pos = 0; pos < n && !cur.empty(); ++pos) {
    next.clear();
    const auto c = static_cast<uint8_t>(name[pos]);
    for (int pc : cur) {
      const Inst& in = prog_[static_cast<size_t>(pc)];
      const bool ok = in.op == Inst::kByte ? in.byte == c : classes_[static_cast<size_t>(in.a)][c];
      if (ok && add(next, pc + 1, pos + 1)) return true;
    }
    std::swap(cur, next);
  }
  return false;
}

}  // namespace moerun
