// cpu/isa.cpp — CPUID + XCR0 + AMX permission, and the kernel sets per level (isa.hpp).
#include "backends/cpu/isa.hpp"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "moerun/error.hpp"

namespace moerun::cpu {
namespace {

uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

// Linux: ask for the AMX tile data state once; true when granted (or already granted).
bool request_amx_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long bitmask = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &bitmask) != 0) return false;
  return (bitmask & (1ul << kXfeatureXtiledata)) != 0;
#else
  return false;
#endif
}

IsaFeatures detect() {
  IsaFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = read_xcr0();
  f.os_ymm = (xcr0 & 0x6) == 0x6;
  f.os_zmm = f.os_ymm && (xcr0 & 0xE0) == 0xE0;
  f.os_amx = (xcr0 & (3ull << 17)) == (3ull << 17);
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = (b >> 5) & 1;
  f.avx512f = (b >> 16) & 1;
  f.avx512dq = (b >> 17) & 1;
  f.avx512bw = (b >> 30) & 1;
  f.avx512vl = (b >> 31) & 1;
  f.avx512vbmi = (c >> 1) & 1;
  f.avx512vnni = (c >> 11) & 1;
  f.amx_bf16 = (d >> 22) & 1;
  f.amx_tile = (d >> 24) & 1;
  const unsigned sub = a;
  if (sub >= 1) {
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512_bf16 = (a >> 5) & 1;
  }
  if (f.amx_tile && f.amx_bf16 && f.os_amx) f.amx_permitted = request_amx_permission();
  // Where the AVX512-BF16 level can run (detected_isa's condition): measured, unless
  // MOERUN_CPU_BF16_DOT_RATE=<ratio> gives it (measurement, or a host too busy to time).
  const bool bf16_level = f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.os_zmm && f.avx512_bf16 &&
                          f.avx512vbmi && f.avx512vnni;
  if (bf16_level) {
    const char* v = std::getenv("MOERUN_CPU_BF16_DOT_RATE");
    char* end = nullptr;
    const double given = v ? std::strtod(v, &end) : 0.0;
    f.bf16_dot_rate = v && end != v && *end == '\0' && given > 0.0 && given < 100.0
                          ? given
                          : kernels::bf16_dot_fma_rate_ratio();
  }
  return f;
}

}  // namespace

const IsaFeatures& detected_features() {
  static const IsaFeatures f = detect();
  return f;
}

CpuIsa detected_isa() {
  const IsaFeatures& f = detected_features();
  if (!(f.avx2 && f.fma && f.f16c && f.os_ymm)) return CpuIsa::kScalar;
  const bool avx512 = f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.os_zmm;
  if (!avx512) return CpuIsa::kAvx2;
  const bool bf16 = f.avx512_bf16 && f.avx512vbmi && f.avx512vnni;  // what the level's kernels use (isa.hpp)
  if (bf16 && f.amx_tile && f.amx_bf16 && f.os_amx && f.amx_permitted) return CpuIsa::kAmx;
  if (bf16) return CpuIsa::kAvx512Bf16;
  return CpuIsa::kAvx512;
}

CpuIsa effective_isa() {
  return static_cast<CpuIsa>(std::min(static_cast<int>(detected_isa()), static_cast<int>(cpu_isa_cap())));
}

namespace {
// A decimal environment value in [0, max], or -1 when the variable is unset, empty or anything else.
int env_count(const char* name, long max) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  long n = 0;
  for (const char* c = v; *c; ++c) {
    if (*c < '0' || *c > '9') return -1;
    n = n * 10 + (*c - '0');
    if (n > max) return -1;
  }
  return static_cast<int>(n);
}
}  // namespace

int q15_stream_max(CpuIsa isa, double bf16_dot_rate) noexcept {
  if (isa == CpuIsa::kAvx2) return kAvx2Q15StreamMaxTokens;
  if (isa == CpuIsa::kAvx512Bf16 && bf16_dot_rate < kBf16DotFullRate) return kQ15StreamMaxTokensSlowBf16Dot;
  return kQ15StreamMaxTokens;
}

int avx512bf16_stream_max(double bf16_dot_rate) noexcept {
  return bf16_dot_rate >= kBf16DotFullRate ? kStreamMaxTokensLimit : kAvx512Bf16StreamMaxTokens;
}

