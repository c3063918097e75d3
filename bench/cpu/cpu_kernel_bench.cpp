// bench/cpu/cpu_kernel_bench.cpp — the cpu backend's kernels alone at one ISA level (AVX2 unless
// --isa says otherwise), per packed format: memory streaming at m = 1 (GB/s of packed bytes; --mem-m for
// more tokens),
// cache-resident streaming at m = 1..8 and panel + tile at larger m (ns per k pair and GFLOP/s). Used
// to judge one kernel change side by side with the previous kernel set ("v1", kept callable through
// kernels_for_variant) in the same process, and to tell a compute-bound kernel (cached time per k
// pair close to the memory one) from a memory-bound one. At avx512-bf16 and above, the formats the
// AVX512-BF16 kernel takes run through it on bf16 activations, as in the runner. The "-q8" formats run
// int8 activations on the q8 kernel, the "-q15" ones the same activations as 15-bit rows (two int8 rows
// a token), each with the kernel set, code layout and cut such a layer gets at the level (the same in
// every --variants column: those rows have no v1 kernels).
//
//   cpu_kernel_bench [--isa avx2|avx512|avx512-bf16|amx] [--variants v1,v2] [--formats bf16,...] [--reps N]
//                    [--m 1,4,...] [--mem-m 1,16,...] [--shape N,K]
//   cpu_kernel_bench --amx-probe [--m 32,64] [--reps N]
//   cpu_kernel_bench --amx-placement [--threads 1,2] [--seconds S]
//   cpu_kernel_bench --panels [--reps N]
//
// --amx-probe (AMX only): where tile_amx2 (2x2 AMX register blocking) loses time. TFLOP/s of one thread
// with the operands in L1 (K = 256: 16 KiB of panels and, at m = 32, 18 KiB of A rows; at m = 64 and
// more the A rows no longer fit the 48 KiB L1 and come partly from L2), in L2 (K = 2048, the same
// buffers over and over), and with the weights from memory (qwen3-30b-a3b gate_up copies); each with the
// panel prefetch on and off. (Software-pipelined tile loads, tried on a session branch that did not
// land, were no faster there.)
//
// --amx-placement (AMX only): tile_amx2's 2x2 step with its operands placed in L1, L2 or memory, and with
// C tiles spilled as a K-chunked kernel would (cpu/peaks/isa_peaks.hpp, amx_operand_placement): the
// ceiling each kernel design could reach, one thread and more, in alternating slices.
//
// --panels (AVX512-BF16 and above): the AMX tiles' converted panels of quantized formats, made the old way
// (dequant_panel_avx512 to an f32 panel, then panel_to_bf16_vnni) and decoded straight to bf16
// (panel_bf16_vnni), ns per 16-row block of K = 2048, blocks of qwen3-30b-a3b's gate_up from a copy in
// cache and from copies far larger than the caches; alternating rounds, the fastest of each.
//
// --shape N,K: the kernel table's matrix (default 1536,2048, qwen3-30b-a3b's gate_up; its down is
// 2048,768).
//
// Each number is the fastest of --reps alternating rounds (variant A, variant B, A, B, ...), so that
// load from other processes on a shared machine hits both variants alike.
//
// Arguments are checked before anything runs: an unknown format, variant or ISA, or an --m the mode's
// buffers do not hold, is refused with exit code 2 (never an empty table or a crash).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "arg_lists.hpp"
#include "llc.hpp"
#include "backends/cpu/isa.hpp"
#include "cpu/peaks/isa_peaks.hpp"
#include "backends/cpu/prepack.hpp"
#include "backends/cpu/q8_rows.hpp"
#include "backends/cpu/runner.hpp"
#include "core/knobs.hpp"
#include "moerun/formats.hpp"
#include "moerun/platform.hpp"

using namespace moerun;
using namespace moerun::cpu;
using Clock = std::chrono::steady_clock;

