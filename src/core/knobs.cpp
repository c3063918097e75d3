// The table of MOERUN_* environment variables (knobs.hpp) and its checks.
#include "core/knobs.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <set>

#include "moerun/error.hpp"

extern char** environ;

namespace moerun {
namespace {

using K = Knob::Kind;

Knob count(std::string_view name, std::string_view area, long lo, long hi, std::string_view unset,
           std::string_view what, long step = 1, bool zero_too = false) {
  return Knob{name, area, false, K::kCount, lo, hi, step, zero_too, {}, unset, what};
}
Knob choice(std::string_view name, std::string_view area, std::string_view choices, std::string_view unset,
            std::string_view what) {
  return Knob{name, area, false, K::kChoice, 0, 0, 1, false, choices, unset, what};
}
Knob on_off(std::string_view name, std::string_view area, std::string_view unset, std::string_view what) {
  return choice(name, area, "0|1", unset, what);
}

// Every knob. The byte counts' upper bound, 65536, and the token bound are the readers' own limits
// (backends/cpu/isa.hpp: kStreamMaxTokensLimit); the explanations of the defaults sit with the
// constants they name.
const std::vector<Knob>& table() {
  static const std::vector<Knob> t = [] {
    std::vector<Knob> v;
    // Settings.
    v.push_back({"MOERUN_PLUGIN_PATH", "core", true, K::kText, 0, 0, 1, false, {}, "no plugins",
                 "backend plugins (shared libraries) to load, ':'-separated, as --plugin does"});
    v.push_back({"MOERUN_CPU_ISA", "core", true, K::kChoice, 0, 0, 1, false, "scalar|avx2|avx512|avx512-bf16|amx",
                 "what the CPU and OS allow", "cap the CPU instruction set the cpu backend uses (and the oracle plans for) on the detected CPU; a described platform keeps its level"});
    // The cpu backend's measurement knobs.
    v.push_back(choice("MOERUN_CPU_KERNELS", "cpu", "v1|v2", "v2", "v1: the previous AVX2 streaming kernel and crossover"));
    v.push_back(count("MOERUN_CPU_STREAM_MAX_TOKENS", "cpu", 0, 65536, "the ISA level's cut",
                      "largest tokens per expert that a weight-streaming kernel takes (above: tiles)"));
    v.push_back(count("MOERUN_CPU_PREFETCH", "cpu", 0, 65536, "1024 at avx512-bf16 and amx, else 4096",
                      "the streams' L1 prefetch distance in bytes, and the AMX tiles' and stream pairs' unless set apart; 0: none"));
    v.push_back(count("MOERUN_CPU_PREFETCH_L2", "cpu", 0, 65536, "4096 at avx512-bf16 and amx, else none",
                      "the streams' second prefetch distance, into L2, in bytes; 0: none"));
    v.push_back(count("MOERUN_CPU_PAIR_PREFETCH_L2", "cpu", 0, 65536, "1536 at avx512-bf16 and amx, or MOERUN_CPU_PREFETCH_L2 where set",
                      "the L2 prefetch distance of the one-token bf16 stream pairs, in bytes; 0: none"));
    v.push_back(count("MOERUN_CPU_PAIR_PREFETCH", "cpu", 0, 65536, "2048 at amx, else the streams' distance; or MOERUN_CPU_PREFETCH where set",
                      "the L1 prefetch distance of the one-token bf16 stream pairs, in bytes; 0: none"));
    v.push_back(count("MOERUN_CPU_MANY_PREFETCH_L2", "cpu", 0, 65536,
                      "8192 at avx512-bf16 where VDPBF16PS runs at the FMA rate, else the streams' distance; or MOERUN_CPU_PREFETCH_L2 where set",
                      "the L2 prefetch distance of VDPBF16PS streaming calls of 4 or more tokens, in bytes; 0: none"));
    v.push_back(count("MOERUN_CPU_AMX_PREFETCH", "cpu", 0, 65536, "512, or MOERUN_CPU_PREFETCH where set",
                      "the AMX tile calls' prefetch distance in bytes; 0: none"));
    v.push_back(count("MOERUN_CPU_AMX_STREAM_PREFETCH", "cpu", 0, 65536, "1024",
                      "the AMX decode stream's prefetch distance in bytes (calls of 2-64 tokens per expert)"));
    v.push_back(on_off("MOERUN_CPU_AMX_PREFETCH_NEXT", "cpu", "1",
                       "0: a tile call's last prefetches run past its panels, not into the thread's next call"));
    v.push_back(choice("MOERUN_CPU_AMX_NBLOCKS", "cpu", "1|2|4", "4 (pairs above 16 tokens)",
                       "N-blocks per AMX tile call"));
    v.push_back(on_off("MOERUN_CPU_AMX_STREAM", "cpu", "1",
                       "0: no AMX decode stream (2-64 tokens per expert take VDPBF16PS or tiles)"));
    v.push_back(count("MOERUN_CPU_JOB_ROWS", "cpu", 32, 65536, "256",
                      "an expert's rows in jobs of at most this many; 0: one job per expert", 1, true));
    v.push_back(count("MOERUN_CPU_ROW_PAD", "cpu", 0, 256, "32",
                      "elements of padding per activation row; 0: none", 32));
    v.push_back(count("MOERUN_CPU_DOWN_GROUP", "cpu", 1, 64, "the runner's rule",
                      "N-blocks per down-GEMM work item where a down GEMM is tiled"));
    v.push_back(count("MOERUN_CPU_STREAM_RUN", "cpu", 1, 64, "the runner's rule: at most 8, 32 for jobs of up to 4 tokens (one-token bf16-pair layers at AMX: 8 blocks of bf16, 16 of fp8; AMX tile items: 48)",
                      "consecutive N-blocks of one expert per decode work item (tile items: whole pairs)"));
    v.push_back(on_off("MOERUN_CPU_Q15_JOIN", "cpu", "1",
                       "0: q15 calls fold a token's two 15-bit rows apart and sum them after (before session 40)"));
    v.push_back(on_off("MOERUN_CPU_STREAM_PAIRS", "cpu", "1",
                       "0: one-token decode calls stream one N-block at a time, not two blocks' weights together"));
    v.push_back(on_off("MOERUN_CPU_STREAM_TAPER", "cpu", "1",
                       "0: the last decode work items of gate_up keep their full runs, not split smaller"));
    v.push_back(on_off("MOERUN_CPU_DOWN_TAPER", "cpu", "1",
                       "0: the last tiled work items of the down GEMM keep their full groups, not split smaller"));
    v.push_back(choice("MOERUN_CPU_DOT_TOKENS", "cpu", "8|16", "16",
                       "8: the VDPBF16PS stream runs at most 8 tokens per pass over a block (the kernel before session 39)"));
    v.push_back(on_off("MOERUN_CPU_E8M0_FOLD", "cpu", "1", "0: mxfp4 scales applied per group, never folded into the weights"));
    v.push_back(on_off("MOERUN_CPU_BF16_INTERMEDIATE", "cpu", "1",
                       "0: the gate_up epilogue writes f32 rows that a later pass converts to bf16"));
    v.push_back(on_off("MOERUN_CPU_Q8", "cpu", "1", "0: int8-activation layers on the bf16 / f32 kernels"));
    v.push_back(count("MOERUN_CPU_Q15", "cpu", 0, 65536, "on, up to the level's cut",
                      "0: mxfp4 / nvfp4 with bf16 activations off the q8 kernels; n: on them up to n tokens per expert"));
    v.push_back(Knob{"MOERUN_CPU_BF16_DOT_RATE", "cpu", false, K::kRatio, 0, 100, 1, false, {}, "measured at start-up",
                     "the VDPBF16PS / FMA issue rate; from 0.75 the avx512-bf16 level streams every call"});
    v.push_back(on_off("MOERUN_CPU_HUGEPAGES", "cpu", "1", "0: no transparent-huge-page advice on weights and buffers"));
    v.push_back(on_off("MOERUN_CPU_POISON", "cpu", "0",
                       "1 (tests): every forward first fills its intermediate buffers with NaN, so skipped work shows"));
    v.push_back(on_off("MOERUN_CPU_PROFILE", "cpu", "0",
                       "1: a cpu runner prints where its forwards' time went when it is destroyed"));
    // The cuda backend's measurement knobs (read per call, so one process can time both forms).
    // (the engines' names: cuda_backend.cpp and gemm_config_name; a GPU-build test keeps them in step)
    v.push_back(choice("MOERUN_CUDA_GEMM", "cuda",
                       "cutlass-sm90-grouped|cutlass-sm90-swapab|sm90-wgmma-grouped|mma-stream-m16|mma-stream-m32|"
                       "mma-stream-m16-n32|mma-tile-m64|mma-tile-m128",
                       "the plan's rule", "force one GEMM variant (a forced CUTLASS one falls back to the rule for f32)"));
    v.push_back(on_off("MOERUN_CUDA_STREAM_TUNE", "cuda", "time them for layers of 16 MB or more",
                       "0: the 16x32 decode tiles everywhere; 1: time them against 16x64 for every layer"));
    v.push_back(on_off("MOERUN_CUDA_PDL", "cuda", "1", "0: no programmatic dependent launch"));
    v.push_back(on_off("MOERUN_CUDA_DIRECT", "cuda", "1", "0: one-token calls aligned like the others"));
    v.push_back(on_off("MOERUN_CUDA_ONE_TOKEN", "cuda", "0",
                       "1: one-token calls as one fused kernel where the layer fits it"));
    v.push_back(on_off("MOERUN_CUDA_FUSED_ACT", "cuda", "on for the own wgmma engine, off for CUTLASS",
                       "the gated activation in the gate_up GEMM's epilogue (0 / 1 for either engine)"));
    v.push_back(on_off("MOERUN_CUDA_GEMM_GATHER", "cuda", "0",
                       "1: the wgmma gate_up GEMM gathers the tokens in its operand load"));
    v.push_back(on_off("MOERUN_CUDA_FILL_GATHER", "cuda", "1",
                       "0: the tokens gathered by a pass after the alignment, not by its fill grid"));
    v.push_back(choice("MOERUN_CUDA_DOWN_PREFETCH", "cuda", "end|start|mid|0|off", "end",
                       "where a one-token gate_up block asks the L2 for its expert's down weights; 0 / off: never"));
    v.push_back(choice("MOERUN_CUDA_N128", "cuda", "0|1|auto", "0",
                       "128-column blocks in the wgmma engine: every launch (1) or where its rule says (auto)"));
    v.push_back(choice("MOERUN_CUDA_KSPLIT", "cuda", "tail|auto|0|1|2|3|4", "tail",
                       "split K in the wgmma GEMMs: the last partial wave (tail), 1 / 0 none, 2-4 every tile (a workspace of "
                       "128 KiB an output tile: GBs at 8192 tokens on deepseek-v3), auto by rule"));
    v.push_back(choice("MOERUN_CUDA_SWAP_TAILS", "cuda", "0|16|32|48", "0",
                       "an expert's last rows up to that many as swap-AB tiles in the wgmma engine"));
    v.push_back(on_off("MOERUN_CUDA_NARROW_N", "cuda", "1", "0: the last column block's MMA full width"));
    v.push_back(on_off("MOERUN_CUDA_PAIR", "cuda", "0",
                       "1: the wgmma engine in clusters of two CTAs sharing each weight tile (not with MOERUN_CUDA_SWAP_TAILS)"));
    return v;
  }();
  return t;
}

bool parse_long(std::string_view s, long& out) {
  if (s.empty() || s.size() > 18) return false;
  long n = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + (c - '0');
  }
  out = n;
  return true;
}

bool parse_double(std::string_view s, double& out) {
  char buf[64];  // strtod wants a terminated string; no allocation (knobs.hpp)
  if (s.empty() || s.size() >= sizeof buf || s.find_first_of(" \t\n") != std::string_view::npos) return false;
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  char* end = nullptr;
  errno = 0;
  out = std::strtod(buf, &end);
  return errno == 0 && end == buf + s.size();
}

bool in_choices(std::string_view choices, std::string_view v) {
  size_t at = 0;
  while (at <= choices.size()) {
    const size_t bar = std::min(choices.find('|', at), choices.size());
    if (choices.substr(at, bar - at) == v) return true;
    at = bar + 1;
  }
  return false;
}

const Knob& known(std::string_view name) {
  const Knob* k = find_knob(name);
  if (!k) throw_error(ErrorKind::kInternal, "knobs: '" + std::string(name) + "' is read but not in the table (core/knobs.cpp)");
  return *k;
}

std::string bad_value_message(const Knob& k, std::string_view value) {
  return std::string(k.name) + "='" + std::string(value) + "': takes " + knob_values(k) + " (unset: " +
         std::string(k.unset) + ")";
}

// The set value of a known knob when the table accepts it; a malformed one throws when `strict`.
std::optional<std::string_view> accepted(std::string_view name, bool strict = false) {
  const Knob& k = known(name);
  // getenv wants a terminated name; the cuda readers run per call, which must not allocate.
  char buf[64];
  if (name.size() >= sizeof buf) return std::nullopt;
  std::memcpy(buf, name.data(), name.size());
  buf[name.size()] = '\0';
  const char* v = std::getenv(buf);
  if (!v || !*v) return std::nullopt;
  if (!knob_accepts(k, v)) {
    if (strict) throw_error(ErrorKind::kInvalidArgument, bad_value_message(k, v));
    return std::nullopt;
  }
  return std::string_view(v);
}

// Edit distance, for "did you mean".
size_t distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::span<const Knob> knobs() { return table(); }

const Knob* find_knob(std::string_view name) {
  for (const Knob& k : table())
    if (k.name == name) return &k;
  return nullptr;
}

std::string knob_values(const Knob& k) {
  switch (k.kind) {
    case K::kCount: {
      std::string s = (k.zero_too ? "0 or " : "") + std::to_string(k.lo) + ".." + std::to_string(k.hi);
      if (k.step > 1) s += ", a multiple of " + std::to_string(k.step);
      return s;
    }
    case K::kChoice: {
      std::string s(k.choices);
      for (size_t at = s.find('|'); at != std::string::npos; at = s.find('|', at + 3)) s.replace(at, 1, " | ");
      return s;
    }
    case K::kRatio: return "a number in (" + std::to_string(k.lo) + ", " + std::to_string(k.hi) + ")";
    case K::kText: return "text";
  }
  return "?";
}

bool knob_accepts(const Knob& k, std::string_view value) {
  switch (k.kind) {
    case K::kCount: {
      long n = 0;
      if (!parse_long(value, n)) return false;
      if (n == 0 && k.zero_too) return true;
      return n >= k.lo && n <= k.hi && n % k.step == 0;
    }
    case K::kChoice: return in_choices(k.choices, value);
    case K::kRatio: {
      double d = 0;
      return parse_double(value, d) && d > static_cast<double>(k.lo) && d < static_cast<double>(k.hi);
    }
    case K::kText: return !value.empty();
  }
  return false;
}

std::optional<long> knob_count(std::string_view name) {
  const auto v = accepted(name);
  long n = 0;
  if (!v || !parse_long(*v, n)) return std::nullopt;
  return n;
}

std::optional<std::string_view> knob_choice(std::string_view name) { return accepted(name); }

std::optional<long> knob_count_strict(std::string_view name) {
  const auto v = accepted(name, true);
  long n = 0;
  if (!v || !parse_long(*v, n)) return std::nullopt;
  return n;
}

std::optional<std::string_view> knob_choice_strict(std::string_view name) { return accepted(name, true); }

std::optional<double> knob_ratio(std::string_view name) {
  const auto v = accepted(name);
  double d = 0;
  if (!v || !parse_double(*v, d)) return std::nullopt;
  return d;
}

bool knob_on(std::string_view name, bool unset) {
  const auto v = accepted(name);
  return v ? *v == "1" : unset;
}

std::vector<KnobProblem> knob_problems(char* const* environment) {
  std::vector<KnobProblem> out;
  for (char* const* e = environment; e && *e; ++e) {
    const std::string_view entry(*e);
    if (entry.rfind("MOERUN_", 0) != 0) continue;
    const size_t eq = entry.find('=');
    const std::string_view name = entry.substr(0, eq), value = eq == std::string_view::npos ? "" : entry.substr(eq + 1);
    if (const Knob* k = find_knob(name)) {
      if (value.empty() || knob_accepts(*k, value)) continue;  // empty reads as unset
      out.push_back({std::string(name), std::string(value), bad_value_message(*k, value), true});
      continue;
    }
    if (std::find(std::begin(kScriptVariables), std::end(kScriptVariables), name) != std::end(kScriptVariables)) continue;
    const Knob* near = nullptr;
    size_t best = 4;  // a few edits away at most: a typo, not another variable
    for (const Knob& k : table())
      if (const size_t d = distance(name, k.name); d < best) best = d, near = &k;
    out.push_back({std::string(name), std::string(value),
                   std::string(name) + " is not a variable moerun reads" +
                       (near ? " (did you mean " + std::string(near->name) + "?)" : std::string(" (see `moerun knobs`)")),
                   false});
  }
  return out;
}

void check_knob_environment() {
  static std::mutex mu;
  static std::set<std::string> warned;
  std::string errors;
  for (const KnobProblem& p : knob_problems(environ)) {
    if (p.error) {
      errors += (errors.empty() ? "" : "; ") + p.message;
      continue;
    }
    std::lock_guard<std::mutex> lock(mu);
    if (warned.insert(p.name).second) std::cerr << "moerun: warning: " << p.message << "\n";
  }
  if (!errors.empty()) throw_error(ErrorKind::kInvalidArgument, errors);
}

}  // namespace moerun
