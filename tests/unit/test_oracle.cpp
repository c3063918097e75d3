// Registry, platform descriptions and oracle decisions, on described platforms (no hardware needed).

#include <functional>

#include <gtest/gtest.h>

#include "backends/reference/reference_backend.hpp"
#include "moerun/error.hpp"
#include "moerun/oracle.hpp"
#include "moerun/presets.hpp"
#include "oracle/json_io.hpp"
#include "unit/error_of.hpp"

namespace moerun {
namespace {

// A test backend whose capabilities the test controls.
class FakeBackend final : public Backend {
 public:
  FakeBackend(std::string name, Capabilities caps) : name_(std::move(name)), caps_(std::move(caps)) {}
  std::string_view name() const override { return name_; }
  std::string_view description() const override { return "fake"; }
  const Capabilities& capabilities() const override { return caps_; }
  std::unique_ptr<Runner> create_runner(const MoeSpec&, const MoeWeights&, const Platform&, const RunnerOptions&) const override {
    return nullptr;
  }

 private:
  std::string name_;
  Capabilities caps_;
};

Capabilities bf16_cuda() {
  Capabilities c;
  c.device = DeviceKind::kCuda;
  c.min_sm = 90;
  c.needs_arch_specific = true;
  c.formats = {{WeightFormat::kBF16, ActQuant::kNone}};
  c.act_dtypes = {DType::kBF16};
  c.activations = {ActivationKind::kSiluAndMul};
  c.scorings = {Scoring::kSoftmax};
  return c;
}

MoeSpec qwen() { return find_preset("qwen3-30b-a3b").model.spec; }


TEST(Registry, NamesAreValidated) {
  Registry r;
  ErrorKind k{};
  EXPECT_NE(error_of([&] { r.add(std::make_shared<FakeBackend>("", bf16_cuda()), "test"); }, &k).find("cannot be empty"), std::string::npos);
  EXPECT_EQ(k, ErrorKind::kRegistry);
  EXPECT_NE(error_of([&] { r.add(std::make_shared<FakeBackend>("auto", bf16_cuda()), "test"); }).find("reserved"), std::string::npos);
  EXPECT_NE(error_of([&] { r.add(std::make_shared<FakeBackend>("Has Space", bf16_cuda()), "test"); }).find("a-z, 0-9"), std::string::npos);
  EXPECT_NE(error_of([&] { r.add(nullptr, "test"); }).find("null backend"), std::string::npos);
  EXPECT_TRUE(r.entries().empty());
}

TEST(Registry, DuplicatesOverridesAndIdenticalReRegistration) {
  Registry r;
  register_builtin_backends(r);
  const auto before = r.names();
  // The identical object again: a no-op.
  auto same = r.find("reference")->backend;
  r.add(same, "built-in");
  EXPECT_EQ(r.names(), before);
  // Another backend under a built-in's name: refused unless asked for.
  auto impostor = std::make_shared<FakeBackend>("reference", bf16_cuda());
  EXPECT_NE(error_of([&] { r.add(impostor, "plugin.so"); }).find("already registered"), std::string::npos);
  std::string logged;
  // The log runs after the registry's lock is released: a callback that asks the registry something
  // must not deadlock.
  size_t names_seen = 0;
  r.set_log([&](const std::string& s) {
    logged = s;
    names_seen = r.names().size();
  });
  r.add(impostor, "plugin.so", AddOptions{true});
  EXPECT_EQ(names_seen, before.size());
  EXPECT_NE(logged.find("overridden by plugin.so"), std::string::npos);
  EXPECT_EQ(r.find("reference")->backend, impostor);
  EXPECT_FALSE(r.find("reference")->builtin);
  EXPECT_EQ(r.find("no-such"), nullptr);
}

// A backend that needs sm_90a features runs only on a GPU described with them: a platform file's GPU
// without "arch_specific" (its default, false) refuses it, and device_reasons says the same as
// supports() (what `moerun backends --platform` shows).
TEST(Supports, ArchSpecificBackendNeedsAnArchSpecificGpu) {
  const FakeBackend b("fake-sm90a", bf16_cuda());
  MoeSpec s = qwen();
  s.act_dtype = DType::kBF16;
  const Platform plain = Platform::from_json_text(R"({"gpus": [{"sm": 90}]})", "t.json");
  const Platform arch = Platform::from_json_text(R"({"gpus": [{"sm": 90, "arch_specific": true}]})", "t.json");
  const Support no = supports(b, s, plain);
  ASSERT_FALSE(no.ok());
  EXPECT_NE(no.reasons.front().find("without arch-specific features"), std::string::npos) << no.reasons.front();
  EXPECT_FALSE(device_reasons(b, plain).empty());
  EXPECT_TRUE(device_reasons(b, arch).empty());
  EXPECT_TRUE(device_reasons(b, Platform::describe("sm90")).empty());
  EXPECT_FALSE(device_reasons(b, Platform::describe("sm100")).empty());  // sm_90a code on sm100
}

TEST(Registry, PluginLoadErrorsArePrecise) {
  Registry r;
  EXPECT_NE(error_of([&] { r.load_plugin("/nonexistent/libx.so"); }).find("cannot load"), std::string::npos);
  // A real shared library without the entry point.
  EXPECT_NE(error_of([&] { r.load_plugin("libm.so.6"); }).find("missing symbol moerun_plugin_init"), std::string::npos);
}

TEST(Platform, DescriptionsAndErrors) {
  const auto names = Platform::known_descriptions();
  EXPECT_GE(names.size(), 7u);
  EXPECT_EQ(Platform::describe("cpu-amx").cpu.isa(), CpuIsa::kAmx);
  EXPECT_EQ(Platform::describe("cpu-avx2").cpu.isa(), CpuIsa::kAvx2);
  EXPECT_EQ(Platform::describe("sm90").gpu_sm(), 90);
  EXPECT_FALSE(Platform::describe("cpu-avx512").has_gpu());
  const std::string e = error_of([] { Platform::describe("sm77"); });
  EXPECT_NE(e.find("unknown platform 'sm77'; known: cpu-avx2, cpu-avx512, cpu-amx, sm80, sm90, sm100, sm120"), std::string::npos);
  const Platform p = Platform::from_json_text(R"({"cpu": {"isa": "avx512-bf16", "cores": 8}, "gpus": [{"sm": 100, "arch_specific": true}]})", "t.json");
  EXPECT_EQ(p.cpu.isa(), CpuIsa::kAvx512Bf16);
  EXPECT_EQ(p.gpu_sm(), 100);
  EXPECT_NE(error_of([] { Platform::from_json_text(R"({"cpu": {"isa": "avx9"}})", "t.json"); }).find("cpu.isa 'avx9'"), std::string::npos);
  // "name" labels the platform; without it the origin does.
  EXPECT_EQ(Platform::from_json_text(R"({"name": "lab box", "cpu": {"isa": "amx"}})", "t.json").description, "lab box");
  EXPECT_EQ(Platform::from_json_text(R"({"cpu": {"isa": "amx"}})", "t.json").description, "t.json");
  // The CPU's label is the level described (docs/platform-json.md), or "model" where given.
  EXPECT_EQ(Platform::from_json_text(R"({})", "t.json").cpu.model, "cpu-scalar");
  EXPECT_EQ(Platform::from_json_text(R"({"cpu": {"isa": "avx512-bf16"}})", "t.json").cpu.model, "cpu-avx512-bf16");
  EXPECT_EQ(Platform::from_json_text(R"({"cpu": {"isa": "amx", "model": "Xeon"}})", "t.json").cpu.model, "Xeon");
  EXPECT_NE(error_of([] { Platform::from_json_text(R"({"gpu": []})", "t.json"); }).find("unknown key 'gpu'"), std::string::npos);
  EXPECT_NE(error_of([] { Platform::from_json_text("{", "t.json"); }).find("not valid JSON"), std::string::npos);
}

// Numbers a JSON writer can produce that no int holds: refused by name, never cast (the fuzzer found
// sm = 1.1e63, undefined behaviour in a plain get<int>; 2^32 + 90 used to wrap to a valid sm 90).
TEST(Platform, NumbersOutsideTheFieldTypeAreRefused) {
  const auto err = [](const char* gpu) {
    return error_of([&] { Platform::from_json_text(std::string(R"({"gpus": [)") + gpu + "]}", "t.json"); });
  };
  EXPECT_NE(err(R"({"sm": 1111111111111111111111111111111110000000000000004321666027710462})").find("'gpus[0].sm' must be an integer (e.g. 90), got 1.1"), std::string::npos);
  EXPECT_NE(err(R"({"sm": 4294967386})").find("'gpus[0].sm' must be an integer (e.g. 90), got 4294967386"), std::string::npos);
  EXPECT_NE(err(R"({"sm": 90.5})").find("got 90.5"), std::string::npos);
  EXPECT_NE(err(R"({"sm": -1e300})").find("must be an integer"), std::string::npos);
  EXPECT_NE(err(R"({"sm": 90, "multiprocessors": 1e20})").find("'gpus[0].multiprocessors' must be an integer"), std::string::npos);
  EXPECT_NE(err(R"({"sm": 90, "memory_gib": 1e300})").find("gpus[0].memory_gib 1e+300 out of range [0, 1e6)"), std::string::npos);
  EXPECT_EQ(Platform::from_json_text(R"({"gpus": [{"sm": 90.0}]})", "t.json").gpu_sm(), 90);  // integral float
  EXPECT_NE(err(R"({"name": "H200"})").find("missing 'gpus[0].sm' (an integer (e.g. 90))"), std::string::npos);
  EXPECT_NE(error_of([] { Platform::from_json_text(R"({"cpu": {"cores": 18446744073709551615}})", "t.json"); }).find("'cpu.cores' must be an integer"),
            std::string::npos);
}

// What `explain --json` prints under "platform" reads back as a platform file (docs/platform-json.md).
TEST(Platform, PrintedPlatformReadsBack) {
  for (const char* name : {"sm90", "cpu-avx512", "sm120"}) {
    const Platform p = Platform::describe(name);
    const Platform q = Platform::from_json_text(json_io::to_json(p).dump(), "printed.json");
    EXPECT_EQ(q.description, p.description) << name;
    EXPECT_EQ(q.cpu.isa(), p.cpu.isa()) << name;
    EXPECT_EQ(q.cpu.cores, p.cpu.cores) << name;
    EXPECT_EQ(q.cpu.model, p.cpu.model) << name;
    ASSERT_EQ(q.gpus.size(), p.gpus.size()) << name;
    for (size_t i = 0; i < p.gpus.size(); ++i) {
      EXPECT_EQ(q.gpus[i].name, p.gpus[i].name);
      EXPECT_EQ(q.gpus[i].sm, p.gpus[i].sm);
      EXPECT_EQ(q.gpus[i].arch_specific, p.gpus[i].arch_specific);
      EXPECT_EQ(q.gpus[i].multiprocessors, p.gpus[i].multiprocessors);
      EXPECT_EQ(q.gpus[i].memory_bytes, p.gpus[i].memory_bytes);
    }
  }
  // The detected machine too: its level and cores, as a described CPU.
  const Platform d = Platform::detect();
  const Platform r = Platform::from_json_text(json_io::to_json(d).dump(), "printed.json");
  EXPECT_EQ(r.cpu.isa(), d.cpu.isa());
  EXPECT_EQ(r.cpu.cores, d.cpu.cores);
  EXPECT_EQ(r.cpu.vendor, "described");
  // Errors name a GPU's key by its path.
  EXPECT_NE(error_of([] { Platform::from_json_text(R"({"gpus": [{"sm": 90}, {"sm": 90, "multiprocessors": 0}]})", "t.json"); })
                .find("gpus[1].multiprocessors 0 out of range [1, 100000]"),
            std::string::npos);
  EXPECT_NE(error_of([] { Platform::from_json_text(R"({"gpus": [{"sm": 90, "smx": 1}]})", "t.json"); }).find("unknown key 'smx' in gpus[0]"),
            std::string::npos);
}

TEST(Platform, DetectRespectsTheIsaCap) {
  const Platform p = Platform::detect();
  const CpuIsa full = p.cpu.isa();
  set_cpu_isa_cap(CpuIsa::kScalar);
  EXPECT_EQ(p.cpu.isa(), CpuIsa::kScalar);
  set_cpu_isa_cap(CpuIsa::kAmx);
  EXPECT_EQ(p.cpu.isa(), full);
}

TEST(Supports, ReasonsComeFromCapabilities) {
  FakeBackend b("gpu-only", bf16_cuda());
  MoeSpec s = find_preset("deepseek-r1-fp4").model.spec;
  const Support on_cpu = supports(b, s, Platform::describe("cpu-amx"));
  ASSERT_FALSE(on_cpu.ok());
  EXPECT_NE(on_cpu.reasons[0].find("needs a CUDA GPU"), std::string::npos);
  const Support on_sm100 = supports(b, s, Platform::describe("sm100"));
  bool wgmma = false, fmt = false;
  for (const std::string& r : on_sm100.reasons) {
    wgmma |= r.find("sm90a-only") != std::string::npos;
    fmt |= r.find("weight format nvfp4") != std::string::npos;
  }
  EXPECT_TRUE(wgmma && fmt);
  EXPECT_TRUE(supports(b, qwen(), Platform::describe("sm90")).ok());
}

// Shared experts in another format than the routed ones run only where Capabilities::shared_formats
// lists it: the reference takes any, the cpu backend the unquantized ones, a record without the list none.
TEST(Supports, SharedExpertsInAnotherFormatNeedTheCapability) {
  MoeSpec s = find_preset("deepseek-r1-fp8").model.spec;
  s.shared.weight_format = WeightFormat::kBF16;
  s.validate();
  const Platform amx = Platform::describe("cpu-amx");
  EXPECT_TRUE(supports(*make_reference_backend(), s, amx).ok());
  Capabilities c = make_reference_backend()->capabilities();
  c.shared_formats.clear();
  const Support no = supports(FakeBackend("no-mixed", c), s, amx);
  ASSERT_EQ(no.reasons.size(), 1u);
  EXPECT_EQ(no.reasons[0], "shared experts in bf16 beside fp8-block routed experts not supported (shared experts in the "
                           "routed experts' format only)");
  c.shared_formats = {WeightFormat::kF16};
  const Support other = supports(FakeBackend("f16-only", c), s, amx);
  ASSERT_EQ(other.reasons.size(), 1u);
  EXPECT_NE(other.reasons[0].find("(shared experts in the routed experts' format, or in: f16)"), std::string::npos)
      << other.reasons[0];
  c.shared_formats = {WeightFormat::kBF16};
  EXPECT_TRUE(supports(FakeBackend("bf16-ok", c), s, amx).ok());
  // The record's list survives JSON (what a plug-in declares), and so does the spec's shared format.
  EXPECT_EQ(json_io::capabilities_from_json(json_io::to_json(c), "t").shared_formats, c.shared_formats);
  const MoeSpec back = json_io::spec_from_json(json_io::to_json(s), "t");
  EXPECT_EQ(back.shared.weight_format, s.shared.weight_format);
  EXPECT_EQ(back.summary(), s.summary());
  EXPECT_FALSE(json_io::to_json(find_preset("deepseek-r1-fp8").model.spec)["shared"].contains("weight_format"));
  // The routed format named again is one format: read as unset, and written (to plug-ins too) without it.
  auto same = json_io::to_json(find_preset("deepseek-r1-fp8").model.spec);
  same["shared"]["weight_format"] = "fp8-block";
  const MoeSpec one = json_io::spec_from_json(same, "t");
  EXPECT_FALSE(one.shared.weight_format.has_value());
  EXPECT_FALSE(json_io::to_json(one)["shared"].contains("weight_format"));
  same["shared"]["weight_format"] = "fp9";
  EXPECT_NE(error_of([&] { json_io::spec_from_json(same, "t"); }).find("shared.weight_format"), std::string::npos);
}

TEST(Oracle, PrefersByDataRowsAndExplainsEveryCandidate) {
  Registry r;
  register_builtin_backends(r);
  r.add(std::make_shared<FakeBackend>("gpu-only", bf16_cuda()), "test");
  std::vector<Preference> prefs = builtin_preferences();
  prefs.push_back({"gpu-only", 500, {DeviceKind::kCuda}, {}, "fastest in the test", "none"});
  SelectOptions o;
  o.preferences = &prefs;
  const Selection on_gpu = select(qwen(), Platform::describe("sm90"), Policy{}, r, o);
  EXPECT_EQ(on_gpu.backend, "gpu-only");
  EXPECT_EQ(on_gpu.trace.size(), r.entries().size());
  const Selection on_cpu = select(qwen(), Platform::describe("cpu-avx2"), Policy{}, r, o);
  EXPECT_NE(on_cpu.backend, "gpu-only");
  bool refused_listed = false;
  for (const Candidate& c : on_cpu.trace)
    if (c.name == "gpu-only") refused_listed = !c.capable && !c.reasons.empty();
  EXPECT_TRUE(refused_listed);
  const std::string text = explain_text(qwen(), Platform::describe("cpu-avx2"), on_cpu);
  EXPECT_NE(text.find("- gpu-only [test]: refused: needs a CUDA GPU"), std::string::npos);
  const auto j = nlohmann::json::parse(explain_json(qwen(), Platform::describe("cpu-avx2"), on_cpu));
  EXPECT_EQ(j["backend"], on_cpu.backend);
}

TEST(Oracle, ExplicitRequestsFailWithReasonsAndAlternatives) {
  Registry r;
  register_builtin_backends(r);
  r.add(std::make_shared<FakeBackend>("gpu-only", bf16_cuda()), "test");
  ErrorKind k{};
  const std::string e = error_of([&] { select(qwen(), Platform::describe("cpu-avx2"), Policy::parse("gpu-only"), r); }, &k);
  EXPECT_EQ(k, ErrorKind::kUnsupported);
  EXPECT_NE(e.find("backend 'gpu-only' cannot run"), std::string::npos);
  EXPECT_NE(e.find("needs a CUDA GPU"), std::string::npos);
  EXPECT_NE(e.find("would work: reference"), std::string::npos);
  const std::string unknown = error_of([&] { select(qwen(), Platform::describe("cpu-avx2"), Policy::parse("no-such"), r); }, &k);
  EXPECT_EQ(k, ErrorKind::kNotFound);
  EXPECT_NE(unknown.find("registered: reference"), std::string::npos);
  // Order policy: first capable in the given order.
  const Selection s = select(qwen(), Platform::describe("cpu-avx2"), Policy::parse("order:gpu-only,reference"), r);
  EXPECT_EQ(s.backend, "reference");
  // An order none of whose backends can run: its refusals, and what could run outside it.
  const std::string none = error_of([&] { select(qwen(), Platform::describe("cpu-avx2"), Policy::parse("order:gpu-only"), r); }, &k);
  EXPECT_EQ(k, ErrorKind::kUnsupported);
  EXPECT_NE(none.find("none of gpu-only can run"), std::string::npos) << none;
  EXPECT_NE(none.find("gpu-only: needs a CUDA GPU"), std::string::npos) << none;
  EXPECT_NE(none.find("capable outside the order: reference"), std::string::npos) << none;
  EXPECT_EQ(none.find("reference: capable"), std::string::npos) << none;
}

TEST(Oracle, NothingFitsListsEveryCandidate) {
  Registry r;
  r.add(std::make_shared<FakeBackend>("gpu-only", bf16_cuda()), "test");
  const std::string e = error_of([&] { select(qwen(), Platform::describe("cpu-amx"), Policy{}, r); });
  EXPECT_NE(e.find("no backend can run"), std::string::npos);
  EXPECT_NE(e.find("gpu-only: needs a CUDA GPU"), std::string::npos);
}

TEST(JsonIo, SpecAndCapabilitiesRoundTripStrictly) {
  const MoeSpec s = find_preset("deepseek-r1-fp8").model.spec;
  const MoeSpec back = json_io::spec_from_json(json_io::to_json(s), "t");
  EXPECT_EQ(back.summary(), s.summary());
  const auto backend = make_reference_backend();
  const Capabilities& c = backend->capabilities();
  const Capabilities cb = json_io::capabilities_from_json(json_io::to_json(c), "t");
  EXPECT_EQ(json_io::to_json(cb), json_io::to_json(c));
  // A plug-in's variant rule survives the trip (both ends of its tokens-per-expert range).
  Capabilities v = c;
  v.variants = {{"decode", 8.0, "few tokens"}, {"prefill", 0.0, "many tokens"}};
  v.variants[1].min_tokens_per_expert = 8.0;
  const Capabilities vb = json_io::capabilities_from_json(json_io::to_json(v), "t");
  ASSERT_EQ(vb.variants.size(), 2u);
  EXPECT_EQ(vb.variants[0].max_tokens_per_expert, 8.0);
  EXPECT_EQ(vb.variants[1].min_tokens_per_expert, 8.0);
  // ... and a variant's ISA level and activation dtypes (a bf16-only AMX path, say)
  v.variants[1].min_cpu_isa = CpuIsa::kAmx;
  v.variants[1].act_dtypes = {DType::kBF16};
  const Capabilities vc = json_io::capabilities_from_json(json_io::to_json(v), "t");
  EXPECT_EQ(vc.variants[1].min_cpu_isa, CpuIsa::kAmx);
  EXPECT_EQ(vc.variants[1].act_dtypes, std::vector<DType>{DType::kBF16});
  EXPECT_EQ(json_io::to_json(vc), json_io::to_json(v));
  auto j = json_io::to_json(c);
  j["typo_key"] = true;
  EXPECT_NE(error_of([&] { json_io::capabilities_from_json(j, "caps"); }).find("unknown key 'typo_key'"), std::string::npos);
}

TEST(JsonIo, NumbersOutsideTheFieldTypeAreRefused) {
  const auto spec_error = [](const char* key, nlohmann::json v) {
    auto j = json_io::to_json(find_preset("qwen3-30b-a3b").model.spec);
    j[key] = std::move(v);
    return error_of([&] { json_io::spec_from_json(j, "s"); });
  };
  EXPECT_NE(spec_error("num_experts", 1e63).find("num_experts must be an integer, got 1e+63"), std::string::npos);
  EXPECT_NE(spec_error("hidden", 4294969344ull).find("hidden must be an integer, got 4294969344"), std::string::npos);
  EXPECT_NE(spec_error("top_k", 8.5).find("top_k must be an integer, got 8.5"), std::string::npos);
  EXPECT_NE(spec_error("top_k", "8").find("top_k must be an integer"), std::string::npos);
  EXPECT_EQ(json_io::spec_from_json([] {
              auto j = json_io::to_json(find_preset("qwen3-30b-a3b").model.spec);
              j["top_k"] = 8.0;
              return j;
            }(), "s").top_k, 8);
  auto j = json_io::to_json(find_preset("qwen3-30b-a3b").model.spec);
  j["activation"]["swiglu_limit"] = 1e300;  // a float field: no silent infinity
  EXPECT_NE(error_of([&] { json_io::spec_from_json(j, "s"); }).find("swiglu_limit must be a number, got 1e+300"), std::string::npos);
  auto c = json_io::to_json(make_reference_backend()->capabilities());
  c["min_sm"] = -1e30;
  EXPECT_NE(error_of([&] { json_io::capabilities_from_json(c, "caps"); }).find("min_sm must be an integer"), std::string::npos);
}

// Limits no spec could meet are refused when the record is read, not reported on every spec later.
TEST(JsonIo, CapabilitiesThatSupportNothingAreRefused) {
  const auto caps_error = [](const std::function<void(nlohmann::json&)>& edit) {
    auto c = json_io::to_json(make_reference_backend()->capabilities());
    edit(c);
    return error_of([&] { json_io::capabilities_from_json(c, "caps"); });
  };
  EXPECT_NE(caps_error([](auto& c) { c["max_top_k"] = -1; }).find("max_top_k -1: must be >= 0"), std::string::npos);
  EXPECT_NE(caps_error([](auto& c) { c["max_lora_rank"] = -3; }).find("max_lora_rank -3"), std::string::npos);
  EXPECT_NE(caps_error([](auto& c) { c["min_sm"] = 100; c["max_sm"] = 90; }).find("max_sm 90 < min_sm 100"),
            std::string::npos);
  EXPECT_NE(caps_error([](auto& c) { c["scorings"] = nlohmann::json::array(); }).find("scorings is empty"),
            std::string::npos);
  EXPECT_NE(caps_error([](auto& c) { c.erase("act_dtypes"); }).find("act_dtypes is empty or missing"), std::string::npos);
  EXPECT_NE(caps_error([](auto& c) {
              c["variants"] = nlohmann::json::array({{{"name", "v"}, {"min_tokens_per_expert", 8}, {"max_tokens_per_expert", 8}}});
            }).find("'v': tokens per expert from 8.0 to 8.0 is an empty range"),
            std::string::npos);
}

}  // namespace
}  // namespace moerun
