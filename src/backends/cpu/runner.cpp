// cpu/runner.cpp — CpuRunner (runner.hpp).
//
// NOTES: one OpenMP region per forward, stages separated by the implicit barriers of `omp for`:
//   gather   X[row] = hidden[token(row)] in f32 (x router weight on input; fp8 / int8 act fake-quant, and
//            the int8 codes for the q8 kernel), K padded, and its bf16 copy Xb; where no call reads f32
//            rows, bf16 hidden rows go to Xb as they are and X is not written (forward: x_f32)
//   lora1    gate_up LoRA deltas per row (only with a LoRA batch)
//   gemm1    work items (job, w13 N-block), dynamic schedule: a hot expert spreads over all threads;
//            the epilogue applies scales, bias, LoRA and the activation (gate and up share a block), and
//            writes the intermediate in f32 (Hb) or, where every down call reads bf16, in bf16 (Hbb: h_f32)
//   post1    pad columns, fp8 / int8 act fake-quant of the intermediate (and its int8 codes), down LoRA
//            deltas, the bf16 copy Hbb; with the bf16 intermediate only Hbb's pad columns
//   gemm2    work items = N-blocks of the hidden size; each loops over all jobs and accumulates the
//            router-weighted outputs of its 16 columns in a per-thread [M][16] buffer, then writes the
//            output columns in the act dtype. No two threads write the same output element; the sum
//            over experts runs in a fixed order, so results do not depend on the thread count.
// Down groups: a gemm2 item that loops over every job re-reads each expert's intermediate rows once
// per item, so with one call's blocks per item (1 or 2 N-blocks of 16 columns) a forward reads the
// whole intermediate H / 16 (or H / 32) times: at qwen3-30b-a3b M = 1024, 12.6 MB x 64 = 0.8 GB,
// twice the down weights. Where some job's down GEMM is tiled (not streaming), an item takes `group`
// consecutive calls and runs them expert by expert, so those rows come from memory once per item and
// from L2 for its other calls. The group is as large as keeps the item's [blocks][M][16] output
// buffers within kDownGroupOutBytes (L2-resident beside the rows), the items at least twice the
// threads, and at most kDownGroupMaxCalls calls; MOERUN_CPU_DOWN_GROUP=<blocks> overrides it (1: one
// call per item). Each output element still sums the experts in job order: results are bitwise the
// same for every group.
// Stream runs: a streaming job's block is 16 rows x K of packed weights (6-64 KiB), and each block
// starts a new memory stream whose first lines arrive cold: the software prefetch runs ahead into the
// next block in memory, which with one block per item is usually another thread's item. So where a job
// streams (decode), a gemm1 item takes up to kStreamRunMax consecutive blocks of its expert, and when no
// job's down GEMM is tiled the gemm2 items are down groups (above) of as many blocks, expert by expert
// (fewer from M = 512 on: stream_run2_limit): each thread then walks runs of contiguous weights. As
// many as keep the items at least four (gemm1) or two (gemm2) per thread; MOERUN_CPU_STREAM_RUN=<n>
// overrides it (1: one block per item). The blocks and their epilogues are the same, so results do not
// depend on the runs. The cap is kStreamRunMax (8), and kLongRunMax (32) for jobs of at most
// kLongRunTokens (4) tokens (gemm2: when every job has so few). Side by side on qwen3-30b-a3b (session
// 37, with stream pairs, below), 32 against 8: one token bf16 1.01x, fp8-block 1.07x, mxfp4 / nvfp4
// 1.14-1.15x; 4 and 16 tokens fp8-block 1.07x, mxfp4 1.10-1.12x, bf16 1.01x. Runs of 32 for every
// streaming job tied or lost 2-5% in one of two A/B rounds at 64 tokens (gpt-oss-20b, deepseek-v2-lite;
// about 8 tokens per expert), hence the token bound; 2 and 4 tokens tied
// (bench/results/2026-12-05_s37_dev-xeon). At AMX, where every job is one token on the bf16 stream
// pairs (a bf16 or fp8 decode step; not the q8 pairs), the cap is a byte budget, kAmxPairRunBytesPerK
// (256 bytes per k step: 8 blocks of bf16, 16 of fp8), in gemm1 and gemm2. On the GPU host's Xeon
// (2 threads, alternated in one process): runs of 16 against 32 read fp8-block 6-7% and bf16 2-3%
// faster on qwen3-30b-a3b (sessions 46-47), mxfp4 / nvfp4 on the q8 pairs 3% slower (so not them);
// against 16, runs of 8 read bf16 faster again (session 47: qwen3-30b-a3b and deepseek-v2-lite 7%,
// gpt-oss-20b 0.5%; session 48: 3.4%, 4.2%, 2.0%, and qwen3 5.4% at 4 threads) but fp8-block 2.4%
// slower (2.8% at 4 threads); runs of 12 read bf16 4.1% / 8.4% faster (gpt-oss-20b 0.9% slower),
// fp8-block tied. So the best run is the same bytes in both formats, about 256 per k step (512 KiB at
// K = 2048); why that many is not measured. Notes: bench/results/2026-12-06_s46_gpu, 2026-12-06_s47_gpu
// and 2026-12-07_s48_gpu.
// Stream pairs: a one-token call that takes the bf16 stream or the AVX-512 q8 kernel runs two blocks
// of its run at once (KernelSet::stream2_bf16 / stream2_q8): blocks q and q + n / 2 of a run of n, so
// each of the two weight streams is itself contiguous (and an odd last block alone). One core then has
// two streams in flight: alone, one thread from memory, pairs far apart read fp8-block 14.3 against
// 13.3 GB/s and nvfp4 13.5 against 11.5 (adjacent blocks: no gain, since each stream's prefetch then
// runs into the other's block). The kernels give bitwise the one-block accumulators, so results do
// not depend on the pairing; MOERUN_CPU_STREAM_PAIRS=0 (measurement) turns them off.
// Tapered tail: with runs of up to 32 blocks a one-token gate_up item is 1-2 MB of weights (60-130
// us), and the dynamic schedule left the thread that finished first waiting for about half of one:
// at qwen3-30b-a3b one token, 2 threads, the slowest thread's busy time was 0.03-0.05 ms above the mean
// in gemm1 and 0.01-0.03 in gemm2 (MOERUN_CPU_PROFILE=1), 3-4% of the forward. So the last streaming
// items of gemm1 are cut smaller (work_items.hpp, taper_tail: the last `threads` at most run / 8
// blocks, the `threads` before run / 4, then run / 2). The blocks and their epilogues are the same, so
// results do not change (tests: StreamTaperAgreesBitwise); MOERUN_CPU_STREAM_TAPER=0 (measurement)
// keeps the runs whole. Side by side (session 38, three rounds): fp8-block and mxfp4 at one token
// 0.8-2.5% faster, bf16 and four tokens within the host's spread. gemm2's items tapered the same way
// (every job streaming) lost 1.4-2.6% at four tokens: each gemm2 item starts a stream per expert, so
// eight more items cost more starts than the imbalance they removed. Where some job's down GEMM is
// tiled, the down groups (below) are few and long instead (qwen3-30b-a3b M = 256: 8 items of 16 blocks
// for 2 threads, and the slowest thread 1.0 ms above the mean, session 51), so their tail can be
// tapered the same way, in whole calls (MOERUN_CPU_DOWN_TAPER=0, measurement, keeps them whole): each
// extra item re-reads the experts' intermediate rows once more (3 MB there, against 403 MB of weights).
// On the GPU host's Xeon (session 53, bf16, 2 threads, alternated in one process) the taper was 1.9% /
// 1.5% faster at M = 256 on qwen3-30b-a3b / deepseek-v2-lite and 2.3% at qwen3 M = 64, and tied at
// M = 1024 (bench/results/2026-12-07_s53_gpu); on the Zen 4 it tied (session 52, no imbalance there).
// AMX pairs: where a job's calls take AMX tiles, one tile_amx2 call computes two adjacent N-blocks (the
// last one alone when the count is odd), and a gemm1 item covers a run of such pairs (up to kTileRunMax
// blocks by the stream runs' rule, rounded down to whole pairs, at least one pair: the tiles read their
// weights straight from memory, so a run is one contiguous stream, as for the streaming kernels; side
// by side, runs of 8 blocks against one pair were 1-2.5% faster on the bf16 rows of qwen3-30b-a3b and
// deepseek-v2-lite at M = 16-1024, session 30. Since session 32 a tile call's last prefetches run on
// into the panels of the thread's next call (run_blocks' next; single-block calls, run_block, do not
// take it), so only an item's first call starts cold: runs of 48 against 8 were 0-2.6% faster on every
// bf16 row of those shapes and gpt-oss-20b at M = 4-1024, side by side, MOERUN_CPU_STREAM_RUN=8 being
// the old rule there); gemm2 calls cover two N-blocks of the hidden size when any job takes AMX
// tiles. Only when the single-block items number at least twice the threads (so pairs still give
// every thread an item), and not with MOERUN_CPU_AMX_NBLOCKS=1. Calls of up to 16 rows take four
// blocks at once where a run or down group holds them (tile_amx4: four weight streams per call;
// session 31, qwen3-30b-a3b bf16 side by side against pairs, MOERUN_CPU_AMX_NBLOCKS=2: see
// bench/results/2026-12-05_s31_dev-xeon/NOTES.md); larger calls of such a group run as two pairs. The
// epilogues run per block on the accumulators one block gets alone, and tile_amx2 and tile_amx4 give
// bitwise tile_amx's accumulators, so results do not depend on the grouping either.
// Job rows: a gemm1 item multiplies its N-blocks with all of its job's rows, in passes of 32 or 64,
// so the job's activation rows are read once per item and stay in L2 only while they fit: deepseek-
// v2-lite's shared experts at M = 1024 hold 1024 rows of 4 KiB (4 MiB, twice this machine's L2 per
// core), re-read from L3 by each of their 176 items. Jobs therefore hold at most KernelSet::job_rows
// (kJobRows = 256: 1 MiB at K = 2048) rows, an expert's rows split into balanced parts; the weights
// of a split expert are read once per part instead (a gemm1 item's panels, from memory each time).
// Parts of 128 or more rows take the same kernels as the whole (every stream cut is below), each
// row's result does not depend on the rows beside it in a tile pass, and the down stage adds a token's
// rows in job order, which the parts keep (an expert's rows stay in row order, also where a token names
// the expert in several slots), so results are bitwise the same (tests: JobRowsAgreeBitwise). Side by side on this
// development machine (2 threads, bf16): deepseek-v2-lite M = 1024 1.02-1.08x over five runs;
// gpt-oss-20b M = 256 / 1024 and deepseek-v2-lite M = 256 tie (few experts hold more than 256 rows).
// 128 rows lost 0.89x on gpt-oss-20b M = 1024 (128 rows per expert: its weights read twice).
// Row padding: X / Xb and Hb / Hbb rows are KernelSet::row_pad (kRowPad = 32) elements longer than
// their padded K. With K = 2048 (qwen3-30b-a3b, deepseek-v2-lite) bf16 rows lie 4 KiB apart, so the 16
// rows an AMX tile load (or a register group of the streaming kernels) reads share one L1 set of 12
// ways; one more cache line per row spreads them over 16 sets. Only addresses change, not results.
#include "backends/cpu/runner.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "moerun/error.hpp"
#include "moerun/formats.hpp"
#include "routing/topk.hpp"

