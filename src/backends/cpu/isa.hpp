// cpu/isa.hpp — which of the cpu backend's kernel sets this process may use.
//
// A level counts only when CPUID reports it AND the OS enabled its register state (XCR0: YMM for AVX2,
// opmask/ZMM for AVX-512, XTILECFG/XTILEDATA for AMX) AND, for AMX on Linux, the process was granted
// the tile data permission (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), requested here once).
// The result is then capped by moerun's process-wide ISA cap (MOERUN_CPU_ISA / set_cpu_isa_cap).
// kAvx512Bf16 (and kAmx) also require AVX512-VBMI and AVX512-VNNI: their kernels are compiled with
// -mavx512vbmi (and the q8 kernel with -mavx512vnni). Every CPU with AMX has both; Cooper Lake
// (AVX512-BF16 without VBMI) counts as kAvx512. (The decoders stopped
// using vpermb with the VNNI-word layouts; dropping the flag and this requirement would give Cooper Lake
// these levels, untested so far.)
//
// Stream/tile crossover: a call of one expert with at most KernelSet::stream_max(fmt) tokens takes the
// streaming kernel, a larger one dequantized panels + register tiles (or AMX tiles). The defaults per
// level are the k...StreamMaxTokens constants below. For benchmarks and tuning only, the environment
// variable MOERUN_CPU_STREAM_MAX_TOKENS=<n> (a decimal integer, 0 <= n <= 65536) replaces the crossover
// by n for every format and level (0: never stream); any other value is ignored. It is read each time a
// kernel set is made (kernels_for / kernels_for_variant), i.e. when a runner is created.
#pragma once

#include <string>

#include "backends/cpu/kernels/kernels.hpp"
#include "moerun/platform.hpp"

namespace moerun::cpu {

struct IsaFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512_bf16 = false;
  bool avx512vbmi = false, avx512vnni = false;
  bool amx_tile = false, amx_bf16 = false;
  bool os_ymm = false, os_zmm = false, os_amx = false, amx_permitted = false;
  // VDPBF16PS over FMA issue rate, measured once where the AVX512-BF16 level can run (kernels.hpp
  // bf16_dot_fma_rate_ratio), or MOERUN_CPU_BF16_DOT_RATE=<ratio>; 0 elsewhere. Decides that level's
  // stream cut and q15 cut (below).
  double bf16_dot_rate = 0;
};

// This machine's features (detected once, thread-safe).
const IsaFeatures& detected_features();
// Highest level the detected features support (never above what the kernels here implement).
CpuIsa detected_isa();
// detected_isa() capped by the process-wide cap; read on each call so tests can step through levels.
CpuIsa effective_isa();