namespace {

int amx_probe(const std::vector<int>& ms, int reps);
int panels(int reps);

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

using moerun_bench::name_list;

struct Fmt {
  const char* name;
  WeightFormat f;
  // 8: int8 activations, the q8 kernel (avx512-bf16, amx and avx2 levels), as the runner runs them.
  // 15: bf16 activations held as 15-bit rows on the same kernel, two a token (q8_rows.hpp pack_q15_rows).
  int q = 0;
};
const Fmt kFormats[] = {{"bf16", WeightFormat::kBF16},       {"fp8-block", WeightFormat::kFp8Block},
                        {"fp8-channel", WeightFormat::kFp8PerChannel}, {"int8-channel", WeightFormat::kInt8PerChannel},
                        {"mxfp4", WeightFormat::kMxfp4},     {"nvfp4", WeightFormat::kNvfp4},
                        {"mxfp4-q8", WeightFormat::kMxfp4, 8}, {"nvfp4-q8", WeightFormat::kNvfp4, 8},
                        {"mxfp4-q15", WeightFormat::kMxfp4, 15}, {"nvfp4-q15", WeightFormat::kNvfp4, 15}};

// One expert [N, K] packed, replicated `copies` times so the whole set exceeds the caches.
struct Set {
  std::shared_ptr<const PackedStack> p;
  std::shared_ptr<uint8_t> data, gs;
  int copies = 0;
  size_t bytes_per_copy = 0;
  int prefetch = kPrefetchBytes, prefetch_l2 = 0;  // the runner's distances at the level measured
  kernels::BlockRef block(int c, int64_t b) const {
    kernels::BlockRef r = p->block(0, b);
    r.data = data.get() + static_cast<size_t>(c) * p->nblocks * p->block_bytes + static_cast<size_t>(b) * p->block_bytes;
    if (gs) r.gscale = gs.get() + static_cast<size_t>(c) * p->nblocks * p->gs_block_bytes + static_cast<size_t>(b) * p->gs_block_bytes;
    r.prefetch = prefetch;
    r.prefetch_l2 = prefetch_l2;
    return r;
  }
};

// 64-byte aligned vectors, as the runner's workspaces and packed stacks are: a tile load of a 64-byte
// row that straddles two cache lines costs twice the loads (unaligned buffers made --amx-probe read
// tile_amx2 at 0.72 instead of 1.5-1.7 TFLOP/s in L2 before session 18).
template <typename T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <typename U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) {
    void* q = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
    if (q == nullptr) throw std::bad_alloc();
    return static_cast<T*>(q);
  }
  void deallocate(T* q, size_t) { std::free(q); }
  template <typename U>
  bool operator==(const Aligned64<U>&) const { return true; }
};
template <typename T>
using AlignedVec = std::vector<T, Aligned64<T>>;

std::shared_ptr<uint8_t> alloc(size_t n) {
  void* q = std::aligned_alloc(64, (n + 63) / 64 * 64);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(q), [](uint8_t* x) { std::free(x); });
}

// The memory-resident rows' set: 96 MiB, or 4x the last-level cache where that is larger (a Sapphire
// Rapids of 480 MiB held the 96 MiB set in L3, and its "mem" rows measured the cache).
size_t mem_set_bytes() { return std::max<size_t>(size_t{96} << 20, 4 * moerun_bench::llc_bytes()); }

Set make_set(WeightFormat f, int64_t N, int64_t K, size_t min_bytes, kernels::CodeLayout layout) {
  std::mt19937 g(11);
  std::normal_distribution<float> n(0.0f, 0.03f);
  std::vector<float> w(static_cast<size_t>(N * K));
  for (float& v : w) v = n(g);
  ExpertMatrix m = quantize_experts(f, w.data(), 1, N, K);
  Set s;
  s.p = pack_stack(m, LaneMap::kPlain, layout);
  const size_t db = s.p->block_bytes * s.p->nblocks, gb = s.p->gs_block_bytes * s.p->nblocks;
  s.bytes_per_copy = db + gb;
  s.copies = static_cast<int>(std::max<size_t>(1, (min_bytes + s.bytes_per_copy - 1) / s.bytes_per_copy));
  s.data = alloc(db * s.copies);
  if (gb) s.gs = alloc(gb * s.copies);
  for (int c = 0; c < s.copies; ++c) {
    std::memcpy(s.data.get() + c * db, s.p->data.get(), db);
    if (gb) std::memcpy(s.gs.get() + c * gb, s.p->gscale.get(), gb);
  }
  return s;
}