namespace moerun::cpu {
namespace {

constexpr int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// Down groups (NOTES): the output-buffer budget of one gemm2 item, and the most calls per item.
constexpr int64_t kDownGroupOutBytes = 512 * 1024;
constexpr int64_t kDownGroupMaxCalls = 8;
constexpr int64_t kStreamRunMax = 8;  // stream runs (NOTES): at most this many blocks per item,
constexpr int64_t kLongRunMax = 32;    // ... or this many for jobs of at most kLongRunTokens tokens
constexpr int64_t kLongRunTokens = 4;
// ... or, at AMX where every job streams one token on the bf16 pairs, runs of at most this many bytes
// per k step (a block holds bytes_per_k of its format per k): 8 blocks of bf16, 16 of fp8
constexpr int kAmxPairRunBytesPerK = 256;
constexpr int64_t kTileRunMax = 48;   // ... and AMX tile runs (NOTES: AMX pairs)

// The most blocks per gemm2 stream run at M tokens: kLongRunMax, fewer where their [M][16] output buffers
// would pass kDownGroupOutBytes (the down groups' budget: from M = 256 on, so that the per-thread
// buffers sized for the worst routing stay within what they were with runs of 8).
int64_t stream_run2_limit(int64_t M) {
  return std::clamp<int64_t>(kDownGroupOutBytes / (std::max<int64_t>(M, 1) * 16 * 4), kDownGroupMaxCalls, kLongRunMax);
}

std::atomic<int64_t> g_bf16_intermediate_forwards{0};  // CpuRunner::bf16_intermediate_forwards

inline float bf16_bits_to_f32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  uint32_t u;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(man), -24);
    std::memcpy(&u, &v, 4);
    u |= sign;
  } else if (exp == 31) {
    u = sign | 0x7F800000u | (man << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_f16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {  // subnormal or zero in fp16: round(x * 2^24) to nearest even
    float v;
    std::memcpy(&v, &a, 4);
    const float s = v * 16777216.0f;
    const float r = std::nearbyint(s);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));
  }
  const uint32_t rounded = a + 0xFFFu + ((a >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

inline float load_act(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kBF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16: return f16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return 0.0f;
  }
}
inline void store_act(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(p)[i] = v; break;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16_bits(v); break;
    case DType::kF16: static_cast<uint16_t*>(p)[i] = f32_to_f16_bits(v); break;
    default: break;
  }
}

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
static_assert(static_cast<int>(ActivationKind::kSiluAndMul) == static_cast<int>(kernels::Act::kSiluMul) &&
                  static_cast<int>(ActivationKind::kGeluAndMul) == static_cast<int>(kernels::Act::kGeluMul) &&
                  static_cast<int>(ActivationKind::kGeluTanhAndMul) == static_cast<int>(kernels::Act::kGeluTanhMul) &&
                  static_cast<int>(ActivationKind::kSwigluOai) == static_cast<int>(kernels::Act::kSwigluOai) &&
                  static_cast<int>(ActivationKind::kRelu2) == static_cast<int>(kernels::Act::kRelu2) &&
                  static_cast<int>(ActivationKind::kSilu) == static_cast<int>(kernels::Act::kSilu),
              "kernels::Act mirrors ActivationKind value for value (the epilogue casts one to the other)");

LaneMap w13_map(const Activation& a) {
  if (!a.gated()) return LaneMap::kPlain;
  return a.interleaved_gate_up ? LaneMap::kGatedInterleaved : LaneMap::kGatedSplit;
}

std::vector<float> copy_f32(const HostTensor& t) {
  if (t.empty()) return {};
  const float* p = t.as<const float>();
  return std::vector<float>(p, p + t.shape().numel());
}

// Concurrent forwards share the machine: each takes cores / (forwards in flight) threads.
std::atomic<int> g_active_forwards{0};
struct ActiveGuard {
  int n;
  ActiveGuard() : n(++g_active_forwards) {}
  ~ActiveGuard() { --g_active_forwards; }
};

// The stacks against the spec: create_runner may be called without MoeLayer's check_weights, and a
// stack of another format than the spec's would be packed for one kernel set and read by another.
// Canonical stacks get check_weights in full; a stack this backend packed before carries the shapes
// packed_of checked, and is held to the spec's dims after packing (the constructor), and the other
// tensors (biases, router) are checked either way: the forward reads them by the spec's sizes.
void check_stacks(const MoeSpec& spec, const MoeWeights& w) {
  check_weights_on_host(w, "cpu backend");
  // Shared stacks pack with the code layout of the routed format's kernel set (an AVX2 4-bit layer's
  // VNNI words, which that level's fp8 kernels do not read): only formats without codes may differ
  // (cpu_backend.cpp, Capabilities::shared_formats).
  const WeightFormat sf = spec.shared_weight_format();
  if (spec.mixed_formats() && !is_unquantized(sf))
    throw_error(ErrorKind::kUnsupported, "cpu backend: shared experts in " + std::string(to_string(sf)) + " beside " +
                                             std::string(to_string(spec.weight_format)) +
                                             " routed experts (shared experts may differ from the routed ones only "
                                             "in f32, f16 or bf16): " + spec.summary());
  bool canonical = true;
  for (const ExpertMatrix* m : {&w.w13, &w.w2, &w.shared_w13, &w.shared_w2}) {
    if (m->empty()) continue;
    canonical = canonical && m->layout == "canonical";
    const bool shared = m == &w.shared_w13 || m == &w.shared_w2;
    const WeightFormat want = shared ? spec.shared_weight_format() : spec.weight_format;
    if (m->format != want)
      throw_error(ErrorKind::kFormat, "cpu backend: a " + std::string(to_string(m->format)) + " " +
                                          (shared ? "shared" : "routed") + " weight stack for a spec with " +
                                          std::string(to_string(want)) + " ones: " + spec.summary());
  }
  if (canonical) check_weights(spec, w);
  else check_weight_tensors(spec, w);
}
}  // namespace

CpuRunner::CpuRunner(const MoeSpec& spec, const MoeWeights& w, const RunnerOptions& options, CpuIsa isa)
    : spec_(spec), options_(options), ks_(kernels_for_spec(spec, isa)) {
  el_ = local_experts(spec);
  il_ = local_intermediate(spec);
  h_ = spec.hidden;
  hp_ = round_up(h_, kernels::kKAlign);
  ilp_ = round_up(il_, kernels::kKAlign);
  // The AMX paths make their bf16 panels with kernels::panel_bf16_vnni, which reproduces
  // dequant_panel_avx512 on VNNI-word codes: a kernel set that pairs AMX with anything else is a bug.
  if (ks_.amx && (ks_.panel != kernels::dequant_panel_avx512 || ks_.code_layout != kernels::CodeLayout::kVnniWords))
    throw_error(ErrorKind::kInternal, "cpu backend: AMX kernel set without the AVX-512 panels panel_bf16_vnni mirrors");
  check_stacks(spec, w);
  w13_ = packed_of(w.w13, w13_map(spec.activation), ks_.code_layout);
  w2_ = packed_of(w.w2, LaneMap::kPlain, ks_.code_layout);
  if (w13_->experts != el_ || w13_->outputs != il_ || w13_->cols != h_ || w2_->experts != el_ ||
      w2_->rows != h_ || w2_->cols != il_)
    throw_error(ErrorKind::kInvalidArgument, "cpu backend: weight stacks do not match the spec " + spec.summary());
  // Shared experts: every EP rank sees every token and rank outputs are summed, so only the first EP
  // rank of each tp group (rank % ep == 0) adds its tp slice of them (weights.hpp).
  if (spec.shared.count > 0 && spec.parallel.rank % spec.parallel.ep == 0) {
    is_ = static_cast<int>(w.shared_w2.cols);
    isp_ = round_up(is_, kernels::kKAlign);
    const bool gated = w.shared_w13.rows == 2 * static_cast<int64_t>(is_);
    sw13_ = packed_of(w.shared_w13, gated ? LaneMap::kGatedSplit : LaneMap::kPlain, ks_.code_layout);
    sw2_ = packed_of(w.shared_w2, LaneMap::kPlain, ks_.code_layout);
    if (sw13_->experts != 1 || sw13_->cols != h_ || sw13_->outputs != is_ || sw2_->experts != 1 || sw2_->rows != h_)
      throw_error(ErrorKind::kInvalidArgument, "cpu backend: shared expert stacks do not match the spec " + spec.summary());
    shared_act_ = gated ? (spec.activation.gated() ? spec.activation.kind : ActivationKind::kSiluAndMul)
                        : spec.activation.kind;
    if (spec.shared.gated_by_router) shared_gate_ = copy_f32(w.shared_gate);
  }
  if (spec.expert_bias) {
    w13_bias_ = copy_f32(w.w13_bias);
    w2_bias_ = copy_f32(w.w2_bias);
    add_w2_bias_ = tp_rank(spec) == 0;
  }
  router_w_ = copy_f32(w.router_weight);
  if (spec.router_bias) router_b_ = copy_f32(w.router_bias);
  if (spec.routing.correction_bias) corr_b_ = copy_f32(w.correction_bias);
  if (ForwardProfile::requested()) prof_ = std::make_unique<ForwardProfile>();
}

