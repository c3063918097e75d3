// cuda/kernels/sorted_passes.cu — the memory-bound passes around the CUTLASS grouped GEMMs: gather
// the tokens into expert-sorted rows, the gated activation between the two GEMMs, and the weighted
// combine of the expert rows back to token order.
//
// NOTES:
//   Each pass reads and writes 16-byte vectors (8 two-byte elements): rows are multiples of 8
//   elements (hidden_multiple = intermediate_multiple = 8) and every buffer here starts 16-byte
//   aligned, except the caller's hidden/out tensors, which the launchers check and, if misaligned,
//   serve with the 2-byte fallback of the same kernel.
//   Bytes: gather moves rows*H*2 out (the token rows are re-read from L2 k times); the activation
//   reads rows*R*2 and writes rows*I*2; the combine reads rows*H*2 and writes m*H*2. Against the
//   GEMMs at M >= 1024 these are a few percent of the forward.
//   Grids are two-dimensional: rows (gather, activation) or tokens (combine) along x, column chunks
//   along y. One block per whole row left a few hundred blocks at M = 128 (mixtral: 256 rows of
//   28672 columns), far too few 16-byte loads in flight to stream: the activation ran at ~1 TB/s.
//   The row count comes from the device (total_rows), so blocks past it leave at once; nothing
//   syncs with the host.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common.cuh"

namespace moerun::cuda_kernels {
namespace {

constexpr int kPassThreads = 128;

// Eight 2-byte elements as one 16-byte vector.
template <typename T>
union Vec8 {
  uint4 u;
  T e[8];
};

// Vectors of one row a gather block copies (kPassThreads threads, kGatherUnroll loads in flight each).
constexpr int kGatherUnroll = 4;
constexpr int kGatherChunk = kPassThreads * kGatherUnroll;

template <typename V>
__global__ void __launch_bounds__(kPassThreads)
    gather_sorted_kernel(const V* __restrict__ src, int vecs, const int32_t* __restrict__ token,
                         const int32_t* __restrict__ total, V* __restrict__ dst) {
  const int64_t r = blockIdx.x;
  if (r >= *total) return;
  const V* s = src + static_cast<int64_t>(token[r]) * vecs;
  V* d = dst + r * vecs;
  const int i0 = blockIdx.y * kGatherChunk + threadIdx.x;
  V v[kGatherUnroll];
#pragma unroll
  for (int u = 0; u < kGatherUnroll; ++u)
    if (i0 + u * kPassThreads < vecs) v[u] = s[i0 + u * kPassThreads];
#pragma unroll
  for (int u = 0; u < kGatherUnroll; ++u)
    if (i0 + u * kPassThreads < vecs) d[i0 + u * kPassThreads] = v[u];
}

template <typename T>
__device__ __forceinline__ void load8(const T* p, float* f) {
  Vec8<T> v;
  v.u = *reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = to_f32(v.e[i]);
}
template <typename T>
__device__ __forceinline__ void store8(T* p, const float* f) {
  Vec8<T> v;
#pragma unroll
  for (int i = 0; i < 8; ++i) v.e[i] = from_f32<T>(f[i]);
  *reinterpret_cast<uint4*>(p) = v.u;
}

template <typename T>
__global__ void __launch_bounds__(kPassThreads)
    activation_sorted_kernel(const T* __restrict__ gu, int n, const int32_t* __restrict__ seg, int experts,
                             const float* __restrict__ bias, Act act, float alpha, float limit,
                             GateUpLayout layout, const int32_t* __restrict__ total, int64_t rows_bound,
                             T* __restrict__ inter) {
  const int64_t r = blockIdx.x;
  if (r >= (total ? static_cast<int64_t>(*total) : rows_bound)) return;
  const bool gated = act_gated(act);
  const int outn = gated ? n / 2 : n;
  const int j0 = (blockIdx.y * kPassThreads + threadIdx.x) * 8;  // one vector of outputs per thread
  if (j0 >= outn) return;
  const float* b = bias ? bias + static_cast<int64_t>(seg ? segment_of(r, seg, experts) : 0) * n : nullptr;
  const T* row = gu + r * n;
  T* o = inter + r * outn;
  {
    float g[8], u[8], y[8];
    if (!gated) {
      load8(row + j0, g);
      if (b)
#pragma unroll
        for (int i = 0; i < 8; ++i) g[i] += b[j0 + i];
#pragma unroll
      for (int i = 0; i < 8; ++i) y[i] = apply_act(act, g[i], 0.0f, alpha, limit);
    } else {
      if (layout == GateUpLayout::kPairs) {  // (gate, up) pairs: columns 2j, 2j+1
        float p[16];
        load8(row + 2 * j0, p);
        load8(row + 2 * j0 + 8, p + 8);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          g[i] = p[2 * i];
          u[i] = p[2 * i + 1];
        }
        if (b)
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            g[i] += b[2 * (j0 + i)];
            u[i] += b[2 * (j0 + i) + 1];
          }
      } else {  // kHalves, kBlocks8: gate j0..j0+7 and up j0..j0+7 are 8 consecutive columns each
        const GateUpCols c = gate_up_cols(layout, j0, outn);
        load8(row + c.gate, g);
        load8(row + c.up, u);
        if (b)
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            g[i] += b[c.gate + i];
            u[i] += b[c.up + i];
          }
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) y[i] = apply_act(act, g[i], u[i], alpha, limit);
    }
    store8(o + j0, y);
  }
}

