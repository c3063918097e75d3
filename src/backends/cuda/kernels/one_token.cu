// cuda/kernels/one_token.cu — the fused one-token expert stage (one_token.hpp says when and why).
//
// NOTES:
//   CTA: 512 threads (16 warps), one an SM: its shared memory holds its down slice. Shared memory, in
//   order: the slice [K][cols][I] (T), the token [H] (T; after the barrier the intermediate [K][I]),
//   y [K][cols] (f32), the gate_up dot products [units][16] (f32), the slot ids, one mbarrier.
//   gate_up: unit u (of K x I/8) is 8 gate rows and their 8 up rows of one slot (rows 16b..16b+15 of
//   the expert's kBlocks8 w13); CTA b takes units b, b + G, ..., two at a time, warp w on row w of
//   each, each lane with up to 8 16-byte loads of each row in flight. The dot products sum in f32;
//   the activation (with the biases, as the chain adds them) is rounded to T as the chain's
//   intermediate is, and stored to the exchange buffer.
//   The down slice: once its own gate_up loads are in, thread 0 arms the mbarrier with the slice's
//   bytes and issues one bulk copy a slot (the rows c0..c0+cols of expert ids[j]'s w2 are one
//   contiguous run of cols x I elements). Late, because issued first (25 MB queued ahead of every
//   gate_up load) the kernel measured 32.1-32.4 us under ncu against 30.9-31.5 (session 28 call 5).
//   Barrier: every CTA fences and counts itself in barrier[0]; thread 0 spins until all G have; then
//   each counts itself out in barrier[1], and the last one out zeroes both (all have passed the
//   spin), so no launch needs a memset. The launch is cooperative: the G CTAs are co-resident, or the
//   launch fails (never a hang).
//   Down: the intermediate is read back through L2 (ld.cg: another SM wrote it), then warp w takes
//   (slot, column) pairs w, w + 16, ...: the column's I weights from the slice against the slot's
//   intermediate row. Each column's sum over the slots runs in slot order in one thread, of
//   weight_j * (dot + bias), which is what the chain's down epilogue and combine pass compute. So the
//   output matches the chain's up to the order of the f32 sums inside each dot product.
//   Measured (qwen3-30b-a3b, H200, bench/results/2026-12-04_s28_h200/NOTES.md): 31-32 us in the
//   kernel at 51% of DRAM peak, 16 warps an SM; as graph replay 2% faster than the chain after a
//   memset flush (34.6-34.8 us against 35.3-35.6) and 5% slower after a read flush (31.5-31.8 against
//   29.9-30.1, call 7), so it is opt-in. Tried
//   and slower: later gate_up units prefetched to L2, a double-buffered load loop (a tie), units
//   taken from a grid-wide counter, the slice read from global after the barrier or prefetched to L2,
//   and gate_up and down on mma.m16n8k16 (half the issued instructions, 35.5-36.3 us: the issue rate
//   was not the limit). The warps' time goes to the barriers (a quarter), the gate_up loads (a
//   quarter) and fixed-latency and shared-memory waits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "common.cuh"
#include "one_token.hpp"
#include "wgmma_grouped.cuh"  // (the mbarrier wrappers)