CpuRunner::~CpuRunner() {
  if (!prof_) return;
  const int64_t m = prof_->mean_tokens();
  const std::string r = prof_->report(spec_.summary() + ", " + variant_name(spec_, ks_, w13_->fmt, m) + " by the rule");
  if (!r.empty()) std::fputs(r.c_str(), stderr);
}

std::string variant_name(const MoeSpec& spec, const KernelSet& ks, kernels::PackFmt fmt, int64_t m) {
  const double per_expert = static_cast<double>(m) * spec.top_k / std::max(1, spec.num_experts);
  if (per_expert <= ks.stream_max(fmt)) {
    if (ks.uses_q8_stream(fmt) && per_expert <= ks.stream_max_m_q8)
      return std::string(ks.isa == CpuIsa::kAvx2 ? "avx2-" : "avx512vnni-") +
             (ks.q8_rows_per_token == 2 ? "q15-stream" : "q8-stream");
    if (!ks.uses_bf16_stream(fmt)) return ks.prefix + "-stream";
    // stream_amx_bf16 leaves one-token calls to the VDPBF16PS kernel: name the kernel most calls take.
    return ks.amx_stream && kernels::amx_stream_native(fmt) && per_expert > 1.0 ? "amx-bf16-stream"
                                                                               : "avx512bf16-stream";
  }
  return ks.amx ? "amx-bf16-tiles" : ks.prefix + "-tiled";
}

KernelSet kernels_for_spec(const MoeSpec& spec, CpuIsa isa) {
  KernelSet ks = kernels_for(isa);
  // AMX tiles and the bf16 streaming kernel multiply bf16 operands, so only layers whose activations
  // are bf16 take them. Even there the intermediate (and X after weight-on-input scaling or fp8
  // fake-quant) is rounded to bf16 before its GEMM, as the GPU backends do and as the conformance
  // tolerance for bf16 activations allows.
  if (spec.act_dtype != DType::kBF16) {
    ks.amx = false;
    ks.stream_bf16 = nullptr;
    ks.stream2_bf16 = nullptr;
  }
  // The q8 kernel computes with the int8 codes themselves: layers that quantize to them take it, and
  // 4-bit layers with bf16 activations hold theirs at 15 bits in two int8 rows (isa.hpp q8_rows_per_token).
  const bool fp4 = spec.weight_format == WeightFormat::kMxfp4 || spec.weight_format == WeightFormat::kNvfp4;
  const bool vnni_level = isa == CpuIsa::kAvx2 || isa == CpuIsa::kAvx512Bf16 || isa == CpuIsa::kAmx;
  if (spec.act_quant == ActQuant::kInt8PerTokenGroup) {
    if (isa == CpuIsa::kAvx2 && q8_stream_enabled()) {
      // The AVX2 stream decoders read e2m1 codes per k (CodeLayout::kPerK) and the q8 kernel reads VNNI
      // words: such a layer is packed in VNNI words and every call takes the q8 kernel (no crossover,
      // whatever MOERUN_CPU_STREAM_MAX_TOKENS says), so no other AVX2 kernel ever meets its weights.
      ks.stream_q8 = kernels::stream_q8_avx2;
      ks.stream = kernels::stream_avx2_vnni;  // (never reached for its codes: a NaN guard)
      ks.code_layout = kernels::CodeLayout::kVnniWords;
      ks.stream_max_m_q8 = std::numeric_limits<int>::max();
    }
  } else if (fp4 && spec.act_quant == ActQuant::kNone && spec.act_dtype == DType::kBF16 && vnni_level &&
             q15_stream_enabled()) {
    const int q15_cut = q15_max_tokens_override();
    const int cut = q15_cut >= 1 ? q15_cut : stream_max_tokens_override();
    ks.q8_rows_per_token = 2;
    if (isa == CpuIsa::kAvx2) {
      // Packed in VNNI words too; calls past the cut take f32 panels decoded from them, and no f32
      // streaming call may meet them, so the f32 stream's cut is held at or below the q8 kernel's.
      ks.stream_q8 = kernels::stream_q8_avx2;
      ks.stream = kernels::stream_avx2_vnni;  // (never reached for its codes: a NaN guard)
      ks.code_layout = kernels::CodeLayout::kVnniWords;
      ks.panel = kernels::dequant_panel_avx2_vnni;
      ks.stream_max_m_q8 = cut >= 0 ? cut : q15_stream_max(isa, 0.0);
      ks.stream_max_m = std::min(ks.stream_max_m, ks.stream_max_m_q8);
      if (q15_join_enabled()) {
        ks.stream_q8 = kernels::stream_q15_avx2;
        ks.q8_joins_rows = true;
      }
    } else {
      ks.stream_q8 = kernels::stream_q8_avx512vnni;  // these levels pack VNNI words anyway
      ks.stream_max_m_q8 = cut >= 0 ? cut : q15_stream_max(isa, detected_features().bf16_dot_rate);
      if (q15_join_enabled()) {
        ks.stream_q8 = kernels::stream_q15_avx512vnni;
        ks.q8_joins_rows = true;
      }
    }
  } else {
    ks.stream_q8 = nullptr;
  }
  // (the pair kernels go with the AVX-512 q8 / q15 kernels only, wherever the choices above left them)
  ks.stream2_q8 = nullptr;
  if (stream_pairs_enabled() && ks.stream_q8 == kernels::stream_q8_avx512vnni)
    ks.stream2_q8 = kernels::stream2_q8_avx512vnni;
  if (stream_pairs_enabled() && ks.stream_q8 == kernels::stream_q15_avx512vnni)
    ks.stream2_q8 = kernels::stream2_q15_avx512vnni;
  return ks;
}

int64_t CpuRunner::bf16_intermediate_forwards() noexcept {
  return g_bf16_intermediate_forwards.load(std::memory_order_relaxed);
}

std::string CpuRunner::variant_for(int64_t m) const { return variant_name(spec_, ks_, w13_->fmt, m); }

bool CpuRunner::takes_amx(kernels::PackFmt f, int64_t m) const noexcept {
  return ks_.amx && m >= kAmxTileMinRows && m > ks_.stream_max(f);  // run_block's order: stream first, then AMX
}

bool CpuRunner::takes_amx4(const PackedStack& w, int64_t m) const noexcept {
  return ks_.amx_nblocks == 4 && m <= kernels::kAmxQuadMaxRows && w.kp <= kernels::kAmxQuadMaxK && takes_amx(w.fmt, m);
}

CpuRunner::CallPath CpuRunner::call_path(kernels::PackFmt f, int64_t m, bool q8_rows, bool bf16_rows) const noexcept {
  if (m <= ks_.stream_max(f)) {
    if (q8_rows && ks_.uses_q8_stream(f) && m <= ks_.stream_max_m_q8) return CallPath::kQ8Stream;
    return bf16_rows && ks_.uses_bf16_stream(f) ? CallPath::kBf16Stream : CallPath::kF32Stream;
  }
  return takes_amx(f, m) && bf16_rows ? CallPath::kAmxTiles : CallPath::kF32Tiles;
}

kernels::BlockRef CpuRunner::call_block(const PackedStack& w, int64_t e, int64_t b, CallPath path, int64_t m) const {
  kernels::BlockRef ref = w.block(e, b);
  ref.prefetch = path == CallPath::kBf16Stream ? ks_.bf16_stream_prefetch(ref.fmt, m) : ks_.prefetch;
  ref.prefetch_l2 = path == CallPath::kBf16Stream ? ks_.bf16_stream_prefetch_l2(m) : ks_.prefetch_l2;
  ref.e8m0_fold = ref.e8m0_fold && ks_.e8m0_fold;
  return ref;
}

void CpuRunner::sum_q15_rows(float* acc, int m) const {
  if (ks_.q8_rows_per_token != 2 || ks_.q8_joins_rows) return;
  for (int i = 0; i < m; ++i)  // a token's high and low rows: their sum, into the token's place (row i <= 2i)
    for (int l = 0; l < 16; ++l) acc[i * 16 + l] = acc[2 * i * 16 + l] + acc[(2 * i + 1) * 16 + l];
}

