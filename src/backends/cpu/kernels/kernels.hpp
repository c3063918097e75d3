// cpu/kernels/kernels.hpp — raw-pointer GEMM kernels of the cpu backend, one implementation per ISA.
//
// Every kernel computes, for one packed N-block of 16 output lanes (see prepack.hpp for the layout),
//   acc[i][l] = sum_k x[i * ldx + k] * W[k][l]      i < m, l < 16
// with the weight's per-K-group scales applied (fp8 block, mxfp4, nvfp4) but not its per-lane scale
// (per-channel / per-tensor), which the caller's epilogue applies. x holds kp columns (kp = the padded
// K, a multiple of kKAlign); the columns past the true K must be zero (the packed weights are zero there
// too, but 0 * NaN would not be). Accumulation is fp32 (bf16 products on AMX / AVX512-BF16 paths).
//
// No kernel allocates, throws or touches OpenMP: the runner splits work and owns the buffers.
//
// The helpers defined in this header are always inlined: the kernel files are compiled with different
// -m flags, and a helper left out of line (at -O0) is a weak symbol whose copy from the widest file the
// linker may keep for every caller, the scalar level's included. The kernel files also avoid the std
// algorithms with floating-point bodies for the same reason (std::fill of floats, std::fma: a loop,
// __builtin_fmaf; integer ones such as std::min<long> compile to no vector instruction). Their own
// helpers live in unnamed namespaces (avx512_decode.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace moerun::cpu::kernels {

inline constexpr int kLanes = 16;   // output rows per N-block
inline constexpr int kKAlign = 32;  // K is padded to a multiple of this (an AMX bf16 tile row)

// The packed element encodings. Group sizes are along K.
enum class PackFmt : uint8_t {
  kF32,        // f32 [kp][16]
  kF16,        // f16 [kp][16]
  kBF16,       // bf16 [kp/2][16][2]: VNNI pairs (k even in the low half), what AMX tiles read
  kFp8,        // e4m3 (CodeLayout below; per-tensor / per-channel: scale in the lane scale)
  kFp8Block,   // e4m3 like kFp8 + f32 group scales in scale slots (below; block scale times 256)
  kInt8,       // int8 [kp][16] (per-channel scale in the lane scale)
  kMxfp4,      // e2m1 (CodeLayout below) + e8m0 [kp/32][16]
  kNvfp4,      // e2m1 like mxfp4 + e4m3 group scale [kp/16][16]; times gmul = 256 * global scale
};

// Where fp8 and e2m1 codes sit in a block; chosen per kernel level (KernelSet::code_layout), recorded
// on the packed weights, and checked by the runner. (Other formats have one layout.)
// - kPerK (AVX2): each k is a run of the 16 lanes' codes, k even then k odd: fp8 16 bytes per k; e2m1
//   8 bytes per k, byte j = lane j (low nibble) | lane j + 8 (high). AVX2 widens bytes with vpshufb /
//   vpmovzx and converts through F16C.
// - kVnniWords (AVX-512 levels, and AVX2 layers the q8 kernel streams): the codes of several k pairs interleaved in 32 little-endian words in
//   VNNI order (word 2l + o = lane l, k 2p + o), 64 bytes: fp8 pairs 2q (low byte) and 2q + 1 (high
//   byte); e2m1 pairs 4q + i in nibble i. One load serves 2 or 4 pairs, and a pair's 32 codes are a shift
//   away from bf16 by arithmetic or a vpermw table: no vpermb to spread codes over words first (a
//   shuffle-port op per pair that set the one-token decode speed on the Xeon). On AVX2 the same e2m1
//   decode costs more than kPerK's (Zen 1, one core: 6.0 against 4.6 ns per pair in cache).
enum class CodeLayout : uint8_t { kPerK, kVnniWords };
inline constexpr int kVnniWordBytes = 64;
[[gnu::always_inline]] constexpr bool has_code_layout(PackFmt f) noexcept {
  return f == PackFmt::kFp8 || f == PackFmt::kFp8Block || f == PackFmt::kMxfp4 || f == PackFmt::kNvfp4;
}
// Where the code of (pair, lane, k parity) sits in a block: the packer writes there, and e2m1_code /
// fp8_code (tests) read there. e2m1: a bit offset (a nibble never straddles bytes); fp8: a byte offset.
constexpr int64_t e2m1_bit(CodeLayout layout, int64_t pair, int lane, int odd) noexcept {
  if (layout == CodeLayout::kPerK) return (pair * 16 + odd * 8 + (lane & 7)) * 8 + (lane < 8 ? 0 : 4);
  return ((pair / 4) * kVnniWordBytes + (2 * lane + odd) * 2) * 8 + 4 * (pair % 4);  // little-endian words
}
constexpr int64_t fp8_byte(CodeLayout layout, int64_t pair, int lane, int odd) noexcept {
  if (layout == CodeLayout::kPerK) return (2 * pair + odd) * 16 + lane;
  return (pair / 2) * kVnniWordBytes + (2 * lane + odd) * 2 + (pair % 2);
}
inline int e2m1_code(CodeLayout layout, const uint8_t* data, int64_t pair, int lane, int odd) noexcept {
  const int64_t bit = e2m1_bit(layout, pair, lane, odd);
  return (data[bit / 8] >> (bit % 8)) & 0xF;
}
inline int fp8_code(CodeLayout layout, const uint8_t* data, int64_t pair, int lane, int odd) noexcept {
  return data[fp8_byte(layout, pair, lane, odd)];
}
// bf16 bits of e2m1 code c (every e2m1 value is a bf16 value); bits above the code are ignored.
constexpr uint16_t e2m1_bf16(int c) noexcept {
  constexpr uint16_t kMag[8] = {0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0};  // 0 .. 6
  return static_cast<uint16_t>(kMag[c & 7] | ((c & 8) ? 0x8000 : 0));
}

