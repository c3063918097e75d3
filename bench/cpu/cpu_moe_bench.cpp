// bench/cpu/cpu_moe_bench.cpp — moerun `cpu` vs `reference` vs a oneDNN per-expert baseline, with this
// machine's limits (memory read bandwidth, FMA peaks, AMX bf16 tile peak) measured in the same run.
//
//   cpu_moe_bench [--quick] [--json PATH] [--threads N] [--only SHAPE,...] [--m 1,64,...] [--compare-v1]
//                 [--compare-amx1] [--compare-down1] [--compare-env VAR=VALUE[,...]] [--budget S]
//                 [--stream-sweep 4,8,16,...] [--formats LABEL,...] [--no-onednn] [--decode-ratios]
//
// --formats LABEL,...: only the rows of these formats, labelled as in the output ("bf16", "mxfp4",
// "mxfp4+int8-token-group", ...). --m replaces the token counts of every row (mixtral's too).
// A shape or format with no row in the mode asked for (--quick runs qwen3-30b-a3b alone; the quantized
// formats are qwen3's, and gpt-oss-20b's mxfp4) is refused with exit code 2 before anything runs.
// --no-onednn: no oneDNN baseline rows (faster side-by-side runs of the cpu backend alone).
// --budget S: seconds of timed calls per row (default 0.8, 0.25 with --quick; at least 3 calls).
// --stream-sweep N,...: instead of the usual rows, time the bf16 qwen3-30b-a3b and deepseek-v2-lite layers
// (--only narrows) at --m (default 16,64,256) once per stream/tile crossover N, set through the cpu
// backend's MOERUN_CPU_STREAM_MAX_TOKENS=N before each runner is created (rows "cpu-sweep").
//
// --compare-v1 times the cpu backend's previous kernels (MOERUN_CPU_KERNELS=v1) too, call by call
// alternating with the current ones, and records both (rows "cpu-v1" and "cpu", cpu_speedup_vs_v1).
// --compare-amx1 does the same with one N-block per AMX tile call (MOERUN_CPU_AMX_NBLOCKS=1) against the
// default (4 N-blocks for pairs above 16 tokens; rows "cpu-amx1" and "cpu", cpu_speedup_vs_amx1); it
// replaces --compare-v1.
// --compare-down1 likewise with one call's N-blocks per down-GEMM work item (MOERUN_CPU_DOWN_GROUP=1)
// against the automatic down groups (rows "cpu-down1", cpu_speedup_vs_down1); it replaces both.
// --compare-env VAR=VALUE[,VAR2=VALUE2...] likewise with any cpu-backend knobs (area cpu in `moerun knobs
// --all`) read when a runner is created (rows "cpu-alt" with variant "VAR=VALUE...", cpu_speedup_vs_alt);
// it replaces all three. Each of these runs two halves, the alternative's runners created first in one
// and second in the other (run_cpu_vs_alt: each runner packs its own weights, and where they land is a
// difference no alternation removes), and the alternative's row also records each half's ratio
// (speedup_alt_created_first / _second).
//
// --decode-ratios: instead of the usual rows, issue 4's format targets at M = 1 (--m for others): the
// qwen3-30b-a3b layer in bf16 and in fp8-block, mxfp4 and nvfp4 (--formats narrows the latter), one
// forward of each format in turn on the same router logits, the order rotated every round, for --budget
// seconds (default 12). On a host whose memory bandwidth moves by 2x within minutes, rows timed minutes
// apart give ratios of whatever the neighbours did; calls alternated within milliseconds share the
// same conditions. Rows "cpu" (median time) with speedup_vs_bf16 = the median over rounds of bf16's
// time / the format's, and its 10th / 90th percentiles.
//
// The oneDNN baseline runs every activated expert (and the shared experts) as two bf16 matmuls
// (f32 where oneDNN has no bf16 matmul for the ISA) with weights reordered once to format_tag::any,
// silu-and-mul in between, gather/scatter in plain loops; it skips biases and other activations
// (same bytes and FLOPs).
//
// Per row: median time of many forwards, each with a different set of router logits so that the
// activated experts (and their weights) change between calls and come from memory, not cache (the cpu
// rows also rotate over copies of the weights: rotate_bytes()); bytes
// are the distinct activated experts' weight bytes (as stored) averaged over those logit sets;
// floor = max(bytes / bandwidth, flops / peak); roofline % = floor / time. The peak is the one of the
// instructions the row's variant runs: the AMX bf16 tile peak for "amx-bf16-*" (and for oneDNN where
// the CPU has AMX), the int8 peaks for the q8 / q15 kernels ("avx512vnni-q8-*": VPDPBUSD, "avx2-q8-*":
// the vpmaddubsw step; q15 at half, two int8 rows a token), the AVX2 FMA peak for the other "avx2-*"
// variants, the VDPBF16PS peak for "avx512bf16-*" ones
// (and for oneDNN's bf16 matmuls on a CPU with AVX512-BF16 but no AMX),
// the AVX-512 FMA peak (AVX2 where the CPU has no AVX-512) otherwise. Each row records the peak it used ("peak", "peak_gflops"). The JSON is rewritten
// after every model, so a run cut short still leaves the rows it finished.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <immintrin.h>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "arg_lists.hpp"
#include "json_file.hpp"
#include "llc.hpp"
#include "stats.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/huge_pages.hpp"
#include "backends/cpu/isa.hpp"
#include "backends/reference/reference_backend.hpp"
#include "core/dequantize.hpp"
#include "core/knobs.hpp"
#include "cpu/peaks/best_rate.hpp"
#include "cpu/peaks/isa_peaks.hpp"
#include "dispatch/dispatch.hpp"
#include "moerun/formats.hpp"
#include "moerun/platform.hpp"
#include "moerun/presets.hpp"
#include "moerun/weights.hpp"
#include "routing/topk.hpp"
#include "run_stamp.hpp"

#ifdef MOERUN_BENCH_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

using namespace moerun;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

struct Opts {
  bool quick = false;
  std::string json_path;
  int threads = 0;
  std::vector<std::string> only;  // run only these shapes (empty = all); --only A,B,...
  bool compare_v1 = false;  // also time the cpu backend with MOERUN_CPU_KERNELS=v1, interleaved call by call
  bool compare_amx1 = false;  // the same with MOERUN_CPU_AMX_NBLOCKS=1
  bool compare_down1 = false;  // the same with MOERUN_CPU_DOWN_GROUP=1
  std::string compare_env;     // "VAR=VALUE": the same with that setting
  bool no_onednn = false;      // --no-onednn: no oneDNN rows (side-by-side runs of the cpu backend only)
  std::vector<int64_t> ms;  // token counts to run instead of the defaults
  double budget = -1;  // seconds of timed calls per row (< 0: 0.8, or 0.25 with --quick)
  std::vector<int> sweep;  // --stream-sweep crossovers (MOERUN_CPU_STREAM_MAX_TOKENS values)
  bool decode_ratios = false;  // --decode-ratios: formats alternated call by call against bf16
  double row_budget() const { return budget >= 0 ? budget : quick ? 0.25 : 0.8; }
  bool want(const std::string& shape) const {
    return only.empty() || std::find(only.begin(), only.end(), shape) != only.end();
  }
  std::vector<std::string> formats;  // run only these format labels (empty = all); --formats A,B,...
  bool want_format(const std::string& label) const {
    return formats.empty() || std::find(formats.begin(), formats.end(), label) != formats.end();
  }
};

// ---- machine limits ----------------------------------------------------------------------------------