void CpuRunner::run_block(const PackedStack& w, int64_t e, int64_t b, const float* x, const uint16_t* xb,
                          const kernels::Q8Rows* q8, int64_t ldx, int64_t m, Scratch& s, float* acc) const {
  const int mi = static_cast<int>(m);
  const CallPath path = call_path(w.fmt, m, q8 != nullptr, xb != nullptr);
  kernels::BlockRef ref = call_block(w, e, b, path, m);
  if (path == CallPath::kQ8Stream) {
    ks_.stream_q8(ref, *q8, ks_.q8_call_count(mi), acc);
    return sum_q15_rows(acc, mi);
  }
  if (path == CallPath::kBf16Stream) return ks_.stream_bf16(ref, xb, ldx, mi, acc);
  if (path == CallPath::kF32Stream) return ks_.stream(ref, x, ldx, mi, acc);
  if (path == CallPath::kAmxTiles) {
    const uint16_t* panel;
    if (ref.fmt == kernels::PackFmt::kBF16) {
      panel = reinterpret_cast<const uint16_t*>(ref.data);
    } else {  // ks_.panel is dequant_panel_avx512 wherever AMX runs: panel_bf16_vnni gives its bf16 values
      uint16_t* pb = s.panel_bf16.get(static_cast<size_t>(w.kp * 16));
      kernels::panel_bf16_vnni(ref, pb);
      panel = pb;
    }
    kernels::tile_amx(panel, w.kp, xb, ldx, mi, acc, ks_.amx_prefetch);
    return;
  }
  float* panel = s.panel.get(static_cast<size_t>(w.kp * 16));
  ks_.panel(ref, panel);
  ks_.tile(panel, w.kp, x, ldx, mi, acc);
}

bool CpuRunner::takes_stream_pairs(kernels::PackFmt f, int64_t m, bool q8_rows, bool bf16_rows) const noexcept {
  if (m != 1) return false;
  const CallPath p = call_path(f, m, q8_rows, bf16_rows);
  return (p == CallPath::kBf16Stream && ks_.stream2_bf16 != nullptr) || (p == CallPath::kQ8Stream && ks_.stream2_q8 != nullptr);
}

void CpuRunner::run_pair(const PackedStack& w, int64_t e, int64_t b0, int64_t b1, const uint16_t* xb,
                         const kernels::Q8Rows* q8, float* acc0, float* acc1) const {
  const CallPath path = call_path(w.fmt, 1, q8 != nullptr, xb != nullptr);
  kernels::BlockRef r0 = call_block(w, e, b0, path, 1), r1 = call_block(w, e, b1, path, 1);
  if (path == CallPath::kBf16Stream) {
    // (isa.hpp: kAmxPairPrefetchBytes; a run's odd block, alone in run_block, is one stream and keeps
    // the streams' distance)
    r0.prefetch = r1.prefetch = ks_.pair_prefetch;
    r0.prefetch_l2 = r1.prefetch_l2 = ks_.pair_prefetch_l2;  // (isa.hpp: kPairPrefetchL2Bytes)
    return ks_.stream2_bf16(r0, r1, xb, acc0, acc1);
  }
  ks_.stream2_q8(r0, r1, *q8, ks_.q8_call_count(1), acc0, acc1);
  sum_q15_rows(acc0, 1);
  sum_q15_rows(acc1, 1);
}

void CpuRunner::run_blocks(const PackedStack& w, int64_t e, int64_t b, int nb, const float* x, const uint16_t* xb,
                           const kernels::Q8Rows* q8, int64_t ldx, int64_t m, Scratch& s, float* acc,
                           int64_t acc_stride, const void* next) const {
  if (nb >= 2 && xb != nullptr && takes_amx(w.fmt, m)) {  // (nb <= 4: the AMX block groups, NOTES)
    const size_t pn = static_cast<size_t>(w.kp * 16);
    const uint16_t* panels[4];
    for (int q = 0; q < nb; ++q) {
      const kernels::BlockRef ref = w.block(e, b + q);
      if (ref.fmt == kernels::PackFmt::kBF16) {
        panels[q] = reinterpret_cast<const uint16_t*>(ref.data);
      } else {
        uint16_t* pb = s.panel_bf16.get(4 * pn) + q * pn;  // the panels side by side
        kernels::panel_bf16_vnni(ref, pb);
        panels[q] = pb;
      }
    }
    const int mi = static_cast<int>(m);
    // The prefetches' next panels (kernels.hpp, next_step): a call's own next pair, else the next call's
    // blocks in the same order (bf16 stacks only: converted panels are the scratch's, not a stream).
    // Panel q goes on to the next call's panel q at this stack's panel stride, even where the next call
    // has fewer blocks or is on the shared stack: a few KiB prefetched in vain, never a wrong value.
    const bool direct = w.fmt == kernels::PackFmt::kBF16 && ks_.amx_prefetch_next;
    const int64_t to_next = direct && next != nullptr
                                ? (reinterpret_cast<intptr_t>(next) - reinterpret_cast<intptr_t>(panels[0])) / 2
                                : 0;
    const auto step_after = [&](int q) -> int64_t {  // for the call on blocks q.. that ends before block q + 2
      if (q + 2 < nb) return direct ? 2 * static_cast<int64_t>(pn) : 0;
      return to_next == 0 ? 0 : to_next - q * static_cast<int64_t>(pn);
    };
    if (nb == 4 && takes_amx4(w, m)) {
      kernels::tile_amx4(panels, w.kp, xb, ldx, mi, acc, acc_stride, ks_.amx_prefetch, to_next);
      return;
    }
    int q = 0;
    for (; q + 2 <= nb; q += 2)
      kernels::tile_amx2(panels[q], panels[q + 1], w.kp, xb, ldx, mi, acc + q * acc_stride, acc + (q + 1) * acc_stride,
                         ks_.amx_prefetch, step_after(q));
    if (q < nb) kernels::tile_amx(panels[q], w.kp, xb, ldx, mi, acc + q * acc_stride, ks_.amx_prefetch, step_after(q));
    return;
  }
  for (int q = 0; q < nb; ++q) run_block(w, e, b + q, x, xb, q8, ldx, m, s, acc + q * acc_stride);
}