// Stream/tile crossovers (tokens per expert and call; see the header comment).
// AVX2: measured with bench/cpu/cpu_kernel_bench on Zen 1: the streaming kernel (v2) beats dequantized
// panels + 6x16 tiles for bf16 and f32 weights (decoded by a shift or not at all) up to 16 tokens; for
// formats decoded through a conversion instruction (f16, fp8, int8, fp4: Zen 1 converts 8 floats per
// ~2.5 cycles) the panel amortizes the decode from 5 tokens on.
// kAvx512Bf16StreamMaxTokens applies where the bf16 streaming kernel runs (bf16 activations; bf16, fp8
// and fp4 weights) at kAvx512Bf16 and kAmx: 8, from the crossover sweeps on the H200 host's Xeon (AMX,
// 2 threads, tools/xeon-bench.sh, bench/results/2026-11-30_75eb5b4_h200-host-xeon/): at 4-6 tokens
// per expert streaming every expert beats the tiled path (deepseek-v2-lite M=64: 117 vs 129 ms, and
// 74-81 vs 105 ms after prefetch), at 16 they tie and at 24 the tiled path wins (88-103 vs 196-209
// ms). The tiled path was then a mix: calls of fewer than 16 tokens ran AVX-512 f32 panels and tiles,
// from 16 on AMX tiles (now from kAmxTileMinRows). That machine's
// run-to-run noise is 10-30%, so the cut is only known to lie between 6 and 16. kAmxStreamMaxTokens (the crossover to AMX tiles for the other
// formats of a bf16 layer) and the AVX-512 f32 values are not measured yet (the AVX2 value).
inline constexpr int kStreamMaxTokens = 4;  // the common default (and the AVX2 value for costly decodes)
inline constexpr int kAvx2StreamMaxTokens = kStreamMaxTokens;
inline constexpr int kAvx2StreamMaxTokensCheapDecode = 16;
inline constexpr int kAvx512StreamMaxTokens = 4;
inline constexpr int kAvx512StreamMaxTokensCheapDecode = 4;
inline constexpr int kAvx512Bf16StreamMaxTokens = 8;
// ... that is, where VDPBF16PS issues at half the FMA rate or less (IsaFeatures::bf16_dot_rate 0.22-0.25
// on the H200 host's Xeon, five start-ups). Where it issues as fast as an FMA (AMD Zen 4: about 1), each one doing twice the
// multiply-adds, the streaming kernel beats the f32 panels and tiles at every token count, so the
// AVX512-BF16 level streams every call: Zen 4 (one core, in cache, cpu_kernel_bench) 229 against 85
// GFLOP/s for bf16 weights at 16-64 tokens, 207 against 70 for mxfp4, 183 against 85 for fp8-block.
inline constexpr double kBf16DotFullRate = 0.75;
int avx512bf16_stream_max(double bf16_dot_rate) noexcept;
inline constexpr int kAmxStreamMaxTokens = 4;
inline constexpr int kAmxStreamMaxTokensCheapDecode = 4;
// The AMX decode stream (stream_amx_bf16) against AMX tiles on converted panels, H200 host's Xeon, 2
// threads, one process (bench/results/2026-11-30_amx-stream-any-m_h200-host-xeon/): fp4 and fp8 weights
// stream faster at 16-32 tokens per expert (qwen3 fp8-block M = 256: 43.4 vs 71.0 ms, gpt-oss-20b mxfp4
// M = 256: 76.0 vs 133.9 ms) and about as fast at 128 (278.8 vs 264.4 ms); bf16 weights need no
// conversion, and tiles (two blocks per call) win from 24 tokens on (deepseek-v2-lite M = 256: 80.8 vs
// 76.2 ms).
inline constexpr int kAmxStreamMaxTokensDecoded = 64;
// bf16 weights take AMX tiles from 2 tokens per expert (only one-token calls stream, on VDPBF16PS): a
// packed bf16 block already is the VNNI panel tile_amx2 reads, so the tiles load B straight from the
// weights (two blocks per call), while the decode stream copied each 1 KiB step into an L1 image
// first. Session 30 on this development machine's Xeon (2 threads, huge pages; bench/results/
// 2026-12-05_s30_dev-xeon/NOTES.md): alone, weights from memory, 64 KiB blocks, tile_amx2 read 32.3 /
// 30.5 / 23.8 GB/s at 16 / 32 / 64 rows against the stream's 26.8 / 23.1 / 20.4 (a plain read: 31.3);
// in the layer, alternated in one process, qwen3-30b-a3b M = 16 / 64 / 256 26.7 / 41.0 / 46.8 ms
// against 27.8 / 44.9 / 49.9 (the cut at 16), deepseek-v2-lite M = 16 / 64 30.0 / 39.2 against
// 31.8 / 43.0 (M = 256 ties: its calls were tiled already). Earlier sweeps that kept 16 compared the
// stream with tiles that ran AVX-512 f32 panels below 16 rows (kAmxTileMinRows).
inline constexpr int kAmxStreamMaxTokensBf16 = 1;
// AMX tiles take calls of at least this many rows (when past the stream cut): an A tile of 16 rows
// multiplies rows past m too (the runner's activation buffers hold 16 spare rows; those results are
// dropped), which costs nothing where the weights' read is the limit. Until session 30 this was 16,
// and calls of 2-15 rows past the cut ran f32 panels and AVX-512 tiles.
inline constexpr int kAmxTileMinRows = 2;
// The q8 kernel (int8 activations, 4-bit weights) against the bf16 kernels on the same dequantized
// activations (MOERUN_CPU_Q8=0), qwen3-30b-a3b at the AMX level on the H200 host's Xeon, calls
// alternating in one process, weight copies rotated (bench/results/2026-11-30_s10_q8_h200-host-xeon/,
// call 4): 1.13-1.39x faster at 0.25-4 tokens per expert (2 threads; 1.03-1.27x with 16), 1.04-1.17x at 8,
// 0.77-0.95x at 12 and 0.74-0.91x at 16, where the AMX decode stream's cost per weight, nearly flat in
// the token count, undercuts the q8 kernel's two VPDPBUSD per token. (At the AVX512-BF16 level the
// alternative above 8 tokens is slower still, f32 panels; not measured, so the same cut.) At kAvx2 an
// int8-activation layer takes the AVX2 q8 kernel for every call (runner.cpp kernels_for_spec).
inline constexpr int kQ8StreamMaxTokens = 8;
// The same kernel on 15-bit activations (KernelSet::q8_rows_per_token = 2: two int8 rows a token, so a
// call of m tokens costs what an int8 call of 2m does).
// kAvx2: up to 4 tokens per expert. Zen 1, one thread, qwen3-30b-a3b mxfp4 against MOERUN_CPU_Q15=0
// in one process, weight copies rotated (docs/performance.md; bench/results/2026-12-01_1a9a21d_cpu-amd-
// epyc-zen1-q15/): 1.62x faster at 1/16 token per expert, 1.51x at 1/4, 1.23x at 1, 1.12x at 2, 1.04x
// at 3, 1.03x at 4, and 0.75x at 8-16 with a longer cut (its cut_sweep/: this kernel passes over a
// block once per two rows, the f32 stream once per four tokens). Past the cut, tiled calls decode
// their panels from VNNI words: 0.89-1.00x of the per-k panels at 8-32 tokens.
// kAvx512Bf16 / kAmx: up to 4. H200 host's Xeon, 2 threads, one process (bench/results/2026-12-01_
// s12_h200-host-xeon/): against MOERUN_CPU_Q15=0, qwen3-30b-a3b mxfp4 / nvfp4 1.19x / 1.22x at M = 1 and
// 1.14x / 1.16x at 2 tokens per expert; at the AMX level a cut of 4 against 2 ran 0.95-1.10x on qwen3
// at 2-6 tokens per expert (its AMX decode stream costs little more per token) and 1.06-1.14x on
// gpt-oss-20b; at the AVX512-BF16 level 1.08-1.17x, and a cut of 8 another 1.30-1.35x at 4-6 tokens
// there (kQ15StreamMaxTokensSlowBf16Dot). On Zen 4 (AVX512-BF16, one core, kernels in cache, three runs)
// VDPBF16PS is 2.5x the Xeon's speed, and from 2 tokens the two kernels come within 15% of each other,
// the sign changing from run to run (q15 ahead at one token), so there the level kept 4 (until
// session 39: kQ15StreamMaxTokensFullRateBf16Dot below).
inline constexpr int kQ15StreamMaxTokens = 4;
inline constexpr int kAvx2Q15StreamMaxTokens = 4;
// ... except at the AVX512-BF16 level where VDPBF16PS issues at half the FMA rate or less (the Xeon
// above, capped to that level): 8, where its bf16 kernel is what the q15 kernels compete with.
inline constexpr int kQ15StreamMaxTokensSlowBf16Dot = 8;
// ... and where it issues at the FMA rate (Zen 4): one-token calls only, since session 39's token
// groups (two chains a token at 3-5 tokens) made the VDPBF16PS stream the faster one from 2 tokens.
// Zen 4, 2 threads, in one process against the cut of 4 (bench/results/2026-12-06_s39_dev-epyc/
// NOTES.md): qwen3-30b-a3b mxfp4 / nvfp4 and gpt-oss-20b mxfp4, M = 16 1.05-1.06x, M = 64 1.02-1.10x,
// M = 4 0.998-1.012x; a cut of 2 gained about half as much at M = 16; no q15 at all lost 6-20% at
// M = 1 and 5-18% at M = 4.
inline constexpr int kQ15StreamMaxTokensFullRateBf16Dot = 1;
// The q15 cut of a level on this machine (bf16_dot_rate: IsaFeatures::bf16_dot_rate).
int q15_stream_max(CpuIsa isa, double bf16_dot_rate) noexcept;
inline constexpr int kStreamMaxTokensLimit = 65536;  // largest value MOERUN_CPU_STREAM_MAX_TOKENS accepts