// The fastest of the rounds: on a shared, loaded machine the minimum is the round least disturbed by
// other processes (each round is short, about a millisecond, to fit in one scheduler slice).
double fastest(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[0];
}

int run(int argc, char** argv);

// An int list by moerun_bench::int_list (arg_lists.hpp), into out.
bool parse_ints(const char* what, const std::string& list, int lo, int hi, std::vector<int>& out) {
  const auto v = moerun_bench::int_list(what, list, lo, hi);
  if (!v) return false;
  out.assign(v->begin(), v->end());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // a kernel set or allocation the arguments asked for
    std::fprintf(stderr, "cpu_kernel_bench: %s\n", e.what());
    return 2;
  }
}

namespace {

int run(int argc, char** argv) {
  try {
    moerun::check_knob_environment();  // the kernel sets below read the cpu knobs
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpu_kernel_bench: %s\n", e.what());
    return 2;
  }
  const char* usage =
      "usage: %s [--isa avx2|avx512|avx512-bf16|amx] [--variants v1,v2] [--formats bf16,...] [--reps N] [--m 1,4,...] "
      "[--mem-m 1,16,...] [--shape N,K] [--amx-probe] [--amx-placement [--threads 1,2] [--seconds S]] [--panels]\n";
  std::vector<std::string> variants = {"v1", "v2"}, formats;
  bool probe = false, placement = false, panel_mode = false;
  std::vector<int> threads = {1, 2};
  double seconds = 2.0;
  int reps = 41;
  CpuIsa isa = CpuIsa::kAvx2;
  std::vector<int> ms = {1, 2, 3, 4, 5, 6, 8, 12, 16, 64};
  std::vector<int> mem_ms = {1};  // token counts of the memory-resident rows
  std::vector<int> shape = {1536, 2048};  // N, K of the kernel table's matrix (qwen3-30b-a3b's gate_up)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--variants" && i + 1 < argc) variants = name_list(argv[++i]);
    else if (a == "--formats" && i + 1 < argc) formats = name_list(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) {
      std::vector<int> r;
      if (!parse_ints("--reps", argv[++i], 1, 100000, r) || r.size() != 1) return 2;
      reps = r[0];
    }
    else if (a == "--amx-probe") probe = true;
    else if (a == "--amx-placement") placement = true;
    else if (a == "--panels") panel_mode = true;
    else if (a == "--seconds" && i + 1 < argc) {
      char* end = nullptr;
      seconds = std::strtod(argv[++i], &end);
      if (*end != '\0' || end == argv[i] || !(seconds > 0 && seconds <= 600)) {
        std::fprintf(stderr, "--seconds: '%s' is not a number of seconds in (0, 600]\n", argv[i]);
        return 2;
      }
    }
    else if (a == "--threads" && i + 1 < argc) { if (!parse_ints("--threads", argv[++i], 1, 1024, threads)) return 2; }
    else if (a == "--m" && i + 1 < argc) { if (!parse_ints("--m", argv[++i], 1, 1024, ms)) return 2; }
    else if (a == "--mem-m" && i + 1 < argc) { if (!parse_ints("--mem-m", argv[++i], 1, 1024, mem_ms)) return 2; }
    else if (a == "--shape" && i + 1 < argc) {
      if (!parse_ints("--shape", argv[++i], 16, 1 << 16, shape) || shape.size() != 2 || shape[0] % 16 != 0 ||
          shape[1] % 32 != 0) {
        std::fprintf(stderr, "--shape: N,K with N a multiple of 16 and K of 32\n");
        return 2;
      }
    }
    else if (a == "--help" || a == "-h") { std::printf(usage, argv[0]); return 0; }
    else if (a == "--isa" && i + 1 < argc) {
      const std::string n = argv[++i];
      bool found = false;
      for (CpuIsa c : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx})
        if (n == to_string(c)) {
          isa = c;
          found = true;
        }
      if (!found) {
        std::fprintf(stderr, "unknown --isa '%s' (avx2, avx512, avx512-bf16, amx)\n", n.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, usage, argv[0]);
      return 2;
    }
  }
  for (const std::string& f : formats)
    if (std::none_of(std::begin(kFormats), std::end(kFormats), [&](const Fmt& k) { return f == k.name; })) {
      std::string known;
      for (const Fmt& k : kFormats) known += (known.empty() ? "" : ", ") + std::string(k.name);
      std::fprintf(stderr, "--formats: unknown format '%s' (known: %s)\n", f.c_str(), known.c_str());
      return 2;
    }
  if (variants.empty()) {
    std::fprintf(stderr, "--variants: an empty list (v1, v2)\n");
    return 2;
  }
  for (const std::string& v : variants)
    if (v != "v1" && v != "v2") {
      std::fprintf(stderr, "--variants: unknown variant '%s' (v1, v2)\n", v.c_str());
      return 2;
    }
  // The kernel table's activation buffers hold 64 rows; the probe sizes its own.
  if (std::any_of(mem_ms.begin(), mem_ms.end(), [](int m) { return m > 64; })) {
    std::fprintf(stderr, "--mem-m: at most 64 rows\n");
    return 2;
  }
  if (!probe && std::any_of(ms.begin(), ms.end(), [](int m) { return m > 64; })) {
    std::fprintf(stderr, "--m: at most 64 rows here (larger ones only with --amx-probe)\n");
    return 2;
  }
  if (reps < 1 || seconds <= 0 || threads.empty()) {
    std::fprintf(stderr, "--reps and --seconds must be positive, --threads a list of counts\n");
    return 2;
  }
  if (isa > Platform::detect().cpu.isa()) {
    std::fprintf(stderr, "this CPU does not run --isa %s (it has %s)\n", std::string(to_string(isa)).c_str(),
                 std::string(to_string(Platform::detect().cpu.isa())).c_str());
    return 2;
  }
  if (panel_mode) {
    if (cpu::detected_isa() < CpuIsa::kAvx512Bf16) {  // the backend's own level check (VBMI included)
      std::fprintf(stderr, "--panels needs AVX512-BF16\n");
      return 2;
    }
    return panels(reps);
  }
  if (probe || placement) {
    if (Platform::detect().cpu.isa() < CpuIsa::kAmx) {
      std::fprintf(stderr, "--amx-probe and --amx-placement need AMX\n");
      return 2;
    }
    if (probe) return amx_probe(ms, reps);
    for (int th : threads) {
      if (th < 1) {
        std::fprintf(stderr, "--threads: positive counts\n");
        return 2;
      }
      const auto rows = moerun_bench::amx_operand_placement(th, seconds);
      if (rows.empty()) {
        std::fprintf(stderr, "--amx-placement: out of memory (256 MiB a thread)\n");
        return 1;
      }
      std::printf("2x2 tile step by operand placement, %d thread(s), GFLOP/s over all threads:\n", th);
      for (const auto& r : rows) std::printf("  %-34s %7.0f\n", r.name.c_str(), r.gflops);
    }
    return 0;
  }
  std::vector<KernelSet> ks;
  for (const auto& v : variants) ks.push_back(kernels_for_variant(isa, v));
  const int64_t N = shape[0], K = shape[1];
  // Activation rows with the runner's row padding (kRowPad): rows exactly 4 KiB apart (bf16, K = 2048)
  // share one L1 set, and past 8 tokens a group's rows evict each other, which no layer sees.
  const int64_t LD = K + kRowPad;
  std::vector<float> x(static_cast<size_t>(64 * LD));
  std::mt19937 g(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& v : x) v = nd(g);
  AlignedVec<uint16_t> xb(x.size());  // the same activations in bf16, for the AVX512-BF16 kernel
  for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
  Q8Buffer q8buf;  // the same activations as int8 rows, for the q8 kernel
  const Q8Slots xq = q8buf.reserve(64, K);
  for (int i = 0; i < 64; ++i) pack_q8_row(x.data() + i * LD, K, xq.row(i));
  Q8Buffer q15buf;  // and as 15-bit rows, two a token
  const Q8Slots xq15 = q15buf.reserve(128, K);
  for (int i = 0; i < 64; ++i) pack_q15_rows(x.data() + i * LD, K, xq15.row(2 * i));
  // One streaming call the way the runner makes it (run_block): the q8 kernel for the "-q8" and "-q15"
  // rows (the kernel sets of the other rows have none), the bf16 kernel where it takes the format.
  // Which streaming kernel a call of m tokens takes (the runner's call_path): the q8 kernel, else the
  // bf16 one where it takes the format, else the f32 one.
  const auto q8_call = [](const KernelSet& k, kernels::PackFmt f, int m) {
    return k.uses_q8_stream(f) && m <= k.stream_max_m_q8;
  };
  const auto bf16_call = [&](const KernelSet& k, kernels::PackFmt f, int m) {
    return !q8_call(k, f, m) && k.stream_bf16 != nullptr && k.uses_bf16_stream(f);
  };
  auto stream = [&](const KernelSet& k, const kernels::BlockRef& b, int m, float* acc) {
    if (q8_call(k, b.fmt, m)) {
      if (k.q8_rows_per_token == 1) return k.stream_q8(b, xq.view(), m, acc);
      k.stream_q8(b, xq15.view(), k.q8_call_count(m), acc);
      if (!k.q8_joins_rows)  // the runner's sum_q15_rows
        for (int i = 0; i < m; ++i)
          for (int l = 0; l < 16; ++l) acc[i * 16 + l] = acc[2 * i * 16 + l] + acc[(2 * i + 1) * 16 + l];
    } else if (bf16_call(k, b.fmt, m)) {
      k.stream_bf16(b, xb.data(), LD, m, acc);
    } else {
      k.stream(b, x.data(), LD, m, acc);
    }
  };
  std::vector<float> acc(128 * 16);
  std::vector<float, std::allocator<float>> panel_raw(static_cast<size_t>(K * 16 + 16));
  float* panel = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(panel_raw.data()) + 63) & ~uintptr_t{63});

  std::printf("%-12s %-22s", "format", "case");
  for (const auto& v : variants) std::printf(" %16s", v.c_str());
  std::printf("   (min of %d; mem: GB/s of packed bytes; cached: ns per k pair per block; last: ratio)\n", reps);
  for (const Fmt& F : kFormats) {
    if (!formats.empty() && std::find(formats.begin(), formats.end(), F.name) == formats.end()) continue;
    // q8 / q15 rows take the kernel set such a layer gets at this level (the runner's kernels_for_spec:
    // at AVX2 VNNI words, not the level's per-k codes, and for q15 its cut and panels); the others never.
    std::vector<KernelSet> kv = ks;
    for (KernelSet& k : kv) {
      if (F.q != 0) {
        MoeSpec spec;
        spec.weight_format = F.f;
        if (F.q == 8) spec.act_quant = ActQuant::kInt8PerTokenGroup;
        else spec.act_dtype = DType::kBF16;  // what takes q15 (an int8 layer's dtype is the default, as before)
        k = kernels_for_spec(spec, isa);
      } else {
        k.stream_q8 = nullptr;
        k.q8_rows_per_token = 1;
      }
    }
    if (F.q != 0 && kv[0].stream_q8 == nullptr) continue;  // the avx512 level has none
    Set s = make_set(F.f, N, K, mem_set_bytes(), kv[0].code_layout);  // the same at every variant of one level
    // The distances the runner gives a call of m tokens (call_block): calls of several tokens on the bf16
    // stream take the "many" L2 distance where the level has one, and the AMX decode stream its own.
    const auto runner_distances = [&](int m) {
      const bool bf16_stream = bf16_call(kv[0], s.p->fmt, m);
      s.prefetch = bf16_stream ? kv[0].bf16_stream_prefetch(s.p->fmt, m) : kv[0].prefetch;
      s.prefetch_l2 = bf16_stream ? kv[0].bf16_stream_prefetch_l2(m) : kv[0].prefetch_l2;
    };
    const int64_t nb = s.p->nblocks, pairs = s.p->kp / 2;
    // memory-resident: every block of every copy once per round, m tokens (GB/s of packed bytes; past
    // one token, GFLOP/s too: whether a kernel's passes over a block keep up with the stream)
    for (int m : mem_ms) {
      runner_distances(m);
      std::vector<std::vector<double>> t(ks.size());
      for (int r = 0; r < reps; ++r)
        for (size_t v = 0; v < ks.size(); ++v) {
          const double t0 = now_s();
          const bool streams = m <= kv[v].stream_max(s.p->fmt);  // (MOERUN_CPU_STREAM_MAX_TOKENS=0: panels)
          for (int c = 0; c < s.copies; ++c)
            for (int64_t b = 0; b < nb; ++b) {
              if (streams) {
                stream(kv[v], s.block(c, b), m, acc.data());
              } else {
                kv[v].panel(s.block(c, b), panel);
                kv[v].tile(panel, s.p->kp, x.data(), LD, m, acc.data());
              }
            }
          t[v].push_back(now_s() - t0);
        }
      char label[64];
      std::snprintf(label, sizeof label, "mem m=%d", m);
      std::printf("%-12s %-22s", F.name, label);
      for (size_t v = 0; v < ks.size(); ++v) {
        const double sec = fastest(t[v]);
        if (m == 1) {
          std::printf(" %10.2f GB/s ", static_cast<double>(s.bytes_per_copy) * s.copies / sec / 1e9);
        } else {
          const double flops = 2.0 * m * 16 * static_cast<double>(s.p->kp) * static_cast<double>(nb) * s.copies;
          std::printf(" %5.1fGB/s %4.0fGF", static_cast<double>(s.bytes_per_copy) * s.copies / sec / 1e9, flops / sec / 1e9);
        }
      }
      if (ks.size() == 2) std::printf(" %.2fx", fastest(t[0]) / fastest(t[1]));
      std::printf("\n");
    }
    // cache-resident: the first 4 blocks of one copy, repeated
    const int64_t cb = 2;
    for (int m : ms) {
      runner_distances(m);
      std::vector<std::vector<double>> t(ks.size());
      const int iters = std::max(1, 16 / m);
      for (int r = 0; r < reps; ++r)
        for (size_t v = 0; v < ks.size(); ++v) {
          const KernelSet& k = kv[v];
          const bool streams = m <= k.stream_max(s.p->fmt);
          const double t0 = now_s();
          for (int it = 0; it < iters; ++it)
            for (int64_t b = 0; b < cb; ++b) {
              if (streams) {
                stream(k, s.block(0, b), m, acc.data());
              } else {
                k.panel(s.block(0, b), panel);
                k.tile(panel, s.p->kp, x.data(), LD, m, acc.data());
              }
            }
          t[v].push_back((now_s() - t0) / (static_cast<double>(iters) * cb * pairs) * 1e9);
        }
      char label[64];
      std::snprintf(label, sizeof label, "cached m=%d", m);
      std::printf("%-12s %-22s", F.name, label);
      for (size_t v = 0; v < ks.size(); ++v) {
        const double ns = fastest(t[v]);
        std::printf(" %6.2f ns %4.1fGF", ns, 2.0 * 2 * 16 * m / ns);
      }
      if (ks.size() == 2) std::printf(" %.2fx", fastest(t[0]) / fastest(t[1]));
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  return 0;
}

// Fastest of `reps` rounds of 2-4 ms, in TFLOP/s, of calls of `body`, each doing `flops`.
template <typename F>
double tflops(int reps, double flops, F&& body) {
  double best = 1e30;
  int calls = 1;
  for (double t = 0; t < 2e-3; calls *= 2) {  // calls per round: doubled past 2 ms, so 2-4 ms
    const double t0 = now_s();
    for (int c = 0; c < calls; ++c) body(c);
    t = now_s() - t0;
  }
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_s();
    for (int c = 0; c < calls; ++c) body(c);
    best = std::min(best, now_s() - t0);
  }
  return flops * calls / best / 1e12;
}

