// moerun/platform.hpp — the hardware a plan is made for: detected, or described for testing.
//
// A feature counts only when the CPU has it AND the OS lets a process use it: AVX-512 needs the
// opmask/ZMM state enabled in XCR0, AMX needs the tile state in XCR0 and, on Linux, the
// ARCH_REQ_XCOMP_PERM permission (detect() requests it). A described platform states its features.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moerun {

// CPU instruction-set levels, ordered: each level includes the ones below it.
enum class CpuIsa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3, kAmx = 4 };

std::string_view to_string(CpuIsa isa) noexcept;  // "scalar", "avx2", "avx512", "avx512-bf16", "amx"

struct CpuInfo {
  std::string vendor;   // "GenuineIntel", "AuthenticAMD", or "described"
  std::string model;    // brand string
  int cores = 1;        // logical CPUs available to this process
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512_vnni = false, avx512_bf16 = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  // Highest level usable, after OS permission and MOERUN_CPU_ISA (a cap, e.g. "avx2").
  CpuIsa isa() const noexcept;
};

struct GpuInfo {
  std::string name;
  int sm = 0;            // compute capability major*10 + minor: 80, 90, 100, 120
  bool arch_specific = false;  // sm_90a / sm_100a features (wgmma, tcgen05) usable
  int multiprocessors = 0;
  long long memory_bytes = 0;
};

struct Platform {
  std::string description;  // "detected" or the description it came from ("sm90", "file.json")
  CpuInfo cpu;
  std::vector<GpuInfo> gpus;

  bool has_gpu() const noexcept { return !gpus.empty(); }
  int gpu_sm() const noexcept { return gpus.empty() ? 0 : gpus.front().sm; }
  std::string summary() const;  // one line

  // This machine: CPUID + XCR0 + AMX permission, plus CUDA devices when moerun was built with CUDA and
  // a driver is present. MOERUN_CPU_ISA caps the CPU level ("scalar", "avx2", "avx512", ...).
  static Platform detect();

  // A named description ("cpu-avx2", "cpu-avx512", "cpu-amx", "sm80", "sm90", "sm100", "sm120"),
  // "detected" (or "detect": detect()), or the path of a JSON file (a name ending in .json). Unknown
  // names throw Error{kParse} listing the known ones; a file that cannot be opened Error{kIo}; a file
  // that is not a platform description (docs/platform-json.md) Error{kParse} naming the problem.
  static Platform describe(std::string_view name_or_path);
  static Platform from_json_text(std::string_view json_text, std::string_view origin);

  static std::vector<std::string> known_descriptions();
};

// Caps the CPU ISA process-wide (what MOERUN_CPU_ISA sets); used by tests to run every level.
void set_cpu_isa_cap(CpuIsa cap) noexcept;
CpuIsa cpu_isa_cap() noexcept;

}  // namespace moerun