void CpuRunner::forward(const ForwardArgs& args) {
  const int64_t M = args.hidden.shape.rank > 0 ? args.hidden.shape[0] : 0;
  if (M == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  ActiveGuard active;
  const WorkspacePool::Lease lease = WorkspacePool::process().acquire();
  Workspace& ws = *lease;

  // ---- threads: requested (or all), never more than this forward's share of the cores ----
  const int procs = std::max(1, omp_get_num_procs());
  const int requested = std::clamp(options_.threads > 0 ? options_.threads : omp_get_max_threads(), 1, procs);
  int threads = std::min(requested, std::max(1, procs / std::max(1, active.n)));
  if (omp_in_parallel()) threads = 1;
  // The per-thread scratch grows for the requested threads whatever this call runs on: the share of the
  // cores falls while other forwards run, and a later call alone on a workspace warmed up meanwhile
  // must not allocate for the threads it gets back.
  const int scratch_threads = std::max(threads, requested);
  if (static_cast<int>(ws.scratch.size()) < scratch_threads) ws.scratch.resize(static_cast<size_t>(scratch_threads));
  ForwardProfile* const pf = prof_ && prof_->begin(threads, M) ? prof_.get() : nullptr;

  const int E = spec_.num_experts, k = spec_.top_k, H = h_;
  const DType adt = spec_.act_dtype;
  const bool on_input = spec_.apply_router_weight_on_input;
  const ActQuant aq = spec_.act_quant;
  const ActQuant saq = spec_.shared_act_quant();  // the shared rows' (rows R.. below): none where their format refuses aq

  // ---- hidden -> f32 [M][hp], for the stages that read f32 hidden rows: the router, expert rows the
  // bf16 kernels do not take as they are, the shared gate (bf16 rows bound for the bf16 kernels are
  // copied as they are, below). Before the routing only when the runner computes the logits itself. ----
  // Workspaces whose use depends on the call (input mode, routing, kernel path) grow on every call all
  // the same, so that after one call of M tokens no call of up to M tokens at the same thread count
  // allocates (tests/alloc): the hidden rows' f32 copy, the routing's outputs and scratch here; the
  // rows of a forward are bounded by M * k (+ M shared) whatever the routing and expert parallelism.
  const int64_t rows_cap = M * k + (sw13_ != nullptr ? M : 0);
  float* hid = nullptr;
  float* const hid_rows = ws.hid.get(static_cast<size_t>(M * hp_));
  int32_t* const topi = ws.topi.get(static_cast<size_t>(M * k));
  float* const topw = ws.topw.get(static_cast<size_t>(M * k));
  float* const logits_rows = router_w_.empty() ? nullptr : ws.logits.get(static_cast<size_t>(M * E));
  for (int t = 0; t < scratch_threads; ++t) ws.scratch[static_cast<size_t>(t)].topk.reserve(E, spec_.routing.n_group);
  ws.disp.reserve(rows_cap);
  const auto convert_hidden = [&] {
    hid = hid_rows;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t t = 0; t < M; ++t) {
      float* d = hid + t * hp_;
      for (int64_t c = 0; c < H; ++c) d[c] = load_act(args.hidden.data, adt, t * H + c);
      for (int64_t c = H; c < hp_; ++c) d[c] = 0.0f;
    }
    if (pf) pf->mark(Phase::kConvert);
  };
  const bool own_logits = args.topk_ids.empty() && args.router_logits.empty();
  if (own_logits) convert_hidden();

  // ---- routing ----
  const int32_t* ids;
  const float* tw;
  if (!args.topk_ids.empty()) {
    ids = args.topk_ids.as<const int32_t>();
    tw = args.topk_weights.as<const float>();
  } else {
    const float* logits;
    if (!args.router_logits.empty()) {
      logits = args.router_logits.as<const float>();
    } else {
      if (router_w_.empty())
        throw_error(ErrorKind::kInvalidArgument, "cpu backend: no router_logits, topk ids or router weight given");
      float* lg = logits_rows;
      const float* rw = router_w_.data();
      const float* rb = router_b_.empty() ? nullptr : router_b_.data();
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int64_t t = 0; t < M; ++t)
        for (int e = 0; e < E; ++e) {
          // Same math as routing::router_logits_host (double, bias first) so expert choices agree.
          double s = rb ? rb[e] : 0.0;
          const float* wr = rw + static_cast<int64_t>(e) * H;
          for (int64_t c = 0; c < H; ++c) s += static_cast<double>(hid[t * hp_ + c]) * wr[c];
          lg[t * E + e] = static_cast<float>(s);
        }
      logits = lg;
    }
    int32_t* ti = topi;
    float* tf = topw;
    // Tokens route independently: one chunk of them per thread.
    const int64_t chunk = (M + threads - 1) / threads;
    const float* cb = corr_b_.empty() ? nullptr : corr_b_.data();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int c = 0; c < threads; ++c) {
      const int64_t t0 = c * chunk, n = std::min(chunk, M - t0);
      if (n > 0)
        routing::topk_host(spec_, logits + t0 * E, n, cb, ti + t0 * k, tf + t0 * k,
                           ws.scratch[static_cast<size_t>(c)].topk);
    }
    ids = ti;
    tw = tf;
  }
  if (pf) pf->mark(Phase::kRoute);

  // ---- dispatch and jobs ----
  dispatch::build_dispatch(spec_, ids, tw, M, ws.disp);
  const int64_t R = ws.disp.rows();
  // An expert's rows in jobs of at most job_rows (NOTES: job rows), so that the rows one gemm1 item
  // multiplies stay in L2 across its passes. The bound on their count follows M, not the routing:
  // growing here once for M, no later call of up to M tokens allocates.
  const int64_t job_rows = ks_.job_rows > 0 ? ks_.job_rows : rows_cap + 1;
  std::vector<Job>& jobs = ws.jobs;
  std::vector<Item>& items1 = ws.items1;
  {
    const size_t max_jobs = static_cast<size_t>(el_ + 1 + rows_cap / job_rows + 1);
    if (jobs.capacity() < max_jobs) jobs.reserve(max_jobs);
    const size_t max_items = max_jobs * static_cast<size_t>(std::max<int64_t>(w13_->nblocks, sw13_ ? sw13_->nblocks : 0));
    if (items1.capacity() < max_items) items1.reserve(max_items);
  }
  jobs.clear();
  auto add_jobs = [&](bool shared, int e, int64_t row0, int64_t m) {
    const int64_t n = std::max<int64_t>(1, (m + job_rows - 1) / job_rows);  // balanced parts
    for (int64_t p = 0, r = row0; p < n; ++p) {
      const int64_t mp = m / n + (p < m % n ? 1 : 0);
      jobs.push_back(Job{shared, e, r, mp});
      r += mp;
    }
  };
  for (int e = 0; e < el_; ++e)
    if (ws.disp.count(e) > 0) add_jobs(false, e, ws.disp.offsets[static_cast<size_t>(e)], ws.disp.count(e));
  const bool has_shared = sw13_ != nullptr;
  if (has_shared) add_jobs(true, 0, R, M);
  const int64_t rows = R + (has_shared ? M : 0);
  const int64_t ipmax = std::max(ilp_, isp_);

  // Work items (see NOTES: AMX pairs). Pairing needs at least two single-block items per thread.
  int64_t singles1 = 0;
  for (const Job& j : jobs) singles1 += j.shared ? sw13_->nblocks : w13_->nblocks;
  const bool pair1 = ks_.amx_nblocks >= 2 && singles1 >= 2 * static_cast<int64_t>(threads);
  const auto run_up_to = [&](int64_t most) {  // blocks per gemm1 item: at least four items per thread
    return ks_.stream_run > 0 ? ks_.stream_run : std::clamp<int64_t>(singles1 / (4 * threads), 1, most);
  };
  // A job's two weight formats: gate_up's and down's.
  const auto job_fmts = [&](const Job& j) {
    return std::array<kernels::PackFmt, 2>{j.shared ? sw13_->fmt : w13_->fmt, j.shared ? sw2_->fmt : w2_->fmt};
  };
  // A job whose calls take the q8 kernel (its rows are packed as q8 rows below).
  const auto q8_job = [&](const Job& j) {
    const auto [f1, f2] = job_fmts(j);
    return ks_.stream_q8 != nullptr && j.m <= ks_.stream_max_m_q8 && (ks_.uses_q8_stream(f1) || ks_.uses_q8_stream(f2));
  };
  // (NOTES: stream runs) at AMX, runs of at most kAmxPairRunBytesPerK where every job is one token on the
  // bf16 stream pairs
  const bool pair_decode = ks_.amx && ks_.stream2_bf16 != nullptr && std::all_of(jobs.begin(), jobs.end(), [&](const Job& j) {
    const auto [f1, f2] = job_fmts(j);
    return j.m == 1 && !q8_job(j) && ks_.uses_bf16_stream(f1) && ks_.uses_bf16_stream(f2);
  });
  int64_t long_run_max = kLongRunMax;
  if (pair_decode) {
    for (const Job& j : jobs)
      for (const kernels::PackFmt f : job_fmts(j))
        long_run_max = std::min<int64_t>(long_run_max, std::max(1, kAmxPairRunBytesPerK / kernels::bytes_per_k(f)));
  }
  const int64_t run1 = run_up_to(kStreamRunMax), long_run1 = run_up_to(long_run_max), tile_run1 = run_up_to(kTileRunMax);
  items1.clear();
  for (size_t j = 0; j < jobs.size(); ++j) {
    const PackedStack& w = jobs[j].shared ? *sw13_ : *w13_;
    const int64_t nb = w.nblocks;
    const int64_t step = jobs[j].m <= ks_.stream_max(w.fmt) ? (jobs[j].m <= kLongRunTokens ? long_run1 : run1)
                         : pair1 && takes_amx(w.fmt, jobs[j].m) ? std::max<int64_t>(2, tile_run1 & ~int64_t{1})
                                                                  : 1;
    for (int64_t b = 0; b < nb; b += step)
      items1.push_back(Item{static_cast<int32_t>(j), static_cast<int32_t>(b), static_cast<int32_t>(std::min(step, nb - b))});
  }
  if (ks_.stream_taper && threads > 1) {  // (NOTES: tapered tail) the streaming items' runs
    taper_tail(items1, threads, long_run1, 2, [&](const Item& it) {
      const Job& j = jobs[static_cast<size_t>(it.job)];
      return j.m <= ks_.stream_max(j.shared ? sw13_->fmt : w13_->fmt);
    });
  }
  bool amx2 = false, tiled2 = false;  // some job's down GEMM takes AMX tiles / any tiles (not streaming)
  for (const Job& j : jobs) {
    const kernels::PackFmt f = j.shared ? sw2_->fmt : w2_->fmt;
    amx2 = amx2 || takes_amx(f, j.m);
    tiled2 = tiled2 || j.m > ks_.stream_max(f);
  }
  const int64_t pair2 = ks_.amx_nblocks >= 2 && amx2 && w2_->nblocks >= 2 * static_cast<int64_t>(threads) ? 2 : 1;
  // Down groups (NOTES): calls of per2 blocks per gemm2 item, so an expert's intermediate rows are read
  // from memory once per group instead of once per call.
  int64_t group2 = 1;
  const int64_t stream_run2_max = stream_run2_limit(M);  // (the workspace's bound below, for any routing)
  const bool few_tokens2 = std::all_of(jobs.begin(), jobs.end(), [](const Job& j) { return j.m <= kLongRunTokens; });
  if (tiled2) {
    if (ks_.down_group > 0) {
      group2 = std::max<int64_t>(1, ks_.down_group / pair2);
    } else {
      const int64_t by_buffer = std::max<int64_t>(1, kDownGroupOutBytes / (M * 16 * 4) / pair2);
      const int64_t by_items = std::max<int64_t>(1, w2_->nblocks / (pair2 * 2 * threads));
      group2 = std::min({by_buffer, by_items, kDownGroupMaxCalls});
    }
  } else {  // every job streams: stream runs (NOTES)
    group2 = ks_.stream_run > 0 ? ks_.stream_run
                                : std::clamp<int64_t>(w2_->nblocks / (2 * threads), 1,
                                                      few_tokens2 ? std::min(stream_run2_max, long_run_max) : kStreamRunMax);
  }
  const int64_t blocks_per_item2 = pair2 * group2;
  // Blocks per down call: the pairs' groups of four where AMX may take four (calls of up to 16 rows
  // take tile_amx4, larger ones two pairs: run_blocks), within an item's blocks.
  const int64_t per2 = pair2 == 2 && ks_.amx_nblocks == 4 && w2_->kp <= kernels::kAmxQuadMaxK && blocks_per_item2 >= 4
                           ? 4
                           : pair2;
  // The down items: groups of blocks_per_item2 blocks, the last ones tapered where the groups are tiled
  // calls (NOTES: tapered tail); pieces stay whole calls of per2 blocks.
  std::vector<Item>& items2 = ws.items2;
  if (items2.capacity() < static_cast<size_t>(w2_->nblocks)) items2.reserve(static_cast<size_t>(w2_->nblocks));
  items2.clear();
  for (int64_t b = 0; b < w2_->nblocks; b += blocks_per_item2)
    items2.push_back(Item{0, static_cast<int32_t>(b), static_cast<int32_t>(std::min(blocks_per_item2, w2_->nblocks - b))});
  if (ks_.down_taper && tiled2 && threads > 1)
    taper_tail(items2, threads, blocks_per_item2, per2, [](const Item&) { return true; });
  const auto nitems2 = static_cast<int64_t>(items2.size());

  // ---- workspaces (grow only) ----
  // Row strides of X / Xb and Hb / Hbb: padded so that the rows of one A tile (or register group) fall
  // into different L1 sets (NOTES: row padding).
  const int64_t ldx = hp_ + ks_.row_pad, ldh = ipmax + ks_.row_pad;
  // The most rows a job can hold: an expert's rows are one per slot that names it, up to M x top_k when
  // tokens repeat an expert in their slots (the ids come as given), the shared job's M; and no job holds
  // more than job_rows. Workspaces are sized by that bound, not by this call's largest job, so that after
  // one call no call of as many tokens allocates, however its tokens route.
  const int64_t max_m = std::min(std::max<int64_t>(M * k, M), job_rows);
  // acc: [4][max_m][16] (one per block of a call: up to four with AMX; 15-bit q8 rows take two rows a
  // token); out: [blocks per item][M][16]
  const int64_t acc_stride = max_m * 16 * ks_.q8_rows_per_token;
  for (int t = 0; t < scratch_threads; ++t) {
    ws.scratch[static_cast<size_t>(t)].acc.get(static_cast<size_t>(4 * acc_stride));
    // (by the most blocks a gemm2 item can hold, which the routing decides: see the down groups)
    ws.scratch[static_cast<size_t>(t)].out.get(static_cast<size_t>(
        2 * std::max<int64_t>({kDownGroupMaxCalls, stream_run2_max, ks_.down_group, ks_.stream_run}) * M * 16));
    const int64_t kpmax = std::max(hp_, ipmax);
    ws.scratch[static_cast<size_t>(t)].panel.get(static_cast<size_t>(kpmax * 16));
    if (ks_.amx) ws.scratch[static_cast<size_t>(t)].panel_bf16.get(static_cast<size_t>(4 * kpmax * 16));
  }
  // bf16 copies of X and H for AMX tiles and the bf16 streaming kernel (bf16 layers only: kernels_for_spec).
  const bool want_bf16 = ks_.amx || ks_.stream_bf16 != nullptr;
  uint16_t* Xb = want_bf16 ? ws.xb.get(static_cast<size_t>((rows_cap + 16) * ldx)) : nullptr;
  uint16_t* Hbb = want_bf16 ? ws.hb.get(static_cast<size_t>((rows_cap + 16) * ldh)) : nullptr;
  float* gate = nullptr;
  if (has_shared && !shared_gate_.empty()) gate = ws.gate.get(static_cast<size_t>(M));
  // q8 rows (int8 activation codes, or 15-bit rows) for the jobs whose calls take the q8 kernel; only
  // their rows are packed (a prefill forward may hold a few such jobs among many tiled ones).
  bool q8 = false;
  uint8_t* q8_row = nullptr;
  if (ks_.stream_q8 != nullptr) {
    uint8_t* qr = ws.q8_row.get(static_cast<size_t>(rows_cap));  // (grown on every call: see xq below)
    for (const Job& j : jobs) {
      if (!q8_job(j)) continue;
      if (!q8) {
        q8_row = qr;
        std::memset(q8_row, 0, static_cast<size_t>(rows));
        q8 = true;
      }
      std::memset(q8_row + j.row0, 1, static_cast<size_t>(j.m));
    }
  }
  const int64_t rpt = ks_.q8_rows_per_token;  // q8 rows per activation row
  // (reserved for every row whenever the layer has a q8 kernel, whether or not this call packs any: a
  // decode call after a prefill one must not allocate)
  const Q8Slots xq = ks_.stream_q8 != nullptr ? ws.xq.reserve(rows_cap * rpt, hp_) : Q8Slots{};
  const Q8Slots hq = ks_.stream_q8 != nullptr ? ws.hq.reserve(rows_cap * rpt, ipmax) : Q8Slots{};
  // Row r's codes: the spec's int8 ones, the values rounded in place as fake_quantize_act does; or its
  // 15-bit high and low rows, the values left as they are.
  auto pack_q8 = [rpt](float* v, int64_t kp, const Q8Slots& q, int64_t r) {
    if (rpt == 2) pack_q15_rows(v, kp, q.row(2 * r));
    else pack_q8_row(v, kp, q.row(r), v);
  };

  // LoRA
  const LoraWeights* lw = (args.lora && !args.lora->token_adapter.empty() && args.lora->weights &&
                           args.lora->weights->adapters > 0)
                              ? args.lora->weights
                              : nullptr;
  const int32_t* tok_adapter = lw ? args.lora->token_adapter.as<const int32_t>() : nullptr;
  const int64_t R13 = w13_->rows;
  const int lr = lw ? lw->rank : 0;
  const int64_t rcap = M * k;  // routed rows, whatever the routing (expert parallelism masks some)
  // A LoRA layer's buffers grow on every call, with or without adapters, by the spec's largest rank
  // (check_lora bounds a call's): a call with adapters after warm-up calls without them does not allocate.
  const bool lora_layer = spec_.lora.max_adapters > 0;
  float* const lora1_buf = lora_layer ? ws.lora1.get(static_cast<size_t>(rcap * R13)) : nullptr;
  float* const lora2_buf = lora_layer ? ws.lora2.get(static_cast<size_t>(rcap * H)) : nullptr;
  float* const lt_buf = lora_layer ? ws.lora_t.get(static_cast<size_t>(rcap * std::max(1, spec_.lora.max_rank))) : nullptr;
  int32_t* const row_expert_buf = lora_layer ? ws.row_expert.get(static_cast<size_t>(rcap)) : nullptr;
  float* lora1 = lw ? lora1_buf : nullptr;
  float* lora2 = lw ? lora2_buf : nullptr;
  float* lt = lw ? lt_buf : nullptr;
  int32_t* row_expert = nullptr;
  if (lw) {
    row_expert = row_expert_buf;
    for (int e = 0; e < el_; ++e)
      for (int32_t r = ws.disp.offsets[static_cast<size_t>(e)]; r < ws.disp.offsets[static_cast<size_t>(e + 1)]; ++r)
        row_expert[r] = e;
  }
  auto row_adapter = [&](int64_t row) -> int {
    return (lw && row < R) ? tok_adapter[ws.disp.token[static_cast<size_t>(row)]] : -1;
  };

  // Which copy of the hidden rows the gate_up calls read (call_path): the f32 rows X only where some
  // call takes an f32 kernel, LoRA reads them or the spec rounds the activations (on f32 rows); else
  // the bf16 rows Xb alone. bf16 hidden rows bound for the bf16 kernels unweighted are copied as they
  // are (f32 and back is exact for them), without the f32 hidden rows at all where nothing else reads
  // those. The intermediate likewise (h_f32 below).
  bool x_f32 = Xb == nullptr || lw != nullptr || aq != ActQuant::kNone;
  for (const Job& j : jobs)
    x_f32 = x_f32 || reads_f32(call_path(j.shared ? sw13_->fmt : w13_->fmt, j.m, q8 && q8_row[j.row0], true));
  const bool direct_x = !x_f32 && adt == DType::kBF16 && !on_input;
  if (!own_logits && (!direct_x || q8 || gate != nullptr)) {
    if (pf) pf->mark(Phase::kPlan);  // (what follows the route mark so far is planning)
    convert_hidden();
  }
  // Grown either way, so that a later call that needs it does not allocate; null where not written.
  float* X = ws.x.get(static_cast<size_t>((rows_cap + 16) * ldx));
  if (!x_f32) X = nullptr;
  // A token's 15-bit rows (rpt 2) are the same for each of its rows unless the router weight scales
  // them first: the gather packs a token's first q8 row and copies its codes to the token's other q8
  // rows (q8_next links them, -1 ends a list; q8_row 2 marks a copy), so a one-token forward packs once
  // instead of k times (a 2048-wide row costs ~4 us). Not for the spec's int8 codes (rpt 1), whose
  // packing also rounds the row's f32 and bf16 copies in place.
  int32_t* q8_next = ws.q8_next.get(static_cast<size_t>(rows_cap));
  int32_t* q8_tail = ws.q8_tail.get(static_cast<size_t>(M));
  if (q8 && !on_input && rpt == 2) {
    std::fill(q8_tail, q8_tail + M, -1);
    for (int64_t row = 0; row < rows; ++row) {
      if (!q8_row[row]) continue;
      const int64_t t = row < R ? static_cast<int64_t>(ws.disp.token[static_cast<size_t>(row)]) : row - R;
      q8_next[row] = -1;
      if (q8_tail[t] >= 0) {
        q8_next[q8_tail[t]] = static_cast<int32_t>(row);
        q8_row[row] = 2;
      }
      q8_tail[t] = static_cast<int32_t>(row);
    }
  } else {
    q8_next = nullptr;
  }
  float* Hb = ws.hbuf.get(static_cast<size_t>((rows_cap + 16) * ldh));
  if (ks_.poison) {  // (tests) a block that no gemm1 item covers reads NaN, not a warm workspace's values
    std::fill(Hb, Hb + rows * ldh, std::numeric_limits<float>::quiet_NaN());
    if (Hbb) std::fill(Hbb, Hbb + rows * ldh, uint16_t{0x7FC0});
  }
  // Which copy of the intermediate the down calls read: the f32 rows Hb only where some call takes an
  // f32 kernel, LoRA or the q8 packing reads them or the spec rounds the activations (on f32 rows);
  // else the gate_up epilogue rounds its activations to bf16 straight into Hbb and post1 only zeroes
  // Hbb's pad columns: the same bf16 words (the same activation, then the same conversion), without
  // the f32 rows' store, reload and second store (at deepseek-v2-lite M = 1024, 10 bytes an element
  // instead of 2; NOTES in bench/results/2026-12-05_s31_dev-xeon). A gemm1 item of AMX pairs writes
  // 16 or more bf16 columns of a row: items share a cache line only where a run is shorter than a
  // line's 32 columns (decode items of one block write 8 or 16), which costs time, not correctness.
  bool h_f32 = !ks_.bf16_intermediate || Hbb == nullptr || ks_.act_rows_bf16 == nullptr || lw != nullptr ||
               aq != ActQuant::kNone || q8;
  for (const Job& j : jobs)
    h_f32 = h_f32 || reads_f32(call_path(j.shared ? sw2_->fmt : w2_->fmt, j.m, false, true));
  if (!h_f32) g_bf16_intermediate_forwards.fetch_add(1, std::memory_order_relaxed);
  for (int t = 0; t < scratch_threads; ++t)  // the gather's f32 row where X is not kept
    ws.scratch[static_cast<size_t>(t)].xrow.get(static_cast<size_t>(hp_));

  const PackedStack& w13 = *w13_;
  const PackedStack& w2 = *w2_;
  const float alpha = spec_.activation.swiglu_alpha, limit = spec_.activation.swiglu_limit;

  if (pf) pf->mark(Phase::kPlan);
