// The MOERUN_* knob table (core/knobs.hpp): the values each knob takes, the boundary's refusal of a
// malformed one and warning on an unknown name, the lenient readers, and that the table, the code that
// reads knobs and docs/knobs.md name the same variables.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "backends/cpu/isa.hpp"
#include "core/knobs.hpp"
#include "moerun/error.hpp"
#include "moerun/moerun.hpp"

namespace moerun {
namespace {

// Sets a variable for the scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_.c_str(), old_->c_str(), 1);
    else unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

const Knob& knob(const char* name) {
  const Knob* k = find_knob(name);
  EXPECT_NE(k, nullptr) << name;
  return *k;
}

TEST(Knobs, TableIsWellFormed) {
  std::set<std::string_view> names;
  for (const Knob& k : knobs()) {
    EXPECT_EQ(k.name.rfind("MOERUN_", 0), 0u) << k.name;
    EXPECT_TRUE(names.insert(k.name).second) << "listed twice: " << k.name;
    EXPECT_TRUE(k.area == "core" || k.area == "cpu" || k.area == "cuda") << k.name;
    EXPECT_FALSE(k.what.empty()) << k.name;
    EXPECT_FALSE(k.unset.empty()) << k.name;
    if (k.kind == Knob::Kind::kCount) {
      EXPECT_LE(k.lo, k.hi) << k.name;
      EXPECT_GE(k.step, 1) << k.name;
    }
    if (k.kind == Knob::Kind::kChoice) EXPECT_FALSE(k.choices.empty()) << k.name;
  }
  EXPECT_EQ(find_knob("MOERUN_NOT_A_KNOB"), nullptr);
}

TEST(Knobs, CountsTakeDecimalsInRange) {
  const Knob& pad = knob("MOERUN_CPU_ROW_PAD");  // 0..256, a multiple of 32
  for (const char* v : {"0", "32", "256"}) EXPECT_TRUE(knob_accepts(pad, v)) << v;
  for (const char* v : {"33", "288", "-32", "32 ", " 32", "3e1", "x", "", "0x20"}) EXPECT_FALSE(knob_accepts(pad, v)) << v;
  const Knob& rows = knob("MOERUN_CPU_JOB_ROWS");  // 0 or 32..65536
  for (const char* v : {"0", "32", "65536"}) EXPECT_TRUE(knob_accepts(rows, v)) << v;
  for (const char* v : {"1", "31", "65537", "99999999999999999999"}) EXPECT_FALSE(knob_accepts(rows, v)) << v;
  EXPECT_EQ(knob_values(pad), "0..256, a multiple of 32");
  EXPECT_EQ(knob_values(rows), "0 or 32..65536");
}

TEST(Knobs, ChoicesAndRatios) {
  const Knob& n = knob("MOERUN_CPU_AMX_NBLOCKS");
  for (const char* v : {"1", "2", "4"}) EXPECT_TRUE(knob_accepts(n, v)) << v;
  for (const char* v : {"3", "1|2", "", "|", "44"}) EXPECT_FALSE(knob_accepts(n, v)) << v;
  EXPECT_EQ(knob_values(n), "1 | 2 | 4");
  const Knob& isa = knob("MOERUN_CPU_ISA");
  EXPECT_TRUE(knob_accepts(isa, "avx512-bf16"));
  EXPECT_FALSE(knob_accepts(isa, "AMX"));
  const Knob& rate = knob("MOERUN_CPU_BF16_DOT_RATE");  // (0, 100)
  for (const char* v : {"0.5", "1", "99.9", "1e-3"}) EXPECT_TRUE(knob_accepts(rate, v)) << v;
  for (const char* v : {"0", "100", "-1", "nan", "0.5x", " 1", ""}) EXPECT_FALSE(knob_accepts(rate, v)) << v;
}

TEST(Knobs, ProblemsNameTheValuesOrTheNearestKnob) {
  std::vector<std::string> env = {"PATH=/bin",
                                  "MOERUN_CPU_ROW_PAD=33",
                                  "MOERUN_CPU_PREFETCH=2048",
                                  "MOERUN_CPU_PREFECH=2048",
                                  "MOERUN_SOMETHING_ELSE_ENTIRELY=1",
                                  "MOERUN_CUDA_N128=",
                                  "MOERUN_CUDA_GEMM=mma-tile-m96",
                                  "MOERUN_FUZZ_SECONDS=60"};  // a script's: no warning
  std::vector<char*> ptrs;
  for (std::string& e : env) ptrs.push_back(e.data());
  ptrs.push_back(nullptr);
  const std::vector<KnobProblem> p = knob_problems(ptrs.data());
  ASSERT_EQ(p.size(), 4u);
  EXPECT_TRUE(p[0].error);
  EXPECT_EQ(p[0].name, "MOERUN_CPU_ROW_PAD");
  EXPECT_NE(p[0].message.find("takes 0..256, a multiple of 32"), std::string::npos) << p[0].message;
  EXPECT_FALSE(p[1].error);
  EXPECT_NE(p[1].message.find("did you mean MOERUN_CPU_PREFETCH?"), std::string::npos) << p[1].message;
  EXPECT_FALSE(p[2].error);
  EXPECT_EQ(p[2].message.find("did you mean"), std::string::npos) << p[2].message;
  EXPECT_TRUE(p[3].error);  // an empty value reads as unset (N128 above); an unknown GEMM name does not
  EXPECT_NE(p[3].message.find("mma-tile-m64"), std::string::npos) << p[3].message;
  EXPECT_TRUE(knob_problems(nullptr).empty());
}

TEST(Knobs, TheBoundaryRefusesAMalformedKnob) {
  {
    ScopedEnv bad("MOERUN_CPU_ROW_PAD", "33");
    try {
      check_knob_environment();
      ADD_FAILURE() << "a malformed knob passed";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("MOERUN_CPU_ROW_PAD='33'"), std::string::npos) << e.what();
    }
    // ... and so does a layer: its plan would otherwise run (and be timed) with the default.
    MoeSpec spec;
    spec.num_experts = 4;
    spec.top_k = 2;
    spec.hidden = 64;
    spec.intermediate = 32;
    auto w = std::make_shared<MoeWeights>(random_weights(spec, 7));
    try {
      MoeLayer layer(spec, w, Platform::detect());
      ADD_FAILURE() << "a layer was made with a malformed knob";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("MOERUN_CPU_ROW_PAD"), std::string::npos) << e.what();
    }
    // The readers below it stay lenient: the default.
    EXPECT_EQ(cpu::row_pad_override(), -1);
  }
  ScopedEnv good("MOERUN_CPU_ROW_PAD", "64");
  EXPECT_NO_THROW(check_knob_environment());
  EXPECT_EQ(cpu::row_pad_override(), 64);
}