// Sum of one thread's slice: 256-bit loads, four independent accumulators, and (prefetch > 0) a software
// prefetch that many bytes ahead, as the streaming kernels do (their 4 KiB prefetch reads faster than the
// hardware prefetcher alone on the Xeon, so a plain loop would put the floor below what they reach).
__attribute__((target("avx2"))) float read_slice(const float* a, size_t n, int prefetch) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  const char* pf = reinterpret_cast<const char*>(a) + prefetch;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {  // 128 bytes a step
    if (prefetch > 0) {
      _mm_prefetch(pf + i * 4, _MM_HINT_T0);
      _mm_prefetch(pf + i * 4 + 64, _MM_HINT_T0);
    }
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(a + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(a + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(a + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(a + i + 24));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  float t = out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
  for (; i < n; ++i) t += a[i];
  return t;
}

// Two halves of one thread's slice read together, 64 bytes of each a step (the one-token kernels'
// stream pairs, runner.cpp NOTES): on the development machine's Xeon one core reads more with two
// streams in flight than with one, so a one-stream probe would put the floor below what they reach.
__attribute__((target("avx2"))) float read_slice2(const float* a, size_t n, int prefetch) {
  const size_t h = (n / 2) & ~size_t(15);
  const float* b = a + h;
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 16 <= h; i += 16) {  // 64 bytes of each half a step
    if (prefetch > 0) {
      _mm_prefetch(reinterpret_cast<const char*>(a + i) + prefetch, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b + i) + prefetch, _MM_HINT_T0);
    }
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(a + i));
    s1 = _mm256_add_ps(s1, _mm256_loadu_ps(a + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_loadu_ps(b + i));
    s3 = _mm256_add_ps(s3, _mm256_loadu_ps(b + i + 8));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  float t = out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
  for (; i < h; ++i) t += a[i];
  for (size_t j = h + i; j < n; ++j) t += a[j];  // b's tail, and the odd elements past 2h
  return t;
}

// All threads read disjoint slices of an array far larger than the last-level cache; the best of four
// passes each without and with the kernels' 4 KiB software prefetch, each slice read as one stream and
// as two (read_slice2). The array is advised for huge pages like the cpu backend's weight stacks
// (huge_pages.hpp), so that the floor is what the machine reads under the same paging.
double measure_bandwidth_gbs(int threads, size_t bytes) {
  const size_t n = bytes / sizeof(float);
  std::unique_ptr<float, decltype(&std::free)> a(static_cast<float*>(moerun::cpu::alloc_large(bytes)), &std::free);
  if (!a) throw std::bad_alloc();
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; ++i) a.get()[i] = static_cast<float>(i & 1023);
  double best = 0;
  for (bool two : {false, true})
  for (int prefetch : {0, 4096})
    for (int rep = 0; rep < 4; ++rep) {
      float total = 0;
      const double t0 = now_s();
#pragma omp parallel num_threads(threads) reduction(+ : total)
      {
        const size_t nt = static_cast<size_t>(omp_get_num_threads()), t = static_cast<size_t>(omp_get_thread_num());
        const size_t per = (n / nt) & ~size_t(31), lo = t * per, hi = t + 1 == nt ? n : lo + per;
        total += two ? read_slice2(a.get() + lo, hi - lo, prefetch) : read_slice(a.get() + lo, hi - lo, prefetch);
      }
      const double dt = now_s() - t0;
      if (total == -1.0f) std::printf("?");
      best = std::max(best, static_cast<double>(bytes) / dt / 1e9);
    }
  return best;
}

__attribute__((target("avx2,fma"))) double fma_loop(int64_t iters) {
  __m256 a[10];
  for (int i = 0; i < 10; ++i) a[i] = _mm256_set1_ps(0.001f * i);
  const __m256 b = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(0.0001f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 10; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
  __m256 s = a[0];
  for (int i = 1; i < 10; ++i) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}

// The AVX2 q8 kernels' step (gemm_avx2.cpp): two vpmaddubsw, a vpaddw, a vpmaddwd by ones and a vpaddd
// for 64 byte products (128 operations), in independent chains. The byte operands are the chain's own
// accumulator: with constant operands the compiler hoisted the products out of the loop.
// (8 chains in named variables: an array of them was copied between registers every iteration.)
__attribute__((target("avx2"))) int64_t maddubs_loop(int64_t iters) {
#define MOERUN_CHAINS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define DECL(i) __m256i a##i = _mm256_set1_epi32(i);
  MOERUN_CHAINS8(DECL)
#undef DECL
  const __m256i s = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
  for (int64_t it = 0; it < iters; ++it) {
#define STEP(i) \
  a##i = _mm256_add_epi32(a##i, _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(a##i, s), _mm256_maddubs_epi16(s, a##i)), ones));
    MOERUN_CHAINS8(STEP)
#undef STEP
  }
  __m256i t = _mm256_setzero_si256();
#define SUM(i) t = _mm256_add_epi32(t, a##i);
  MOERUN_CHAINS8(SUM)
#undef SUM
#undef MOERUN_CHAINS8
  alignas(32) int32_t out[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), t);
  return out[0];
}

double measure_avx2_int8_peak_gops(int threads) {
  const int64_t iters = 5'000'000;
  return moerun_bench::best_rate(threads, static_cast<double>(iters) * 8 * 128, [&] { return maddubs_loop(iters); });
}

double measure_fma_peak_gflops(int threads) {
  const int64_t iters = 20'000'000;
  return moerun_bench::best_rate(threads, static_cast<double>(iters) * 10 * 16, [&] { return fma_loop(iters); });
}

// The shapes this bench knows (--only names).
const std::string kShapes[] = {"qwen3-30b-a3b", "deepseek-v2-lite", "gpt-oss-20b", "mixtral-8x7b"};

// What a row's floor is computed from, measured for one thread count. A peak of 0 means absent (the CPU or
// the OS does not have it).
struct Limits {
  double bw = 0;          // read bandwidth, GB/s
  double fma_avx2 = 0;    // fp32 GFLOP/s, 256-bit FMA
  double fma_avx512 = 0;  // fp32 GFLOP/s, 512-bit FMA
  double bf16_dot = 0;    // GFLOP/s, 512-bit VDPBF16PS
  double int8_avx2 = 0;   // GOP/s, the AVX2 q8 step (vpmaddubsw ...)
  double int8_vnni = 0;   // GOP/s, 512-bit VPDPBUSD
  moerun_bench::AmxPeak amx;  // bf16 GFLOP/s, tdpbf16ps

  json to_json() const {
    auto opt = [](double v) { return v > 0 ? json(v) : json(nullptr); };
    return {{"read_bandwidth_gbs", bw},
            {"fma_fp32_peak_gflops", fma_avx2},
            {"avx512_fma_fp32_peak_gflops", opt(fma_avx512)},
            {"avx512_bf16_dot_peak_gflops", opt(bf16_dot)},
            {"avx2_int8_peak_gops", opt(int8_avx2)},
            {"avx512_vnni_int8_peak_gops", opt(int8_vnni)},
            {"amx_bf16_peak_gflops", opt(amx.gflops)},
            {"amx_bf16_peak_gflops_2x2", opt(amx.gflops_2x2)},
            {"amx_bf16_peak_gflops_1x6", opt(amx.gflops_1x6)},
            {"amx_bf16_2x2_alternated_gflops", opt(amx.gflops_2x2_alternated)},
            {"amx_bf16_2x2_l1_loads_gflops", opt(amx.gflops_2x2_l1)},
            {"amx_bf16_2x2_l1_loads_strided_a_gflops", opt(amx.gflops_2x2_l1_strided)},
            {"amx_tileload_l1_gbs", opt(amx.tileload_gbs)}};
  }
};

bool cpu_has_avx512() {
  const cpu::IsaFeatures& f = cpu::detected_features();
  return f.avx512f && f.os_zmm;
}
bool cpu_has_amx() {  // detected_features() also asked Linux for the tile data permission
  const cpu::IsaFeatures& f = cpu::detected_features();
  return f.amx_tile && f.amx_bf16 && f.os_amx && f.amx_permitted;
}

Limits measure_limits(int threads, bool quick) {
  Limits l;
  l.bw = measure_bandwidth_gbs(threads, quick ? (512ull << 20) : (1ull << 30));
  l.fma_avx2 = measure_fma_peak_gflops(threads);
  if (cpu_has_avx512()) l.fma_avx512 = moerun_bench::avx512_fma_peak_gflops(threads);
  if (cpu::detected_isa() >= CpuIsa::kAvx512Bf16) l.bf16_dot = moerun_bench::avx512_bf16_dot_peak_gflops(threads);
  if (cpu::detected_isa() >= CpuIsa::kAvx2) l.int8_avx2 = measure_avx2_int8_peak_gops(threads);
  if (cpu::detected_features().avx512vnni && cpu_has_avx512()) l.int8_vnni = moerun_bench::avx512_vnni_dot_peak_gops(threads);
  if (cpu_has_amx()) l.amx = moerun_bench::amx_bf16_peak(threads, quick ? 0.2 : 0.3);
  return l;
}

// The peak a row's floor uses: {name, GFLOP/s}. See the header comment.
std::pair<std::string, double> peak_for(const Limits& l, const std::string& backend, const std::string& variant) {
  const bool has512 = l.fma_avx512 > 0;
  const std::pair<std::string, double> vec = has512 ? std::pair<std::string, double>{"avx512-fma", l.fma_avx512}
                                                     : std::pair<std::string, double>{"avx2-fma", l.fma_avx2};
  const auto starts = [&](const char* p) { return variant.rfind(p, 0) == 0; };
  if (backend.rfind("onednn", 0) == 0) {
    // oneDNN picks the best bf16 instructions the CPU has: AMX tiles, else VDPBF16PS (avx512_core_bf16,
    // e.g. AMD Zen 4). Against the FMA peak its large-M rows read over 100% there.
    if (l.amx.gflops > 0) return {"amx-bf16", l.amx.gflops};
    if (backend.rfind("onednn-bf16", 0) == 0 && l.bf16_dot > 0) return {"avx512-bf16-dot", l.bf16_dot};
    return vec;
  }
  if (starts("amx") && l.amx.gflops > 0) return {"amx-bf16", l.amx.gflops};  // tiles and the AMX decode stream
  // The int8 kernels (int8 activations): their instruction's peak; q15 runs two int8 rows a token, so
  // a row's FLOPs take twice the instructions (half the peak).
  const bool q15 = variant.find("-q15-") != std::string::npos;
  if ((starts("avx512vnni-q8") || starts("avx512vnni-q15")) && l.int8_vnni > 0)
    return {q15 ? "avx512-vnni-int8/2" : "avx512-vnni-int8", q15 ? l.int8_vnni / 2 : l.int8_vnni};
  if ((starts("avx2-q8") || starts("avx2-q15")) && l.int8_avx2 > 0)
    return {q15 ? "avx2-int8/2" : "avx2-int8", q15 ? l.int8_avx2 / 2 : l.int8_avx2};
  if (starts("avx2")) return {"avx2-fma", l.fma_avx2};
  // VDPBF16PS (bf16, fp8 and 4-bit weights with bf16 activations; the others are named avx512-stream)
  if (starts("avx512bf16") && l.bf16_dot > 0) return {"avx512-bf16-dot", l.bf16_dot};
  return vec;
}

