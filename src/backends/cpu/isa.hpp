// cpu/isa.hpp — which of the cpu backend's kernel sets this process may use.
//
// A level counts only when CPUID reports it AND the OS enabled its register state (XCR0: YMM for AVX2,
// opmask/ZMM for AVX-512, XTILECFG/XTILEDATA for AMX) AND, for AMX on Linux, the process was granted
// the tile data permission (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), requested here once).
// The result is then capped by moerun's process-wide ISA cap (MOERUN_CPU_ISA / set_cpu_isa_cap).
#pragma once

#include <string>

#include "backends/cpu/kernels/kernels.hpp"
#include "moerun/platform.hpp"

namespace moerun::cpu {

struct IsaFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512_bf16 = false;
  bool amx_tile = false, amx_bf16 = false;
  bool os_ymm = false, os_zmm = false, os_amx = false, amx_permitted = false;
};

// This machine's features (detected once, thread-safe).
const IsaFeatures& detected_features();
// Highest level the detected features support (never above what the kernels here implement).
CpuIsa detected_isa();
// detected_isa() capped by the process-wide cap; read on each call so tests can step through levels.
CpuIsa effective_isa();

// Up to this many tokens per expert the AVX2 streaming kernel (v2) beats dequantized panels + 6x16
// tiles, measured with bench/cpu/cpu_kernel_bench on Zen 1: for bf16 and f32 weights (decoded by a
// shift or not at all) up to 16 tokens; for formats decoded through a conversion instruction (f16, fp8,
// int8, fp4: Zen 1 converts 8 floats per ~2.5 cycles) the panel amortizes the decode from 5 tokens on.
// AVX-512 and AMX keep kStreamMaxTokens for every format.
inline constexpr int kAvx2StreamMaxTokensCheapDecode = 16;
inline constexpr int kStreamMaxTokens = 4;

// The kernels one runner uses, fixed when it is created.
struct KernelSet {
  CpuIsa isa = CpuIsa::kAvx2;
  std::string prefix;  // "avx2", "avx512", "amx"
  void (*stream)(const kernels::BlockRef&, const float*, int64_t, int, float*) = nullptr;
  void (*panel)(const kernels::BlockRef&, float*) = nullptr;
  void (*tile)(const float*, int64_t, const float*, int64_t, int, float*) = nullptr;
  void (*act)(kernels::Act, const float*, const float*, int, float, float, float*) = nullptr;  // every level: AVX2
  bool amx = false;  // large calls go through bf16 panels and AMX tiles
  int stream_max_m = 4;  // calls with at most this many tokens take `stream`, larger ones panel + tile
  int stream_max_m_cheap = 4;  // the same for bf16 and f32 weights
  int stream_max(kernels::PackFmt f) const noexcept {
    return (f == kernels::PackFmt::kBF16 || f == kernels::PackFmt::kF32) ? stream_max_m_cheap : stream_max_m;
  }
  std::string variant = "v2";
};

// Kernels for the given level (kAvx512Bf16 uses the AVX-512 set). Throws Error{kUnsupported} below AVX2.
// The environment variable MOERUN_CPU_KERNELS=v1 selects the previous AVX2 streaming kernel and
// crossover (for side-by-side measurement only).
KernelSet kernels_for(CpuIsa isa);
// kernels_for with an explicit variant, "v1" or "v2"; throws Error{kInvalidArgument} for another name.
KernelSet kernels_for_variant(CpuIsa isa, const std::string& variant);

}  // namespace moerun::cpu
