// The cpu backend's forward allocates nothing once warmed up (the issue's "allocation-free forward
// after warm-up"): its workspaces only grow, and a call of no more tokens than one made before, at the
// same thread count and with the same kind of inputs (logits or top-k ids; LoRA or not), finds them
// grown, however its tokens route and whichever kernels its calls take. A binary of its own, because it
// replaces the global operator new to count allocations (the counter runs only around the forwards
// under test).
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/isa.hpp"
#include "backends/cpu/workspace.hpp"
#include "moerun/formats.hpp"
#include "moerun/platform.hpp"
#include "moerun/weights.hpp"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  const std::size_t al = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace moerun {
namespace {

HostTensor random_tensor(DType t, Shape shape, uint32_t seed, float amp) {
  HostTensor h(t, shape);
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-amp, amp);
  for (int64_t i = 0; i < shape.numel(); ++i) {
    if (t == DType::kF32) h.as<float>()[i] = u(g);
    else h.as<uint16_t>()[i] = f32_to_bf16(u(g));
  }
  return h;
}

struct Inputs {  // one call's tensors, made before counting starts
  HostTensor hidden, logits, out, adapters;
  LoraBatch lora;
  ForwardArgs args;
};

void make_inputs(Inputs& in, const MoeSpec& s, int64_t m, uint32_t seed, bool logits, const LoraWeights* lw) {
  in.hidden = random_tensor(s.act_dtype, {m, s.hidden}, seed, 1.0f);
  in.logits = random_tensor(DType::kF32, {m, s.num_experts}, seed + 1, 3.0f);
  in.out = HostTensor(s.act_dtype, {m, s.hidden});
  in.args.hidden = in.hidden.view();
  if (logits) in.args.router_logits = in.logits.view();
  in.args.output = in.out.view();
  if (lw) {
    in.adapters = HostTensor(DType::kI32, {m});
    for (int64_t t = 0; t < m; ++t) in.adapters.as<int32_t>()[t] = static_cast<int32_t>(t % 3) - 1;  // -1, 0, 1
    in.lora.weights = lw;
    in.lora.token_adapter = in.adapters.view();
    in.args.lora = &in.lora;
  }
}

// The allocations `f` makes.
long allocations_of(const std::function<void()>& f) {
  g_allocations = 0;
  g_counting = true;
  f();
  g_counting = false;
  return g_allocations.load();
}

// `body` at every ISA level this machine runs (the cap set to it), the cap restored afterwards.
void for_every_level(const std::function<void(CpuIsa)>& body) {
  const CpuIsa saved = cpu_isa_cap();
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (cpu::detected_isa() < isa) continue;
    set_cpu_isa_cap(isa);
    body(isa);
  }
  set_cpu_isa_cap(saved);
}

std::unique_ptr<Runner> two_thread_runner(const MoeSpec& s, const MoeWeights& w) {
  RunnerOptions opt;
  opt.threads = 2;
  return make_cpu_backend()->create_runner(s, w, Platform::detect(), opt);
}

// `body` with a 2-thread runner of `s` at every ISA level this machine runs.
void at_every_level(const MoeSpec& s, const MoeWeights& w, const std::function<void(CpuIsa, Runner&)>& body) {
  for_every_level([&](CpuIsa isa) { body(isa, *two_thread_runner(s, w)); });
}

// Warm up with the largest call, then count the allocations of calls of every size up to it, with
// fresh inputs.
void expect_allocation_free(const MoeSpec& s, bool logits, const std::string& what, bool lora = false) {
  s.validate();
  const MoeWeights w = random_weights(s, 7);
  const LoraWeights lw = lora ? random_lora(s, 8) : LoraWeights{};
  const LoraWeights* l = lora ? &lw : nullptr;
  const std::vector<int64_t> ms = {1, 5, 37, 300};
  at_every_level(s, w, [&](CpuIsa isa, Runner& runner) {
    Inputs warm;
    make_inputs(warm, s, ms.back(), 1, logits, l);
    runner.forward(warm.args);
    std::vector<Inputs> calls(ms.size());  // (not moved afterwards: args point into them)
    for (size_t i = 0; i < ms.size(); ++i)
      make_inputs(calls[i], s, ms[i], 100 + static_cast<uint32_t>(ms[i]), logits, l);
    for (Inputs& c : calls)
      EXPECT_EQ(allocations_of([&] { runner.forward(c.args); }), 0)
          << what << " [" << to_string(isa) << "] M=" << c.args.hidden.shape[0];
  });
}