// The weight format, with "+<act quant>" when the layer quantizes its activations ("mxfp4+int8-token-group").
std::string format_label(const MoeSpec& s) {
  std::string f(to_string(s.weight_format));
  if (s.act_quant != ActQuant::kNone) f += "+" + std::string(to_string(s.act_quant));
  return f;
}

// ---- a model under test ------------------------------------------------------------------------------

struct Model {
  std::string name, note;
  MoeSpec spec;
  std::shared_ptr<MoeWeights> w;                   // copy 0: what the reference and oneDNN rows use
  std::vector<std::shared_ptr<MoeWeights>> copies;  // every copy (see kRotateBytes), copies[0] == w
  std::vector<HostTensor> logits;  // rotating router logit sets [Mmax, E]
  HostTensor hidden;               // [Mmax, H] in act dtype
  int64_t mmax = 0;
};

// Weight copies: the cpu rows rotate over enough copies of the experts that one cycle of calls at one
// token (every copy with each of the 8 logit sets) touches at least kRotateBytes, or 4x the last-level
// cache where that is larger, whatever the format, so a 4-bit layer's weights come from memory as a
// bf16 layer's do. (One copy of qwen3-30b-a3b's mxfp4 experts is 320 MB, of which a cycle of 8
// one-token logit sets touches about 130 MB: close to the Xeon's last-level cache, so one-token 4-bit
// rows ran at up to 137% of the bandwidth floor with a single copy. Copies used to be counted from a
// whole copy's bytes, of which a cycle at one token touches less than half.)
constexpr double kRotateBytes = 1e9;
constexpr int kMaxCopies = 8;

double rotate_bytes() { return std::max(kRotateBytes, 4.0 * static_cast<double>(moerun_bench::llc_bytes())); }

Model make_model(const std::string& preset, const std::string& note, WeightFormat fmt, int64_t mmax,
                 std::function<void(MoeSpec&)> edit = {}) {
  Model m;
  m.spec = find_preset(preset).model.spec;
  m.spec.weight_format = fmt;
  m.spec.act_dtype = DType::kBF16;
  m.spec.act_quant = ActQuant::kNone;
  m.spec.parallel = Parallel{};
  if (edit) edit(m.spec);
  m.spec.validate();
  m.name = preset;
  m.note = note;
  m.mmax = mmax;
  const double t0 = now_s();
  m.w = std::make_shared<MoeWeights>(random_weights(m.spec, 1));
  m.copies = {m.w};
  std::mt19937 g(3);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int s = 0; s < 8; ++s) {
    HostTensor l(DType::kF32, {mmax, m.spec.num_experts});
    for (int64_t i = 0; i < l.shape().numel(); ++i) l.as<float>()[i] = n(g);
    m.logits.push_back(std::move(l));
  }
  m.hidden = HostTensor(DType::kBF16, {mmax, m.spec.hidden});
  for (int64_t i = 0; i < m.hidden.shape().numel(); ++i) m.hidden.as<uint16_t>()[i] = f32_to_bf16(n(g));
  // The experts one copy's cycle of one-token calls activates (the union over the logit sets).
  std::set<int32_t> cycle;
  std::vector<int32_t> ids(static_cast<size_t>(m.spec.top_k));
  std::vector<float> wts(ids.size());
  for (const HostTensor& l : m.logits) {
    routing::topk_host(m.spec, l.as<const float>(), 1, m.w->correction_bias.empty() ? nullptr : m.w->correction_bias.as<const float>(),
                       ids.data(), wts.data());
    cycle.insert(ids.begin(), ids.end());
  }
  const double per_expert = static_cast<double>(m.w->w13.bytes_per_expert() + m.w->w2.bytes_per_expert());
  const double per_copy = static_cast<double>(m.spec.num_experts) * per_expert;
  const double touched = static_cast<double>(cycle.size()) * per_expert;
  const int copies = std::clamp(static_cast<int>(std::ceil(rotate_bytes() / touched)), 1, kMaxCopies);
  for (int c = 1; c < copies; ++c) m.copies.push_back(std::make_shared<MoeWeights>(random_weights(m.spec, 1 + c)));
  std::fprintf(stderr, "  weights %s %s: %d cop%s of %.0f MB (a one-token cycle touches %.0f MB of each), %.1f s\n",
               preset.c_str(), std::string(to_string(fmt)).c_str(), copies, copies == 1 ? "y" : "ies", per_copy / 1e6,
               touched / 1e6, now_s() - t0);
  return m;
}

// Distinct activated experts per call for M tokens, averaged over the logit sets.
double distinct_experts(const Model& m, int64_t M) {
  double sum = 0;
  std::vector<int32_t> ids(static_cast<size_t>(M * m.spec.top_k));
  std::vector<float> w(ids.size());
  for (const HostTensor& l : m.logits) {
    routing::topk_host(m.spec, l.as<const float>(), M, m.w->correction_bias.empty() ? nullptr : m.w->correction_bias.as<const float>(),
                       ids.data(), w.data());
    sum += static_cast<double>(std::set<int32_t>(ids.begin(), ids.end()).size());
  }
  return sum / static_cast<double>(m.logits.size());
}

struct Cost {
  double bytes = 0, flops = 0;
};

Cost cost(const Model& m, int64_t M) {
  const MoeSpec& s = m.spec;
  Cost c;
  const double per_expert = static_cast<double>(m.w->w13.bytes_per_expert() + m.w->w2.bytes_per_expert());
  c.bytes = distinct_experts(m, M) * per_expert;
  c.flops = 2.0 * M * s.top_k * (static_cast<double>(s.w13_rows()) * s.hidden + static_cast<double>(s.hidden) * s.intermediate);
  if (s.shared.count > 0) {
    c.bytes += static_cast<double>(m.w->shared_w13.bytes_per_expert() + m.w->shared_w2.bytes_per_expert());
    c.flops += 2.0 * M * 3.0 * s.hidden * s.shared.intermediate;
  }
  return c;
}

// Median seconds of fn(call index), with at least min_runs calls and about budget_s seconds, after
// warm_calls untimed calls (calls 0 .. warm_calls - 1: workspaces, first touch). Rows that rotate over
// weight copies pass the copy count: each copy has its own runner, whose first call allocates its
// workspaces (with one warm-up call, the next copies' first calls were timed, and at 256 tokens of
// qwen3-30b-a3b mxfp4 with 4 copies and a 0.3-0.6 s budget the median was such a call: 166-190 ms
// against 36 ms warm, on this session's Sapphire Rapids).
double time_median(const std::function<void(int)>& fn, double budget_s, int min_runs = 3, int max_runs = 200,
                   int warm_calls = 1) {
  for (int i = 0; i < warm_calls; ++i) fn(i);
  std::vector<double> t;
  const double start = now_s();
  for (int i = warm_calls; (static_cast<int>(t.size()) < min_runs || now_s() - start < budget_s) && static_cast<int>(t.size()) < max_runs; ++i) {
    const double t0 = now_s();
    fn(i);
    t.push_back(now_s() - t0);
  }
  return moerun_bench::median(t);
}

ForwardArgs args_for(const Model& m, int64_t M, int call, HostTensor& out) {
  ForwardArgs a;
  a.hidden = m.hidden.view();
  a.hidden.shape = Shape{M, m.spec.hidden};
  a.router_logits = m.logits[static_cast<size_t>(call) % m.logits.size()].view();
  a.router_logits.shape = Shape{M, m.spec.num_experts};
  a.output = out.view();
  a.output.shape = Shape{M, m.spec.hidden};
  return a;
}

// ---- oneDNN baseline: one matmul pair per activated expert, weights pre-reordered ----------------------
#ifdef MOERUN_BENCH_DNNL
struct DnnlBaseline {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::memory::data_type wdt = dnnl::memory::data_type::bf16;
  std::string label;
  dnnl::matmul mm1, mm2, smm1, smm2;
  dnnl::matmul::primitive_desc pd1, pd2, spd1, spd2;
  std::vector<dnnl::memory> w13, w2, sw13, sw2;
  // The reordered weights' buffers, on huge pages like the cpu backend's stacks (huge_pages.hpp), so
  // that the two stream their weights under the same paging.
  std::vector<std::unique_ptr<void, decltype(&std::free)>> buffers;
  int64_t H = 0, R = 0, I = 0, Is = 0;

