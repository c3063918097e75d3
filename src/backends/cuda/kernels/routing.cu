// cuda/kernels/routing.cu — routing (fused scoring, bias, grouped top-k, renormalize, scale), the
// router linear, token alignment by expert, the combine pass and the elementwise helpers.
//
// NOTES:
//   Routing runs one warp per token with the token's scores in shared memory. Choices follow
//   routing::topk_host's rules: NaN logits (and NaN biased choices) choose as -inf and weigh 0
//   (scale / k each when every logit of the token is NaN); ties go to the lower expert id (and the
//   lower group id). The scores themselves may differ from the host's by an ulp or two (expf, and
//   the softmax denominator summed in float here, in double there), so two logits within that of
//   each other can rank the other way round.
//   Alignment of a small call runs in one block: histogram, warp scan, tile table, then a fill with
//   per-expert cursors. Above kAlignSingleBlockRows rows one block cannot keep up (65536 rows took
//   270 us of a 1.6 ms forward on the H200), so a grid counts (block histograms reserving runs of
//   each expert's rows through global atomics; the last block scans) and a second grid fills.
//   With an AlignGather the second grid also copies the tokens into their sorted rows (one block a
//   row): one kernel fewer than a gather pass after the fill, which measured as fast at 512 and 1024
//   tokens and 0.2-1.3% faster at 8192 (H200, bench/results/2026-12-04_s26_h200/NOTES.md).
//   Rows inside an expert's segment are in no particular order (the fill's atomics place them), and
//   the order changes from call to call. Outputs do not depend on it: a row's result is written to
//   its (token, slot) place, and in the GEMMs it depends on its own data only. The wgmma engine's tail
//   split sums split tiles in another order than whole ones, so it splits whole (expert, column
//   block) groups only (launch.hpp, wgmma_tail_split_start): a row gets the same sums in any of its
//   expert's M tiles. Outputs are bitwise reproducible from call to call
//   (CudaBackend.RepeatedForwardsAreBitwiseEqual).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>

#include "common.cuh"

namespace moerun::cuda_kernels {
namespace {

constexpr int kRoutingWarps = 4;

// Infinite logits are clamped to the largest finite float (as routing::topk_host does).
__device__ __forceinline__ float clamp_inf(float x) { return isinf(x) ? copysignf(FLT_MAX, x) : x; }

__device__ __forceinline__ bool better(float v1, int i1, float v2, int i2) {
  return v1 > v2 || (v1 == v2 && i1 < i2);
}

// Warp-wide argmax over (value, index) pairs; every lane gets the winner. NaN marks "not a candidate".
__device__ __forceinline__ void warp_argmax(float& v, int& i) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, off);
    const int oi = __shfl_xor_sync(0xffffffffu, i, off);
    if (better(ov, oi, v, i)) { v = ov; i = oi; }
  }
}