int amx_probe(const std::vector<int>& ms, int reps) {
  std::printf("tile_amx2, one thread, TFLOP/s (fastest of %d rounds); pf0 / pf4k: panel prefetch off / %d bytes "
              "ahead\n",
              reps, kPrefetchBytes);
  struct Variant {
    const char* name;
    int prefetch;
  };
  const Variant variants[] = {{"pf4k", kPrefetchBytes}, {"pf0", 0}};
  for (int m : ms) {
    const int rows = (m + 15) / 16 * 16;
    AlignedVec<float> acc(static_cast<size_t>(2 * rows * 16));
    for (const int64_t K : {int64_t{256}, int64_t{2048}}) {
      const int64_t ldx = K + 32;
      AlignedVec<uint16_t> xb(static_cast<size_t>(rows * ldx), 0x3F80), panels(static_cast<size_t>(2 * K * 16), 0x3C00);
      std::printf("m=%-4d K=%-5lld (%s) ", m, static_cast<long long>(K), K == 256 ? "L1" : "L2");
      for (const Variant& v : variants) {
        const double tf = tflops(reps, 2.0 * m * 32 * static_cast<double>(K), [&](int) {
          kernels::tile_amx2(panels.data(), panels.data() + K * 16, K, xb.data(), ldx, m, acc.data(),
                             acc.data() + rows * 16, v.prefetch);
        });
        std::printf("  %s %5.2f", v.name, tf);
      }
      std::printf("\n");
    }
    // Weights from memory: qwen3-30b-a3b gate_up blocks, pair after pair through many copies.
    const int64_t N = 1536, K = 2048, ldx = K + 32;
    static const Set w = make_set(WeightFormat::kBF16, N, K, 256u << 20, kernels::CodeLayout::kVnniWords);
    AlignedVec<uint16_t> xb(static_cast<size_t>(rows * ldx), 0x3F80);
    const int64_t pairs = w.p->nblocks / 2;
    std::printf("m=%-4d K=%-5lld (mem)", m, static_cast<long long>(K));
    for (const Variant& v : variants) {
      int64_t at = 0;
      const double tf = tflops(reps, 2.0 * m * 32 * static_cast<double>(K), [&](int) {
        const int c = static_cast<int>(at / pairs % w.copies);
        const int64_t b = at % pairs * 2;
        ++at;
        kernels::tile_amx2(reinterpret_cast<const uint16_t*>(w.block(c, b).data),
                           reinterpret_cast<const uint16_t*>(w.block(c, b + 1).data), K, xb.data(), ldx, m,
                           acc.data(), acc.data() + rows * 16, v.prefetch);
      });
      std::printf("  %s %5.2f", v.name, tf);
    }
    std::printf("\n");
  }
  kernels::amx_release();
  return 0;
}