// sigmoid(hidden[t] . gate) over the block (every thread gets it).
template <typename T>
__device__ float shared_gate_of(const T* __restrict__ hidden_row, const float* __restrict__ gate, int h) {
  __shared__ float part[kPassThreads / 32];
  float acc = 0.0f;
  for (int i = threadIdx.x; i < h; i += kPassThreads) acc += to_f32(hidden_row[i]) * gate[i];
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = acc;
  __syncthreads();
  float v = 0.0f;
#pragma unroll
  for (int w = 0; w < kPassThreads / 32; ++w) v += part[w];
  return 1.0f / (1.0f + expf(-v));
}

// Slots whose rows one combine thread loads at once (kBatch), as raw 16-byte vectors: their loads are
// issued before the first is summed, then summed in slot order, so every batch gives the same sum as
// one slot at a time. Session 14 (H200, bench/results/2026-12-01_s14_h200/) timed 4 slots against a
// loop of one load per slot: 3-15% faster on every shape with top-4 and top-8 (qwen3-30b-a3b M = 1024
// 17.9-18.1 against 19.8-19.9 us) and within 4% on mixtral's top-2; 8 slots converted to f32 as they
// were loaded took 102 registers a thread and ran 25-60% slower. 8 slots kept raw (4 registers a
// slot) tied 4 at M = 128 and 1024 and lost 0.3-0.8% at 8192 on the four sweep shapes (session 53,
// H100, alternated graph replay: bench/results/2026-12-07_s53_gpu), so 4 it is.
constexpr int kCombineBatch = 4;