__global__ void routing_kernel(RoutingParams p, const float* __restrict__ logits, int64_t m,
                               int32_t* __restrict__ ids, float* __restrict__ weights) {
  extern __shared__ float smem[];
  pdl_wait();
  pdl_trigger();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRoutingWarps + warp;
  if (t >= m) return;  // whole warps leave; the kernel uses no block barrier
  const int E = p.num_experts, K = p.top_k;
  float* score = smem + static_cast<size_t>(warp) * (2 * E + kMaxRoutingTopK);
  float* choice = score + E;
  int* sel = reinterpret_cast<int*>(choice + E);
  const float* row = logits + t * E;

  // Phase 1: max and count of the non-NaN logits.
  float mx = -INFINITY;
  int valid = 0;
  for (int e = lane; e < E; e += 32) {
    const float l = row[e];
    if (!isnan(l)) { mx = fmaxf(mx, clamp_inf(l)); ++valid; }
  }
  for (int off = 16; off > 0; off >>= 1) {
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    valid += __shfl_xor_sync(0xffffffffu, valid, off);
  }
  const bool softmax_all = p.scoring == 0 && !p.softmax_after_topk;
  float sum = 0.0f;
  if (softmax_all) {
    for (int e = lane; e < E; e += 32) {
      const float l = row[e];
      if (!isnan(l)) sum += expf(clamp_inf(l) - mx);
    }
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  }

  // Phase 2: scores (weight source) and choice values.
  for (int e = lane; e < E; e += 32) {
    const float l = clamp_inf(row[e]);
    float s, c;
    if (isnan(l)) {
      s = 0.0f;
      c = -INFINITY;
    } else {
      if (p.scoring == 0) s = p.softmax_after_topk ? l : expf(l - mx) / sum;
      else s = 1.0f / (1.0f + expf(-l));
      // without a bias the logits rank (routing/topk.cpp: f32 scores round apart logits into ties)
      c = p.correction_bias ? s : l;
      if (p.correction_bias) c += p.correction_bias[e];
      // A NaN bias (a checkpoint's, not checked) ranks its expert last, as the host's NaN choice does:
      // NaN here means "not a candidate", and a token left with fewer than k candidates chose id INT_MAX.
      if (isnan(c)) c = -INFINITY;
    }
    score[e] = s;
    choice[e] = c;
  }
  __syncwarp();

  // Phase 3: grouped top-k keeps the topk_group best groups (n_group <= 32: one lane per group).
  if (p.n_group > 1) {
    const int gsize = E / p.n_group;
    float gs = NAN;
    if (lane < p.n_group) {
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int j = 0; j < gsize; ++j) {
        const float c = choice[lane * gsize + j];
        if (c > b1) { b2 = b1; b1 = c; } else if (c > b2) { b2 = c; }
      }
      gs = p.correction_bias ? b1 + b2 : b1;
      // one non-NaN expert: below every group of two, above the all-NaN ones (routing/topk.cpp)
      if (p.correction_bias && b1 > -INFINITY && b2 == -INFINITY) gs = -FLT_MAX;
      if (isnan(gs)) gs = -INFINITY;  // -inf + inf cannot happen; keep NaN only for "taken"
    }
    unsigned keep = 0;
    for (int r = 0; r < p.topk_group; ++r) {
      float v = lane < p.n_group && !isnan(gs) ? gs : -INFINITY;
      int i = lane < p.n_group && !isnan(gs) ? lane : INT_MAX;
      warp_argmax(v, i);
      if (i < 32) keep |= 1u << i;
      if (lane == i) gs = NAN;
    }
    __syncwarp();  // group scoring read choice[] above
    for (int e = lane; e < E; e += 32)
      if (!((keep >> (e / gsize)) & 1u)) choice[e] = NAN;  // dropped groups: never chosen
    __syncwarp();
  }

  // Phase 4: top-k, ties to the lower id; chosen entries become NaN (no longer candidates).
  for (int j = 0; j < K; ++j) {
    float v = -INFINITY;
    int i = INT_MAX;
    for (int e = lane; e < E; e += 32) {
      const float c = choice[e];
      if (!isnan(c) && better(c, e, v, i)) { v = c; i = e; }
    }
    warp_argmax(v, i);
    __syncwarp();  // every lane's scan of choice[] is done before it changes
    if (lane == 0) { sel[j] = i; choice[i] = NAN; }
    __syncwarp();
  }

  // Phase 5: weights (lane 0; k <= 32), sums in double as the host does.
  if (lane == 0) {
    float w[kMaxRoutingTopK];
    float scale = p.scale;
    if (valid == 0) {  // scale / k, rounded once as the host does
      for (int j = 0; j < K; ++j) w[j] = p.scale / static_cast<float>(K);
      scale = 1.0f;
    } else if (p.softmax_after_topk) {
      float m2 = -INFINITY;
      for (int j = 0; j < K; ++j) {
        const float l = row[sel[j]];
        if (!isnan(l)) m2 = fmaxf(m2, clamp_inf(l));
      }
      double s2 = 0.0;
      for (int j = 0; j < K; ++j) {
        const float l = row[sel[j]];
        w[j] = isnan(l) ? 0.0f : expf(clamp_inf(l) - m2);
        s2 += w[j];
      }
      for (int j = 0; j < K; ++j) w[j] = static_cast<float>(w[j] / s2);
    } else {
      double s2 = 0.0;
      for (int j = 0; j < K; ++j) { w[j] = score[sel[j]]; s2 += w[j]; }
      if (p.renormalize)
        for (int j = 0; j < K; ++j) w[j] = s2 > 0 ? static_cast<float>(w[j] / s2) : 1.0f / static_cast<float>(K);
    }
    for (int j = 0; j < K; ++j) {
      ids[t * K + j] = sel[j];
      weights[t * K + j] = w[j] * scale;
    }
  }
}

