// Platform detection (CPUID + OS permission + CUDA devices) and platform descriptions for testing.
#include "moerun/platform.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <type_traits>

#include "core/json_number.hpp"
#include "moerun/error.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#ifdef MOERUN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace moerun {
namespace {

constexpr int kNoCap = 100;
std::atomic<int> g_isa_cap{-1};  // -1: not read from the environment yet

int read_env_cap() {
  const char* e = std::getenv("MOERUN_CPU_ISA");
  if (!e || !*e) return kNoCap;
  const std::string v(e);
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx})
    if (v == to_string(isa)) return static_cast<int>(isa);
  throw_error(ErrorKind::kParse, "MOERUN_CPU_ISA = '" + v + "': allowed scalar, avx2, avx512, avx512-bf16, amx");
}

#if defined(__x86_64__)
uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

// Linux keeps AMX tile data off until a process asks for it (arch_prctl ARCH_REQ_XCOMP_PERM).
bool request_amx_permission() {
#if defined(__linux__)
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

void detect_cpu(CpuInfo& c) {
  unsigned a, b, cx, d;
  char vendor[13] = {};
  __cpuid(0, a, b, cx, d);
  const unsigned max_leaf = a;
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &cx, 4);
  c.vendor = vendor;
  char brand[49] = {};
  __cpuid(0x80000000, a, b, cx, d);
  if (a >= 0x80000004)
    for (unsigned i = 0; i < 3; ++i) {
      __cpuid(0x80000002 + i, a, b, cx, d);
      std::memcpy(brand + 16 * i, &a, 4);
      std::memcpy(brand + 16 * i + 4, &b, 4);
      std::memcpy(brand + 16 * i + 8, &cx, 4);
      std::memcpy(brand + 16 * i + 12, &d, 4);
    }
  c.model = brand;
  while (!c.model.empty() && c.model.back() == ' ') c.model.pop_back();
  __cpuid(1, a, b, cx, d);
  const bool osxsave = cx & (1u << 27);
  const bool fma = cx & (1u << 12), f16c = cx & (1u << 29);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;             // XMM + YMM state
  const bool os_avx512 = (xcr0 & 0xE6) == 0xE6;        // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & (3ull << 17)) == (3ull << 17);  // XTILECFG + XTILEDATA
  if (max_leaf < 7) return;
  __cpuid_count(7, 0, a, b, cx, d);
  c.avx2 = os_avx && (b & (1u << 5));
  c.fma = os_avx && fma;
  c.f16c = os_avx && f16c;
  c.avx512f = os_avx512 && (b & (1u << 16));
  c.avx512bw = os_avx512 && (b & (1u << 30));
  c.avx512vl = os_avx512 && (b & (1u << 31));
  c.avx512_vnni = os_avx512 && (cx & (1u << 11));
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24), amx_int8 = d & (1u << 25);
  __cpuid_count(7, 1, a, b, cx, d);
  c.avx512_bf16 = os_avx512 && (a & (1u << 5));
  if (amx_tile && os_amx && request_amx_permission()) {
    c.amx_tile = true;
    c.amx_bf16 = amx_bf16;
    c.amx_int8 = amx_int8;
  }
}
#else
void detect_cpu(CpuInfo& c) { c.vendor = "unknown"; }
#endif

void detect_gpus(std::vector<GpuInfo>& gpus) {
#ifdef MOERUN_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    GpuInfo g;
    g.name = p.name;
    g.sm = p.major * 10 + p.minor;
    // moerun's CUDA code is built for sm_90a; the 'a' features exist on exactly that architecture.
    g.arch_specific = g.sm == 90;
    g.multiprocessors = p.multiProcessorCount;
    g.memory_bytes = static_cast<long long>(p.totalGlobalMem);
    gpus.push_back(g);
  }
#else
  (void)gpus;
#endif
}

CpuInfo described_cpu(std::string_view level, int cores) {
  CpuInfo c;
  c.vendor = "described";
  c.model = "cpu-" + std::string(level);
  c.cores = cores;
  c.avx2 = c.fma = c.f16c = true;
  if (level == "avx2") return c;
  c.avx512f = c.avx512bw = c.avx512vl = c.avx512_vnni = true;
  if (level == "avx512") return c;
  c.avx512_bf16 = c.amx_tile = c.amx_bf16 = c.amx_int8 = true;
  return c;
}

GpuInfo described_gpu(std::string name, int sm, bool arch_specific, int sms, double gib) {
  return GpuInfo{std::move(name), sm, arch_specific, sms, static_cast<long long>(gib * (1ll << 30))};
}