TEST(Knobs, ReadersParseByTheTable) {
  {
    ScopedEnv e("MOERUN_CPU_AMX_NBLOCKS", "2");
    EXPECT_EQ(cpu::amx_nblocks_override(), 2);
  }
  {
    ScopedEnv e("MOERUN_CPU_AMX_NBLOCKS", "3");
    EXPECT_EQ(cpu::amx_nblocks_override(), -1);
  }
  {
    ScopedEnv e("MOERUN_CPU_Q15", "0");
    EXPECT_FALSE(cpu::q15_stream_enabled());
    EXPECT_EQ(cpu::q15_max_tokens_override(), -1);
  }
  {
    ScopedEnv e("MOERUN_CPU_Q15", "6");
    EXPECT_TRUE(cpu::q15_stream_enabled());
    EXPECT_EQ(cpu::q15_max_tokens_override(), 6);
  }
  {
    ScopedEnv e("MOERUN_CUDA_N128", "2");
    EXPECT_FALSE(knob_choice("MOERUN_CUDA_N128").has_value());
    EXPECT_THROW(knob_choice_strict("MOERUN_CUDA_N128"), Error);
  }
  {
    ScopedEnv e("MOERUN_CUDA_SWAP_TAILS", "32");
    EXPECT_EQ(knob_count_strict("MOERUN_CUDA_SWAP_TAILS"), 32);
  }
  {
    ScopedEnv e("MOERUN_CPU_KERNELS", "v3");  // refused where it is read, as before the table
    EXPECT_THROW(cpu::kernels_for(CpuIsa::kAvx2), Error);
  }
  {
    ScopedEnv e("MOERUN_CPU_KERNELS", "v1");
    EXPECT_EQ(cpu::kernels_for(CpuIsa::kAvx2).variant, "v1");
  }
  EXPECT_TRUE(knob_on("MOERUN_CUDA_PDL", true));
  {
    ScopedEnv e("MOERUN_CUDA_PDL", "0");
    EXPECT_FALSE(knob_on("MOERUN_CUDA_PDL", true));
  }
  // A reader asking for a name that is not in the table is a bug, not "unset".
  try {
    (void)knob_count("MOERUN_CPU_NOT_IN_THE_TABLE");
    ADD_FAILURE() << "an unlisted knob was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
  }
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every "MOERUN_..." string in the sources that read, set or test knobs is a knob of the table, and
// every knob is read somewhere: a reader added without its entry, or an entry left behind by a reader
// that was removed, fails here.
TEST(Knobs, TheTableMatchesTheSources) {
  const std::filesystem::path root = MOERUN_SOURCE_ROOT;
  const std::regex quoted("\"(MOERUN_[A-Z0-9_]+)\"");
  std::set<std::string> named;
  for (const char* dir : {"src", "bench/cpu", "bench/cuda", "tools/moerun", "tests/unit", "tests/gpu", "tests/alloc"}) {
    if (!std::filesystem::exists(root / dir)) continue;
    for (const auto& e : std::filesystem::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".cu" && ext != ".cuh" && ext != ".h")) continue;
      // This file names non-knobs on purpose; the table names every knob, so it cannot count as a reader.
      const std::string file = e.path().filename().string();
      if (file == "test_knobs.cpp" || file == "knobs.cpp" || file == "knobs.hpp") continue;
      const std::string text = read_file(e.path());
      for (std::sregex_iterator m(text.begin(), text.end(), quoted), end; m != end; ++m) {
        named.insert((*m)[1].str());
        if (std::find(std::begin(kScriptVariables), std::end(kScriptVariables), (*m)[1].str()) != std::end(kScriptVariables))
          continue;
        EXPECT_NE(find_knob((*m)[1].str()), nullptr) << (*m)[1].str() << " in " << e.path() << " is not in core/knobs.cpp";
      }
    }
  }
  for (const Knob& k : knobs())
    EXPECT_TRUE(named.count(std::string(k.name))) << k.name << " is in the table but nothing reads it";
}