template <typename T>
__global__ void router_linear_kernel(const T* __restrict__ hidden, int64_t m, int h,
                                     const float* __restrict__ w, const float* __restrict__ bias,
                                     int e, float* __restrict__ logits) {
  pdl_wait();
  pdl_trigger();
  const int64_t gw = ((static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (gw >= m * e) return;
  const int64_t t = gw / e;
  const int x = static_cast<int>(gw % e);
  float acc = 0.0f;
  for (int i = lane; i < h; i += 32) acc += to_f32(hidden[t * h + i]) * w[static_cast<int64_t>(x) * h + i];
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) logits[gw] = acc + (bias ? bias[x] : 0.0f);
}

constexpr int kAlignThreads = 1024;                                   // the one-block kernel
constexpr int kAlignBlockThreads = static_cast<int>(kAlignRowsPerBlock);  // the two multi-block kernels: a row each

// ceil(count / block_m) without the overflow of count + block_m - 1 (a count may be near INT32_MAX).
__device__ __forceinline__ int tiles_of(int count, int block_m) { return count / block_m + (count % block_m != 0); }

// From the per-expert row counts (shared memory, E entries): the exclusive scans of rows and tiles
// (warp 0, each lane a contiguous run of experts), then seg_offsets, the tile table and num_tiles.
// offset / tile_off: shared arrays of E + 1 entries. Called by every thread of one block.
__device__ void write_alignment_tables(const int* count, int E, int block_m, int* offset, int* tile_off,
                                       const AlignOutput& out) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const int per = (E + 31) / 32;
    const int lo = min(E, lane * per), hi = min(E, lo + per);
    int rs = 0, ts = 0;
    for (int e = lo; e < hi; ++e) { rs += count[e]; ts += tiles_of(count[e], block_m); }
    int ri = rs, ti = ts;  // inclusive warp scan
    for (int off = 1; off < 32; off <<= 1) {
      const int a = __shfl_up_sync(0xffffffffu, ri, off), b = __shfl_up_sync(0xffffffffu, ti, off);
      if (lane >= off) { ri += a; ti += b; }
    }
    int r0 = ri - rs, t0 = ti - ts;
    for (int e = lo; e < hi; ++e) {
      offset[e] = r0;
      tile_off[e] = t0;
      r0 += count[e];
      t0 += tiles_of(count[e], block_m);
    }
    if (lane == 31) { offset[E] = ri; tile_off[E] = ti; *out.num_tiles = ti; }
  }
  __syncthreads();
  for (int e = threadIdx.x; e <= E; e += blockDim.x) out.seg_offsets[e] = offset[e];
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const int n = tiles_of(count[e], block_m);
    for (int j = 0; j < n; ++j) {
      out.tile_expert[tile_off[e] + j] = e;
      out.tile_row0[tile_off[e] + j] = j * block_m;
    }
  }
}

// Row pos of the sorted order is (token, slot) pair i: the tables every fill writes.
__device__ __forceinline__ void place_row(const AlignOutput& out, int pos, int64_t i, int top_k,
                                          const float* __restrict__ weights) {
  out.token_of_row[pos] = static_cast<int32_t>(i / top_k);
  out.slot_of_row[pos] = static_cast<int32_t>(i);
  if (out.row_of_slot) out.row_of_slot[i] = pos;
  out.weight_of_row[pos] = weights[i];
}

// Small calls: everything in one block (histogram, scans, tables, then a fill with per-expert cursors).
__global__ void __launch_bounds__(kAlignThreads) align_kernel(const int32_t* __restrict__ ids,
                                                              const float* __restrict__ weights,
                                                              int64_t rows, int top_k, int E,
                                                              int block_m, AlignOutput out) {
  __shared__ int count[kMaxRoutingExperts];
  __shared__ int offset[kMaxRoutingExperts + 1];
  __shared__ int tile_off[kMaxRoutingExperts + 1];
  __shared__ int cursor[kMaxRoutingExperts];
  pdl_wait();
  pdl_trigger();
  for (int e = threadIdx.x; e < E; e += blockDim.x) { count[e] = 0; cursor[e] = 0; }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) atomicAdd(&count[ids[i]], 1);
  __syncthreads();
  write_alignment_tables(count, E, block_m, offset, tile_off, out);
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    const int e = ids[i];
    const int pos = offset[e] + atomicAdd(&cursor[e], 1);
    place_row(out, pos, i, top_k, weights);
  }
}