struct Named {
  const char* name;
  Platform (*make)();
};
const Named kDescriptions[] = {
    {"cpu-avx2", [] { Platform p; p.cpu = described_cpu("avx2", 16); return p; }},
    {"cpu-avx512", [] { Platform p; p.cpu = described_cpu("avx512", 32); return p; }},
    {"cpu-amx", [] { Platform p; p.cpu = described_cpu("amx", 56); return p; }},
    {"sm80", [] { Platform p; p.cpu = described_cpu("avx512", 64); p.gpus = {described_gpu("A100-SXM4-80GB", 80, false, 108, 80)}; return p; }},
    {"sm90", [] { Platform p; p.cpu = described_cpu("amx", 96); p.gpus = {described_gpu("H200", 90, true, 132, 141)}; return p; }},
    {"sm100", [] { Platform p; p.cpu = described_cpu("amx", 112); p.gpus = {described_gpu("B200", 100, true, 148, 180)}; return p; }},
    {"sm120", [] { Platform p; p.cpu = described_cpu("avx2", 32); p.gpus = {described_gpu("RTX-PRO-6000", 120, false, 188, 96)}; return p; }},
};

// j[key], read as T; errors name the key by its path in the file (`at` + key: "gpus[1].sm").
template <typename T>
T get_field(const nlohmann::json& j, const char* key, std::string_view origin, const char* type, const std::string& at = "") {
  if (!j.contains(key)) throw_error(ErrorKind::kParse, std::string(origin) + ": missing '" + at + key + "' (" + type + ")");
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    if (auto v = json_number<T>(j.at(key))) return *v;
  } else {
    try {
      return j.at(key).get<T>();
    } catch (const nlohmann::json::exception&) {
    }
  }
  const nlohmann::json& v = j.at(key);
  const bool numeric = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;  // (a string or boolean field: the wrong type)
  const std::string why = !numeric ? " (a number)" : std::is_integral_v<T> ? " (out of range or not whole)" : " (out of range)";
  throw_error(ErrorKind::kParse, std::string(origin) + ": '" + at + key + "' must be " + type + (v.is_number() ? ", got " + v.dump() + why : ""));
}

void reject_unknown(const nlohmann::json& j, std::initializer_list<const char*> allowed, std::string_view origin, const char* where) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = false;
    for (const char* a : allowed) ok |= it.key() == a;
    if (!ok) {
      std::string list;
      for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
      throw_error(ErrorKind::kParse, std::string(origin) + ": unknown key '" + it.key() + "' in " + where + " (known: " + list + ")");
    }
  }
}

}  // namespace

std::string_view to_string(CpuIsa isa) noexcept {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Bf16: return "avx512-bf16";
    case CpuIsa::kAmx: return "amx";
  }
  return "?";
}

void set_cpu_isa_cap(CpuIsa cap) noexcept { g_isa_cap.store(static_cast<int>(cap)); }

CpuIsa cpu_isa_cap() noexcept {
  int v = g_isa_cap.load();
  if (v < 0) {
    try {
      v = read_env_cap();
    } catch (const Error&) {
      v = kNoCap;  // reported by Platform::detect(), which callers see first
    }
    g_isa_cap.store(v);
  }
  return static_cast<CpuIsa>(std::min(v, static_cast<int>(CpuIsa::kAmx)));
}

CpuIsa CpuInfo::isa() const noexcept {
  CpuIsa level = CpuIsa::kScalar;
  if (avx2 && fma && f16c) level = CpuIsa::kAvx2;
  if (level == CpuIsa::kAvx2 && avx512f && avx512bw && avx512vl) level = CpuIsa::kAvx512;
  if (level == CpuIsa::kAvx512 && avx512_bf16) level = CpuIsa::kAvx512Bf16;
  if (level == CpuIsa::kAvx512Bf16 && amx_tile && amx_bf16) level = CpuIsa::kAmx;
  if (vendor != "described") level = std::min(level, cpu_isa_cap());
  return level;
}

std::string Platform::summary() const {
  std::ostringstream os;
  os << description << ": cpu " << (cpu.model.empty() ? cpu.vendor : cpu.model) << " (" << to_string(cpu.isa()) << ", "
     << cpu.cores << " threads)";
  for (const GpuInfo& g : gpus) os << ", gpu " << g.name << " (sm" << g.sm << (g.arch_specific ? "a" : "") << ", " << g.multiprocessors << " SMs)";
  if (gpus.empty()) os << ", no gpu";
  return os.str();
}

Platform Platform::detect() {
  (void)read_env_cap();  // a bad MOERUN_CPU_ISA is an error here, where the user sees it
  Platform p;
  p.description = "detected";
  detect_cpu(p.cpu);
  p.cpu.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  detect_gpus(p.gpus);
  return p;
}

std::vector<std::string> Platform::known_descriptions() {
  std::vector<std::string> v;
  for (const Named& n : kDescriptions) v.emplace_back(n.name);
  return v;
}

Platform Platform::describe(std::string_view name) {
  for (const Named& n : kDescriptions)
    if (name == n.name) {
      Platform p = n.make();
      p.description = n.name;
      return p;
    }
  if (name == "detected" || name == "detect") return detect();
  const std::string s(name);
  if (s.size() > 5 && s.substr(s.size() - 5) == ".json") {
    std::ifstream f(s);
    if (!f) throw_error(ErrorKind::kIo, "cannot open platform file '" + s + "'");
    std::stringstream buf;
    buf << f.rdbuf();
    return from_json_text(buf.str(), s);
  }
  std::string known;
  for (const Named& n : kDescriptions) known += std::string(known.empty() ? "" : ", ") + n.name;
  throw_error(ErrorKind::kParse, "unknown platform '" + s + "'; known: " + known + ", detected, or a .json file");
}