template <typename T, bool kVec, int kBatch>
__global__ void __launch_bounds__(kPassThreads)
    combine_sorted_kernel(const T* __restrict__ y, int h, int top_k, const int32_t* __restrict__ row_of_slot,
                          const float* __restrict__ weight_of_row, const int32_t* __restrict__ seg,
                          int experts, const float* __restrict__ bias, const T* __restrict__ shared,
                          const float* __restrict__ shared_gate, const T* __restrict__ hidden,
                          int cols, T* __restrict__ out) {
  const int64_t t = blockIdx.x;
  const int c_begin = blockIdx.y * cols, c_end = min(h, c_begin + cols);  // this block's columns
  __shared__ int64_t row_s[kMaxRoutingTopK];
  __shared__ float w_s[kMaxRoutingTopK];
  __shared__ const float* b_s[kMaxRoutingTopK];
  if (threadIdx.x < top_k) {
    const int64_t r = row_of_slot[t * top_k + threadIdx.x];
    row_s[threadIdx.x] = r;
    w_s[threadIdx.x] = weight_of_row[r];
    b_s[threadIdx.x] = bias ? bias + static_cast<int64_t>(segment_of(r, seg, experts)) * h : nullptr;
  }
  const float gate = shared && shared_gate ? shared_gate_of(hidden + t * h, shared_gate, h) : 1.0f;
  __syncthreads();
  if constexpr (kVec) {
    for (int c = c_begin + threadIdx.x * 8; c < c_end; c += kPassThreads * 8) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int s0 = 0; s0 < top_k; s0 += kBatch) {
        Vec8<T> v[kBatch];
#pragma unroll
        for (int q = 0; q < kBatch; ++q)
          if (s0 + q < top_k) v[q].u = *reinterpret_cast<const uint4*>(y + row_s[s0 + q] * h + c);
#pragma unroll
        for (int q = 0; q < kBatch; ++q) {
          if (s0 + q >= top_k) break;
          const float w = w_s[s0 + q];
          const float* b = b_s[s0 + q];
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[i] += w * (to_f32(v[q].e[i]) + (b ? b[c + i] : 0.0f));
        }
      }
      if (shared) {
        float v[8];
        load8(shared + t * h + c, v);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] += gate * v[i];
      }
      store8(out + t * h + c, acc);
    }
  } else {
    for (int c = c_begin + threadIdx.x; c < c_end; c += kPassThreads) {
      float acc = 0.0f;
      for (int s = 0; s < top_k; ++s)
        acc += w_s[s] * (to_f32(y[row_s[s] * h + c]) + (b_s[s] ? b_s[s][c] : 0.0f));
      if (shared) acc += gate * to_f32(shared[t * h + c]);
      out[t * h + c] = from_f32<T>(acc);
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename F>
cudaError_t by_half_elem(Elem e, F&& f) {
  switch (e) {
    case Elem::kBF16: return f(__nv_bfloat16{});
    case Elem::kF16: return f(__half{});
    case Elem::kF32: break;
  }
  return cudaErrorInvalidValue;  // the CUTLASS path takes 2-byte elements only
}

}  // namespace

cudaError_t launch_gather_sorted(Elem elem, const void* src, int h, const int32_t* token_of_row,
                                 const int32_t* total_rows, int64_t rows_bound, void* dst, cudaStream_t stream) {
  if (rows_bound == 0) return cudaSuccess;
  if (elem == Elem::kF32 || h % 8 != 0 || rows_bound > 0x7fffffff) return cudaErrorInvalidValue;
  const bool vec = aligned16(src) && aligned16(dst);
  const int vecs = vec ? h / 8 : h;
  const dim3 grid(static_cast<unsigned>(rows_bound), static_cast<unsigned>((vecs + kGatherChunk - 1) / kGatherChunk));
  if (vec) {
    gather_sorted_kernel<uint4><<<grid, kPassThreads, 0, stream>>>(
        static_cast<const uint4*>(src), h / 8, token_of_row, total_rows, static_cast<uint4*>(dst));
  } else {
    gather_sorted_kernel<uint16_t><<<grid, kPassThreads, 0, stream>>>(
        static_cast<const uint16_t*>(src), h, token_of_row, total_rows, static_cast<uint16_t*>(dst));
  }
  return cudaGetLastError();
}

cudaError_t launch_activation_sorted(Elem elem, const void* gate_up, int n, const int32_t* seg_offsets,
                                     int experts, const float* bias, Act act, float alpha, float limit,
                                     GateUpLayout layout, const int32_t* total_rows, int64_t rows_bound,
                                     void* inter, cudaStream_t stream) {
  if (rows_bound == 0) return cudaSuccess;
  const int outn = act_gated(act) ? n / 2 : n;
  if (n % 8 != 0 || outn % 8 != 0 || !aligned16(gate_up) || !aligned16(inter) || rows_bound > 0x7fffffff)
    return cudaErrorInvalidValue;  // our own workspaces: always aligned
  return by_half_elem(elem, [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(static_cast<unsigned>(rows_bound), static_cast<unsigned>((outn / 8 + kPassThreads - 1) / kPassThreads));
    activation_sorted_kernel<T><<<grid, kPassThreads, 0, stream>>>(
        static_cast<const T*>(gate_up), n, seg_offsets, experts, bias, act, alpha, limit, layout,
        total_rows, rows_bound, static_cast<T*>(inter));
    return cudaGetLastError();
  });
}

cudaError_t launch_combine_sorted(Elem elem, const void* y, int h, int64_t m, int top_k,
                                  const int32_t* row_of_slot, const float* weight_of_row,
                                  const int32_t* seg_offsets, int experts, const float* bias,
                                  const void* shared, const float* shared_gate, const void* hidden,
                                  void* out, cudaStream_t stream) {
  if (m == 0) return cudaSuccess;
  if (top_k > kMaxRoutingTopK || m > 0x7fffffff || (bias && !seg_offsets)) return cudaErrorInvalidValue;
  const bool vec = h % 8 == 0 && aligned16(y) && aligned16(out) && (!shared || aligned16(shared));
  return by_half_elem(elem, [&](auto tag) {
    using T = decltype(tag);
    const auto kernel = vec ? combine_sorted_kernel<T, true, kCombineBatch> : combine_sorted_kernel<T, false, 1>;
    // One block per token and column chunk; with a router-gated shared expert one block per token,
    // since every block computes the token's gate (a dot product over the hidden row).
    const bool gate = shared && shared_gate;
    const int cols = gate ? h : vec ? kPassThreads * 8 : kPassThreads;
    const dim3 grid(static_cast<unsigned>(m), static_cast<unsigned>((h + cols - 1) / cols));
    kernel<<<grid, kPassThreads, 0, stream>>>(
        static_cast<const T*>(y), h, top_k, row_of_slot, weight_of_row, seg_offsets, experts, bias,
        static_cast<const T*>(shared), shared_gate, static_cast<const T*>(hidden), cols, static_cast<T*>(out));
    return cudaGetLastError();
  });
}

}  // namespace moerun::cuda_kernels