#pragma omp parallel num_threads(threads)
  {
    const int tid = omp_get_thread_num();
    Scratch& s = ws.scratch[static_cast<size_t>(tid)];
    // Profiling (profile.hpp): thread 0 marks each stage's end after its barrier; items add busy time.
    const bool marker = pf && tid == 0;
    auto clock = [pf] { return pf ? ForwardProfile::ticks() : uint64_t{0}; };

    // ---- gather ----
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
      if (row >= R && gate) {
        const int64_t t = row - R;
        float g = 0.0f;
        for (int64_t c = 0; c < H; ++c) g += hid[t * hp_ + c] * shared_gate_[static_cast<size_t>(c)];
        gate[t] = sigmoid(g);
      }
      if (direct_x && !(q8 && q8_row[row])) {  // the bf16 row as it is
        const int64_t t = row < R ? static_cast<int64_t>(ws.disp.token[static_cast<size_t>(row)]) : row - R;
        uint16_t* xb = Xb + row * ldx;
        std::memcpy(xb, static_cast<const uint16_t*>(args.hidden.data) + t * H, static_cast<size_t>(H) * 2);
        std::fill(xb + H, xb + hp_, uint16_t{0});
        continue;
      }
      float* d = X ? X + row * ldx : s.xrow.v.data();
      if (row < R) {
        const float* src = hid + static_cast<int64_t>(ws.disp.token[static_cast<size_t>(row)]) * hp_;
        const float wgt = on_input ? ws.disp.weight[static_cast<size_t>(row)] : 1.0f;
        if (on_input) for (int64_t c = 0; c < hp_; ++c) d[c] = src[c] * wgt;
        else std::memcpy(d, src, static_cast<size_t>(hp_) * sizeof(float));
      } else {
        std::memcpy(d, hid + (row - R) * hp_, static_cast<size_t>(hp_) * sizeof(float));
      }
      if (q8 && q8_row[row] == 1) {
        pack_q8(d, hp_, xq, row);
        if (q8_next)
          for (int32_t r = q8_next[row]; r >= 0; r = q8_next[r]) copy_q8_rows(xq, row * rpt, r * rpt, rpt, hp_);
      } else if (!(q8 && q8_row[row])) {
        fake_quantize_act(row < R ? aq : saq, d, 1, H);
      }
      if (Xb) kernels::f32_to_bf16_row(d, hp_, Xb + row * ldx);
    }

    // ---- gate_up LoRA deltas ----
    if (lw) {
#pragma omp for schedule(static)
      for (int64_t row = 0; row < R; ++row) {
        const int a = row_adapter(row);
        if (a < 0) continue;
        const int e = row_expert[row];
        const float* A = lw->gate_up_a.as<const float>() + ((static_cast<int64_t>(a) * el_ + e) * lr) * H;
        const float* B = lw->gate_up_b.as<const float>() + ((static_cast<int64_t>(a) * el_ + e) * R13) * lr;
        const float* x = X + row * ldx;
        float* t = lt + row * lr;
        for (int q = 0; q < lr; ++q) {
          float acc = 0.0f;
          for (int64_t c = 0; c < H; ++c) acc += A[q * H + c] * x[c];
          t[q] = acc;
        }
        float* d = lora1 + row * R13;
        for (int64_t n = 0; n < R13; ++n) {
          float acc = 0.0f;
          for (int q = 0; q < lr; ++q) acc += B[n * lr + q] * t[q];
          d[n] = acc;
        }
      }
    }

    if (marker) pf->mark(Phase::kGather);

    // ---- GEMM1 + bias + LoRA + activation ----