// Bytes one k step of one N-block occupies.
constexpr int bytes_per_k(PackFmt f) noexcept {
  switch (f) {
    case PackFmt::kF32: return 64;
    case PackFmt::kF16: case PackFmt::kBF16: return 32;
    case PackFmt::kFp8: case PackFmt::kFp8Block: case PackFmt::kInt8: return 16;
    case PackFmt::kMxfp4: case PackFmt::kNvfp4: return 8;
  }
  return 0;
}
// K group of the per-group scale; 0 = none.
constexpr int group_size(PackFmt f) noexcept {
  switch (f) {
    case PackFmt::kFp8Block: return 128;
    case PackFmt::kMxfp4: return 32;
    case PackFmt::kNvfp4: return 16;
    default: return 0;
  }
}
// Group scales of one block (BlockRef::gscale), per format:
// - mxfp4, nvfp4: [groups][16], one e8m0 / e4m3 byte per lane and K group.
// - fp8 block (kFp8Block): the source has one f32 per 128 x 128 block, so a block's 16 lanes read at most
//   three distinct scale rows (plain and interleaved blocks are 16 aligned rows; a gated block's gate
//   half is 8 rows aligned to 8 and its up half 8 consecutive rows, which may straddle a 128-row
//   boundary). A block stores its lane -> slot map once (16 bytes, slot 0-3 per lane; padding lanes
//   take slot 3, which stays 0), then per K group
//   the slots' f32 scales (16 bytes): a quarter of 16 lanes' f32, which at K = 2048 was 1 KiB per
//   32 KiB block of codes, 3% more bytes for a one-token stream to read than the codes alone. Against
//   that traffic, alternated in one process on the GPU host's Xeon (qwen3-30b-a3b fp8-block, 2 threads;
//   session 51): one token 1.7% / 1.8% faster (4 threads 2.1%), 4 tokens 1.0% / 1.8%, 16 tokens
//   2.2% / 1.6%; issue 4's one-token ratio over bf16 1.84x -> 1.87-1.88x (bench/results/2026-12-07_s51_gpu).
inline constexpr int kFp8ScaleSlots = 4;
constexpr int64_t group_scales_bytes(PackFmt f, int64_t groups) noexcept {
  if (f == PackFmt::kFp8Block) return kLanes + groups * kFp8ScaleSlots * 4;
  return group_size(f) != 0 ? groups * kLanes : 0;
}

// e8m0 scale bytes v (2^(v - 127)) for which every e2m1 value (0.5 to 6) times the scale is a normal f32
// and bf16 number: 2^-126 to 1.5 * 2^127.
inline constexpr uint8_t kE8m0FoldMin = 2, kE8m0FoldMax = 252;