// MOERUN_CPU_STREAM_MAX_TOKENS parsed: n, or -1 when unset or invalid (then the defaults hold).
// Every knob below: its values are core/knobs.cpp's table; a malformed value reads as unset here and
// is refused at the boundary (check_knob_environment).
int stream_max_tokens_override();

// Calls of several tokens prefetch into L2 8 KiB ahead where VDPBF16PS issues at the FMA rate (AMD Zen
// 4: every call streams, prefill too). Each weight line then feeds several dot products a token, the
// stream advances more slowly per cycle of work, and 4 KiB did not keep enough lines in flight.
// Session 39 on a Zen 4, 2 threads, alternated in one process (bench/results/2026-12-06_s39_dev-epyc/
// NOTES.md). First every call past one token at 8 KiB: qwen3-30b-a3b bf16 M = 64 / 256 / 1024 2.2 /
// 7.3 / 3.4% faster, fp8-block 12 / 0.3 / 1.3%, deepseek-v2-lite bf16 4.5 / 4.0 / 0.2%; but at M = 16,
// where such calls mostly hold 2 tokens, bf16 lost 2-4%. So calls below 4 tokens keep 4 KiB; against
// MOERUN_CPU_MANY_PREFETCH_L2=4096 that rule ran bf16 M = 64 / 256 2.1 / 7.6% faster on qwen3 and
// 7.7 / 3.3% on deepseek-v2-lite, fp8-block M = 64 2.7%; M = 16 and 1024 within 1.7% either way
// over two rounds.
inline constexpr int kManyPrefetchL2Bytes = 8192;
inline constexpr int kManyPrefetchMinTokens = 4;