  // [K, N] weights of expert e of `em` reordered into pd's weights format.
  dnnl::memory reorder_weights(const ExpertMatrix& em, int64_t e, const dnnl::memory::desc& wd) {
    std::vector<float> dense(static_cast<size_t>(em.rows * em.cols));
    check_expert_matrix(em, "baseline weights");  // once, not per row as dequantize_row would
    for (int64_t r = 0; r < em.rows; ++r) dequantize_row_unchecked(em, e, r, dense.data() + r * em.cols);
    auto src = dnnl::memory({{em.cols, em.rows}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ba}, eng, dense.data());
    void* buf = moerun::cpu::alloc_large(wd.get_size());
    if (!buf) throw std::bad_alloc();
    buffers.emplace_back(buf, &std::free);
    auto dst = dnnl::memory(wd, eng, buf);
    dnnl::reorder(src, dst).execute(strm, src, dst);
    strm.wait();
    return dst;
  }

  bool init(const Model& m) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    H = m.spec.hidden;
    R = m.spec.w13_rows();
    I = m.spec.intermediate;
    const dnnl::memory::dim rt = DNNL_RUNTIME_DIM_VAL;
    for (dt d : {dt::bf16, dt::f32}) {
      try {
        auto src1 = dnnl::memory::desc({rt, H}, d, tag::ab);
        auto wei1 = dnnl::memory::desc({H, R}, d, tag::any);
        auto dst1 = dnnl::memory::desc({rt, R}, dt::f32, tag::ab);
        auto src2 = dnnl::memory::desc({rt, I}, d, tag::ab);
        auto wei2 = dnnl::memory::desc({I, H}, d, tag::any);
        auto dst2 = dnnl::memory::desc({rt, H}, dt::f32, tag::ab);
        pd1 = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src1, wei1, dst1), eng);
        pd2 = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src2, wei2, dst2), eng);
        wdt = d;
        label = d == dt::bf16 ? "onednn-bf16" : "onednn-f32 (bf16 matmul unimplemented on this ISA)";
        break;
      } catch (const dnnl::error&) {
        if (d == dt::f32) return false;
      }
    }
    mm1 = dnnl::matmul(pd1);
    mm2 = dnnl::matmul(pd2);
    for (int64_t e = 0; e < m.w->w13.experts; ++e) {
      w13.push_back(reorder_weights(m.w->w13, e, pd1.weights_desc()));
      w2.push_back(reorder_weights(m.w->w2, e, pd2.weights_desc()));
    }
    if (m.spec.shared.count > 0) {  // the shared experts: one more gated MLP every token passes through
      Is = m.w->shared_w2.cols;
      const dnnl::memory::dim rt = DNNL_RUNTIME_DIM_VAL;
      using dt = dnnl::memory::data_type;
      using tag = dnnl::memory::format_tag;
      spd1 = dnnl::matmul::primitive_desc(
          dnnl::matmul::desc({{rt, H}, wdt, tag::ab}, {{H, 2 * Is}, wdt, tag::any}, {{rt, 2 * Is}, dt::f32, tag::ab}), eng);
      spd2 = dnnl::matmul::primitive_desc(
          dnnl::matmul::desc({{rt, Is}, wdt, tag::ab}, {{Is, H}, wdt, tag::any}, {{rt, H}, dt::f32, tag::ab}), eng);
      smm1 = dnnl::matmul(spd1);
      smm2 = dnnl::matmul(spd2);
      sw13.push_back(reorder_weights(m.w->shared_w13, 0, spd1.weights_desc()));
      sw2.push_back(reorder_weights(m.w->shared_w2, 0, spd2.weights_desc()));
    }
    return true;
  }

  // Scratch kept across calls.
  std::vector<float> x32, h1, y, acc, act, o;
  std::vector<uint16_t> xb, hb;
  std::vector<int32_t> ids;
  std::vector<float> tw;
  dispatch::Dispatch d;

  // gather -> matmul -> silu-and-mul -> matmul -> weighted scatter-add, the simple way.
  template <typename Tok, typename Wt>
  void mlp(int64_t me, Tok tok, Wt wt, dnnl::matmul& m1, dnnl::matmul& m2, dnnl::memory& wa, dnnl::memory& wb, int64_t units) {
    using tag = dnnl::memory::format_tag;
    const bool bf = wdt == dnnl::memory::data_type::bf16;
    const int64_t rows = 2 * units;
    xb.resize(static_cast<size_t>(me * H));
    y.resize(static_cast<size_t>(me * H));
    for (int64_t i = 0; i < me; ++i) {
      const float* src = x32.data() + static_cast<int64_t>(tok(i)) * H;
      if (bf) for (int64_t c = 0; c < H; ++c) xb[static_cast<size_t>(i * H + c)] = f32_to_bf16(src[c]);
      else std::memcpy(y.data() + i * H, src, static_cast<size_t>(H) * 4);
    }
    h1.resize(static_cast<size_t>(me * rows));
    auto src1 = dnnl::memory({{me, H}, wdt, tag::ab}, eng, bf ? static_cast<void*>(xb.data()) : static_cast<void*>(y.data()));
    auto dst1 = dnnl::memory({{me, rows}, dnnl::memory::data_type::f32, tag::ab}, eng, h1.data());
    m1.execute(strm, {{DNNL_ARG_SRC, src1}, {DNNL_ARG_WEIGHTS, wa}, {DNNL_ARG_DST, dst1}});
    strm.wait();
    act.resize(static_cast<size_t>(me * units));
    for (int64_t i = 0; i < me; ++i)
      for (int64_t j = 0; j < units; ++j) {
        const float g = h1[static_cast<size_t>(i * rows + j)], u = h1[static_cast<size_t>(i * rows + units + j)];
        act[static_cast<size_t>(i * units + j)] = g / (1.0f + std::exp(-g)) * u;
      }
    hb.resize(act.size());
    if (bf) for (size_t i = 0; i < act.size(); ++i) hb[i] = f32_to_bf16(act[i]);
    o.resize(static_cast<size_t>(me * H));
    auto src2 = dnnl::memory({{me, units}, wdt, tag::ab}, eng, bf ? static_cast<void*>(hb.data()) : static_cast<void*>(act.data()));
    auto dst2 = dnnl::memory({{me, H}, dnnl::memory::data_type::f32, tag::ab}, eng, o.data());
    m2.execute(strm, {{DNNL_ARG_SRC, src2}, {DNNL_ARG_WEIGHTS, wb}, {DNNL_ARG_DST, dst2}});
    strm.wait();
    for (int64_t i = 0; i < me; ++i) {
      const int64_t t = tok(i);
      const float w = wt(i);
      for (int64_t c = 0; c < H; ++c) acc[static_cast<size_t>(t * H + c)] += w * o[static_cast<size_t>(i * H + c)];
    }
  }

  void forward(const Model& m, int64_t M, int call, HostTensor& out) {
    const MoeSpec& s = m.spec;
    const int k = s.top_k;
    ids.resize(static_cast<size_t>(M * k));
    tw.resize(ids.size());
    x32.resize(static_cast<size_t>(M * H));
    for (int64_t i = 0; i < M * H; ++i) x32[static_cast<size_t>(i)] = bf16_to_f32(m.hidden.as<const uint16_t>()[i]);
    routing::topk_host(s, m.logits[static_cast<size_t>(call) % m.logits.size()].as<const float>(), M,
                       m.w->correction_bias.empty() ? nullptr : m.w->correction_bias.as<const float>(), ids.data(), tw.data());
    dispatch::build_dispatch(s, ids.data(), tw.data(), M, d);
    acc.assign(static_cast<size_t>(M * H), 0.0f);
    for (int e = 0; e < d.local_experts; ++e) {
      const int64_t me = d.count(e);
      if (me == 0) continue;
      const int32_t r0 = d.offsets[static_cast<size_t>(e)];
      mlp(me, [&](int64_t i) { return d.token[static_cast<size_t>(r0 + i)]; },
          [&](int64_t i) { return d.weight[static_cast<size_t>(r0 + i)]; }, mm1, mm2, w13[static_cast<size_t>(e)],
          w2[static_cast<size_t>(e)], I);
    }
    if (!sw13.empty())
      mlp(M, [](int64_t i) { return static_cast<int32_t>(i); }, [](int64_t) { return 1.0f; }, smm1, smm2, sw13[0], sw2[0], Is);
    for (int64_t i = 0; i < M * H; ++i) out.as<uint16_t>()[i] = f32_to_bf16(acc[static_cast<size_t>(i)]);
  }
};
#endif

struct Bench {
  Opts opt;
  Limits lim, lim1;  // with opt threads, with 1 thread
  int threads = 1;
  json rows = json::array();
  bool warned_sweep = false;
  double huge_page_mb = -1;  // most anonymous memory seen on huge pages after packing (-1: unknown)
  std::string started_utc = moerun::bench::utc_now();  // (run_stamp.hpp)