// One N-block of one expert: everything a kernel needs.
struct BlockRef {
  PackFmt fmt = PackFmt::kF32;
  const uint8_t* data = nullptr;    // kp * bytes_per_k(fmt) bytes, 64-byte aligned
  const uint8_t* gscale = nullptr;  // group scales (group_scales_bytes above), or null
  float gmul = 1.0f;                // nvfp4: 256 * global scale; else unused
  // mxfp4: every real lane's e8m0 scale byte lies in [kE8m0FoldMin, kE8m0FoldMax], so each weight times
  // its scale is a normal bf16 number and decoders may multiply the scales in exactly (prepack sets it).
  bool e8m0_fold = false;
  int64_t kp = 0;                   // padded K (multiple of kKAlign)
  // Software prefetch distance in bytes for the weight stream of the streaming kernels (every ISA)
  // and the AMX B tiles (0 = none). Blocks are short (16 to 64 KiB) and each starts a new stream, so the hardware
  // prefetcher ramps up late; the runner sets it (MOERUN_CPU_PREFETCH overrides it for measurement).
  int prefetch = 0;
  // A second, longer distance into L2 (0 = none; only with prefetch > 0): see isa.hpp kPrefetchL2Bytes.
  int prefetch_l2 = 0;
};

// Software prefetch for the streaming kernels, at k pair p: the weight lines of pair p + prefetch /
// kPairBytes into L1 (PREFETCHT0) and, with prefetch_l2 > 0, those of pair p + prefetch_l2 / kPairBytes
// into L2 (PREFETCHT2); each line once per pass over the block, nothing with prefetch 0. Past the
// block's end it reaches into the next block, usually the next work item (prefetches never fault).
// Always inlined: out of line, GCC treats a void function whose only effect is __builtin_prefetch as
// side-effect free and deletes the calls (it did so in every non-inlined dot_t of gemm_avx512bf16.cpp
// when this function grew by the L2 prefetch).
template <int kPairBytes>
[[gnu::always_inline]] inline void prefetch_pair(const BlockRef& b, int64_t p) {
  if (b.prefetch <= 0) return;
  const int64_t off = p * kPairBytes;
  if (kPairBytes < 64 && (off & 63) != 0) return;
  const uintptr_t base = reinterpret_cast<uintptr_t>(b.data) + static_cast<uintptr_t>(off);  // may leave the block
  for (int q = 0; q < (kPairBytes + 63) / 64; ++q)
    __builtin_prefetch(reinterpret_cast<const void*>(base + b.prefetch + q * 64), 0, 3);
  if (b.prefetch_l2 > 0)
    for (int q = 0; q < (kPairBytes + 63) / 64; ++q)
      __builtin_prefetch(reinterpret_cast<const void*>(base + b.prefetch_l2 + q * 64), 0, 1);
}

// ---- AVX2 + FMA + F16C (gemm_avx2.cpp) ----
// Streaming path: reads each weight byte from memory once per call and never writes a panel; tokens
// run in groups of up to 4 with accumulators in registers, over L1-sized K chunks when m > 4. acc is
// [m][16]; any m >= 0.
void stream_avx2(const BlockRef& b, const float* x, int64_t ldx, int m, float* acc);
// The previous streaming kernel (groups of 4 over the whole K, scale applied to every weight), kept for
// side-by-side measurement (MOERUN_CPU_KERNELS=v1, bench/cpu/cpu_kernel_bench).
void stream_avx2_v1(const BlockRef& b, const float* x, int64_t ldx, int m, float* acc);
// Dequantizes the whole block into an f32 panel [kp][16] (group scales applied).
void dequant_panel_avx2(const BlockRef& b, float* panel);
// The same for blocks whose codes sit in VNNI words (an AVX2 layer that the q8 kernel streams: runner.cpp
// kernels_for_spec): mxfp4 and nvfp4 decoded from that layout, formats without a code layout as
// dequant_panel_avx2; fp8 (never packed so at this level) fills the panel with NaN.
void dequant_panel_avx2_vnni(const BlockRef& b, float* panel);
// The f32 stream of such a layer: stream_avx2 for formats without a code layout; for the others, whose
// calls the q8 kernel takes up to the cut and panels beyond it, NaN (they must never look valid).
void stream_avx2_vnni(const BlockRef& b, const float* x, int64_t ldx, int m, float* acc);
// acc[m][16] = x[m][kp] @ panel[kp][16]: 6x16 register tiles.
void tile_avx2(const float* panel, int64_t kp, const float* x, int64_t ldx, int m, float* acc);