// The kernels one runner uses, fixed when it is created.
struct KernelSet {
  CpuIsa isa = CpuIsa::kAvx2;
  std::string prefix;  // "avx2", "avx512"
  void (*stream)(const kernels::BlockRef&, const float*, int64_t, int, float*) = nullptr;
  // kAvx512Bf16 and kAmx: the bf16-activation streaming kernel (null below, and for layers whose
  // activations are not bf16: kernels_for_spec); used for the formats kernels::bf16_stream_native accepts.
  void (*stream_bf16)(const kernels::BlockRef&, const uint16_t*, int64_t, int, float*) = nullptr;
  // kAvx512Bf16 and kAmx: one-token calls on two N-blocks at once (kernels::stream2_avx512bf16, the
  // runner's stream pairs: runner.cpp NOTES), for the calls that would take stream_avx512bf16 one block
  // at a time; null below, and with MOERUN_CPU_STREAM_PAIRS=0 (measurement).
  void (*stream2_bf16)(const kernels::BlockRef&, const kernels::BlockRef&, const uint16_t*, float*, float*) = nullptr;
  void (*panel)(const kernels::BlockRef&, float*) = nullptr;
  void (*tile)(const float*, int64_t, const float*, int64_t, int, float*) = nullptr;
  void (*act)(kernels::Act, const float*, const float*, int, float, float, float*) = nullptr;  // every level: AVX2
  // The GEMM1 epilogue's activation over a block's rows: act_rows_avx2, act_rows_avx512 from the AVX-512
  // level on (the same values); act_rows_bf16 (AVX512-BF16 and AMX) rounds them to bf16 as it stores
  // them, for the bf16 intermediate (runner.cpp: h_f32); null below.
  void (*act_rows)(kernels::Act, const float*, int64_t, int, float, float, float*, int64_t) = nullptr;
  void (*act_rows_bf16)(kernels::Act, const float*, int64_t, int, float, float, uint16_t*, int64_t) = nullptr;
  bool amx = false;  // large calls go through bf16 panels and AMX tiles
  kernels::CodeLayout code_layout = kernels::CodeLayout::kVnniWords;  // what this level's decoders read (kernels.hpp)
  int stream_max_m = 4;  // calls with at most this many tokens take `stream`, larger ones panel + tile
  int stream_max_m_cheap = 4;  // the same for bf16 and f32 weights
  int stream_max_m_bf16 = 4;  // the same where stream_bf16 runs
  // Whether a call with format f and bf16 activations at hand takes stream_bf16 (when it streams).
  bool uses_bf16_stream(kernels::PackFmt f) const noexcept {
    return stream_bf16 != nullptr && kernels::bf16_stream_native(f);
  }
  // The same where stream_bf16 decodes onto AMX tiles (amx_stream): decoded formats, and bf16 weights.
  int stream_max_m_amx = kAmxStreamMaxTokensDecoded;
  int stream_max_m_amx_bf16 = kAmxStreamMaxTokensBf16;
  // Layers with ActQuant::kInt8PerTokenGroup, and mxfp4 / nvfp4 layers with bf16 activations (q8_rows_per_token
  // below; null for any other layer: kernels_for_spec): the int8-activation kernel for mxfp4 and nvfp4
  // blocks, taken by calls of at most stream_max_m_q8 tokens (larger ones run the bf16 / f32 kernels, on
  // the dequantized activations for int8 layers: the same values). int8 layers: kAvx512Bf16 and kAmx
  // stream_q8_avx512vnni up to kQ8StreamMaxTokens, kAvx2 stream_q8_avx2 for every call.
  // MOERUN_CPU_Q8=0 (measurement) leaves every call of int8 layers to the bf16 / f32 kernels.
  void (*stream_q8)(const kernels::BlockRef&, const kernels::Q8Rows&, int, float*) = nullptr;
  // Where stream_q8 is stream_q8_avx512vnni: its stream pairs (kernels::stream2_q8_avx512vnni) for one-token
  // calls, as stream2_bf16 for stream_bf16; null otherwise and with MOERUN_CPU_STREAM_PAIRS=0.
  void (*stream2_q8)(const kernels::BlockRef&, const kernels::BlockRef&, const kernels::Q8Rows&, int, float*,
                     float*) = nullptr;
  int stream_max_m_q8 = kQ8StreamMaxTokens;
  // 1: the rows are the spec's int8 codes. 2: the layer's activations are not quantized by its spec
  // (mxfp4 / nvfp4 weights, bf16 activations) and the q8 kernel reads each token as two int8 rows of a
  // 15-bit code (q8_rows.hpp pack_q15_rows: a high and a low part, their products added back by the
  // kernel's per-row scales), calls of up to stream_max_m_q8 tokens (kQ15StreamMaxTokens,
  // kAvx2Q15StreamMaxTokens). MOERUN_CPU_Q15=0 (measurement) leaves such layers to the other kernels.
  int q8_rows_per_token = 1;
  // True where stream_q8 / stream2_q8 take a count of tokens and join each token's two 15-bit rows
  // themselves (kernels::stream_q15_avx512vnni, stream_q15_avx2: one f32 fold a token, not two); false
  // where they take rows (int8 layers) and, for q15 rows with MOERUN_CPU_Q15_JOIN=0 (measurement), the
  // runner sums a token's two.
  bool q8_joins_rows = false;
  // The count a stream_q8 / stream2_q8 call on `tokens` tokens takes, and the acc rows it writes.
  int q8_call_count(int tokens) const noexcept { return q8_joins_rows ? tokens : tokens * q8_rows_per_token; }
  bool uses_q8_stream(kernels::PackFmt f) const noexcept {
    return stream_q8 != nullptr && kernels::q8_stream_native(f);
  }
  int stream_max(kernels::PackFmt f) const noexcept {
    const int q8 = uses_q8_stream(f) ? stream_max_m_q8 : 0;
    return q8 > stream_max_base(f) ? q8 : stream_max_base(f);
  }
  int stream_max_base(kernels::PackFmt f) const noexcept {
    if (uses_bf16_stream(f)) {
      if (!amx_stream || !kernels::amx_stream_native(f)) return stream_max_m_bf16;
      return f == kernels::PackFmt::kBF16 ? stream_max_m_amx_bf16 : stream_max_m_amx;
    }
    return (f == kernels::PackFmt::kBF16 || f == kernels::PackFmt::kF32) ? stream_max_m_cheap : stream_max_m;
  }
  std::string variant = "v2";
  // Software prefetch distance (bytes) the runner puts in BlockRef::prefetch for the streaming kernels:
  // kPrefetchBytes at the AVX2 and AVX-512 levels, kPrefetchBytesBf16Levels at AVX512-BF16 and AMX, or
  // MOERUN_CPU_PREFETCH=<bytes> (0 = off; measurement), which also sets the AMX tiles' and the bf16
  // stream pairs' distances unless their own knobs are set.
  int prefetch = 0;
  // The streaming kernels' second distance, into L2 (BlockRef::prefetch_l2): kPrefetchL2Bytes at
  // AVX512-BF16 and AMX, none below, or MOERUN_CPU_PREFETCH_L2=<bytes> (0 = off; measurement).
  int prefetch_l2 = 0;
  // The L2 distance of the bf16 stream's pairs (stream2_bf16): kPairPrefetchL2Bytes at AVX512-BF16 and
  // AMX, or MOERUN_CPU_PREFETCH_L2's, or MOERUN_CPU_PAIR_PREFETCH_L2=<bytes> (measurement).
  int pair_prefetch_l2 = 0;
  // The L1 distance of the bf16 stream's pairs: kAmxPairPrefetchBytes at AMX, `prefetch` elsewhere; or
  // MOERUN_CPU_PREFETCH's, or MOERUN_CPU_PAIR_PREFETCH=<bytes> (measurement).
  int pair_prefetch = 0;
  // The L2 distance of VDPBF16PS streaming calls of at least kManyPrefetchMinTokens tokens:
  // kManyPrefetchL2Bytes at AVX512-BF16 where VDPBF16PS issues at the FMA rate (that level streams
  // every call), else prefetch_l2; or MOERUN_CPU_PREFETCH_L2's, or MOERUN_CPU_MANY_PREFETCH_L2=<bytes>
  // (measurement).
  int many_prefetch_l2 = 0;
  // BlockRef::prefetch_l2 for a VDPBF16PS streaming call of m tokens.
  int bf16_stream_prefetch_l2(int64_t m) const noexcept {
    return m >= kManyPrefetchMinTokens ? many_prefetch_l2 : prefetch_l2;
  }
  // The distance for the AMX tiles' weight panels: kAmxPrefetchBytes, or MOERUN_CPU_PREFETCH's, or
  // MOERUN_CPU_AMX_PREFETCH=<bytes> (measurement: a tile call consumes its panels in bursts, not at the
  // streaming kernels' pace).
  int amx_prefetch = 0;
  // The distance for calls of 2 or more tokens on the AMX decode stream (kernels::stream_amx_bf16):
  // kAmxStreamPrefetchBytes, or MOERUN_CPU_AMX_STREAM_PREFETCH=<bytes> (measurement).
  int amx_stream_prefetch = 0;
  // BlockRef::prefetch for a streaming call of m tokens on format f (the bf16-activation kernels).
  int bf16_stream_prefetch(kernels::PackFmt f, int64_t m) const noexcept {
    return amx_stream && m >= 2 && kernels::amx_stream_native(f) ? amx_stream_prefetch : prefetch;
  }
  // The most AMX N-blocks per tile call (1, 2 or 4): kAmxNBlocks, or MOERUN_CPU_AMX_NBLOCKS=2 for pairs
  // only, =1 for the one-block kernel (measurement). Only calls that take AMX tiles group their blocks
  // (runner.cpp); four only in calls of up to kernels::kAmxQuadMaxRows tokens, pairs above.
  int amx_nblocks = 4;
  // Down-GEMM N-blocks per work item when some job's down GEMM is tiled (0 = the runner decides:
  // runner.cpp, down groups), or MOERUN_CPU_DOWN_GROUP=<n> (measurement): n N-blocks per item, rounded
  // down to whole calls (pairs where AMX pairs blocks), 1 = one call's blocks; only where some job's
  // down GEMM is tiled (decode-only calls keep one call per item).
  int down_group = 0;
  // Consecutive N-blocks of one expert per work item where a job streams its weights (decode), in
  // gemm1 and in gemm2 when no down GEMM is tiled, and (in whole pairs) per gemm1 item of AMX tiles
  // (0 = the runner decides: runner.cpp, stream runs and AMX pairs), or MOERUN_CPU_STREAM_RUN=<n>
  // (measurement): n blocks, 1 = one block per streaming item and one pair per tile item.
  int stream_run = 0;
  // Whether the runner splits the last streaming work items of gemm1 into smaller ones (runner.cpp,
  // tapered tail); MOERUN_CPU_STREAM_TAPER=0 (measurement) keeps every item its run.
  bool stream_taper = true;
  // Whether the runner splits the last down-GEMM work items (down groups) smaller where some job's down
  // GEMM is tiled (runner.cpp, tapered tail); MOERUN_CPU_DOWN_TAPER=0 (measurement) keeps them whole.
  bool down_taper = true;
  // MOERUN_CPU_POISON=1 (tests): every forward first fills its intermediate buffers with NaN, so that
  // work a forward skips shows in its output instead of an earlier forward's values in a warm workspace.
  bool poison = false;
  // kAmx: stream_bf16 is kernels::stream_amx_bf16 (mxfp4, nvfp4, fp8 and bf16 calls of 2 or more
  // tokens decoded onto AMX tiles, which therefore stream up to stream_max_m_amx / stream_max_m_amx_bf16
  // tokens), unless MOERUN_CPU_AMX_STREAM=0 (measurement) keeps stream_avx512bf16 and the tiles from 9
  // tokens.
  bool amx_stream = false;
  // Whether decoders may multiply mxfp4 scales into the weights where the stack allows it
  // (BlockRef::e8m0_fold); MOERUN_CPU_E8M0_FOLD=0 (measurement) keeps the per-group fold everywhere.
  bool e8m0_fold = true;
  // Whether the gate_up epilogue may write the intermediate straight in bf16 where every down call reads
  // bf16 rows (runner.cpp: h_f32); MOERUN_CPU_BF16_INTERMEDIATE=0 (measurement) keeps the f32 rows and
  // post1's conversion everywhere. Either way the down calls read the same bf16 words.
  bool bf16_intermediate = true;
  // Whether the AMX tile calls on bf16 stacks are told where this thread reads next, so that their last
  // prefetches run on into it (kernels.hpp, next_step); MOERUN_CPU_AMX_PREFETCH_NEXT=0 (measurement)
  // lets them run past their own panels' ends, as before session 32.
  bool amx_prefetch_next = true;
  // Rows per job (runner.cpp NOTES: job rows): an expert's rows, and the shared experts', in jobs of at
  // most kJobRows, or MOERUN_CPU_JOB_ROWS=<n> (measurement; 0 = one job per expert).
  int job_rows = 0;
  // Elements added to the row stride of the runner's activation and intermediate buffers: kRowPad, or
  // MOERUN_CPU_ROW_PAD=<n> (measurement; 0 = the unpadded stride).
  int row_pad = 0;
};