int panels(int reps) {
  const KernelSet ks = kernels_for(CpuIsa::kAvx512Bf16);
  std::printf("converted panels, ns per block (16 rows x K = 2048), fastest of %d alternating rounds\n", reps);
  std::printf("%-12s %-7s %12s %12s %8s\n", "format", "from", "f32 + round", "direct", "ratio");
  const int64_t N = 1536, K = 2048;
  std::vector<float> f32(static_cast<size_t>(K * 16) + 16);
  float* fa = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(f32.data()) + 63) & ~uintptr_t{63});
  std::vector<uint16_t> out(static_cast<size_t>(K * 16));
  for (const Fmt& fmt : kFormats) {
    if (fmt.q != 0 || fmt.f == WeightFormat::kBF16) continue;  // bf16 blocks need no conversion
    for (const size_t bytes : {size_t{0}, size_t{256} << 20}) {
      const Set w = make_set(fmt.f, N, K, bytes, kernels::CodeLayout::kVnniWords);
      const int64_t nb = w.p->nblocks;
      int64_t at0 = 0, at1 = 0;
      std::vector<double> t0s, t1s;
      const auto round = [&](bool direct, int64_t& at) {
        const int calls = 64;
        const double t = now_s();
        for (int c = 0; c < calls; ++c, ++at) {
          const kernels::BlockRef b = w.block(static_cast<int>(at / nb % w.copies), at % nb);
          if (direct) {
            kernels::panel_bf16_vnni(b, out.data());
          } else {
            ks.panel(b, fa);
            kernels::panel_to_bf16_vnni(fa, w.p->kp, out.data());
          }
        }
        return (now_s() - t) / calls * 1e9;
      };
      for (int r = 0; r < reps; ++r) {
        t0s.push_back(round(false, at0));
        t1s.push_back(round(true, at1));
      }
      const double a = fastest(t0s), b = fastest(t1s);
      std::printf("%-12s %-7s %12.0f %12.0f %7.2fx\n", fmt.name, bytes ? "memory" : "cache", a, b, a / b);
    }
  }
  return 0;
}

}  // namespace