// Activations of the GEMM1 epilogue (moerun's ActivationKind, mirrored so kernels need no moerun types).
enum class Act : uint8_t { kSiluMul, kGeluMul, kGeluTanhMul, kSwigluOai, kRelu2, kSilu };
[[gnu::always_inline]] constexpr bool gated(Act a) noexcept { return a != Act::kRelu2 && a != Act::kSilu; }
// out[j] = act(g[j], u[j]) (gated; swiglu-oai clamps with limit > 0 and uses alpha) or act(g[j]) (u
// unused), j < n. silu, sigmoid and tanh use a vector exp (degree-6 polynomial after range reduction,
// within 2e-7 relative of std::exp on [-87, 88], arguments clamped there); gelu-erf stays scalar.
// out may alias g or u.
void act_avx2(Act a, const float* g, const float* u, int n, float alpha, float limit, float* out);
// act_avx2 over the rows of one block's accumulators: row i reads g = acc + 16 i, u = g + 8 and
// writes n values at out + i * ldo. One call per block instead of one per row (the GEMM1 epilogue
// made one call per row and block: ~30 ns each, a tenth of an AMX forward at 1024 tokens).
void act_rows_avx2(Act a, const float* acc, int64_t rows, int n, float alpha, float limit, float* out, int64_t ldo);
// The gate_up epilogue's scale and bias, in place on rows of 16 lanes: v = v x ls[l] (+ bias[l]; one FMA
// with both), for ls and / or bias given (16 entries each), rows i < m.
void scale_bias_rows_avx2(float* acc, int64_t m, const float* ls, const float* bias);
// The down GEMM's epilogue for one call's rows (every level: the runner is compiled for no ISA, and its
// 16-lane loops ran at SSE2 width): y = acc row i (x ls[l] if ls) (+ bias[l] if bias; one FMA with
// both), then out[(token ? token[i] : t0 + i) * 16 + l] += (weight ? weight[i] : 1) * y, one FMA, for
// lanes l < nl.
// ls and bias have 16 entries; rows i < m.
void down_rows_avx2(const float* acc, int64_t m, int nl, const float* ls, const float* bias, const int32_t* token,
                    int64_t t0, const float* weight, float* out);
// nb blocks of m rows of 16 f32 values (block q's row t at in + q * bstride + t * 16) rounded to bf16
// (nearest even, NaN kept quiet: the runner's f32_to_bf16_bits) into out[t * ldo + q * 16 + l], l < 16
// (l < nl in the last block); row by row, so each output row's nb * 32 bytes are written together.
void rows16_to_bf16_avx2(const float* in, int64_t m, int nb, int64_t bstride, int nl, uint16_t* out, int64_t ldo);

// ---- AVX-512F/BW/VL (gemm_avx512.cpp) ----
// act_rows_avx2's contract on 16 lanes (act_avx512.hpp): each value bitwise what act_rows_avx2 gives,
// two gated rows per step.
void act_rows_avx512(Act a, const float* acc, int64_t rows, int n, float alpha, float limit, float* out,
                     int64_t ldo);
void stream_avx512(const BlockRef& b, const float* x, int64_t ldx, int m, float* acc);
void dequant_panel_avx512(const BlockRef& b, float* panel);
void tile_avx512(const float* panel, int64_t kp, const float* x, int64_t ldx, int m, float* acc);