// 4 KiB ahead: on Zen 1 (1 thread, qwen3 bf16) M=1 8.1 -> 6.6 ms and M=16 94 -> 76 ms against no
// prefetch, and 2, 8 or 16 KiB no better; on the H200 host's Xeon (2 threads, same run) bf16 M=1 4.9 ->
// 3.7 ms, M=64 104 -> 70 ms, fp8 M=1 3.8 -> 2.3 ms.
inline constexpr int kPrefetchBytes = 4096;
// MOERUN_CPU_PREFETCH parsed: bytes in [0, 65536], or -1 when unset or invalid.
int prefetch_override();

// Two distances at the AVX512-BF16 and AMX levels: into L1 1 KiB ahead and into L2 (PREFETCHT2) 4 KiB
// ahead. A core has about 16 fill buffers for L1 misses, which at a memory latency of ~100 ns carry
// about 10 GB/s; only the L2 streamer goes beyond, and it runs a short way ahead within a 4 KiB page. A
// prefetch into L1 far ahead therefore holds a fill buffer for a whole memory latency, and a kernel that
// decodes between its loads leaves the memory idle meanwhile: time = memory + decode instead of the
// larger of the two. With the L2 prefetch ahead, the L1 prefetch finds its line in L2 and frees its fill
// buffer within ~20 cycles. A probe (bench/results/2026-12-02_s16_dev-xeon/prefetch_probe.cpp: 2 lines
// a step, 6 dependent ops on each, 1 GiB, one thread) read 8.7 GB/s with no prefetch, 10.5 with L1
// 4 KiB ahead, 15.8 with L1 1 KiB and 17.7 with L1 1 KiB + L2 4 KiB; a plain read 15-17. In the layer (qwen3-30b-a3b, 2 threads, this development machine's Xeon,
// bench/results/2026-12-02_s16_dev-xeon/NOTES.md): one token bf16 2.44-2.64 -> 2.32-2.51 ms, fp8-block
// 1.70-1.75 -> 1.54-1.68, mxfp4 0.88-0.95 -> 0.78-0.87; M = 16 (AMX decode stream, whose L1 distance
// stays kAmxStreamPrefetchBytes) fp8-block 19.4-20.3 -> 16.9-18.3. At the AVX-512 level here the pair
// was mixed (bf16 1.1x faster, mxfp4 up to 0.92x), so the levels below keep kPrefetchBytes alone.
// Until session 32 the AMX tiles took the L1 distance too (their prefetch loop issues T0 only): side by
// side against 4 KiB, 1.02-1.07x on every tiled row (qwen3, deepseek-v2-lite, gpt-oss-20b bf16 at M = 256 and
// 1024, mixtral M = 256; 2 KiB 1.00-1.03x); an added L2 prefetch 4 or 12 KiB ahead lost 0.93-0.97x.
inline constexpr int kPrefetchBytesBf16Levels = 1024;
inline constexpr int kPrefetchL2Bytes = 4096;
// The bf16 stream's pairs (two blocks' weights read together by one-token calls, runner.cpp NOTES)
// prefetch into L2 1.5 KiB ahead in each of their two streams. kPrefetchL2Bytes was tuned before the
// pairs existed, on one stream a core. Side by side at one token (session 38, 2 threads, in one
// process, two rounds each; bench/results/2026-12-05_s38_dev-xeon/NOTES.md), against 4 KiB: qwen3-
// 30b-a3b bf16 3.8-6.3% faster, fp8-block 4.1-6.5%, deepseek-v2-lite bf16 2.6-4.2%; 1 KiB tied with
// 1.5, 2 KiB lost 0-4% and 3 KiB 3-5%. Layers of 4 and 16 tokens (mostly one-token experts) gained
// 1-4% too. The q8 kernel's pairs (mxfp4, nvfp4) keep 4 KiB: shorter distances tied or lost 2% there.
inline constexpr int kPairPrefetchL2Bytes = 1536;
// At AMX the pairs also prefetch into L1 further ahead: 2 KiB, not kPrefetchBytesBf16Levels. On the GPU
// host's Xeon (session 46, bench/results/2026-12-06_s46_gpu/NOTES.md; one token, 2 threads, alternated
// in one process, two device calls) 2 KiB against 1 KiB: qwen3-30b-a3b fp8-block 8.1% and 3.9% faster,
// bf16 2.4% and 2.8%, deepseek-v2-lite bf16 3.0%, gpt-oss-20b bf16 1.9%; 512 bytes against 1 KiB 1%
// slower; 3 KiB against 2 KiB bf16 1.5% faster, fp8-block 0.9% slower. On the Zen 4 (AVX512-BF16) 2 KiB
// tied (bench/results/2026-12-06_s46_dev-epyc), so the levels below keep the streams' distance. The L1
// distance now passes the L2 one (kPairPrefetchL2Bytes, tuned with L1 at 1 KiB), so at AMX the pairs'
// L2 prefetches ask for lines their L1 prefetches already requested. It still pays there: on top of
// 2 KiB (session 47, bench/results/2026-12-06_s47_gpu/NOTES.md, runs of 16 blocks) no L2
// prefetch read bf16 0.5% faster and fp8-block 1.4% slower, 4 KiB 3% and 7% slower; 1536 stays.
inline constexpr int kAmxPairPrefetchBytes = 2048;
// Since session 32 the AMX tiles prefetch closer: 512 bytes ahead. A prefetch into L1 issued too early
// waits for memory in a fill buffer; the hardware prefetcher has the line in L2 by the time a nearer one
// asks. Alone, weights from memory (bench/results/2026-12-05_s32_dev-xeon/amx_tall.cpp), 2 threads,
// K = 1408 and 24 rows: 26.5-27.0 GB/s at 1 KiB, 28.0-28.2 at 512; no prefetch at all was fastest at
// 16 rows (29.8) but lost half at 64. In the layer side by side against 1 KiB, bf16 at M = 16-1024 on
// qwen3-30b-a3b, deepseek-v2-lite and gpt-oss-20b: 512 bytes 1.004-1.046x on 12 of 12 rows, 256 bytes
// 0.99-1.13x (NOTES: section 4). Those 512-byte runs had no run-on into the next call (it took whole
// KiB steps until a review found it); with it (kernels::amx_prefetch_offset), side by side against
// MOERUN_CPU_AMX_PREFETCH_NEXT=0, 18 of 20 tiled rows faster by 0.1-3.2% (deepseek-v2-lite M = 1024
// lost one round at 0.966x and won the other at 1.010x).
inline constexpr int kAmxPrefetchBytes = 512;
// MOERUN_CPU_PREFETCH_L2 parsed: bytes in [0, 65536], or -1 when unset or invalid.
int prefetch_l2_override();
// MOERUN_CPU_PAIR_PREFETCH_L2 parsed: bytes in [0, 65536], or -1 when unset or invalid.
int pair_prefetch_l2_override();
// MOERUN_CPU_PAIR_PREFETCH parsed: bytes in [0, 65536], or -1 when unset or invalid.
int pair_prefetch_override();
// MOERUN_CPU_MANY_PREFETCH_L2 parsed: bytes in [0, 65536], or -1 when unset or invalid.
int many_prefetch_l2_override();