  // peak_variant: the variant whose instructions set the peak (default `variant`).
  void row(const Model& m, const std::string& backend, int64_t M, int th, double t, const std::string& variant,
           double ref_t = 0, const std::string& peak_variant = "") {
    const Cost c = cost(m, M);
    const Limits& l = th == 1 ? lim1 : lim;
    const auto [peak_name, peak] = peak_for(l, backend, peak_variant.empty() ? variant : peak_variant);
    const double floor = std::max(c.bytes / (l.bw * 1e9), c.flops / (peak * 1e9));
    json r = {{"shape", m.name},
              {"note", m.note},
              {"format", format_label(m.spec)},
              {"act_quant", std::string(to_string(m.spec.act_quant))},
              {"backend", backend},
              {"variant", variant},
              {"m", M},
              {"threads", th},
              {"time_ms", t * 1e3},
              {"weight_bytes", c.bytes},
              {"flops", c.flops},
              {"gbps", c.bytes / t / 1e9},
              {"tflops", c.flops / t / 1e12},
              {"floor_ms", floor * 1e3},
              {"peak", peak_name},
              {"peak_gflops", peak},
              {"roofline_pct", 100.0 * floor / t},
              {"weight_copies", backend.rfind("cpu", 0) == 0 ? static_cast<int>(m.copies.size()) : 1}};
    if (ref_t > 0) r["speedup_vs_reference"] = ref_t / t;
    rows.push_back(r);
    std::printf("%-18s %-14s %-28s M=%-5lld th=%-2d %9.3f ms %7.2f GB/s %7.3f TF/s floor %8.3f ms (%-10s) %5.1f%%%s\n",
                m.name.c_str(), format_label(m.spec).c_str(),
                (backend + (variant.empty() ? "" : "/" + variant)).c_str(), static_cast<long long>(M), th, t * 1e3,
                c.bytes / t / 1e9, c.flops / t / 1e12, floor * 1e3, peak_name.c_str(), 100.0 * floor / t,
                ref_t > 0 ? (" x" + std::to_string(ref_t / t) + " vs ref").c_str() : "");
    std::fflush(stdout);
  }

  // One cpu runner per weight copy of m (Model::copies), made with the current environment.
  // Also notes how much anonymous memory is on huge pages once they are packed (huge_page_mb).
  std::vector<std::unique_ptr<Runner>> cpu_runners(const Model& m, int th) {
    RunnerOptions ro;
    ro.threads = th;
    std::vector<std::unique_ptr<Runner>> rs;
    for (const auto& w : m.copies) rs.push_back(make_cpu_backend()->create_runner(m.spec, *w, Platform::detect(), ro));
    huge_page_mb = std::max(huge_page_mb, static_cast<double>(cpu::anon_huge_page_bytes()) / 1e6);
    return rs;
  }
  // Call `call` runs copy call % copies on logit set (call / copies) % sets: each cycle of the sets
  // passes every copy.
  static ForwardArgs copy_args(const Model& m, int64_t M, int call, HostTensor& out) {
    return args_for(m, M, call / static_cast<int>(m.copies.size()), out);
  }

  double run_cpu(const Model& m, int64_t M, int th, std::string* variant = nullptr) {
    auto rs = cpu_runners(m, th);
    HostTensor out(DType::kBF16, {M, m.spec.hidden});
    if (variant) *variant = rs[0]->variant_for(M);
    const double budget = opt.row_budget();
    const int n = static_cast<int>(rs.size());
    return time_median([&](int call) { auto a = copy_args(m, M, call, out); rs[static_cast<size_t>(call % n)]->forward(a); },
                       budget, 3, 200, n);
  }

  // The cpu backend as it is and under other settings ("VAR=VALUE" or several joined by commas, e.g.
  // MOERUN_CPU_KERNELS=v1; all set while the alternative runners are created), calls alternating so
  // that load from other processes hits both alike. Each runner packs its own copy of the weights, so
  // where those copies land in memory (2 MiB pages or not, which the runners created first may take)
  // is a difference between the two sets that no alternation removes. So the time is split in two
  // halves with fresh runners, the alternative's created first in one and second in the other, and the
  // samples pooled; each half's ratio is kept too (VsAlt::ratio_alt_first / ratio_alt_second), a
  // measure of the spread. A/A runs on the Zen 4 (session 41: a knob set to its default; qwen3-30b-a3b
  // one token, 2 threads, 2 s a half) read halves of 0.987-1.035 and pooled ratios of 0.993-1.023, so
  // an effect under 3% needs several rounds.
  struct VsAlt {
    double current = 0, alternative = 0;              // median seconds over both halves
    double ratio_alt_first = 0, ratio_alt_second = 0;  // alternative / current medians of each half
    std::string alt_variant;                           // the variant the alternative's runners take
  };
  VsAlt run_cpu_vs_alt(const Model& m, int64_t M, int th, const std::string& settings) {
    struct Saved { std::string name, value; bool was_set; };
    std::vector<Saved> saved;
    std::stringstream ss(settings);
    for (std::string kv; std::getline(ss, kv, ',');) {
      const std::string name = kv.substr(0, kv.find('='));
      const char* prev = std::getenv(name.c_str());
      saved.push_back({name, prev ? prev : "", prev != nullptr});
    }
    std::string alt_variant;
    const auto alt_runners = [&] {
      std::stringstream kvs(settings);
      for (std::string kv; std::getline(kvs, kv, ',');) {
        const size_t eq = kv.find('=');
        setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
      }
      auto r = cpu_runners(m, th);
      alt_variant = r.front()->variant_for(M);  // (under its settings: a knob may switch the kernel family)
      for (const Saved& v : saved) {
        if (v.was_set) setenv(v.name.c_str(), v.value.c_str(), 1);
        else unsetenv(v.name.c_str());
      }
      return r;
    };
    HostTensor out(DType::kBF16, {M, m.spec.hidden});
    std::vector<double> all_cur, all_alt;
    const auto median = [](const std::vector<double>& v) { return moerun_bench::median(v); };
    VsAlt res;
    for (int half = 0; half < 2; ++half) {
      std::vector<std::unique_ptr<Runner>> ra, rc;  // (released at the end of the half)
      if (half == 0) {
        ra = alt_runners();
        rc = cpu_runners(m, th);
      } else {
        rc = cpu_runners(m, th);
        ra = alt_runners();
      }
      std::vector<double> tc, ta;
      const double budget = opt.row_budget(), start = now_s();
      const size_t n = rc.size();
      for (int call = 0; (ta.size() < 3 || now_s() - start < budget) && ta.size() < 100; ++call) {
        // each call's logits differ (fresh experts from memory); which runner goes first alternates, so
        // neither profits more from what the other left in L3
        auto a = copy_args(m, M, call, out);
        for (int j = 0; j < 2; ++j) {
          const bool cur = (j == 0) == (call % 2 == 0);
          const double t0 = now_s();
          (cur ? rc : ra)[static_cast<size_t>(call) % n]->forward(a);
          if (call >= static_cast<int>(n)) (cur ? tc : ta).push_back(now_s() - t0);  // every runner's first call untimed
        }
      }
      (half == 0 ? res.ratio_alt_first : res.ratio_alt_second) = median(ta) / median(tc);
      all_cur.insert(all_cur.end(), tc.begin(), tc.end());
      all_alt.insert(all_alt.end(), ta.begin(), ta.end());
    }
    res.current = median(all_cur);
    res.alternative = median(all_alt);
    res.alt_variant = alt_variant;
    return res;
  }

  double run_ref(const Model& m, int64_t M) {
    auto r = make_reference_backend()->create_runner(m.spec, *m.w, Platform::detect(), {});
    HostTensor out(DType::kBF16, {M, m.spec.hidden});
    return time_median([&](int call) { auto a = args_for(m, M, call, out); r->forward(a); }, 0.0, 3, 3);  // (slow: 3 calls)
  }

  void model_rows(const Model& m, const std::vector<int64_t>& ms, bool with_ref, bool with_dnnl) {
#ifdef MOERUN_BENCH_DNNL
    std::unique_ptr<DnnlBaseline> dn;
    if (with_dnnl && !opt.no_onednn) {
      dn = std::make_unique<DnnlBaseline>();
      const double t0 = now_s();
      if (!dn->init(m)) dn.reset();
      std::fprintf(stderr, "  oneDNN weights: %.1f s\n", now_s() - t0);
    }
#else
    (void)with_dnnl;
#endif
    for (int64_t M : ms) {
      double ref_t = 0;
      if (with_ref && M <= 4) ref_t = run_ref(m, M);
      std::string variant;
      double t;
      if (opt.compare_v1 || opt.compare_amx1 || opt.compare_down1 || !opt.compare_env.empty()) {
        // (settings, row name, JSON speedup key) of the alternative timed call by call
        struct Alt { std::string settings; const char *row, *key; };
        const Alt alt = !opt.compare_env.empty() ? Alt{opt.compare_env, "cpu-alt", "cpu_speedup_vs_alt"}
                        : opt.compare_down1      ? Alt{"MOERUN_CPU_DOWN_GROUP=1", "cpu-down1", "cpu_speedup_vs_down1"}
                        : opt.compare_amx1       ? Alt{"MOERUN_CPU_AMX_NBLOCKS=1", "cpu-amx1", "cpu_speedup_vs_amx1"}
                                                 : Alt{"MOERUN_CPU_KERNELS=v1", "cpu-v1", "cpu_speedup_vs_v1"};
        const VsAlt ab = run_cpu_vs_alt(m, M, threads, alt.settings);
        const double t1 = ab.alternative;
        t = ab.current;
        RunnerOptions ro;
        variant = make_cpu_backend()->create_runner(m.spec, *m.w, Platform::detect(), ro)->variant_for(M);
        row(m, alt.row, M, threads, t1, alt.settings, 0, ab.alt_variant);  // (its floor from its own kernels)
        rows.back()["alt_variant"] = ab.alt_variant;
        rows.back()[alt.key] = t1 / t;
        rows.back()["speedup_alt_created_first"] = ab.ratio_alt_first;
        rows.back()["speedup_alt_created_second"] = ab.ratio_alt_second;
      } else {
        t = run_cpu(m, M, threads, &variant);
      }
      if (ref_t > 0) row(m, "reference", M, threads, ref_t, "scalar-double");
      row(m, "cpu", M, threads, t, variant, ref_t);
#ifdef MOERUN_BENCH_DNNL
      if (dn) {
        HostTensor out(DType::kBF16, {M, m.spec.hidden});
        omp_set_num_threads(threads);
        const double td = time_median([&](int call) { dn->forward(m, M, call, out); }, opt.row_budget());
        row(m, dn->label, M, threads, td, "");
        rows.back()["cpu_speedup_vs_onednn"] = td / t;
      }
#endif
    }
  }