int prefetch_override() { return env_count("MOERUN_CPU_PREFETCH", 65536); }

int prefetch_l2_override() { return env_count("MOERUN_CPU_PREFETCH_L2", 65536); }

int amx_prefetch_override() { return env_count("MOERUN_CPU_AMX_PREFETCH", 65536); }

int amx_stream_prefetch_override() { return env_count("MOERUN_CPU_AMX_STREAM_PREFETCH", 65536); }

int job_rows_override() {
  const int n = env_count("MOERUN_CPU_JOB_ROWS", 65536);
  return n == 0 || n >= 32 ? n : -1;
}

int amx_nblocks_override() {
  const int n = env_count("MOERUN_CPU_AMX_NBLOCKS", 4);
  return n == 1 || n == 2 || n == 4 ? n : -1;
}

int row_pad_override() {
  const int n = env_count("MOERUN_CPU_ROW_PAD", 256);
  return n % kernels::kKAlign == 0 ? n : -1;  // rows keep the alignment of the padded K
}

int down_group_override() {
  const int n = env_count("MOERUN_CPU_DOWN_GROUP", 64);
  return n >= 1 ? n : -1;
}

int stream_run_override() {
  const int n = env_count("MOERUN_CPU_STREAM_RUN", 64);
  return n >= 1 ? n : -1;
}

namespace {
// An on/off environment switch: off only when set to exactly "0".
bool env_not_zero(const char* name) {
  const char* v = std::getenv(name);
  return !(v && std::strcmp(v, "0") == 0);
}
}  // namespace

bool amx_stream_enabled() { return env_not_zero("MOERUN_CPU_AMX_STREAM"); }

bool e8m0_fold_enabled() { return env_not_zero("MOERUN_CPU_E8M0_FOLD"); }

bool bf16_intermediate_enabled() { return env_not_zero("MOERUN_CPU_BF16_INTERMEDIATE"); }
bool amx_prefetch_next_enabled() { return env_not_zero("MOERUN_CPU_AMX_PREFETCH_NEXT"); }

bool q8_stream_enabled() { return env_not_zero("MOERUN_CPU_Q8"); }
bool q15_stream_enabled() { return env_not_zero("MOERUN_CPU_Q15"); }

int q15_max_tokens_override() {
  const int n = env_count("MOERUN_CPU_Q15", kStreamMaxTokensLimit);
  return n >= 1 ? n : -1;
}

int stream_max_tokens_override() { return env_count("MOERUN_CPU_STREAM_MAX_TOKENS", kStreamMaxTokensLimit); }

KernelSet kernels_for(CpuIsa isa) {
  const char* v = std::getenv("MOERUN_CPU_KERNELS");
  return kernels_for_variant(isa, v && *v ? v : "v2");
}