// Holds every idle workspace of the process's pool for its lifetime, so that the forwards meanwhile run
// on a fresh one (the others were grown by earlier tests' calls).
struct HeldWorkspaces {
  std::vector<cpu::WorkspacePool::Lease> leases;
  HeldWorkspaces() {
    cpu::WorkspacePool& pool = cpu::WorkspacePool::process();
    while (pool.idle() > 0) leases.push_back(pool.acquire());
  }
};

// A LoRA layer warmed up by calls without adapters, then called with them (its buffers grow with the
// layer, by the spec's largest rank, not with the first call that brings adapters).
void expect_allocation_free_lora_later(const MoeSpec& s, const std::string& what) {
  s.validate();
  const MoeWeights w = random_weights(s, 7);
  const LoraWeights lw = random_lora(s, 8);
  at_every_level(s, w, [&](CpuIsa isa, Runner& runner) {
    Inputs warm, call;
    make_inputs(warm, s, 300, 1, true, nullptr);
    make_inputs(call, s, 300, 2, true, &lw);
    const HeldWorkspaces held;  // (earlier calls, with adapters too, grew the process's workspaces)
    runner.forward(warm.args);
    EXPECT_EQ(allocations_of([&] { runner.forward(call.args); }), 0)
        << what << " [" << to_string(isa) << "] adapters after calls without";
  });
}

// A forward that runs on fewer threads than its runner asks for (inside another parallel region here;
// while other forwards share the cores, in use) still grows the scratch of every requested thread, so
// a later call that gets them all back does not allocate.
void expect_allocation_free_after_fewer_threads(const MoeSpec& s, const std::string& what) {
  s.validate();
  const MoeWeights w = random_weights(s, 11);
  at_every_level(s, w, [&](CpuIsa isa, Runner& runner) {
    Inputs warm, call;
    make_inputs(warm, s, 64, 31, true, nullptr);
    make_inputs(call, s, 64, 32, true, nullptr);
    const HeldWorkspaces held;
#pragma omp parallel num_threads(2)
    {
#pragma omp single
      runner.forward(warm.args);  // omp_in_parallel(): one thread
    }
    EXPECT_EQ(allocations_of([&] { runner.forward(call.args); }), 0)
        << what << " [" << to_string(isa) << "] two threads after a one-thread warm-up";
  });
}

// The routing decides the jobs, the work items and (with expert parallelism) the rows: warm up with
// every token on the same k experts, or on another rank's, then call with the tokens spread over all
// experts, at the same M, with routing given as top-k ids; then with every slot of every token on one
// expert (ids may repeat within a token: one job of M x k rows, cut at the job row bound).
void expect_allocation_free_across_routing(const MoeSpec& s, const std::string& what) {
  s.validate();
  const MoeWeights w = random_weights(s, 9);
  const int64_t m = 37;
  const int k = s.top_k, E = s.num_experts;
  const int first_off_rank = s.parallel.ep > 1 ? E / s.parallel.ep : 0;  // rank 0 holds [0, E / ep)
  HostTensor ids_n(DType::kI32, {m, k}), ids_s(DType::kI32, {m, k}), ids_r(DType::kI32, {m, k}), tw(DType::kF32, {m, k});
  for (int64_t t = 0; t < m; ++t)
    for (int j = 0; j < k; ++j) {
      ids_n.as<int32_t>()[t * k + j] = first_off_rank + j;  // the same k experts (off-rank with ep)
      ids_s.as<int32_t>()[t * k + j] = static_cast<int32_t>((t * k + j * 5) % E);  // distinct within a token
      ids_r.as<int32_t>()[t * k + j] = 1;  // every slot on expert 1 (rank 0's with ep)
      tw.as<float>()[t * k + j] = 1.0f / static_cast<float>(k);
    }
  at_every_level(s, w, [&](CpuIsa isa, Runner& runner) {
    Inputs narrow, spread;
    make_inputs(narrow, s, m, 21, false, nullptr);
    make_inputs(spread, s, m, 22, false, nullptr);
    narrow.args.topk_ids = ids_n.view();
    narrow.args.topk_weights = tw.view();
    spread.args.topk_ids = ids_s.view();
    spread.args.topk_weights = tw.view();
    runner.forward(narrow.args);
    EXPECT_EQ(allocations_of([&] { runner.forward(spread.args); }), 0)
        << what << " [" << to_string(isa) << "] narrow, then spread routing";
    Inputs repeat;
    make_inputs(repeat, s, m, 23, false, nullptr);
    repeat.args.topk_ids = ids_r.view();
    repeat.args.topk_weights = tw.view();
    EXPECT_EQ(allocations_of([&] { runner.forward(repeat.args); }), 0)
        << what << " [" << to_string(isa) << "] then one expert in every slot";
  });
}