// The AMX decode stream prefetches one bf16 B tile (1 KiB) ahead instead of kPrefetchBytes. Each of
// its steps copies or decodes 16 k pairs into an L1 tile image and tile-loads it, so all of a step's
// weight loads must arrive before its tile load; prefetches far ahead only hold the core's fill buffers
// that those loads need, while the L2 streamer follows the sequential loads by itself. Measured on
// this development machine's Xeon (2 threads, qwen3-30b-a3b, alternated in one process; bench/results/
// 2026-12-02_s15_dev-xeon/NOTES.md): bf16 M = 64 57.5-57.8 ms at 4 KiB, 52.1-52.7 ms with none,
// 49.9-50.0 ms at 1 KiB (M = 256: 63.7-64.1, 59.2-60.2, 57.4-57.8); fp8-block and nvfp4 M = 64 lose
// 5-6% with none and tie 1 KiB against 4 KiB.
inline constexpr int kAmxStreamPrefetchBytes = 1024;
// MOERUN_CPU_AMX_STREAM_PREFETCH parsed: bytes in [0, 65536], or -1 when unset or invalid.
int amx_stream_prefetch_override();

// Up to four N-blocks per AMX tile call: kernels::tile_amx4 for calls of up to 16 tokens (one A tile
// for four products, four weight streams: 4-12% more GB/s than pairs at K = 768 and 3-8% at K = 2048
// alone, session 31), kernels::tile_amx2 pairs above (2x2 register blocking: per 32 k, 4 tile loads
// for 4 dot products instead of 5 for 4 with kernels::tile_amx).
inline constexpr int kAmxNBlocks = 4;
// MOERUN_CPU_AMX_NBLOCKS parsed: 1, 2 or 4, or -1 when unset or anything else.
int amx_nblocks_override();