Platform Platform::from_json_text(std::string_view text, std::string_view origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw_error(ErrorKind::kParse, std::string(origin) + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw_error(ErrorKind::kParse, std::string(origin) + ": expected a JSON object");
  reject_unknown(j, {"cpu", "gpus", "name"}, origin, "platform");
  Platform p;
  // "name" labels the platform in explain's output; without it the file's path does.
  p.description = j.contains("name") ? get_field<std::string>(j, "name", origin, "a string") : std::string(origin);
  if (p.description.empty()) p.description = std::string(origin);
  p.cpu = described_cpu("avx2", 1);
  p.cpu.avx2 = p.cpu.fma = p.cpu.f16c = false;
  p.cpu.model = "cpu-scalar";  // (the label of the level described; "model" replaces it)
  if (j.contains("cpu")) {
    const auto& c = j["cpu"];
    if (!c.is_object()) throw_error(ErrorKind::kParse, std::string(origin) + ": 'cpu' must be an object");
    // "vendor": what `explain --json` prints beside the rest, so that its platform reads back; a described
    // CPU's vendor is "described" whatever the file says (MOERUN_CPU_ISA caps only the detected CPU).
    reject_unknown(c, {"isa", "cores", "model", "vendor"}, origin, "cpu");
    if (c.contains("vendor")) get_field<std::string>(c, "vendor", origin, "a string", "cpu.");
    if (c.contains("isa")) {
      const std::string isa = get_field<std::string>(c, "isa", origin, "a string", "cpu.");
      if (isa == "scalar") {
      } else if (isa == "avx2" || isa == "avx512" || isa == "amx") {
        p.cpu = described_cpu(isa, 1);
      } else if (isa == "avx512-bf16") {
        p.cpu = described_cpu("avx512", 1);
        p.cpu.avx512_bf16 = true;
        p.cpu.model = "cpu-avx512-bf16";
      } else {
        throw_error(ErrorKind::kParse, std::string(origin) + ": cpu.isa '" + isa + "': allowed scalar, avx2, avx512, avx512-bf16, amx");
      }
    }
    if (c.contains("cores")) {
      p.cpu.cores = get_field<int>(c, "cores", origin, "an integer", "cpu.");
      if (p.cpu.cores < 1 || p.cpu.cores > 65536) throw_error(ErrorKind::kParse, std::string(origin) + ": cpu.cores must be in [1, 65536]");
    }
    if (c.contains("model")) p.cpu.model = get_field<std::string>(c, "model", origin, "a string", "cpu.");
  }
  if (j.contains("gpus")) {
    if (!j["gpus"].is_array()) throw_error(ErrorKind::kParse, std::string(origin) + ": 'gpus' must be an array");
    if (j["gpus"].size() > 64) throw_error(ErrorKind::kParse, std::string(origin) + ": at most 64 gpus");
    for (size_t i = 0; i < j["gpus"].size(); ++i) {
      const auto& g = j["gpus"][i];
      const std::string at = "gpus[" + std::to_string(i) + "].";
      if (!g.is_object()) throw_error(ErrorKind::kParse, std::string(origin) + ": " + at.substr(0, at.size() - 1) + " must be an object");
      reject_unknown(g, {"name", "sm", "arch_specific", "multiprocessors", "memory_gib"}, origin, at.substr(0, at.size() - 1).c_str());
      GpuInfo gi;
      gi.name = g.contains("name") ? get_field<std::string>(g, "name", origin, "a string", at) : "described";
      gi.sm = get_field<int>(g, "sm", origin, "an integer (e.g. 90)", at);
      if (gi.sm < 30 || gi.sm > 200)
        throw_error(ErrorKind::kParse, std::string(origin) + ": " + at + "sm " + std::to_string(gi.sm) + " out of range [30, 200]");
      gi.arch_specific = g.contains("arch_specific") ? get_field<bool>(g, "arch_specific", origin, "a boolean", at) : false;
      gi.multiprocessors = g.contains("multiprocessors") ? get_field<int>(g, "multiprocessors", origin, "an integer", at) : 1;
      if (gi.multiprocessors < 1 || gi.multiprocessors > 100000)
        throw_error(ErrorKind::kParse, std::string(origin) + ": " + at + "multiprocessors " + std::to_string(gi.multiprocessors) +
                                           " out of range [1, 100000]");
      if (g.contains("memory_gib")) {
        const double gib = get_field<double>(g, "memory_gib", origin, "a number", at);
        if (!(gib >= 0 && gib < 1e6))
          throw_error(ErrorKind::kParse, std::string(origin) + ": " + at + "memory_gib " + g["memory_gib"].dump() + " out of range [0, 1e6)");
        gi.memory_bytes = static_cast<long long>(gib * (1ll << 30));
      }
      p.gpus.push_back(gi);
    }
  }
  return p;
}

}  // namespace moerun