namespace {

KernelSet kernels_default(CpuIsa isa, const std::string& variant) {
  KernelSet k;
  k.variant = variant;
  k.act = kernels::act_avx2;
  k.act_rows = kernels::act_rows_avx2;
  k.isa = isa;
  switch (isa) {
    case CpuIsa::kScalar:
      throw_error(ErrorKind::kUnsupported, "cpu backend needs AVX2 + FMA + F16C (this CPU or the ISA cap allows scalar only)");
    case CpuIsa::kAvx2:
      k.prefix = "avx2";
      k.code_layout = kernels::CodeLayout::kPerK;
      k.stream = variant == "v1" ? kernels::stream_avx2_v1 : kernels::stream_avx2;
      k.stream_max_m = kAvx2StreamMaxTokens;
      k.stream_max_m_cheap = variant == "v1" ? kAvx2StreamMaxTokens : kAvx2StreamMaxTokensCheapDecode;
      k.stream_max_m_bf16 = kAvx2StreamMaxTokens;  // unused: no stream_bf16 at this level
      k.panel = kernels::dequant_panel_avx2;
      k.tile = kernels::tile_avx2;
      return k;
    case CpuIsa::kAvx512:
      k.prefix = "avx512";
      k.act_rows = kernels::act_rows_avx512;
      k.stream = kernels::stream_avx512;
      k.stream_max_m = kAvx512StreamMaxTokens;
      k.stream_max_m_cheap = kAvx512StreamMaxTokensCheapDecode;
      k.stream_max_m_bf16 = kAvx512StreamMaxTokens;  // unused: no stream_bf16 at this level
      k.panel = kernels::dequant_panel_avx512;
      k.tile = kernels::tile_avx512;
      return k;
    case CpuIsa::kAvx512Bf16:
      k.prefix = "avx512";
      k.act_rows = kernels::act_rows_avx512;
      k.act_rows_bf16 = kernels::act_rows_bf16_avx512;
      k.stream = kernels::stream_avx512;
      k.stream_bf16 = kernels::stream_avx512bf16;
      k.stream_q8 = q8_stream_enabled() ? kernels::stream_q8_avx512vnni : nullptr;
      k.stream_max_m = kAvx512StreamMaxTokens;
      k.stream_max_m_cheap = kAvx512StreamMaxTokensCheapDecode;
      k.stream_max_m_bf16 = avx512bf16_stream_max(detected_features().bf16_dot_rate);
      k.panel = kernels::dequant_panel_avx512;
      k.tile = kernels::tile_avx512;
      return k;
    case CpuIsa::kAmx:
      k.prefix = "avx512";  // decode and non-bf16 prefill run the AVX-512 kernels; `amx` adds the tiles
      k.act_rows = kernels::act_rows_avx512;
      k.act_rows_bf16 = kernels::act_rows_bf16_avx512;
      k.stream = kernels::stream_avx512;
      k.amx_stream = amx_stream_enabled();
      k.stream_bf16 = k.amx_stream ? kernels::stream_amx_bf16 : kernels::stream_avx512bf16;
      k.stream_q8 = q8_stream_enabled() ? kernels::stream_q8_avx512vnni : nullptr;
      k.stream_max_m = kAmxStreamMaxTokens;
      k.stream_max_m_cheap = kAmxStreamMaxTokensCheapDecode;
      k.stream_max_m_bf16 = kAvx512Bf16StreamMaxTokens;
      k.panel = kernels::dequant_panel_avx512;
      k.tile = kernels::tile_avx512;
      k.amx = true;
      return k;
  }
  throw_error(ErrorKind::kInternal, "cpu backend: unhandled CpuIsa " + std::to_string(static_cast<int>(isa)));
}

}  // namespace

KernelSet kernels_for_variant(CpuIsa isa, const std::string& variant) {
  if (variant != "v1" && variant != "v2")
    throw_error(ErrorKind::kInvalidArgument, "cpu backend: unknown kernel variant '" + variant + "' (knows v1, v2)");
  KernelSet k = kernels_default(isa, variant);
  if (const int n = stream_max_tokens_override(); n >= 0)
    k.stream_max_m = k.stream_max_m_cheap = k.stream_max_m_bf16 = k.stream_max_m_amx = k.stream_max_m_amx_bf16 =
        k.stream_max_m_q8 = n;
  const bool bf16_level = isa >= CpuIsa::kAvx512Bf16;
  k.prefetch = bf16_level ? kPrefetchBytesBf16Levels : kPrefetchBytes;
  k.prefetch_l2 = bf16_level ? kPrefetchL2Bytes : 0;
  k.amx_prefetch = kAmxPrefetchBytes;  // (used at the AMX level only)
  if (const int n = prefetch_override(); n >= 0) k.prefetch = k.amx_prefetch = n;
  if (const int n = prefetch_l2_override(); n >= 0) k.prefetch_l2 = n;
  if (const int n = amx_prefetch_override(); n >= 0) k.amx_prefetch = n;
  k.amx_stream_prefetch = kAmxStreamPrefetchBytes;
  if (const int n = amx_stream_prefetch_override(); n >= 0) k.amx_stream_prefetch = n;
  k.amx_nblocks = kAmxNBlocks;
  if (const int n = amx_nblocks_override(); n > 0) k.amx_nblocks = n;
  if (const int n = down_group_override(); n > 0) k.down_group = n;
  if (const int n = stream_run_override(); n > 0) k.stream_run = n;
  k.e8m0_fold = e8m0_fold_enabled();
  k.bf16_intermediate = bf16_intermediate_enabled();
  k.amx_prefetch_next = amx_prefetch_next_enabled();
  k.job_rows = kJobRows;
  if (const int n = job_rows_override(); n >= 0) k.job_rows = n;
  k.row_pad = kRowPad;
  if (const int n = row_pad_override(); n >= 0) k.row_pad = n;
  return k;
}

}  // namespace moerun::cpu