namespace moerun::cuda_kernels {
namespace {

constexpr int kThreads = 512, kWarps = kThreads / 32;
static_assert(kWarps == 16, "warp w computes row w of each 16-row gate_up unit");
constexpr int kPassVecs = 8;  // 16-byte loads in flight per lane per row

using wgmma::ld_acquire_gpu;
using wgmma::mbar_expect_tx;
using wgmma::mbar_init;
using wgmma::mbar_wait;
using wgmma::smem_u32;

__host__ __device__ constexpr size_t up16(size_t x) { return (x + 15) & ~size_t(15); }

// Byte offsets of the shared-memory regions (host and device use the same).
struct Layout {
  size_t slice = 0, vec = 0, y = 0, dots = 0, ids = 0, bar = 0, total = 0;
};
__host__ __device__ constexpr Layout layout_for(int K, int H, int I, int cols, int units) {
  Layout l;
  l.vec = up16(size_t(K) * cols * I * 2);
  l.y = l.vec + up16(size_t(H > K * I ? H : K * I) * 2);
  l.dots = l.y + up16(size_t(K) * cols * 4);
  l.ids = l.dots + up16(size_t(units) * 16 * 4);
  l.bar = l.ids + up16(size_t(K) * 4);
  l.total = l.bar + 16;
  return l;
}

__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

// A weight vector read once: no L1 allocation.
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

template <typename T>
union Vec8 {
  uint4 u;
  T e[8];
};

template <typename T>
__device__ __forceinline__ float dot8(uint4 a, uint4 b, float acc) {
  Vec8<T> x, y;
  x.u = a;
  y.u = b;
#pragma unroll
  for (int i = 0; i < 8; ++i) acc = fmaf(to_f32(x.e[i]), to_f32(y.e[i]), acc);
  return acc;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1) one_token_kernel(const OneTokenParams p, int cols, int units_max) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int K = p.top_k, H = p.hidden, I = p.inter, E = p.experts, G = static_cast<int>(gridDim.x);
  const Layout L = layout_for(K, H, I, cols, units_max);
  uint4* slice = reinterpret_cast<uint4*>(smem);
  uint4* vec = reinterpret_cast<uint4*>(smem + L.vec);
  float* y = reinterpret_cast<float*>(smem + L.y);
  float* dots = reinterpret_cast<float*>(smem + L.dots);
  int* sid = reinterpret_cast<int*>(smem + L.ids);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + L.bar);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int c0 = static_cast<int>(blockIdx.x) * cols, ncols = max(0, min(cols, H - c0));
  const int vecs = H / 8;
  pdl_wait();  // the token, its ids and weights may come from the kernel before