// Knobs are read through the table (knob_count, knob_choice, ...), not with getenv, so that a reader
// cannot take values the table refuses or miss the boundary's check. The exceptions and why:
// knobs.cpp (the table), platform.cpp (MOERUN_CPU_ISA, refused there too, with the allowed levels),
// registry.cpp (MOERUN_PLUGIN_PATH, a path list), common.cuh (MOERUN_CUDA_PDL: kernels that probes
// link without the library).
TEST(Knobs, NoReaderBypassesTheTable) {
  const std::filesystem::path root = MOERUN_SOURCE_ROOT;
  const std::set<std::string> allowed = {"knobs.cpp", "platform.cpp", "registry.cpp", "common.cuh"};
  const std::regex direct("getenv\\(\\s*\"MOERUN_");
  int files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root / "src")) {
    if (!e.is_regular_file()) continue;
    ++files;
    const std::string text = read_file(e.path());
    if (std::regex_search(text, direct))
      EXPECT_TRUE(allowed.count(e.path().filename().string())) << e.path() << " reads a MOERUN_ variable with getenv";
  }
  EXPECT_GT(files, 50);  // the tree was found
}

// docs/knobs.md has a row for every knob, with the values it takes and its default.
TEST(Knobs, TheDocsListEveryKnob) {
  const std::string doc = read_file(std::filesystem::path(MOERUN_SOURCE_ROOT) / "docs" / "knobs.md");
  ASSERT_FALSE(doc.empty());
  for (const Knob& k : knobs()) {
    const std::string head = "| `" + std::string(k.name) + "` |";
    const size_t at = doc.find(head);
    ASSERT_NE(at, std::string::npos) << k.name << " has no row in docs/knobs.md (python3 tools/knobs-doc.py)";
    const std::string row = doc.substr(at, doc.find('\n', at) - at);
    auto cell = [](std::string s) {  // as a markdown table cell writes it
      for (size_t i = s.find('|'); i != std::string::npos; i = s.find('|', i + 2)) s.insert(i, "\\");
      return s;
    };
    EXPECT_NE(row.find(cell(knob_values(k))), std::string::npos) << k.name << ": the row should say " << cell(knob_values(k)) << " (python3 tools/knobs-doc.py)";
    EXPECT_NE(row.find(cell(std::string(k.unset))), std::string::npos) << k.name << ": the row should say " << k.unset;
  }
}

}  // namespace
}  // namespace moerun