// Large calls, pass 1 of 2 (one block per kAlignRowsPerBlock rows): a block histogram, whose counts
// each reserve a run inside the expert's global count (atomicAdd returns the run's start, kept in
// base[block][e]); the last block to finish scans the totals into the tables and zeroes the counters
// for the next call. ws = [E] counts | [1] finished blocks | [blocks * E] bases (the counts and the finished count zero on entry; the bases are written here before any fill reads them).
__global__ void __launch_bounds__(kAlignBlockThreads) align_count_kernel(const int32_t* __restrict__ ids, int64_t rows,
                                                                    int E, int block_m, int32_t* ws,
                                                                    AlignOutput out) {
  __shared__ int count[kMaxRoutingExperts];
  __shared__ int offset[kMaxRoutingExperts + 1];
  __shared__ int tile_off[kMaxRoutingExperts + 1];
  __shared__ bool last;
  int32_t* total = ws;
  int32_t* finished = ws + E;
  int32_t* base = ws + E + 1 + static_cast<int64_t>(blockIdx.x) * E;
  pdl_wait();
  pdl_trigger();
  for (int e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
  __syncthreads();
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * kAlignRowsPerBlock;
  const int64_t hi = min(rows, lo + kAlignRowsPerBlock);
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) atomicAdd(&count[ids[i]], 1);
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) base[e] = count[e] ? atomicAdd(&total[e], count[e]) : 0;
  __threadfence();  // the totals are visible before this block counts itself finished
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(finished, 1) == static_cast<int>(gridDim.x) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int e = threadIdx.x; e < E; e += blockDim.x) count[e] = atomicExch(&total[e], 0);
  if (threadIdx.x == 0) *finished = 0;
  __syncthreads();
  write_alignment_tables(count, E, block_m, offset, tile_off, out);
}

// Pass 2: each block places its rows at seg_offsets[e] + its run start + a block-local cursor.
__global__ void __launch_bounds__(kAlignBlockThreads) align_fill_kernel(const int32_t* __restrict__ ids,
                                                                   const float* __restrict__ weights, int64_t rows,
                                                                   int top_k, int E, const int32_t* __restrict__ ws,
                                                                   AlignOutput out) {
  __shared__ int start[kMaxRoutingExperts];
  __shared__ int cursor[kMaxRoutingExperts];
  const int32_t* base = ws + E + 1 + static_cast<int64_t>(blockIdx.x) * E;
  pdl_wait();
  pdl_trigger();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    start[e] = out.seg_offsets[e] + base[e];
    cursor[e] = 0;
  }
  __syncthreads();
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * kAlignRowsPerBlock;
  const int64_t hi = min(rows, lo + kAlignRowsPerBlock);
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const int e = ids[i];
    const int pos = start[e] + atomicAdd(&cursor[e], 1);
    place_row(out, pos, i, top_k, weights);
  }
}

// Pass 2 with the gather (AlignGather): one block per row i. Thread 0 takes the row's place from its
// count block's run, as a global atomic on that run's start (the count pass rewrites every start, so
// nothing needs zeroing), and writes the tables; meanwhile every thread loads its first vectors of the
// token (known from i alone), then stores them at the place.
constexpr int kFillGatherThreads = 128;
constexpr int kFillGatherUnroll = 4;

template <typename V>
__global__ void __launch_bounds__(kFillGatherThreads)
    align_fill_gather_kernel(const int32_t* __restrict__ ids, const float* __restrict__ weights, int top_k, int E,
                             int32_t* ws, AlignOutput out, const V* __restrict__ src, int vecs,
                             V* __restrict__ dst) {
  __shared__ int place;
  pdl_wait();
  pdl_trigger();
  const int64_t i = blockIdx.x;
  if (threadIdx.x == 0) {
    const int e = ids[i];
    int32_t* run = ws + E + 1 + (i / kAlignRowsPerBlock) * E + e;
    const int pos = out.seg_offsets[e] + atomicAdd(run, 1);
    place_row(out, pos, i, top_k, weights);
    place = pos;
  }
  const V* s = src + (i / top_k) * vecs;
  V v[kFillGatherUnroll];
  int c = threadIdx.x;
#pragma unroll
  for (int u = 0; u < kFillGatherUnroll; ++u)
    if (c + u * kFillGatherThreads < vecs) v[u] = s[c + u * kFillGatherThreads];
  __syncthreads();
  V* d = dst + static_cast<int64_t>(place) * vecs;
  for (;;) {
#pragma unroll
    for (int u = 0; u < kFillGatherUnroll; ++u)
      if (c + u * kFillGatherThreads < vecs) d[c + u * kFillGatherThreads] = v[u];
    c += kFillGatherUnroll * kFillGatherThreads;
    if (c >= vecs) break;
#pragma unroll
    for (int u = 0; u < kFillGatherUnroll; ++u)
      if (c + u * kFillGatherThreads < vecs) v[u] = s[c + u * kFillGatherThreads];
  }
}

