// cpu/isa.cpp — CPUID + XCR0 + AMX permission, and the kernel sets per level (isa.hpp).
#include "backends/cpu/isa.hpp"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/knobs.hpp"
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
    const std::optional<double> given = knob_ratio("MOERUN_CPU_BF16_DOT_RATE");
    f.bf16_dot_rate = given ? *given : kernels::bf16_dot_fma_rate_ratio();
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

// The knobs' values and limits are in core/knobs.cpp's table; -1 (or the default) when unset or
// malformed, which the boundary reports (check_knob_environment).
namespace {
int knob_or_none(const char* name) { return static_cast<int>(knob_count(name).value_or(-1)); }
}  // namespace

int q15_stream_max(CpuIsa isa, double bf16_dot_rate) noexcept {
  if (isa == CpuIsa::kAvx2) return kAvx2Q15StreamMaxTokens;
  if (isa == CpuIsa::kAvx512Bf16)
    return bf16_dot_rate < kBf16DotFullRate ? kQ15StreamMaxTokensSlowBf16Dot : kQ15StreamMaxTokensFullRateBf16Dot;
  return kQ15StreamMaxTokens;
}

int avx512bf16_stream_max(double bf16_dot_rate) noexcept {
  return bf16_dot_rate >= kBf16DotFullRate ? kStreamMaxTokensLimit : kAvx512Bf16StreamMaxTokens;
}

int prefetch_override() { return knob_or_none("MOERUN_CPU_PREFETCH"); }
int prefetch_l2_override() { return knob_or_none("MOERUN_CPU_PREFETCH_L2"); }
int pair_prefetch_l2_override() { return knob_or_none("MOERUN_CPU_PAIR_PREFETCH_L2"); }
int pair_prefetch_override() { return knob_or_none("MOERUN_CPU_PAIR_PREFETCH"); }
int many_prefetch_l2_override() { return knob_or_none("MOERUN_CPU_MANY_PREFETCH_L2"); }
int amx_prefetch_override() { return knob_or_none("MOERUN_CPU_AMX_PREFETCH"); }
int amx_stream_prefetch_override() { return knob_or_none("MOERUN_CPU_AMX_STREAM_PREFETCH"); }
int job_rows_override() { return knob_or_none("MOERUN_CPU_JOB_ROWS"); }
int row_pad_override() { return knob_or_none("MOERUN_CPU_ROW_PAD"); }
int down_group_override() { return knob_or_none("MOERUN_CPU_DOWN_GROUP"); }
int stream_run_override() { return knob_or_none("MOERUN_CPU_STREAM_RUN"); }
int stream_max_tokens_override() { return knob_or_none("MOERUN_CPU_STREAM_MAX_TOKENS"); }

int amx_nblocks_override() {
  const auto v = knob_choice("MOERUN_CPU_AMX_NBLOCKS");
  return v ? (*v)[0] - '0' : -1;  // one digit: the table takes 1 | 2 | 4
}

bool amx_stream_enabled() { return knob_on("MOERUN_CPU_AMX_STREAM", true); }
bool stream_pairs_enabled() { return knob_on("MOERUN_CPU_STREAM_PAIRS", true); }
bool stream_taper_enabled() { return knob_on("MOERUN_CPU_STREAM_TAPER", true); }
bool down_taper_enabled() { return knob_on("MOERUN_CPU_DOWN_TAPER", true); }
bool dot_groups_of_8() { return knob_choice("MOERUN_CPU_DOT_TOKENS") == std::optional<std::string_view>("8"); }
bool poison_enabled() { return knob_on("MOERUN_CPU_POISON", false); }
bool e8m0_fold_enabled() { return knob_on("MOERUN_CPU_E8M0_FOLD", true); }
bool bf16_intermediate_enabled() { return knob_on("MOERUN_CPU_BF16_INTERMEDIATE", true); }
bool amx_prefetch_next_enabled() { return knob_on("MOERUN_CPU_AMX_PREFETCH_NEXT", true); }
bool q8_stream_enabled() { return knob_on("MOERUN_CPU_Q8", true); }
bool q15_stream_enabled() { return knob_count("MOERUN_CPU_Q15") != 0; }
bool q15_join_enabled() { return knob_on("MOERUN_CPU_Q15_JOIN", true); }

int q15_max_tokens_override() {
  const int n = knob_or_none("MOERUN_CPU_Q15");
  return n >= 1 ? n : -1;
}

KernelSet kernels_for(CpuIsa isa) {
  // Refused, not ignored, as before the table: a runner of the wrong kernels would time the wrong thing.
  return kernels_for_variant(isa, std::string(knob_choice_strict("MOERUN_CPU_KERNELS").value_or("v2")));
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
      k.stream_bf16 = variant == "v1" || dot_groups_of_8() ? kernels::stream_avx512bf16_g8 : kernels::stream_avx512bf16;
      k.stream2_bf16 = stream_pairs_enabled() ? kernels::stream2_avx512bf16 : nullptr;
      k.stream_q8 = q8_stream_enabled() ? kernels::stream_q8_avx512vnni : nullptr;
      k.stream2_q8 = k.stream_q8 != nullptr && stream_pairs_enabled() ? kernels::stream2_q8_avx512vnni : nullptr;
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
      k.stream2_bf16 = stream_pairs_enabled() ? kernels::stream2_avx512bf16 : nullptr;  // (one-token calls)
      k.stream_q8 = q8_stream_enabled() ? kernels::stream_q8_avx512vnni : nullptr;
      k.stream2_q8 = k.stream_q8 != nullptr && stream_pairs_enabled() ? kernels::stream2_q8_avx512vnni : nullptr;
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
  k.pair_prefetch = isa == CpuIsa::kAmx ? kAmxPairPrefetchBytes : k.prefetch;
  if (const int n = prefetch_override(); n >= 0) k.prefetch = k.amx_prefetch = k.pair_prefetch = n;
  if (const int n = pair_prefetch_override(); n >= 0) k.pair_prefetch = n;
  k.pair_prefetch_l2 = bf16_level ? kPairPrefetchL2Bytes : 0;
  const bool dot_full_rate = detected_features().bf16_dot_rate >= kBf16DotFullRate;
  k.many_prefetch_l2 = isa == CpuIsa::kAvx512Bf16 && dot_full_rate ? kManyPrefetchL2Bytes : k.prefetch_l2;
  if (const int n = prefetch_l2_override(); n >= 0) k.prefetch_l2 = k.pair_prefetch_l2 = k.many_prefetch_l2 = n;
  if (const int n = pair_prefetch_l2_override(); n >= 0) k.pair_prefetch_l2 = n;
  if (const int n = many_prefetch_l2_override(); n >= 0) k.many_prefetch_l2 = n;
  if (const int n = amx_prefetch_override(); n >= 0) k.amx_prefetch = n;
  k.amx_stream_prefetch = kAmxStreamPrefetchBytes;
  if (const int n = amx_stream_prefetch_override(); n >= 0) k.amx_stream_prefetch = n;
  k.amx_nblocks = kAmxNBlocks;
  if (const int n = amx_nblocks_override(); n > 0) k.amx_nblocks = n;
  if (const int n = down_group_override(); n > 0) k.down_group = n;
  if (const int n = stream_run_override(); n > 0) k.stream_run = n;
  k.stream_taper = stream_taper_enabled();
  k.down_taper = down_taper_enabled();
  k.poison = poison_enabled();
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