  // The stream/tile crossover sweep: one runner per MOERUN_CPU_STREAM_MAX_TOKENS value (the variable is
  // set while it is created and used), timed at each M.
  void stream_sweep(const Model& m, const std::vector<int64_t>& ms) {
    const char* prev = std::getenv("MOERUN_CPU_STREAM_MAX_TOKENS");
    const std::string keep = prev ? prev : "";
    for (int n : opt.sweep) {
      setenv("MOERUN_CPU_STREAM_MAX_TOKENS", std::to_string(n).c_str(), 1);
      RunnerOptions ro;
      ro.threads = threads;
      const double t0 = now_s();
      auto r = make_cpu_backend()->create_runner(m.spec, *m.w, Platform::detect(), ro);
      std::fprintf(stderr, "  runner (n = %d): %.1f s\n", n, now_s() - t0);
      for (int64_t M : ms) {
        const std::string variant = r->variant_for(M);
        HostTensor out(DType::kBF16, {M, m.spec.hidden});
        const double t = time_median([&](int call) { auto a = args_for(m, M, call, out); r->forward(a); }, opt.row_budget());
        row(m, "cpu-sweep", M, threads, t, variant);
        // The runner names its variant from the mean tokens per expert (runner.cpp variant_name): when the
        // variant does not follow n, this build of the backend does not read the variable.
        const double per_expert = static_cast<double>(M) * m.spec.top_k / std::max(1, m.spec.num_experts);
        const bool stream = variant.find("stream") != std::string::npos;
        const bool honoured = stream == (per_expert <= n);
        rows.back()["stream_max_tokens"] = n;
        rows.back()["tokens_per_expert"] = per_expert;
        rows.back()["stream_env_honoured"] = honoured;
        if (!honoured && !warned_sweep) {
          warned_sweep = true;
          std::printf("WARNING: variant %s at %.1f tokens/expert with MOERUN_CPU_STREAM_MAX_TOKENS=%d: this cpu backend "
                      "seems not to read the variable (sweep rows marked stream_env_honoured=false)\n",
                      variant.c_str(), per_expert, n);
        }
      }
    }
    if (prev) setenv("MOERUN_CPU_STREAM_MAX_TOKENS", keep.c_str(), 1);
    else unsetenv("MOERUN_CPU_STREAM_MAX_TOKENS");
  }

  // --decode-ratios: models[0] is bf16, the rest the formats compared with it, all of one shape. Each
  // round runs one forward of every model at M on the same logit set, round % 8, in an order rotated by
  // one each round, so no format always follows the same one. A format's copy changes every 8 rounds
  // ((round / 8) % copies), so each copy meets every logit set: with round % copies, 8 copies met one
  // set each, and a cycle touched an eighth of the bytes the copy count was sized for.
  void decode_ratios(const std::vector<const Model*>& models, int64_t M, double budget) {
    const size_t nf = models.size();
    std::vector<std::vector<std::unique_ptr<Runner>>> rs;
    std::vector<std::string> variants;
    for (const Model* m : models) {
      rs.push_back(cpu_runners(*m, threads));
      variants.push_back(rs.back()[0]->variant_for(M));
    }
    std::vector<HostTensor> outs;
    for (const Model* m : models) outs.emplace_back(DType::kBF16, Shape{M, m->spec.hidden});
    // Every runner's first call is untimed (as in run_cpu): copy c first runs in round 8c, so the first
    // 8 x (most copies) rounds are, and sample i of every format comes from the same round.
    size_t warm = 0;
    for (const auto& r : rs) warm = std::max(warm, 8 * (r.size() - 1) + 1);
    std::vector<std::vector<double>> t(nf);
    const double start = now_s();
    for (int round = 0; (t[0].size() < 8 || now_s() - start < budget) && t[0].size() < 20000; ++round) {
      for (size_t j = 0; j < nf; ++j) {
        const size_t f = (j + static_cast<size_t>(round)) % nf;
        const Model& m = *models[f];
        const int n = static_cast<int>(rs[f].size());
        auto a = args_for(m, M, round, outs[f]);  // logit set round % 8, the same for every format
        const double t0 = now_s();
        rs[f][static_cast<size_t>((round / 8) % n)]->forward(a);
        const double dt = now_s() - t0;
        if (static_cast<size_t>(round) >= warm) t[f].push_back(dt);
      }
    }
    const auto pct = [](std::vector<double> v, double q) {
      std::sort(v.begin(), v.end());
      return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
    };
    const size_t timed = t[0].size();
    for (size_t f = 0; f < nf; ++f) {
      const Model& m = *models[f];
      row(m, "cpu", M, threads, moerun_bench::median(t[f]), variants[f]);
      json& r = rows.back();
      r["rounds"] = timed;
      r["method_note"] = "decode-ratios: formats alternated call by call";
      if (f == 0) continue;
      std::vector<double> ratio(timed);
      for (size_t i = 0; i < timed; ++i) ratio[i] = t[0][i] / t[f][i];
      r["speedup_vs_bf16"] = moerun_bench::median(ratio);
      r["speedup_vs_bf16_p10"] = pct(ratio, 0.1);
      r["speedup_vs_bf16_p90"] = pct(ratio, 0.9);
      std::printf("  %-14s %.2fx faster than bf16 (median over %zu alternated rounds; 10th-90th percentile %.2f-%.2fx)\n",
                  format_label(m.spec).c_str(), moerun_bench::median(ratio), timed, pct(ratio, 0.1), pct(ratio, 0.9));
    }
    std::fflush(stdout);
  }
};

// --compare-env's argument: VAR=VALUE settings joined by commas, each a knob of the cpu backend
// (core/knobs.hpp, area "cpu") set to a value it takes, so that neither a typo nor another backend's
// knob can time the default against itself; not the VDPBF16PS rate, which is read once per process and
// so cannot differ between the two sets of runners (the ISA cap is a core knob, read once too).
bool valid_settings(const std::string& s) {
  std::stringstream ss(s);
  int n = 0;
  for (std::string kv; std::getline(ss, kv, ','); ++n) {
    const size_t eq = kv.find('=');
    const Knob* k = eq == std::string::npos ? nullptr : find_knob(kv.substr(0, eq));
    const bool per_process = k && (k->name == "MOERUN_CPU_ISA" || k->name == "MOERUN_CPU_BF16_DOT_RATE");
    const bool elsewhere = k && !per_process && k->area != "cpu";
    if (!k || per_process || elsewhere || !knob_accepts(*k, kv.substr(eq + 1))) {
      std::fprintf(stderr, "cpu_moe_bench: --compare-env '%s': %s\n", kv.c_str(),
                   !k            ? "not a knob (moerun knobs --all lists them)"
                   : per_process ? "read once per process: both sides would run the same"
                   : elsewhere   ? ("a " + std::string(k->area) + " knob: the cpu backend never reads it, so both sides "
                                    "would run the same (moerun knobs --all lists the cpu ones)").c_str()
                                 : ("takes " + knob_values(*k)).c_str());
      return false;
    }
  }
  return n > 0 && s.back() != ',';
}

// The rows main() times: which format labels each shape has, in the full run (--quick: qwen3 only;
// --stream-sweep: the bf16 layers of qwen3 and deepseek-v2-lite). The check below refuses a request
// that would time none of them.
const char* const kQwenFormats[] = {"bf16", "fp8-block", "mxfp4", "nvfp4", "int8-channel", "mxfp4+int8-token-group",
                                    "nvfp4+int8-token-group"};
std::vector<std::string> formats_of(const std::string& shape, bool quick, bool sweep) {
  if (sweep) return shape == "qwen3-30b-a3b" || shape == "deepseek-v2-lite" ? std::vector<std::string>{"bf16"}
                                                                           : std::vector<std::string>{};
  if (shape == "qwen3-30b-a3b") return {std::begin(kQwenFormats), std::end(kQwenFormats)};
  if (quick) return {};
  if (shape == "gpt-oss-20b") return {"mxfp4", "bf16"};
  return {"bf16"};  // deepseek-v2-lite, mixtral-8x7b
}