// ---- AMX-BF16 + AVX512-BF16 (gemm_amx.cpp) ----
// f32 panel [kp][16] -> bf16 VNNI panel [kp/2][16][2] (round to nearest even). For kBF16 weights the
// packed block already is such a panel and needs no conversion.
void panel_to_bf16_vnni(const float* panel, int64_t kp, uint16_t* out);
// Block b decoded straight to that bf16 VNNI panel: bitwise dequant_panel_avx512 followed by
// panel_to_bf16_vnni (kVnniWords codes), without the f32 panel's round trip through the cache (a
// 128 KiB store and load per block at K = 2048). Needs AVX512-BF16 (and VBMI: this file's flags).
// bf16 blocks, already such panels, are copied as they are (the two-step path would flush subnormal
// words to zero and quiet signalling NaNs; the runner never converts bf16 blocks).
void panel_bf16_vnni(const BlockRef& b, uint16_t* out);
// n floats -> bf16 (round to nearest even).
void f32_to_bf16_row(const float* x, int64_t n, uint16_t* out);
// Where the tile kernels prefetch, as a byte offset from a panel of kp k (kp * 32 bytes): line l (0, 64,
// .., 960) of k step k (32 k, the B tile's KiB) `prefetch` bytes ahead; a line past the panel's end moves
// on into the next call's panel, next_step elements away (0: straight on). Decided line by line, since
// a step's KiB straddles the end unless `prefetch` is a multiple of 1 KiB.
constexpr int64_t amx_prefetch_offset(int64_t kp, int prefetch, int64_t k, int l, int64_t next_step) {
  const int64_t off = prefetch + k * 32 + l;
  return next_step != 0 && off >= kp * 32 ? off + next_step * 2 - kp * 32 : off;
}
// acc[m][16] = xb[m][kp] @ panel: xb bf16 with row stride ldx elements and round_up(m, 16) readable rows
// (rows past m should be zero); panel bf16 VNNI [kp/2][16][2]. Loads its own tile configuration.
// prefetch: bytes ahead of each B tile load, into L1. next_step (every tile kernel): the elements from
// each panel to the panel that takes its place in this thread's next call (0: unknown). The last pass's
// prefetches then run on into those panels instead of past their own ends (amx_prefetch_offset), so
// that the next call's streams start warm: alone, weights from memory, 2 threads, prefetching 1 KiB
// ahead, that read 24.3 -> 28.1 GB/s at K = 2048 and 24 rows, 23.1 -> 25.3 at K = 768
// (bench/results/2026-12-05_s32_dev-xeon/amx_tall.cpp). Prefetches never fault, so a wrong guess costs
// bandwidth, not correctness.
void tile_amx(const uint16_t* panel, int64_t kp, const uint16_t* xb, int64_t ldx, int m, float* acc,
              int prefetch = 0, int64_t next_step = 0);
// Two N-blocks in one call (2x2 register blocking: each A tile is loaded once for both panels):
// acc0[m][16] = xb @ panel0 and acc1[m][16] = xb @ panel1, bitwise what two tile_amx calls give. Same
// contract on xb (round_up(m, 16) readable rows); panel0 and panel1 may be anywhere (adjacent blocks of
// a packed bf16 stack or two converted panels). Passes of 32 tokens; reads 16 rows per A tile.
void tile_amx2(const uint16_t* panel0, const uint16_t* panel1, int64_t kp, const uint16_t* xb, int64_t ldx, int m,
               float* acc0, float* acc1, int prefetch = 0, int64_t next_step = 0);
// Four N-blocks in one call for calls of 1-16 tokens (one A tile for four products, four weight
// streams): acc + q * acc_stride [m][16] = xb @ panels[q], q < 4, bitwise what four tile_amx calls give.
// Same contract on xb (16 readable rows).
inline constexpr int kAmxQuadMaxRows = 16;
// ... and only on panels of at most this K: alone, from memory, four streams beat two by 4-12% at K = 768
// and 3-8% at K = 2048, but not at K = 2880 (m = 8: 27.7-28.1 against 29.0-29.1 GB/s), and gpt-oss-20b
// (K = 2880 in both GEMMs) lost 1.2-1.6% with them at M = 16-64 side by side (session 31 NOTES).
inline constexpr int64_t kAmxQuadMaxK = 2048;
void tile_amx4(const uint16_t* const panels[4], int64_t kp, const uint16_t* xb, int64_t ldx, int m, float* acc,
               int64_t acc_stride, int prefetch = 0, int64_t next_step = 0);
// stream_avx512bf16's contract (any m, rows need not be padded), for the AMX level: with 2 or more
// tokens, mxfp4, nvfp4, fp8, fp8-block and bf16 weights are decoded (bf16: copied; nvfp4: with its
// e4m3 group scales, exactly) 16 k pairs at a time into a bf16 B tile in L1 and multiplied on AMX
// (TDPBF16PS, f32 accumulation) with the A tiles of up to 64 tokens per pass; other formats and
// one-token calls run stream_avx512bf16. Results differ from it only in the order of the f32 additions
// and in where scales apply. Loads its own tile configuration (switching back and forth with the tile
// kernels reloads it).
void stream_amx_bf16(const BlockRef& b, const uint16_t* xb, int64_t ldx, int m, float* acc);
constexpr bool amx_stream_native(PackFmt f) noexcept {
  return f == PackFmt::kMxfp4 || f == PackFmt::kNvfp4 || f == PackFmt::kFp8 || f == PackFmt::kFp8Block ||
         f == PackFmt::kBF16;
}
// Releases the tile state of the calling thread.
void amx_release();