#pragma omp for schedule(dynamic, 1)
    for (size_t it = 0; it < items1.size(); ++it) {
      const Item& item = items1[it];
      const Job& job = jobs[static_cast<size_t>(item.job)];
      const PackedStack& w = job.shared ? *sw13_ : w13;
      const int64_t e = job.shared ? 0 : job.expert;
      // AMX pairs in one call each; a stream run (NOTES) block by block, each with its epilogue, or in
      // stream pairs (NOTES): blocks q and q + nb / 2 of the run in one call.
      const bool amx_job = takes_amx(w.fmt, job.m);
      const bool jq8 = q8 && job.m > 0 && q8_row[job.row0];
      const kernels::Q8Rows xqj = jq8 ? xq.row(job.row0 * rpt).view() : kernels::Q8Rows{};
      const int half = takes_stream_pairs(w.fmt, job.m, jq8, Xb != nullptr) ? item.nb / 2 : 0;
      for (int q0 = 0, per_call = 1; q0 < item.nb; q0 += per_call) {
        const bool paired = q0 < 2 * half;
        per_call = amx_job ? std::min(takes_amx4(w, job.m) ? 4 : 2, item.nb - q0) : paired ? 2 : 1;
        const auto block_of = [&](int q) { return item.b + (paired ? q0 / 2 + q * half : q0 + q); };
        const uint64_t t0 = clock();
        if (paired) {
          run_pair(w, e, block_of(0), block_of(1), Xb ? Xb + job.row0 * ldx : nullptr, jq8 ? &xqj : nullptr,
                   s.acc.v.data(), s.acc.v.data() + acc_stride);
        } else {
          // (the thread's next call: this item's next blocks; the next item is not known yet)
          const void* next = q0 + per_call < item.nb ? w.block(e, item.b + q0 + per_call).data : nullptr;
          run_blocks(w, e, item.b + q0, per_call, X ? X + job.row0 * ldx : nullptr,
                     Xb ? Xb + job.row0 * ldx : nullptr, jq8 ? &xqj : nullptr, ldx, job.m, s,
                     s.acc.v.data(), acc_stride, next);
        }
        const uint64_t t1 = clock();
        for (int q = 0; q < per_call; ++q) {  // the epilogue per block, on that block's accumulators
          const int64_t b = block_of(q);
          float* acc = s.acc.v.data() + q * acc_stride;
          const float* ls = w.lane_scales(e, b);
          const int32_t* lrow = w.lane_row.data() + b * 16;
          const float* bias = (!job.shared && !w13_bias_.empty()) ? w13_bias_.data() + e * w.rows : nullptr;
          const ActivationKind ak = job.shared ? shared_act_ : spec_.activation.kind;
          const kernels::Act ka = static_cast<kernels::Act>(ak);
          const int64_t I = w.outputs;
          const bool gated = w.map != LaneMap::kPlain;
          const int64_t c0 = gated ? b * 8 : b * 16;
          const int nc = static_cast<int>(std::min<int64_t>(gated ? 8 : 16, I - c0));
          if (ls || bias || lora1) {  // scaled in place; then one activation call for the block
            // The bias by lane once per block, so that the scale and bias run as whole-row vector passes
            // (scale_bias_rows_avx2). Padding lanes (lrow < 0) get 0: their outputs are never written.
            float bl[16] = {};
            if (bias)
              for (int l = 0; l < 16; ++l) bl[l] = lrow[l] >= 0 ? bias[lrow[l]] : 0.0f;
            if (!lora1) {
              kernels::scale_bias_rows_avx2(acc, job.m, ls, bias ? bl : nullptr);
            } else {  // the kernel's formula, then the row's LoRA delta (correctness first)
              for (int64_t i = 0; i < job.m; ++i) {
                const int64_t row = job.row0 + i;
                float* v = acc + i * 16;
                for (int l = 0; l < 16; ++l)
                  v[l] = ls && bias ? std::fma(v[l], ls[l], bl[l]) : ls ? v[l] * ls[l] : bias ? v[l] + bl[l] : v[l];
                if (row < R && row_adapter(row) >= 0)
                  for (int l = 0; l < 16; ++l)
                    if (lrow[l] >= 0) v[l] += lora1[row * R13 + lrow[l]];
              }
            }
          }
          if (h_f32) {
            ks_.act_rows(ka, acc, job.m, nc, alpha, limit, Hb + job.row0 * ldh + c0, ldh);
          } else {  // rounded to bf16 as it is stored (h_f32)
            ks_.act_rows_bf16(ka, acc, job.m, nc, alpha, limit, Hbb + job.row0 * ldh + c0, ldh);
          }
        }
        if (pf) {
          pf->add(tid, Phase::kGemm1, t0, t1);
          pf->add(tid, Phase::kEpilogue1, t1, clock());
        }
      }
    }
    if (marker) pf->mark(Phase::kGemm1);

    // ---- intermediate: padding, fp8 act quant, down LoRA ----