int run(int argc, char** argv);

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpu_moe_bench: %s\n", e.what());
    return 1;
  }
}

namespace {

int run(int argc, char** argv) {
  const char* usage =
      "usage: %s [--quick] [--json PATH] [--threads N] [--only SHAPE,...] [--m 1,64,...] [--compare-v1] "
      "[--compare-amx1] [--compare-down1] [--compare-env VAR=VALUE[,...]] [--budget S] [--stream-sweep 4,8,16,...] "
      "[--formats bf16,mxfp4+int8-token-group,...] [--no-onednn] [--decode-ratios]\n";
  Bench b;
  bool only_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") b.opt.quick = true;
    else if (a == "--json" && i + 1 < argc) b.opt.json_path = argv[++i];
    else if (a == "--threads" && i + 1 < argc) {
      const auto t = moerun_bench::int_list("--threads", argv[++i], 0, 4096);  // 0: every processor
      if (!t) return 2;
      if (t->size() != 1) {
        std::fprintf(stderr, "--threads: one count (0: every processor)\n");
        return 2;
      }
      b.opt.threads = static_cast<int>(t->front());
    } else if (a == "--only" && i + 1 < argc) {
      // Comma-separated shape names (spaces around them ignored); an unknown name is an error, not an
      // empty run, and so is an empty list (which would otherwise mean every shape).
      only_given = true;
      for (const std::string& name : moerun_bench::name_list(argv[++i])) {
        if (std::find(std::begin(kShapes), std::end(kShapes), name) == std::end(kShapes)) {
          std::fprintf(stderr, "--only: unknown shape '%s' (known: qwen3-30b-a3b, deepseek-v2-lite, gpt-oss-20b, "
                       "mixtral-8x7b)\n", name.c_str());
          return 2;
        }
        b.opt.only.push_back(name);
      }
    }
    else if (a == "--compare-v1") b.opt.compare_v1 = true;
    else if (a == "--no-onednn") b.opt.no_onednn = true;
    else if (a == "--decode-ratios") b.opt.decode_ratios = true;
    else if (a == "--compare-amx1") b.opt.compare_amx1 = true;
    else if (a == "--compare-down1") b.opt.compare_down1 = true;
    else if (a == "--compare-env" && i + 1 < argc && valid_settings(argv[i + 1]))
      b.opt.compare_env = argv[++i];
    else if (a == "--m" && i + 1 < argc) {
      const auto ms = moerun_bench::int_list("--m", argv[++i], 1, 65536);
      if (!ms) return 2;
      b.opt.ms = *ms;
    } else if (a == "--formats" && i + 1 < argc) {
      b.opt.formats = moerun_bench::name_list(argv[++i]);
      if (b.opt.formats.empty()) {
        std::fprintf(stderr, "--formats: an empty list\n");
        return 2;
      }
    } else if (a == "--budget" && i + 1 < argc) {
      char* end = nullptr;
      const std::string v = argv[++i];
      b.opt.budget = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(b.opt.budget >= 0.0 && b.opt.budget <= 3600.0)) {
        std::fprintf(stderr, "--budget: '%s' is not a number of seconds in 0..3600\n", v.c_str());
        return 2;
      }
    } else if (a == "--help" || a == "-h") {
      std::printf(usage, argv[0]);
      return 0;
    } else if (a == "--stream-sweep" && i + 1 < argc) {
      // Each value becomes MOERUN_CPU_STREAM_MAX_TOKENS: one it does not take would time the default.
      const Knob& cut = *find_knob("MOERUN_CPU_STREAM_MAX_TOKENS");
      const auto sweep = moerun_bench::int_list("--stream-sweep", argv[++i], 0, 65536);
      if (!sweep) return 2;
      for (int64_t n : *sweep) {
        if (!knob_accepts(cut, std::to_string(n))) {
          std::fprintf(stderr, "--stream-sweep: %lld: takes %s\n", static_cast<long long>(n), knob_values(cut).c_str());
          return 2;
        }
        b.opt.sweep.push_back(static_cast<int>(n));
      }
    } else {
      std::fprintf(stderr, usage, argv[0]);
      return 2;
    }
  }
  // Every shape and format asked for must have a row in this mode: a request that matches none would
  // measure the machine's limits, write an empty table and exit 0.
  if (only_given && b.opt.only.empty()) {
    std::fprintf(stderr, "--only: an empty list\n");
    return 2;
  }
  if (b.opt.decode_ratios) {  // its own rows: refuse what it would ignore
    if (!b.opt.sweep.empty() || b.opt.compare_v1 || b.opt.compare_amx1 || b.opt.compare_down1 || !b.opt.compare_env.empty()) {
      std::fprintf(stderr, "--decode-ratios: not with --stream-sweep or --compare-*\n");
      return 2;
    }
    for (const std::string& s : b.opt.only)
      if (s != "qwen3-30b-a3b") {
        std::fprintf(stderr, "--decode-ratios: runs qwen3-30b-a3b only (--only %s)\n", s.c_str());
        return 2;
      }
    bool any = b.opt.formats.empty();
    for (const std::string& f : b.opt.formats) {
      if (f != "bf16" && f != "fp8-block" && f != "mxfp4" && f != "nvfp4") {
        std::fprintf(stderr, "--decode-ratios: compares fp8-block, mxfp4 and nvfp4 with bf16 (--formats %s)\n", f.c_str());
        return 2;
      }
      any = any || f != "bf16";
    }
    if (!any) {
      std::fprintf(stderr, "--decode-ratios: --formats bf16 alone leaves nothing to compare with bf16\n");
      return 2;
    }
  } else {
    const bool sweep = !b.opt.sweep.empty();
    const char* mode = sweep ? "--stream-sweep" : b.opt.quick ? "--quick" : "the full run";
    std::set<std::string> runnable;  // format labels of the selected shapes
    for (const std::string& shape : kShapes) {
      if (!b.opt.want(shape)) continue;
      const std::vector<std::string> fs = formats_of(shape, b.opt.quick, sweep);
      bool any = false;
      for (const std::string& f : fs) {
        runnable.insert(f);
        any = any || b.opt.want_format(f);
      }
      if (!b.opt.only.empty() && !any) {
        std::string has;
        for (const std::string& f : fs) has += (has.empty() ? "" : ", ") + f;
        std::fprintf(stderr, "--only %s: no rows%s in %s (its formats there: %s)\n", shape.c_str(),
                     b.opt.formats.empty() ? "" : " of the --formats asked for", mode, has.empty() ? "none" : has.c_str());
        return 2;
      }
    }
    for (const std::string& f : b.opt.formats)
      if (!runnable.count(f)) {
        std::string known;
        for (const std::string& k : runnable) known += (known.empty() ? "" : ", ") + k;
        std::fprintf(stderr, "--formats: no row of format '%s' in %s of the shapes chosen (they have: %s)\n", f.c_str(),
                     mode, known.empty() ? "none" : known.c_str());
        return 2;
      }
  }
  try {
    check_knob_environment();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpu_moe_bench: %s\n", e.what());
    return 2;
  }
  if (!b.opt.json_path.empty() && !moerun_bench::json_path_writable(b.opt.json_path)) {  // before minutes of measuring
    std::fprintf(stderr, "--json %s: cannot write there\n", b.opt.json_path.c_str());
    return 2;
  }
  const double t_start = now_s();
  b.threads = b.opt.threads > 0 ? b.opt.threads : omp_get_num_procs();
  const Platform p = Platform::detect();
  std::printf("platform: %s; cpu backend ISA %s\n", p.summary().c_str(), std::string(to_string(cpu::effective_isa())).c_str());
  b.lim = measure_limits(b.threads, b.opt.quick);
  b.lim1 = b.threads == 1 ? b.lim : measure_limits(1, b.opt.quick);
  const auto gf = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return v > 0 ? std::string(buf) : std::string("absent");
  };
  std::printf("limits (%d threads / 1 thread): read bandwidth %.1f / %.1f GB/s; fp32 FMA peak AVX2 %.1f / %.1f, "
              "AVX-512 %s / %s GFLOP/s; VDPBF16PS peak %s / %s GFLOP/s; AMX bf16 tile peak %s / %s GFLOP/s; int8 "
              "peak AVX2 %s / %s, VPDPBUSD %s / %s GOP/s\n",
              b.threads, b.lim.bw, b.lim1.bw, b.lim.fma_avx2, b.lim1.fma_avx2, gf(b.lim.fma_avx512).c_str(),
              gf(b.lim1.fma_avx512).c_str(), gf(b.lim.bf16_dot).c_str(), gf(b.lim1.bf16_dot).c_str(),
              gf(b.lim.amx.gflops).c_str(), gf(b.lim1.amx.gflops).c_str(), gf(b.lim.int8_avx2).c_str(),
              gf(b.lim1.int8_avx2).c_str(), gf(b.lim.int8_vnni).c_str(), gf(b.lim1.int8_vnni).c_str());
  if (b.lim.amx.gflops > 0)  // diagnostics of the tile kernels, not floors
    std::printf("amx, alternating slices (%d threads / 1 thread): 2x2 on register tiles %s / %s GFLOP/s, tiles "
                "reloaded from L1 every step %s / %s GFLOP/s, with A rows 4160 bytes apart %s / %s GFLOP/s; "
                "tileloadd alone from L1 %s / %s GB/s\n",
                b.threads, gf(b.lim.amx.gflops_2x2_alternated).c_str(), gf(b.lim1.amx.gflops_2x2_alternated).c_str(),
                gf(b.lim.amx.gflops_2x2_l1).c_str(), gf(b.lim1.amx.gflops_2x2_l1).c_str(),
                gf(b.lim.amx.gflops_2x2_l1_strided).c_str(), gf(b.lim1.amx.gflops_2x2_l1_strided).c_str(),
                gf(b.lim.amx.tileload_gbs).c_str(), gf(b.lim1.amx.tileload_gbs).c_str());
  std::fflush(stdout);

  const auto write_json = [&] {
    if (b.opt.json_path.empty()) return;
    json limits = b.lim.to_json();
    const json one = b.lim1.to_json();
    for (const auto& [k, v] : one.items()) limits[k + "_1thread"] = v;
    json j = {{"bench", "cpu_moe_bench"},
              {"commit", moerun::bench::build_commit()},
              {"started_utc", b.started_utc},
              {"platform", p.summary()},
              {"cpu_model", p.cpu.model},
              {"cpu_isa_used", std::string(to_string(cpu::effective_isa()))},
              {"threads", b.threads},
              {"quick", b.opt.quick},
              {"budget_s", b.opt.row_budget()},
#ifdef MOERUN_BENCH_DNNL
              {"onednn", true},
#else
              {"onednn", false},
#endif
              {"limits", limits},
              {"anon_huge_page_mb_max", b.huge_page_mb},
              {"llc_bytes", moerun_bench::llc_bytes()},
              {"method", "median of repeated forwards, router logits rotated over 8 random sets; bytes = distinct "
                         "activated experts' stored weight bytes; floor = max(bytes/bw, flops/peak), peak per row: "
                         "amx-bf16 (tdpbf16ps) for AMX variants (tiles, decode stream) and oneDNN on AMX CPUs, "
                         "avx512-vnni-int8 (vpdpbusd) / avx2-int8 (vpmaddubsw step) for the q8 kernels and half of it "
                         "for q15 (two int8 rows a token), avx2-fma for other avx2-* "
                         "variants, avx512-bf16-dot (vdpbf16ps) for avx512bf16-* variants and oneDNN bf16 on "
                         "AVX512-BF16 CPUs without AMX, else avx512-fma (avx2-fma "
                         "without AVX-512)"},
              {"elapsed_s", now_s() - t_start},
              {"rows", b.rows}};
    if (!b.opt.sweep.empty()) j["stream_sweep"] = b.opt.sweep;
    if (!moerun_bench::write_json_file(b.opt.json_path, j, 2, "cpu_moe_bench")) std::exit(1);
  };

  if (b.opt.decode_ratios) {
    const std::vector<int64_t> ms = !b.opt.ms.empty() ? b.opt.ms : std::vector<int64_t>{1};
    const int64_t mmax = *std::max_element(ms.begin(), ms.end());
    std::vector<Model> models;
    models.reserve(4);
    models.push_back(make_model("qwen3-30b-a3b", "", WeightFormat::kBF16, mmax));
    for (WeightFormat f : {WeightFormat::kFp8Block, WeightFormat::kMxfp4, WeightFormat::kNvfp4})
      if (b.opt.formats.empty() || b.opt.want_format(std::string(to_string(f))))
        models.push_back(make_model("qwen3-30b-a3b", "", f, mmax));
    std::vector<const Model*> ptrs;
    for (const Model& m : models) ptrs.push_back(&m);
    for (int64_t M : ms) {
      b.decode_ratios(ptrs, M, b.opt.budget >= 0 ? b.opt.budget : 12.0);
      write_json();
    }
    std::printf("huge pages: at most %.0f MB of anonymous memory on 2 MiB pages (-1: unknown)\ntotal %.1f s\n",
                b.huge_page_mb, now_s() - t_start);
    write_json();
    return 0;
  }
  if (!b.opt.sweep.empty()) {
    const std::vector<int64_t> ms = !b.opt.ms.empty() ? b.opt.ms : std::vector<int64_t>{16, 64, 256};
    const int64_t mmax = *std::max_element(ms.begin(), ms.end());
    for (const char* shape : {"qwen3-30b-a3b", "deepseek-v2-lite"}) {
      if (!b.opt.want(shape)) continue;
      Model m = make_model(shape, "", WeightFormat::kBF16, mmax);
      b.stream_sweep(m, ms);
      write_json();
    }
    std::printf("huge pages: at most %.0f MB of anonymous memory on 2 MiB pages (-1: unknown)\ntotal %.1f s\n",
                b.huge_page_mb, now_s() - t_start);
    write_json();
    return 0;
  }

  const std::vector<int64_t> all_m = !b.opt.ms.empty() ? b.opt.ms
                                     : b.opt.quick ? std::vector<int64_t>{1, 16, 256} : std::vector<int64_t>{1, 4, 16, 64, 256, 1024};
  // The bf16 models hold inputs for this many tokens (the rows read M of them): at least the default 1024.
  const int64_t rows_cap = std::max<int64_t>(1024, *std::max_element(all_m.begin(), all_m.end()));
  if (b.opt.want("qwen3-30b-a3b") && b.opt.want_format("bf16")) {
    Model q = make_model("qwen3-30b-a3b", "", WeightFormat::kBF16, rows_cap);
    b.model_rows(q, all_m, true, true);
    // thread scaling 1 -> N
    for (int64_t M : {int64_t{1}, int64_t{256}}) {
      std::string v;
      const double t1 = b.run_cpu(q, M, 1, &v);
      b.row(q, "cpu", M, 1, t1, v);
    }
    write_json();
  }
  if (b.opt.want("qwen3-30b-a3b")) {  // quantized formats at decode (M = 1), plus prefill M=256 for each (or --m)
    for (WeightFormat f : {WeightFormat::kFp8Block, WeightFormat::kMxfp4, WeightFormat::kNvfp4, WeightFormat::kInt8PerChannel}) {
      if (!b.opt.want_format(std::string(to_string(f)))) continue;
      const std::vector<int64_t> ms = !b.opt.ms.empty() ? b.opt.ms
                                      : b.opt.quick     ? std::vector<int64_t>{1}
                                                        : std::vector<int64_t>{1, 256};
      Model q = make_model("qwen3-30b-a3b", "", f, std::max<int64_t>(256, *std::max_element(ms.begin(), ms.end())));
      b.model_rows(q, ms, false, false);
      write_json();
    }
    // 4-bit weights with int8 activations (the q8 kernel up to 8 tokens per expert: M = 128 here).
    for (WeightFormat f : {WeightFormat::kMxfp4, WeightFormat::kNvfp4}) {
      if (!b.opt.want_format(std::string(to_string(f)) + "+int8-token-group")) continue;
      const std::vector<int64_t> ms = !b.opt.ms.empty() ? b.opt.ms
                                      : b.opt.quick     ? std::vector<int64_t>{1}
                                                        : std::vector<int64_t>{1, 4, 16, 64, 256};
      Model q = make_model("qwen3-30b-a3b", "int8 activations", f, std::max<int64_t>(256, *std::max_element(ms.begin(), ms.end())),
                           [](MoeSpec& s) { s.act_quant = ActQuant::kInt8PerTokenGroup; });
      b.model_rows(q, ms, false, false);
      write_json();
    }
  }
  if (!b.opt.quick) {
    if (b.opt.want("deepseek-v2-lite") && b.opt.want_format("bf16")) {
      Model d = make_model("deepseek-v2-lite", "2 shared experts", WeightFormat::kBF16, rows_cap);
      b.model_rows(d, all_m, false, true);
      write_json();
    }
    for (WeightFormat f : {WeightFormat::kMxfp4, WeightFormat::kBF16}) {
      if (!b.opt.want("gpt-oss-20b")) break;
      if (!b.opt.want_format(std::string(to_string(f)))) continue;
      Model g = make_model("gpt-oss-20b", "swiglu-oai, interleaved, biases", f, rows_cap);
      b.model_rows(g, all_m, false, f == WeightFormat::kBF16);
      write_json();
    }
    if (b.opt.want("mixtral-8x7b") && b.opt.want_format("bf16")) {
      Model x = make_model("mixtral-8x7b", "scaled: I = 14336/4 = 3584 (fits the 24 GiB box with oneDNN's f32 copy)",
                           WeightFormat::kBF16, rows_cap, [](MoeSpec& s) { s.intermediate = 3584; });
      b.model_rows(x, !b.opt.ms.empty() ? b.opt.ms : std::vector<int64_t>{1, 16, 256}, false, true);
      write_json();
    }
  }
  std::printf("huge pages: at most %.0f MB of anonymous memory on 2 MiB pages (-1: unknown)\ntotal %.1f s\n",
              b.huge_page_mb, now_s() - t_start);
  write_json();
  return 0;
}

}  // namespace