// Rows per job (runner.cpp NOTES: job rows): 256 bf16 rows of K = 2048 are 1 MiB, half this machine's
// L2 per core.
inline constexpr int kJobRows = 256;
// MOERUN_CPU_JOB_ROWS parsed: 0 or 32..65536, or -1 when unset or anything else.
int job_rows_override();

// Row padding (runner.cpp NOTES): a K of 2048 bf16 puts the 16 rows of an A tile 4 KiB apart, all in
// one L1 set (64 sets of 64 bytes, 12 ways), so every tile load misses. 32 more elements per row move
// each row to the next set (bf16: 64 bytes; f32: 128).
inline constexpr int kRowPad = 32;
// MOERUN_CPU_ROW_PAD parsed: elements in [0, 256], a multiple of kernels::kKAlign, or -1 when unset or
// anything else.
int row_pad_override();

// MOERUN_CPU_AMX_PREFETCH parsed: bytes in [0, 65536], or -1 when unset or invalid.
int amx_prefetch_override();
// MOERUN_CPU_DOWN_GROUP parsed: 1..64, or -1 when unset or anything else.
int down_group_override();
// MOERUN_CPU_STREAM_RUN parsed: 1..64, or -1 when unset or anything else.
int stream_run_override();
// MOERUN_CPU_AMX_STREAM=0: false; unset (or malformed): true.
bool amx_stream_enabled();
// MOERUN_CPU_STREAM_PAIRS=0: false; unset (or malformed): true.
bool stream_pairs_enabled();
// MOERUN_CPU_STREAM_TAPER=0: false; unset (or malformed): true.
bool stream_taper_enabled();
// MOERUN_CPU_DOWN_TAPER=0: false; unset (or malformed): true.
bool down_taper_enabled();
// MOERUN_CPU_DOT_TOKENS=8: true (stream_bf16 is kernels::stream_avx512bf16_g8); unset (or 16): false.
bool dot_groups_of_8();
// MOERUN_CPU_POISON=1: true; unset (or anything else): false.
bool poison_enabled();
// MOERUN_CPU_E8M0_FOLD=0: false; unset (or malformed): true.
bool e8m0_fold_enabled();
// MOERUN_CPU_BF16_INTERMEDIATE=0: false; unset (or malformed): true.
bool bf16_intermediate_enabled();
// MOERUN_CPU_AMX_PREFETCH_NEXT=0: false; unset (or malformed): true.
bool amx_prefetch_next_enabled();
// MOERUN_CPU_Q8=0: false; unset (or malformed): true.
bool q8_stream_enabled();
// MOERUN_CPU_Q15=0: false; unset (or malformed): true (a number n >= 1 also sets the cut, below; so
// MOERUN_CPU_Q15=1 means a cut of one token, not just "on").
bool q15_stream_enabled();
// MOERUN_CPU_Q15_JOIN=0: q15 calls fold a token's two rows apart and the runner sums them (the kernels
// before session 40); unset (or malformed): true.
bool q15_join_enabled();
// MOERUN_CPU_Q15=<n> with n >= 1 (measurement): the q15 kernels take calls of up to n tokens per expert,
// whatever MOERUN_CPU_STREAM_MAX_TOKENS says; -1 when unset, 0 or malformed (the level's cut holds).
int q15_max_tokens_override();

// Kernels for the given level (kAvx512Bf16 and kAmx: the AVX-512 set plus stream_bf16; kAmx adds the
// tiles). Throws Error{kUnsupported} below AVX2.
// The environment variable MOERUN_CPU_KERNELS=v1 selects the previous AVX2 streaming kernel and
// crossover (for side-by-side measurement only); another value throws Error{kInvalidArgument}.
KernelSet kernels_for(CpuIsa isa);
// kernels_for with an explicit variant, "v1" or "v2"; throws Error{kInvalidArgument} for another name.
KernelSet kernels_for_variant(CpuIsa isa, const std::string& variant);

}  // namespace moerun::cpu