  if (tid == 0) {
    mbar_init(bar, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  for (int j = tid; j < K; j += kThreads) {
    const int e = p.ids[j];
    sid[j] = e >= 0 && e < E ? e : -1;
  }
  for (int v = tid; v < vecs; v += kThreads) vec[v] = static_cast<const uint4*>(p.x)[v];
  __syncthreads();

  // ---- gate_up: this CTA's units, warp w on row w of each ----
  const int nb = I / 8, units_total = K * nb;
  const int bx = static_cast<int>(blockIdx.x);
  const int mine = bx < units_total ? (units_total - 1 - bx) / G + 1 : 0;
  const uint4* w13 = static_cast<const uint4*>(p.w13);
  auto row_of = [&](int i, bool& ok) {
    const int u = bx + i * G, e = sid[u / nb];
    ok = e >= 0;
    return w13 + (int64_t(ok ? e : 0) * 2 * I + 16 * (u % nb) + warp) * vecs;
  };
  for (int i = 0; i < mine; i += 2) {
    const bool two = i + 1 < mine;
    bool oka = false, okb = false;
    const uint4* ra = row_of(i, oka);
    const uint4* rb = two ? row_of(i + 1, okb) : ra;
    float da = 0.0f, db = 0.0f;
    for (int base = 0; base < vecs; base += 32 * kPassVecs) {
      uint4 va[kPassVecs], vb[kPassVecs];
#pragma unroll
      for (int t = 0; t < kPassVecs; ++t) {
        const int v = base + lane + 32 * t;
        if (v < vecs) {
          if (oka) va[t] = ld_stream(ra + v);
          if (okb) vb[t] = ld_stream(rb + v);
        }
      }
#pragma unroll
      for (int t = 0; t < kPassVecs; ++t) {
        const int v = base + lane + 32 * t;
        if (v < vecs) {
          const uint4 xv = vec[v];
          if (oka) da = dot8<T>(va[t], xv, da);
          if (okb) db = dot8<T>(vb[t], xv, db);
        }
      }
    }
    da = warp_sum(da);
    db = warp_sum(db);
    if (lane == 0) {
      dots[i * 16 + warp] = da;
      if (two) dots[(i + 1) * 16 + warp] = db;
    }
  }

  // Thread 0, its own gate_up loads in, arms the mbarrier with the down slice's bytes and issues its
  // bulk copies, one a slot (the rows c0..c0+cols of expert ids[j]'s w2 are one contiguous run).
  if (tid == 0 && ncols > 0) {
    const uint32_t slot_bytes = static_cast<uint32_t>(ncols) * static_cast<uint32_t>(I) * 2u;
    uint32_t bytes = 0;
    for (int j = 0; j < K; ++j) bytes += sid[j] >= 0 ? slot_bytes : 0u;
    mbar_expect_tx(bar, bytes);
    const T* w2 = static_cast<const T*>(p.w2);
    for (int j = 0; j < K; ++j)
      if (sid[j] >= 0)
        bulk_copy_g2s(smem + size_t(j) * cols * I * 2, w2 + (int64_t(sid[j]) * H + c0) * I, slot_bytes, bar);
  }
  __syncthreads();

  // ---- the activation of this CTA's units, to the exchange buffer ----
  T* inter_g = static_cast<T*>(p.inter_buf);
  for (int q = tid; q < mine * 8; q += kThreads) {
    const int i = q / 8, x = q % 8, u = bx + i * G, j = u / nb, b = u % nb, e = sid[j];
    float g = dots[i * 16 + x], up = dots[i * 16 + 8 + x];
    if (p.b13 && e >= 0) {
      g += p.b13[int64_t(e) * 2 * I + 16 * b + x];
      up += p.b13[int64_t(e) * 2 * I + 16 * b + 8 + x];
    }
    inter_g[int64_t(j) * I + 8 * b + x] = from_f32<T>(e >= 0 ? apply_act(p.act, g, up, p.alpha, p.limit) : 0.0f);
  }

  // ---- every CTA's intermediate is stored ----
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    atomicAdd(&p.barrier[0], 1);
    while (ld_acquire_gpu(&p.barrier[0]) < G) __nanosleep(32);
    if (atomicAdd(&p.barrier[1], 1) == G - 1) {  // the last one out: every CTA has passed the spin
      atomicExch(&p.barrier[0], 0);
      atomicExch(&p.barrier[1], 0);
    }
  }
  __syncthreads();
  pdl_trigger();
  if (ncols == 0) return;

  // ---- down and the combine: this CTA's output columns ----
  const int ivecs = I / 8;
  const uint4* ig = static_cast<const uint4*>(p.inter_buf);
  for (int v = tid; v < K * ivecs; v += kThreads) vec[v] = __ldcg(ig + v);
  mbar_wait(bar, 0);
  __syncthreads();
  for (int q = warp; q < K * ncols; q += kWarps) {
    const int j = q / ncols, c = q % ncols, e = sid[j];
    float a = 0.0f;
    if (e >= 0) {
      const uint4* wr = slice + (size_t(j) * cols + c) * ivecs;
      const uint4* ir = vec + size_t(j) * ivecs;
      for (int v = lane; v < ivecs; v += 32) a = dot8<T>(wr[v], ir[v], a);
      a = warp_sum(a);
    }
    if (lane == 0) {
      if (e >= 0 && p.b2) a += p.b2[int64_t(e) * H + c0 + c];
      y[j * cols + c] = e >= 0 ? p.weights[j] * a : 0.0f;
    }
  }
  __syncthreads();
  T* out = static_cast<T*>(p.out);
  for (int c = tid; c < ncols; c += kThreads) {
    float s = 0.0f;
    for (int j = 0; j < K; ++j) s += y[j * cols + c];
    out[c0 + c] = from_f32<T>(s);
  }
}

struct OneTokenBf16Tag {};
struct OneTokenF16Tag {};

// The kernel's shared-memory limit: its size varies by layer and the limit is set once a device, so
// the device's opt-in maximum (a geometry larger than that cannot launch).
template <typename T, typename Tag>
cudaError_t prepare_kernel(const OneTokenGeometry& g) {
  int device = 0, optin = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (e == cudaSuccess && g.smem > static_cast<size_t>(optin)) e = cudaErrorInvalidValue;
  if (e == cudaSuccess) e = ensure_max_dynamic_smem<Tag>(one_token_kernel<T>, optin);
  return e;
}

template <typename T, typename Tag>
cudaError_t resident_typed(const OneTokenGeometry& g, bool* resident) {
  *resident = false;
  if (cudaError_t e = prepare_kernel<T, Tag>(g); e != cudaSuccess) return e;
  int device = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, one_token_kernel<T>, kThreads, g.smem);
  if (e == cudaSuccess) *resident = g.grid > 0 && int64_t(per_sm) * sms >= g.grid;
  return e;
}