// ---- AVX512-BF16 + AVX512-VBMI (gemm_avx512bf16.cpp) ----
// act_rows_avx512 with each value rounded to bf16 as it is stored (f32_to_bf16_row's conversion): the
// words that act_rows_avx512 then f32_to_bf16_row give, with no f32 row in between.
void act_rows_bf16_avx512(Act a, const float* acc, int64_t rows, int n, float alpha, float limit, uint16_t* out,
                          int64_t ldo);
// VDPBF16PS throughput over VFMADD231PS throughput on 512-bit registers (instructions per second, eight
// independent chains each, the fastest of five short alternated runs: about 0.2 ms). Each VDPBF16PS does
// twice an FMA's multiply-adds: 0.22-0.25 on the H200 host's Xeon (once per 2 cycles beside two FMA
// ports), 1.00 on AMD Zen 4 (isa.hpp: what it decides).
double bf16_dot_fma_rate_ratio();
// Streaming path for bf16 activations: acc[m][16] = xb[m][kp] @ W with xb bf16 (row stride ldx elements,
// kp readable columns, zero past K; rows need not be 16-row padded), any m >= 0. bf16, fp8 and fp4
// weights are decoded to bf16 VNNI pairs with integer shuffles and multiplied with VDPBF16PS (f32
// accumulation; a product of two bf16 is exact in f32); f32, f16 and int8 weights take an f32 FMA loop
// (x widened from bf16). Either way the result equals stream_avx512 on the same bf16-valued x up to
// the order of the f32 additions. Tokens run in register groups of at most kMaxGroupTokens, each group
// one pass over the block (gemm_avx512bf16.cpp NOTES).
void stream_avx512bf16(const BlockRef& b, const uint16_t* xb, int64_t ldx, int m, float* acc);
inline constexpr int kMaxGroupTokens = 16;
// The same with groups of at most 8 tokens and fewer accumulator chains at 3-5 tokens: the kernel
// before session 39, kept for side-by-side measurement (MOERUN_CPU_DOT_TOKENS=8; variant v1).
void stream_avx512bf16_g8(const BlockRef& b, const uint16_t* xb, int64_t ldx, int m, float* acc);
// Two N-blocks of one stack at one token: acc0 = xb @ b0 and acc1 = xb @ b1 (16 floats each), bitwise what
// two stream_avx512bf16 calls with m = 1 give, with the two blocks' weight streams in flight together.
// Blocks of the same stack (format and kp); formats outside bf16_stream_native go block by block.
void stream2_avx512bf16(const BlockRef& b0, const BlockRef& b1, const uint16_t* xb, float* acc0, float* acc1);
// The formats stream_avx512bf16 runs on VDPBF16PS (every value exactly a bf16, decoded cheaply); for the
// others the runner keeps the f32 streaming kernel.
constexpr bool bf16_stream_native(PackFmt f) noexcept {
  return f == PackFmt::kBF16 || f == PackFmt::kFp8 || f == PackFmt::kFp8Block || f == PackFmt::kMxfp4 ||
         f == PackFmt::kNvfp4;
}