// Grid (tokens, column chunks): kCombineThreads threads x 4 columns per block, so a decode call with
// one token still spreads its k rows over several SMs (one block per token took 10 us at h = 2048).
constexpr int kCombineThreads = 128;
constexpr int kCombineCols = kCombineThreads * 4;

template <typename TH, typename TO>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const float* __restrict__ rows, int top_k, int h,
                                                                  const float* __restrict__ shared,
                                                                  const float* __restrict__ shared_gate,
                                                                  const TH* __restrict__ hidden, TO* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  float gate = 1.0f;
  if (shared && shared_gate) {  // every block of the token computes the gate (h reads, cheap)
    __shared__ float part[kCombineThreads / 32];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < h; i += blockDim.x) acc += to_f32(hidden[t * h + i]) * shared_gate[i];
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = acc;
    __syncthreads();
    float v = 0.0f;
    for (int w = 0; w < kCombineThreads / 32; ++w) v += part[w];
    gate = 1.0f / (1.0f + expf(-v));
  }
  const int c = blockIdx.y * kCombineCols + threadIdx.x * 4;  // h is a multiple of 8: whole float4s
  if (c >= h) return;
  const float* base = rows + t * top_k * h + c;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int s = 0; s < top_k; ++s) {
    const float4 v = *reinterpret_cast<const float4*>(base + static_cast<int64_t>(s) * h);
    acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
  }
  if (shared) {
    const float4 v = *reinterpret_cast<const float4*>(shared + t * h + c);
    acc.x += gate * v.x; acc.y += gate * v.y; acc.z += gate * v.z; acc.w += gate * v.w;
  }
  TO* o = out + t * h + c;
  o[0] = from_f32<TO>(acc.x);
  o[1] = from_f32<TO>(acc.y);
  o[2] = from_f32<TO>(acc.z);
  o[3] = from_f32<TO>(acc.w);
}

template <typename T>
__global__ void gather_rows_kernel(const T* __restrict__ src, int h, const int32_t* __restrict__ token,
                                   const int32_t* __restrict__ total, T* __restrict__ dst) {
  const int64_t r = blockIdx.x;
  if (r >= *total) return;
  const int64_t s = token[r];
  for (int i = threadIdx.x; i < h; i += blockDim.x) dst[r * h + i] = src[s * h + i];
}

template <typename T>
__global__ void activation_kernel(const T* __restrict__ gu, int64_t n, const int32_t* __restrict__ eor,
                                  const float* __restrict__ bias, Act act, float alpha, float limit,
                                  bool interleaved, const int32_t* __restrict__ total,
                                  T* __restrict__ inter) {
  const int64_t r = blockIdx.x;
  if (r >= *total) return;
  const bool gated = act_gated(act);
  const int64_t outn = gated ? n / 2 : n;
  const float* b = bias ? bias + static_cast<int64_t>(eor[r]) * n : nullptr;
  for (int64_t j = threadIdx.x; j < outn; j += blockDim.x) {
    const int64_t gi = gated ? (interleaved ? 2 * j : j) : j;
    const int64_t ui = gated ? (interleaved ? 2 * j + 1 : outn + j) : j;
    float g = to_f32(gu[r * n + gi]), u = gated ? to_f32(gu[r * n + ui]) : 0.0f;
    if (b) { g += b[gi]; if (gated) u += b[ui]; }
    inter[r * outn + j] = from_f32<T>(apply_act(act, g, u, alpha, limit));
  }
}

template <typename T>
__global__ void weighted_scatter_kernel(const T* __restrict__ y, int h, const int32_t* __restrict__ slot,
                                        const float* __restrict__ w, const int32_t* __restrict__ eor,
                                        const float* __restrict__ bias, const int32_t* __restrict__ total,
                                        float* __restrict__ rows_out) {
  const int64_t r = blockIdx.x;
  if (r >= *total) return;
  const float wr = w[r];
  const float* b = bias ? bias + static_cast<int64_t>(eor[r]) * h : nullptr;
  float* dst = rows_out + static_cast<int64_t>(slot[r]) * h;
  for (int i = threadIdx.x; i < h; i += blockDim.x) dst[i] = wr * (to_f32(y[r * h + i]) + (b ? b[i] : 0.0f));
}