#pragma omp for schedule(static)
    for (int64_t row = 0; row < rows; ++row) {
      const bool shared_row = row >= R;
      const int64_t I = shared_row ? is_ : il_, ip = shared_row ? isp_ : ilp_;
      if (!h_f32) {  // Hbb already holds the row (h_f32)
        std::fill(Hbb + row * ldh + I, Hbb + row * ldh + ip, uint16_t{0});
        continue;
      }
      float* hrow = Hb + row * ldh;
      for (int64_t c = I; c < ip; ++c) hrow[c] = 0.0f;
      if (q8 && q8_row[row]) pack_q8(hrow, ip, hq, row);
      else fake_quantize_act(shared_row ? saq : aq, hrow, 1, I);
      if (Hbb) kernels::f32_to_bf16_row(hrow, ip, Hbb + row * ldh);
      if (lw && !shared_row) {
        const int a = row_adapter(row);
        if (a < 0) continue;
        const int e = row_expert[row];
        const float* A = lw->down_a.as<const float>() + ((static_cast<int64_t>(a) * el_ + e) * lr) * I;
        const float* B = lw->down_b.as<const float>() + ((static_cast<int64_t>(a) * el_ + e) * H) * lr;
        float* t = lt + row * lr;
        for (int q = 0; q < lr; ++q) {
          float acc = 0.0f;
          for (int64_t c = 0; c < I; ++c) acc += A[q * I + c] * hrow[c];
          t[q] = acc;
        }
        float* d = lora2 + row * H;
        for (int64_t n = 0; n < H; ++n) {
          float acc = 0.0f;
          for (int q = 0; q < lr; ++q) acc += B[n * lr + q] * t[q];
          d[n] = acc;
        }
      }
    }

    if (marker) pf->mark(Phase::kPost1);

    // ---- GEMM2 + bias + LoRA, router-weighted sum over experts, output ----
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < nitems2; ++it) {
      const int64_t b_item = items2[static_cast<size_t>(it)].b;
      const int nb_item = items2[static_cast<size_t>(it)].nb;
      std::memset(s.out.v.data(), 0, static_cast<size_t>(nb_item) * static_cast<size_t>(M) * 16 * sizeof(float));
      const int64_t calls = (nb_item + per2 - 1) / per2, ncalls = static_cast<int64_t>(jobs.size()) * calls;
      // call c: job c / calls, blocks from b_item + (c % calls) * per2, on that job's stack and expert
      const auto call_job = [&](int64_t c) -> const Job& { return jobs[static_cast<size_t>(c / calls)]; };
      const auto call_b0 = [&](int64_t c) { return b_item + (c % calls) * per2; };
      const auto stack_of = [&](const Job& j) -> const PackedStack& { return j.shared ? *sw2_ : w2; };
      for (int64_t jc = 0; jc < ncalls; ++jc) {  // one expert at a time
        const Job& job = call_job(jc);
        const PackedStack& w = stack_of(job);
        const int64_t e = job.shared ? 0 : job.expert;
        const bool jq8 = q8 && job.m > 0 && q8_row[job.row0];
        const kernels::Q8Rows hqj = jq8 ? hq.row(job.row0 * rpt).view() : kernels::Q8Rows{};
        // Stream pairs (NOTES): where this job's calls (one block each) take them, the job's blocks q and
        // q + nb_item / 2 in one call; the job's other calls of this item are skipped below.
        const int half = per2 == 1 && takes_stream_pairs(w.fmt, job.m, jq8, Hbb != nullptr) ? nb_item / 2 : 0;
        const int64_t qc = jc % calls;  // this call's place among the job's calls of the item
        if (half > 0 && qc >= half && qc < 2 * half) continue;  // (taken by call qc - half)
        const bool paired = half > 0 && qc < half;
        const int64_t b0 = call_b0(jc);
        const int nbi = paired ? 2 : static_cast<int>(std::min(per2, b_item + nb_item - b0));
        const auto block_of = [&](int q) { return b0 + q * (paired ? half : 1); };
        const uint64_t t0 = clock();
        if (paired) {
          run_pair(w, e, block_of(0), block_of(1), Hbb ? Hbb + job.row0 * ldh : nullptr, jq8 ? &hqj : nullptr,
                   s.acc.v.data(), s.acc.v.data() + acc_stride);
        } else {
          const Job* nj = jc + 1 < ncalls ? &call_job(jc + 1) : nullptr;  // the thread's next call, in this item
          const void* next = nj ? stack_of(*nj).block(nj->shared ? 0 : nj->expert, call_b0(jc + 1)).data : nullptr;
          run_blocks(w, e, b0, nbi, Hb + job.row0 * ldh, Hbb ? Hbb + job.row0 * ldh : nullptr, jq8 ? &hqj : nullptr,
                     ldh, job.m, s, s.acc.v.data(), acc_stride, next);
        }
        const uint64_t t1 = clock();
        for (int q = 0; q < nbi; ++q) {  // its accumulators into the block's [M][16] output buffer
          const int64_t b = block_of(q);
          float* outl = s.out.v.data() + (b - b_item) * M * 16;
          const float* acc = s.acc.v.data() + q * acc_stride;
          const float* ls = w.lane_scales(e, b);
          const float* bias = (!job.shared && add_w2_bias_) ? w2_bias_.data() + e * H + b * 16 : nullptr;
          const int nl = static_cast<int>(std::min<int64_t>(16, H - b * 16));
          if (!lora2) {  // the vector kernel (row i -> token, weight)
            if (job.shared)
              kernels::down_rows_avx2(acc, job.m, nl, ls, bias, nullptr, job.row0 - R, gate ? gate + (job.row0 - R) : nullptr,
                                      outl);
            else
              kernels::down_rows_avx2(acc, job.m, nl, ls, bias, ws.disp.token.data() + job.row0, 0,
                                      on_input ? nullptr : ws.disp.weight.data() + job.row0, outl);
            continue;
          }
          for (int64_t i = 0; i < job.m; ++i) {  // with LoRA: a row's delta where its token has an adapter
            const int64_t row = job.row0 + i;
            int64_t t;
            float wgt;
            if (job.shared) {
              t = row - R;
              wgt = gate ? gate[t] : 1.0f;
            } else {
              t = ws.disp.token[static_cast<size_t>(row)];
              wgt = on_input ? 1.0f : ws.disp.weight[static_cast<size_t>(row)];
            }
            const float* lo = (lora2 && !job.shared && row_adapter(row) >= 0) ? lora2 + row * H + b * 16 : nullptr;
            float* o = outl + t * 16;
            // down_rows_avx2's formula, plus the row's LoRA delta before the weighted sum (this path
            // runs only with a LoRA batch: correctness first).
            const float* a = acc + i * 16;
            for (int l = 0; l < nl; ++l) {
              float y = ls && bias ? std::fma(a[l], ls[l], bias[l]) : ls ? a[l] * ls[l] : bias ? a[l] + bias[l] : a[l];
              if (lo) y += lo[l];
              o[l] = std::fma(wgt, y, o[l]);
            }
          }
        }
        if (pf) {
          pf->add(tid, Phase::kGemm2, t0, t1);
          pf->add(tid, Phase::kEpilogue2, t1, clock());
        }
      }
      const uint64_t t_store = clock();
      if (adt == DType::kBF16) {
        kernels::rows16_to_bf16_avx2(s.out.v.data(), M, nb_item, M * 16,
                                     static_cast<int>(std::min<int64_t>(16, H - (b_item + nb_item - 1) * 16)),
                                     static_cast<uint16_t*>(args.output.data) + b_item * 16, H);
      } else {
        for (int q = 0; q < nb_item; ++q) {
          const int64_t b = b_item + q;
          const float* outl = s.out.v.data() + q * M * 16;
          const int nl = static_cast<int>(std::min<int64_t>(16, H - b * 16));
          for (int64_t t = 0; t < M; ++t)
            for (int l = 0; l < nl; ++l) store_act(args.output.data, adt, t * H + b * 16 + l, outl[t * 16 + l]);
        }
      }
      if (pf) pf->add(tid, Phase::kStore, t_store, clock());
    }
    if (marker) pf->mark(Phase::kGemm2);
    if (ks_.amx) kernels::amx_release();
  }
}

}  // namespace moerun::cpu