template <typename T, typename Tag>
cudaError_t launch_typed(const OneTokenParams& p, const OneTokenGeometry& g, cudaStream_t stream) {
  if (cudaError_t e = prepare_kernel<T, Tag>(g); e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(g.grid));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = g.smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 2 : 1;
  return cudaLaunchKernelEx(&cfg, one_token_kernel<T>, p, g.cols, g.units);
}

}  // namespace

OneTokenGeometry one_token_geometry(int top_k, int hidden, int inter, int sms, size_t max_smem) {
  if (top_k <= 0 || top_k > kMaxRoutingTopK || hidden <= 0 || inter <= 0 || hidden % 8 != 0 || inter % 8 != 0 ||
      sms <= 0)
    return {};
  OneTokenGeometry g;
  g.grid = sms;
  g.cols = (hidden + sms - 1) / sms;
  const int64_t units_total = static_cast<int64_t>(top_k) * (inter / 8);
  g.units = static_cast<int>(std::min<int64_t>((units_total + sms - 1) / sms, kOneTokenMaxUnits + 1));
  if (g.units > kOneTokenMaxUnits) return {};
  g.smem = layout_for(top_k, hidden, inter, g.cols, g.units).total;
  if (g.smem > max_smem) return {};
  return g;
}

cudaError_t one_token_resident(Elem elem, const OneTokenGeometry& g, bool* resident) {
  if (!resident) return cudaErrorInvalidValue;
  *resident = false;
  switch (elem) {
    case Elem::kBF16: return resident_typed<__nv_bfloat16, OneTokenBf16Tag>(g, resident);
    case Elem::kF16: return resident_typed<__half, OneTokenF16Tag>(g, resident);
    case Elem::kF32: break;
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_one_token(Elem elem, const OneTokenParams& p, const OneTokenGeometry& g, cudaStream_t stream) {
  // x, w13 and the exchange buffer are read as 16-byte vectors, w2's slices by bulk copies (16-byte
  // source): every one of them on a 16-byte boundary (the slices' offsets are, as I % 8 == 0).
  const auto off16 = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15u) != 0; };
  if (g.grid <= 0 || !act_gated(p.act) || !p.x || !p.ids || !p.weights || !p.w13 || !p.w2 || !p.inter_buf ||
      !p.out || !p.barrier || off16(p.x) || off16(p.w13) || off16(p.w2) || off16(p.inter_buf) ||
      (reinterpret_cast<uintptr_t>(p.out) & 1u) != 0)
    return cudaErrorInvalidValue;
  const OneTokenGeometry want = one_token_geometry(p.top_k, p.hidden, p.inter, g.grid, g.smem);
  if (want.grid != g.grid || want.cols != g.cols || want.units != g.units || want.smem != g.smem)
    return cudaErrorInvalidValue;
  switch (elem) {
    case Elem::kBF16: return launch_typed<__nv_bfloat16, OneTokenBf16Tag>(p, g, stream);
    case Elem::kF16: return launch_typed<__half, OneTokenF16Tag>(p, g, stream);
    case Elem::kF32: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace moerun::cuda_kernels