// ---- int8 activations: AVX512-VNNI + AVX512-VBMI (gemm_avx512vnni.cpp) ----
// Rows of int8 activation codes (ActQuant::kInt8PerTokenGroup; q8_rows.hpp packs them). Row r, with a
// row stride of ld codes (a multiple of 32, at least the blocks' kp):
//   q      [r * ld, +kp)          codes; within each 8-k chunk j in the order k = 8j + {0, 4, 1, 5, 2, 6, 3,
//                                 7}, the order in which VPDPBUSD meets the e2m1 nibbles of a VNNI-word quad
//   scale  [r * ld / 32, +kp / 32) each 32-k group's scale 2^e (NaN for a group that held a NaN or inf)
//   bias16 [r * ld / 16, +kp / 16) -kQ8E2m1Offset x the sum of each 16-k group's codes
//   bias32 [r * ld / 32, +kp / 32) the same per 32-k group
struct Q8Rows {
  const int8_t* q = nullptr;
  const float* scale = nullptr;
  const int32_t* bias16 = nullptr;
  const int32_t* bias32 = nullptr;
  int64_t ld = 0;
  [[gnu::always_inline]] Q8Rows rows_from(int64_t r) const noexcept {
    return {q + r * ld, scale + r * (ld / 32), bias16 + r * (ld / 16), bias32 + r * (ld / 32), ld};
  }
};
// The q8 kernel decodes an e2m1 code c to the byte 2 * e2m1(c) + kQ8E2m1Offset in [0, 24] (unsigned,
// VPDPBUSD's first operand); the bias rows take the offset back out of each group's integer sum.
inline constexpr int kQ8E2m1Offset = 12;
// The byte the q8 kernels decode e2m1 code c to (bits above the code ignored): 2 x e2m1(c) + offset.
constexpr uint8_t q8_e2m1_byte(int c) noexcept {
  constexpr int kTwice[8] = {0, 1, 2, 3, 4, 6, 8, 12};  // 2 x (0, 0.5, 1, 1.5, 2, 3, 4, 6)
  return static_cast<uint8_t>(kQ8E2m1Offset + ((c & 8) ? -kTwice[c & 7] : kTwice[c & 7]));
}
// That byte for each index 0 .. N - 1 (the code in its low 4 bits): the lookup table a q8 kernel loads
// (AVX2 vpshufb: 16 entries; AVX-512 vpermb: 64). Data only, so every ISA-compiled file may share it.
template <int N>
struct alignas(64) Q8E2m1Table {
  uint8_t v[N];
};
template <int N>
constexpr Q8E2m1Table<N> q8_e2m1_table() {
  Q8E2m1Table<N> t{};
  for (int i = 0; i < N; ++i) t.v[i] = q8_e2m1_byte(i);
  return t;
}
// A streaming kernel like stream_avx512bf16, for mxfp4 and nvfp4 blocks (code layout kVnniWords) and int8 activations:
// acc[m][16] = sum over k of dequantized W[k][l] * q[i][k] * scale[i][k / 32], any m >= 0. Per K group
// the integer dot products are exact (VPDPBUSD); the group's scales multiply their sum in f32, so the
// result equals the dense f32 loop on the dequantized activations up to the order of the f32 additions.
void stream_q8_avx512vnni(const BlockRef& b, const Q8Rows& x, int m, float* acc);
// Two N-blocks of one stack on the same rows: acc0 = x @ b0 and acc1 = x @ b1 ([m][16] each), bitwise what two
// stream_q8_avx512vnni calls give, with both blocks' weight streams in flight together for m = 1 or 2
// (one token: an int8 row, or a token's two 15-bit rows); other m go block by block.
void stream2_q8_avx512vnni(const BlockRef& b0, const BlockRef& b1, const Q8Rows& x, int m, float* acc0, float* acc1);
// The same on m tokens of 15-bit rows, two a token (q8_rows.hpp pack_q15_rows: high row, then low): each
// token's two integer sums joined exactly (128 x high + low) before their one f32 fold, so acc gets m rows
// of 16, a token's sum over both rows, in half the fold work of summing two stream_q8 rows afterwards.
void stream_q15_avx512vnni(const BlockRef& b, const Q8Rows& x, int m, float* acc);
// Its stream pairs: two N-blocks, one token; other m block by block.
void stream2_q15_avx512vnni(const BlockRef& b0, const BlockRef& b1, const Q8Rows& x, int m, float* acc0, float* acc1);
constexpr bool q8_stream_native(PackFmt f) noexcept { return f == PackFmt::kMxfp4 || f == PackFmt::kNvfp4; }
// The same on AVX2 (gemm_avx2.cpp; vpmaddubsw + vpmaddwd for VPDPBUSD), on weights packed in VNNI words
// too: an AVX2 layer with int8 activations is packed so, and every call of it takes this kernel; a
// 4-bit layer with bf16 activations too, whose calls take it up to a cut (panels beyond).
void stream_q8_avx2(const BlockRef& b, const Q8Rows& x, int m, float* acc);
// Its joined q15 form, as stream_q15_avx512vnni: m tokens of two 15-bit rows, acc m rows.
void stream_q15_avx2(const BlockRef& b, const Q8Rows& x, int m, float* acc);

}  // namespace moerun::cpu::kernels