__global__ void expert_of_row_kernel(const int32_t* __restrict__ seg, int E, int64_t rows_bound,
                                     int32_t* __restrict__ eor) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows_bound || r >= seg[E]) return;
  eor[r] = segment_of(r, seg, E);
}

template <typename F>
cudaError_t by_elem(Elem e, F&& f) {
  switch (e) {
    case Elem::kBF16: return f(__nv_bfloat16{});
    case Elem::kF16: return f(__half{});
    case Elem::kF32: return f(float{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_routing(const RoutingParams& p, const float* logits, int64_t m, int32_t* ids,
                           float* weights, cudaStream_t stream) {
  if (m == 0) return cudaSuccess;
  // What MoeSpec::validate holds, checked again for callers that launch this directly (tests, probes):
  // a token with fewer than top_k candidates would choose id INT_MAX.
  const int E = p.num_experts, K = p.top_k, G = p.n_group;
  if (E < 1 || E > kMaxRoutingExperts || K < 1 || K > kMaxRoutingTopK || K > E || G < 1 || G > 32 ||
      E % G != 0 || (G > 1 && (p.topk_group < 1 || p.topk_group > G || K > p.topk_group * (E / G))))
    return cudaErrorInvalidValue;
  const size_t smem = kRoutingWarps * (2 * p.num_experts + kMaxRoutingTopK) * sizeof(float);
  const int64_t blocks = (m + kRoutingWarps - 1) / kRoutingWarps;
  return launch_pdl(routing_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kRoutingWarps * 32), smem, stream, p,
                    logits, m, ids, weights);
}

cudaError_t launch_router_linear(Elem elem, const void* hidden, int64_t m, int h, const float* w,
                                 const float* bias, int e, float* logits, cudaStream_t stream) {
  if (m == 0) return cudaSuccess;
  // A warp a logit, 8 a block, on a 2-D grid: m * e blocks of 8 can pass gridDim.x's 2^31 - 1.
  const int64_t blocks = (m * e + 7) / 8;
  constexpr int64_t kRowBlocks = 1 << 16;
  if ((blocks + kRowBlocks - 1) / kRowBlocks > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(std::min(blocks, kRowBlocks)), static_cast<unsigned>((blocks + kRowBlocks - 1) / kRowBlocks));
  return by_elem(elem, [&](auto tag) {
    using T = decltype(tag);
    return launch_pdl(router_linear_kernel<T>, grid, dim3(256), 0, stream, static_cast<const T*>(hidden), m, h,
                      w, bias, e, logits);
  });
}

cudaError_t launch_align(const int32_t* ids, const float* weights, int64_t m, int top_k, int experts,
                         int block_m, const AlignOutput& out, cudaStream_t stream, const AlignGather* gather) {
  if (experts > kMaxRoutingExperts) return cudaErrorInvalidValue;
  const int64_t rows = m * top_k;
  if (gather && (gather->elem == Elem::kF32 || gather->h <= 0 || gather->h % 8 != 0 || !gather->src || !gather->dst))
    return cudaErrorInvalidValue;
  const int64_t blocks = align_blocks(rows);
  if (blocks <= 1) {
    const cudaError_t e = launch_pdl(align_kernel, dim3(1), dim3(kAlignThreads), 0, stream, ids, weights, rows, top_k,
                                     experts, block_m, out);
    if (e != cudaSuccess || !gather) return e;
    return launch_gather_sorted(gather->elem, gather->src, gather->h, out.token_of_row, out.seg_offsets + experts, rows,
                                gather->dst, stream);
  }
  if (!out.workspace || rows > 0x7fffffff) return cudaErrorInvalidValue;
  const unsigned grid = static_cast<unsigned>(blocks);
  const cudaError_t e = launch_pdl(align_count_kernel, dim3(grid), dim3(kAlignBlockThreads), 0, stream, ids, rows, experts,
                                   block_m, out.workspace, out);
  if (e != cudaSuccess) return e;
  if (!gather)
    return launch_pdl(align_fill_kernel, dim3(grid), dim3(kAlignBlockThreads), 0, stream, ids, weights, rows, top_k,
                      experts, static_cast<const int32_t*>(out.workspace), out);
  // 16-byte vectors where both row bases allow them (the caller's hidden states may sit anywhere).
  const bool vec = ((reinterpret_cast<uintptr_t>(gather->src) | reinterpret_cast<uintptr_t>(gather->dst)) & 15u) == 0;
  const dim3 g(static_cast<unsigned>(rows));
  if (vec)
    return launch_pdl(align_fill_gather_kernel<uint4>, g, dim3(kFillGatherThreads), 0, stream, ids, weights, top_k,
                      experts, out.workspace, out, static_cast<const uint4*>(gather->src), gather->h / 8,
                      static_cast<uint4*>(gather->dst));
  return launch_pdl(align_fill_gather_kernel<uint16_t>, g, dim3(kFillGatherThreads), 0, stream, ids, weights, top_k,
                    experts, out.workspace, out, static_cast<const uint16_t*>(gather->src), gather->h,
                    static_cast<uint16_t*>(gather->dst));
}

cudaError_t launch_combine(const float* rows, int64_t m, int top_k, int h, const float* shared,
                           const float* shared_gate, const void* hidden, Elem hidden_elem, void* out,
                           Elem out_elem, cudaStream_t stream) {
  if (m == 0) return cudaSuccess;
  return by_elem(hidden_elem, [&](auto htag) {
    using TH = decltype(htag);
    return by_elem(out_elem, [&](auto otag) {
      using TO = decltype(otag);
      if (h % 4 != 0 || m > 0x7fffffff) return cudaErrorInvalidValue;
      const dim3 grid(static_cast<unsigned>(m), static_cast<unsigned>((h + kCombineCols - 1) / kCombineCols));
      return launch_pdl(combine_kernel<TH, TO>, grid, dim3(kCombineThreads), 0, stream, rows, top_k, h, shared,
                        shared_gate, static_cast<const TH*>(hidden), static_cast<TO*>(out));
    });
  });
}

cudaError_t launch_gather_rows(Elem elem, const void* src, int h, const int32_t* token,
                               const int32_t* total, int64_t rows_bound, void* dst, cudaStream_t stream) {
  if (rows_bound == 0) return cudaSuccess;
  return by_elem(elem, [&](auto tag) {
    using T = decltype(tag);
    gather_rows_kernel<T><<<static_cast<unsigned>(rows_bound), 256, 0, stream>>>(
        static_cast<const T*>(src), h, token, total, static_cast<T*>(dst));
    return cudaGetLastError();
  });
}

cudaError_t launch_activation(Elem elem, const void* gu, int64_t n, const int32_t* eor, const float* bias,
                              Act act, float alpha, float limit, bool interleaved, const int32_t* total,
                              int64_t rows_bound, void* inter, cudaStream_t stream) {
  if (rows_bound == 0) return cudaSuccess;
  return by_elem(elem, [&](auto tag) {
    using T = decltype(tag);
    activation_kernel<T><<<static_cast<unsigned>(rows_bound), 256, 0, stream>>>(
        static_cast<const T*>(gu), n, eor, bias, act, alpha, limit, interleaved, total, static_cast<T*>(inter));
    return cudaGetLastError();
  });
}

cudaError_t launch_weighted_scatter(Elem elem, const void* y, int h, const int32_t* slot, const float* w,
                                    const int32_t* eor, const float* bias, const int32_t* total,
                                    int64_t rows_bound, float* rows_out, cudaStream_t stream) {
  if (rows_bound == 0) return cudaSuccess;
  return by_elem(elem, [&](auto tag) {
    using T = decltype(tag);
    weighted_scatter_kernel<T><<<static_cast<unsigned>(rows_bound), 256, 0, stream>>>(
        static_cast<const T*>(y), h, slot, w, eor, bias, total, rows_out);
    return cudaGetLastError();
  });
}

cudaError_t launch_expert_of_row(const int32_t* seg, int experts, int64_t rows_bound, int32_t* eor,
                                 cudaStream_t stream) {
  if (rows_bound == 0) return cudaSuccess;
  expert_of_row_kernel<<<static_cast<unsigned>((rows_bound + 255) / 256), 256, 0, stream>>>(seg, experts, rows_bound, eor);
  return cudaGetLastError();
}

}  // namespace moerun::cuda_kernels