MoeSpec spec(WeightFormat f, DType act) {
  MoeSpec s;
  s.name = "alloc";
  s.num_experts = 16;
  s.top_k = 4;
  s.hidden = 256;
  s.intermediate = 160;
  s.weight_format = f;
  s.act_dtype = act;
  return s;
}

TEST(CpuForwardAllocations, NoneAfterWarmUp) {
  expect_allocation_free(spec(WeightFormat::kBF16, DType::kBF16), true, "bf16, bf16 act");
  expect_allocation_free(spec(WeightFormat::kBF16, DType::kF32), true, "bf16, f32 act");
  expect_allocation_free(spec(WeightFormat::kMxfp4, DType::kBF16), true, "mxfp4, bf16 act (q15)");
  MoeSpec q8 = spec(WeightFormat::kNvfp4, DType::kBF16);
  q8.act_quant = ActQuant::kInt8PerTokenGroup;
  expect_allocation_free(q8, true, "nvfp4, int8 act");
  MoeSpec fp8 = spec(WeightFormat::kFp8Block, DType::kBF16);
  fp8.intermediate = 256;
  fp8.act_quant = ActQuant::kFp8PerTokenGroup;
  expect_allocation_free(fp8, true, "fp8-block, fp8 act");
  MoeSpec ds = spec(WeightFormat::kBF16, DType::kBF16);  // DeepSeek routing and a gated shared expert
  ds.routing.scoring = Scoring::kSigmoid;
  ds.routing.correction_bias = true;
  ds.routing.n_group = 4;
  ds.routing.topk_group = 2;
  ds.routing.routed_scaling_factor = 2.5f;
  ds.shared.count = 1;
  ds.shared.intermediate = 96;
  ds.shared.gated_by_router = true;
  expect_allocation_free(ds, true, "grouped sigmoid routing, gated shared expert");
  expect_allocation_free(spec(WeightFormat::kBF16, DType::kBF16), false, "router weight in the layer");
  MoeSpec lora = spec(WeightFormat::kBF16, DType::kBF16);
  lora.lora.max_adapters = 2;
  lora.lora.max_rank = 4;
  expect_allocation_free(lora, true, "LoRA", true);
  expect_allocation_free_lora_later(lora, "LoRA");
  if (omp_get_num_procs() >= 2) expect_allocation_free_after_fewer_threads(spec(WeightFormat::kBF16, DType::kBF16), "bf16");
}

TEST(CpuForwardAllocations, NoneWhenTheRoutingSpreads) {
  expect_allocation_free_across_routing(spec(WeightFormat::kBF16, DType::kBF16), "bf16");
  expect_allocation_free_across_routing(spec(WeightFormat::kMxfp4, DType::kBF16), "mxfp4 (q15)");
  MoeSpec ep = spec(WeightFormat::kBF16, DType::kBF16);
  ep.parallel.ep = 2;
  expect_allocation_free_across_routing(ep, "expert parallel, rank 0 of 2");
  MoeSpec sh = spec(WeightFormat::kNvfp4, DType::kBF16);
  sh.act_quant = ActQuant::kInt8PerTokenGroup;
  sh.shared.count = 1;
  sh.shared.intermediate = 96;
  expect_allocation_free_across_routing(sh, "nvfp4 int8 act, shared expert");
}

// The layers of a model share the process's workspaces (cpu/workspace.hpp): once one layer's runner
// has run a call of M tokens, another layer's runner of the same shape runs one of M tokens without
// allocating, and no workspace is made for it. Every level, both with logits and with given top-k ids.
TEST(CpuForwardAllocations, LayersShareTheWorkspace) {
  MoeSpec s = spec(WeightFormat::kBF16, DType::kBF16);
  s.validate();
  const MoeWeights w1 = random_weights(s, 31), w2 = random_weights(s, 32);
  for_every_level([&](CpuIsa isa) {
    auto layer1 = two_thread_runner(s, w1), layer2 = two_thread_runner(s, w2);
    Inputs warm, call;
    make_inputs(warm, s, 300, 41, true, nullptr);
    make_inputs(call, s, 300, 42, true, nullptr);
    layer1->forward(warm.args);
    const size_t made = cpu::WorkspacePool::process().created();
    EXPECT_EQ(allocations_of([&] { layer2->forward(call.args); }), 0)
        << "[" << to_string(isa) << "] the second layer's first call";
    EXPECT_EQ(cpu::WorkspacePool::process().created(), made) << to_string(isa);
    EXPECT_GE(cpu::WorkspacePool::process().idle(), 1u) << "the workspace was given back";
  });
}

}  // namespace
}  // namespace moerun
