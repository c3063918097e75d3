// cpu/kernels/gemm_avx2.cpp — AVX2 + FMA + F16C kernels (kernels.hpp). Compiled with -mavx2 -mfma -mf16c;
// reached only through isa.cpp's dispatch when the CPU and the cap allow AVX2.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/dequant_avx2.hpp"
#include "backends/cpu/kernels/kernels.hpp"

namespace moerun::cpu::kernels {
namespace {

using avx2::Dec;
using avx2::group_scale;

#define MOERUN_T4(X) X(0) X(1) X(2) X(3)
// ---- streaming, v1 (kept for side-by-side measurement: MOERUN_CPU_KERNELS=v1): weights decoded once,
// MT tokens' accumulators in registers ----------------------------
// NOTES: accumulators are named variables, not arrays: GCC keeps arrays of vectors in memory and stores
// them every iteration (12 stores per k step halved the tile kernel's speed). With MT <= 2 the even and
// odd k of a pair go to separate accumulators so each FMA chain is short (latency 4-5 cycles); from
// MT = 3 there are enough independent chains already.
template <PackFmt F, int MT>
void v1_stream_t(const BlockRef& b, const float* x, int64_t ldx, float* acc) {
  constexpr int G = group_size(F);
  constexpr bool kSplit = MT <= 2;
  const int64_t pairs = b.kp / 2;
  const int64_t gp = G ? G / 2 : pairs;
  const __m256 z = _mm256_setzero_ps();
#define DECL(t) __m256 e##t##0 = z, e##t##1 = z, o##t##0 = z, o##t##1 = z; const float* x##t = x + (t) * ldx;
  MOERUN_T4(DECL)
#undef DECL
  for (int64_t p0 = 0; p0 < pairs; p0 += gp) {
    __m256 s0, s1;
    if constexpr (G != 0) group_scale<F>(b.gscale, p0 / gp, b.gmul, s0, s1);
    const int64_t pe = std::min(p0 + gp, pairs);
    for (int64_t p = p0; p < pe; ++p) {
      __m256 w[4];
      Dec<F>::load2(b.data, p, w);
      if constexpr (G != 0) {
        w[0] = _mm256_mul_ps(w[0], s0); w[1] = _mm256_mul_ps(w[1], s1);
        w[2] = _mm256_mul_ps(w[2], s0); w[3] = _mm256_mul_ps(w[3], s1);
      }
#define STEP(t)                                                              \
      if constexpr (MT > (t)) {                                              \
        const __m256 xe = _mm256_broadcast_ss(x##t + 2 * p);                 \
        const __m256 xo = _mm256_broadcast_ss(x##t + 2 * p + 1);             \
        e##t##0 = _mm256_fmadd_ps(w[0], xe, e##t##0);                        \
        e##t##1 = _mm256_fmadd_ps(w[1], xe, e##t##1);                        \
        if constexpr (kSplit) {                                              \
          o##t##0 = _mm256_fmadd_ps(w[2], xo, o##t##0);                      \
          o##t##1 = _mm256_fmadd_ps(w[3], xo, o##t##1);                      \
        } else {                                                             \
          e##t##0 = _mm256_fmadd_ps(w[2], xo, e##t##0);                      \
          e##t##1 = _mm256_fmadd_ps(w[3], xo, e##t##1);                      \
        }                                                                    \
      }
      MOERUN_T4(STEP)
#undef STEP
    }
  }
#define STORE(t)                                                             \
  if constexpr (MT > (t)) {                                                  \
    _mm256_storeu_ps(acc + (t) * 16, _mm256_add_ps(e##t##0, o##t##0));       \
    _mm256_storeu_ps(acc + (t) * 16 + 8, _mm256_add_ps(e##t##1, o##t##1));   \
  }
  MOERUN_T4(STORE)
#undef STORE
}

template <PackFmt F>
void v1_stream_f(const BlockRef& b, const float* x, int64_t ldx, int m, float* acc) {
  int i = 0;
  for (; i + 4 <= m; i += 4) v1_stream_t<F, 4>(b, x + i * ldx, ldx, acc + i * 16);
  switch (m - i) {
    case 3: v1_stream_t<F, 3>(b, x + i * ldx, ldx, acc + i * 16); break;
    case 2: v1_stream_t<F, 2>(b, x + i * ldx, ldx, acc + i * 16); break;
    case 1: v1_stream_t<F, 1>(b, x + i * ldx, ldx, acc + i * 16); break;
    default: break;
  }
}

// ---- streaming, v2: any token count, weights decoded once per token group -------------------------
// NOTES: a token group (MT <= 4 tokens) keeps its accumulators in registers (named variables, not
// arrays: GCC keeps arrays of vectors in memory). More than 4 tokens run as several groups over chunks
// of kChunkPairs k pairs, so the chunk's packed bytes come from memory once and from L1 for the other
// groups, and no f32 panel is written (Zen 1 stores one 128-bit half per cycle, so a bf16 panel costs
// about 8 cycles per k pair). Groups are sized 4, then 3 + 2 or 3 + 3 rather than 4 + 1 or 4 + 2: one
// or two tokens give too few FMA chains to cover the FMA latency. Measured (cpu_kernel_bench, bf16,
// L1/L2-resident, ns per k pair, this vs panel + 6x16 tiles): m = 6 11.4 vs 14.2, m = 8 15.3 vs 18.4,
// m = 16 30.4 vs 30.1, m = 32 61 vs 56; for fp8 / fp4 the panel wins from m = 6 on (their decode is
// paid once per panel there), hence the per-format crossover in isa.hpp.
// With MT <= 2 the even and odd k of a pair go to separate accumulators (short FMA chains), and the
// group scale (fp8 block, mxfp4, nvfp4) is applied once per group to partial sums instead of to every
// decoded weight; from MT = 3 the scale multiplies the decoded weights (4 multiplies per pair shared
// by 12-16 FMAs) so that the registers suffice.
inline constexpr int64_t kChunkPairs = 256;  // 512 k: 16 KiB of bf16 per block, within Zen 1's 32 KiB L1D

template <PackFmt F, int MT>
void stream_rows(const BlockRef& b, int64_t pb, int64_t pe, const float* x, int64_t ldx, float* acc, bool accumulate) {
  constexpr int G = group_size(F);
  constexpr bool kSplit = MT <= 2;
  constexpr bool kFold = G != 0 && kSplit;
  static_assert(kChunkPairs % 64 == 0, "a chunk must hold whole scale groups (64, 16 or 8 pairs)");
  const int64_t gp = G ? G / 2 : pe - pb;
  const __m256 z = _mm256_setzero_ps();
#define DECL(t) __m256 a##t##0 = z, a##t##1 = z, o##t##0 = z, o##t##1 = z; const float* x##t = x + (t) * ldx;
  MOERUN_T4(DECL)
#undef DECL
  for (int64_t p0 = pb; p0 < pe; p0 += gp) {
    const int64_t p1 = std::min(p0 + gp, pe);
    __m256 s0 = z, s1 = z;
    if constexpr (G != 0) group_scale<F>(b.gscale, p0 / gp, b.gmul, s0, s1);
    if constexpr (kFold) {
      // partial sums of this group: e = k even, q = k odd
#define PDECL(t) __m256 e##t##0 = z, e##t##1 = z, q##t##0 = z, q##t##1 = z;
      MOERUN_T4(PDECL)
#undef PDECL
      for (int64_t p = p0; p < p1; ++p) {
        prefetch_pair<2 * bytes_per_k(F)>(b, p);
        __m256 w[4];
        Dec<F>::load2(b.data, p, w);
#define STEP(t)                                                                     \
        if constexpr (MT > (t)) {                                                   \
          const __m256 xe = _mm256_broadcast_ss(x##t + 2 * p);                      \
          const __m256 xo = _mm256_broadcast_ss(x##t + 2 * p + 1);                  \
          e##t##0 = _mm256_fmadd_ps(w[0], xe, e##t##0);                             \
          e##t##1 = _mm256_fmadd_ps(w[1], xe, e##t##1);                             \
          q##t##0 = _mm256_fmadd_ps(w[2], xo, q##t##0);                             \
          q##t##1 = _mm256_fmadd_ps(w[3], xo, q##t##1);                             \
        }
        MOERUN_T4(STEP)
#undef STEP
      }
#define FOLD(t)                                                                     \
      if constexpr (MT > (t)) {                                                     \
        a##t##0 = _mm256_fmadd_ps(_mm256_add_ps(e##t##0, q##t##0), s0, a##t##0);    \
        a##t##1 = _mm256_fmadd_ps(_mm256_add_ps(e##t##1, q##t##1), s1, a##t##1);    \
      }
      MOERUN_T4(FOLD)
#undef FOLD
    } else {
      for (int64_t p = p0; p < p1; ++p) {
        prefetch_pair<2 * bytes_per_k(F)>(b, p);
        __m256 w[4];
        Dec<F>::load2(b.data, p, w);
        if constexpr (G != 0) {
          w[0] = _mm256_mul_ps(w[0], s0); w[1] = _mm256_mul_ps(w[1], s1);
          w[2] = _mm256_mul_ps(w[2], s0); w[3] = _mm256_mul_ps(w[3], s1);
        }
        // k even for every token, then k odd: with MT >= 3 this keeps GCC from rotating the
        // accumulators through extra register moves (measured 14% at MT = 4)
#define STEPE(t)                                                                    \
        if constexpr (MT > (t)) {                                                   \
          const __m256 xe = _mm256_broadcast_ss(x##t + 2 * p);                      \
          a##t##0 = _mm256_fmadd_ps(w[0], xe, a##t##0);                             \
          a##t##1 = _mm256_fmadd_ps(w[1], xe, a##t##1);                             \
        }
#define STEPO(t)                                                                    \
        if constexpr (MT > (t)) {                                                   \
          const __m256 xo = _mm256_broadcast_ss(x##t + 2 * p + 1);                  \
          if constexpr (kSplit) {                                                   \
            o##t##0 = _mm256_fmadd_ps(w[2], xo, o##t##0);                           \
            o##t##1 = _mm256_fmadd_ps(w[3], xo, o##t##1);                           \
          } else {                                                                  \
            a##t##0 = _mm256_fmadd_ps(w[2], xo, a##t##0);                           \
            a##t##1 = _mm256_fmadd_ps(w[3], xo, a##t##1);                           \
          }                                                                         \
        }
        MOERUN_T4(STEPE)
        MOERUN_T4(STEPO)
#undef STEPE
#undef STEPO
      }
    }
  }
  // Registers start at zero and the previous chunk's sums are added here: loading them into the
  // accumulators before the loop made GCC rotate registers through extra moves (14% slower at MT = 4).
#define STORE(t)                                                                    \
  if constexpr (MT > (t)) {                                                         \
    __m256 r0 = kSplit ? _mm256_add_ps(a##t##0, o##t##0) : a##t##0;                 \
    __m256 r1 = kSplit ? _mm256_add_ps(a##t##1, o##t##1) : a##t##1;                 \
    if (accumulate) {                                                               \
      r0 = _mm256_add_ps(r0, _mm256_loadu_ps(acc + (t) * 16));                      \
      r1 = _mm256_add_ps(r1, _mm256_loadu_ps(acc + (t) * 16 + 8));                  \
    }                                                                               \
    _mm256_storeu_ps(acc + (t) * 16, r0);                                           \
    _mm256_storeu_ps(acc + (t) * 16 + 8, r1);                                       \
  }
  MOERUN_T4(STORE)
#undef STORE
}

template <PackFmt F>
void stream_group(const BlockRef& b, int64_t pb, int64_t pe, const float* x, int64_t ldx, int mt, float* acc,
                  bool accumulate) {
  switch (mt) {
    case 4: return stream_rows<F, 4>(b, pb, pe, x, ldx, acc, accumulate);
    case 3: return stream_rows<F, 3>(b, pb, pe, x, ldx, acc, accumulate);
    case 2: return stream_rows<F, 2>(b, pb, pe, x, ldx, acc, accumulate);
    case 1: return stream_rows<F, 1>(b, pb, pe, x, ldx, acc, accumulate);
    default: return;
  }
}

// Size of the token group starting at row i of m: 4, except that the last 5 or 6 rows go as 3 + 2 / 3 + 3.
constexpr int group_rows(int m, int i) {
  const int left = m - i;
  if (left == 5 || left == 6) return 3;
  return left < 4 ? left : 4;
}

template <PackFmt F>
void stream_f(const BlockRef& b, const float* x, int64_t ldx, int m, float* acc) {
  const int64_t pairs = b.kp / 2;
  if (m <= 4) {
    // Over the whole K, 3 or 4 tokens (and 1 or 2 without group scales) are what v1 did; its loop
    // compiles to fewer instructions than stream_rows<F, 4> (7% at m = 4 on Zen 1).
    if (m == 4) return v1_stream_t<F, 4>(b, x, ldx, acc);
    if (m == 3) return v1_stream_t<F, 3>(b, x, ldx, acc);
    return stream_group<F>(b, 0, pairs, x, ldx, m, acc, false);
  }
  for (int64_t c0 = 0; c0 < pairs; c0 += kChunkPairs) {
    const int64_t c1 = std::min(c0 + kChunkPairs, pairs);
    for (int i = 0; i < m;) {
      const int mt = group_rows(m, i);
      stream_group<F>(b, c0, c1, x + i * ldx, ldx, mt, acc + i * 16, c0 > 0);
      i += mt;
    }
  }
}

template <PackFmt F>
void panel_f(const BlockRef& b, float* panel) {
  constexpr int G = group_size(F);
  const int64_t pairs = b.kp / 2;
  const int64_t gp = G ? G / 2 : pairs;
  for (int64_t p0 = 0; p0 < pairs; p0 += gp) {
    __m256 s0, s1;
    if constexpr (G != 0) group_scale<F>(b.gscale, p0 / gp, b.gmul, s0, s1);
    const int64_t pe = std::min(p0 + gp, pairs);
    for (int64_t p = p0; p < pe; ++p) {
      __m256 w[4];
      Dec<F>::load2(b.data, p, w);
      if constexpr (G != 0) {
        w[0] = _mm256_mul_ps(w[0], s0); w[1] = _mm256_mul_ps(w[1], s1);
        w[2] = _mm256_mul_ps(w[2], s0); w[3] = _mm256_mul_ps(w[3], s1);
      }
      float* o = panel + p * 32;
      _mm256_store_ps(o, w[0]);
      _mm256_store_ps(o + 8, w[1]);
      _mm256_store_ps(o + 16, w[2]);
      _mm256_store_ps(o + 24, w[3]);
    }
  }
}

// ---- register tiles on an f32 panel: MR tokens x 16 lanes -------------------------------------------
#define MOERUN_R6(X) X(0) X(1) X(2) X(3) X(4) X(5)
template <int MR>
void tile_t(const float* panel, int64_t kp, const float* x, int64_t ldx, float* acc) {
  const __m256 z = _mm256_setzero_ps();
#define DECL(r) __m256 c##r##0 = z, c##r##1 = z; const float* x##r = x + (r) * ldx;
  MOERUN_R6(DECL)
#undef DECL
  for (int64_t k = 0; k < kp; ++k) {
    const __m256 b0 = _mm256_load_ps(panel + k * 16), b1 = _mm256_load_ps(panel + k * 16 + 8);
#define STEP(r)                                                  \
    if constexpr (MR > (r)) {                                    \
      const __m256 a = _mm256_broadcast_ss(x##r + k);            \
      c##r##0 = _mm256_fmadd_ps(a, b0, c##r##0);                 \
      c##r##1 = _mm256_fmadd_ps(a, b1, c##r##1);                 \
    }
    MOERUN_R6(STEP)
#undef STEP
  }
#define STORE(r)                                                 \
  if constexpr (MR > (r)) {                                      \
    _mm256_storeu_ps(acc + (r) * 16, c##r##0);                   \
    _mm256_storeu_ps(acc + (r) * 16 + 8, c##r##1);               \
  }
  MOERUN_R6(STORE)
#undef STORE
}

// ---- activations ------------------------------------------------------------------------------------
// exp(x) = 2^n e^r, n = round(x log2 e), r = x - n ln 2 (ln 2 split in two so r is exact to ~1 ulp),
// |r| <= ln2 / 2; e^r by its Taylor polynomial to r^6 (remainder < 0.35^7 / 5040 = 1.3e-7). x is
// clamped to [-87, 88] so 2^n stays a normal float (n in [-126, 127]).
inline __m256 exp_ps(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
inline __m256 sigmoid_ps(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}
inline __m256 act8(Act a, __m256 g, __m256 u, float alpha, float limit) {
  switch (a) {
    case Act::kSiluMul: return _mm256_mul_ps(_mm256_mul_ps(g, sigmoid_ps(g)), u);
    case Act::kSilu: return _mm256_mul_ps(g, sigmoid_ps(g));
    case Act::kGeluTanhMul: {  // 0.5 g (1 + tanh(y)) = g * sigmoid(2y)
      const __m256 y = _mm256_mul_ps(_mm256_set1_ps(0.79788456080286536f),
                                     _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), g), _mm256_mul_ps(g, g), g));
      return _mm256_mul_ps(_mm256_mul_ps(g, sigmoid_ps(_mm256_add_ps(y, y))), u);
    }
    case Act::kSwigluOai:
      if (limit > 0.0f) {
        // vminps / vmaxps return their second operand when either is NaN: the data goes second, so
        // that a NaN stays NaN as in the reference (std::min / std::clamp) and torch.clamp.
        const __m256 l = _mm256_set1_ps(limit);
        g = _mm256_min_ps(l, g);
        u = _mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), l), _mm256_min_ps(l, u));
      }
      return _mm256_mul_ps(_mm256_mul_ps(g, sigmoid_ps(_mm256_mul_ps(_mm256_set1_ps(alpha), g))),
                           _mm256_add_ps(u, _mm256_set1_ps(1.0f)));
    case Act::kRelu2: {
      const __m256 r = _mm256_max_ps(_mm256_setzero_ps(), g);  // (NaN stays NaN: see kSwigluOai)
      return _mm256_mul_ps(r, r);
    }
    case Act::kGeluMul: break;  // scalar (erf)
  }
  return _mm256_setzero_ps();
}

}  // namespace

void act_avx2(Act a, const float* g, const float* u, int n, float alpha, float limit, float* out) {
  if (a == Act::kGeluMul) {
    for (int j = 0; j < n; ++j) out[j] = 0.5f * g[j] * (1.0f + std::erf(g[j] * 0.70710678118654752f)) * u[j];
    return;
  }
  const bool gt = gated(a);
  int j = 0;
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(out + j, act8(a, _mm256_loadu_ps(g + j), gt ? _mm256_loadu_ps(u + j) : _mm256_setzero_ps(), alpha, limit));
  if (j < n) {
    float gb[8] = {}, ub[8] = {}, ob[8];
    for (int t = 0; t < n - j; ++t) {
      gb[t] = g[j + t];
      if (gt) ub[t] = u[j + t];
    }
    _mm256_storeu_ps(ob, act8(a, _mm256_loadu_ps(gb), _mm256_loadu_ps(ub), alpha, limit));
    for (int t = 0; t < n - j; ++t) out[j + t] = ob[t];
  }
}

void act_rows_avx2(Act a, const float* acc, int64_t rows, int n, float alpha, float limit, float* out, int64_t ldo) {
  if (n == 8 && a != Act::kGeluMul) {  // the common gated block: one act8 per row, no tail
    for (int64_t i = 0; i < rows; ++i) {
      const float* v = acc + i * 16;
      _mm256_storeu_ps(out + i * ldo, act8(a, _mm256_loadu_ps(v), _mm256_loadu_ps(v + 8), alpha, limit));
    }
    return;
  }
  for (int64_t i = 0; i < rows; ++i) act_avx2(a, acc + i * 16, acc + i * 16 + 8, n, alpha, limit, out + i * ldo);
}

namespace {
// A 16-lane row's scale and bias (the epilogues' formula, stated rather than left to contraction:
// x ls + bias is one FMA where both are given, ls and / or bias null otherwise).
struct ScaleBias16 {
  const bool ls, bias;
  __m256 s0, s1, b0, b1;
  ScaleBias16(const float* l, const float* b)
      : ls(l != nullptr), bias(b != nullptr),
        s0(l ? _mm256_loadu_ps(l) : _mm256_set1_ps(1.0f)), s1(l ? _mm256_loadu_ps(l + 8) : s0),
        b0(b ? _mm256_loadu_ps(b) : _mm256_setzero_ps()), b1(b ? _mm256_loadu_ps(b + 8) : b0) {}
  void apply(__m256& y0, __m256& y1) const {
    if (ls && bias) {
      y0 = _mm256_fmadd_ps(y0, s0, b0);
      y1 = _mm256_fmadd_ps(y1, s1, b1);
    } else if (ls) {
      y0 = _mm256_mul_ps(y0, s0);
      y1 = _mm256_mul_ps(y1, s1);
    } else if (bias) {
      y0 = _mm256_add_ps(y0, b0);
      y1 = _mm256_add_ps(y1, b1);
    }
  }
};
}  // namespace

void scale_bias_rows_avx2(float* acc, int64_t m, const float* ls, const float* bias) {
  const ScaleBias16 sb(ls, bias);
  for (int64_t i = 0; i < m; ++i) {
    float* v = acc + i * 16;
    __m256 y0 = _mm256_loadu_ps(v), y1 = _mm256_loadu_ps(v + 8);
    sb.apply(y0, y1);
    _mm256_storeu_ps(v, y0);
    _mm256_storeu_ps(v + 8, y1);
  }
}

void down_rows_avx2(const float* acc, int64_t m, int nl, const float* ls, const float* bias, const int32_t* token,
                    int64_t t0, const float* weight, float* out) {
  if (nl == 16) {  // whole blocks: two registers a row, no masks
    const ScaleBias16 sb(ls, bias);
    for (int64_t i = 0; i < m; ++i) {
      const float* a = acc + i * 16;
      float* o = out + (token ? static_cast<int64_t>(token[i]) : t0 + i) * 16;
      const __m256 w = _mm256_set1_ps(weight ? weight[i] : 1.0f);
      __m256 y0 = _mm256_loadu_ps(a), y1 = _mm256_loadu_ps(a + 8);
      sb.apply(y0, y1);
      _mm256_storeu_ps(o, _mm256_fmadd_ps(w, y0, _mm256_loadu_ps(o)));
      _mm256_storeu_ps(o + 8, _mm256_fmadd_ps(w, y1, _mm256_loadu_ps(o + 8)));
    }
    return;
  }
  for (int64_t i = 0; i < m; ++i) {  // the last block of a hidden size that is not a multiple of 16
    const float* a = acc + i * 16;
    float* o = out + (token ? static_cast<int64_t>(token[i]) : t0 + i) * 16;
    const float w = weight ? weight[i] : 1.0f;
    for (int l = 0; l < nl; ++l) {
      const float y = ls && bias ? __builtin_fmaf(a[l], ls[l], bias[l]) : ls ? a[l] * ls[l] : bias ? a[l] + bias[l] : a[l];
      o[l] = __builtin_fmaf(w, y, o[l]);
    }
  }
}

void rows16_to_bf16_avx2(const float* in, int64_t m, int nb, int64_t bstride, int nl, uint16_t* out, int64_t ldo) {
  // f32_to_bf16_bits (runner.cpp) on 8 lanes: NaN -> its high half with the quiet bit, else round to
  // nearest even by adding 0x7FFF plus the kept half's lowest bit.
  const __m256i abs = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
  const __m256i half = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x40);
  const auto round8 = [&](const float* x) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, half), _mm256_and_si256(_mm256_srli_epi32(u, 16), one)), 16);
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
    return _mm256_blendv_epi8(r, q, nan);
  };
  for (int64_t t = 0; t < m; ++t)
    for (int q = 0; q < nb; ++q) {  // a row's blocks one after the other: whole lines of it written at once
      const float* x = in + q * bstride + t * 16;
      uint16_t* o = out + t * ldo + q * 16;
      // two 8-lane halves packed to 16 words (packus works per 128-bit lane: the permute restores order)
      const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(round8(x), round8(x + 8)), 0xD8);
      if (q < nb - 1 || nl == 16) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), p);
      } else {
        alignas(32) uint16_t w[16];
        _mm256_store_si256(reinterpret_cast<__m256i*>(w), p);
        for (int l = 0; l < nl; ++l) o[l] = w[l];
      }
    }
}

void stream_avx2(const BlockRef& b, const float* x, int64_t ldx, int m, float* acc) {
  switch (b.fmt) {
    case PackFmt::kF32: return stream_f<PackFmt::kF32>(b, x, ldx, m, acc);
    case PackFmt::kF16: return stream_f<PackFmt::kF16>(b, x, ldx, m, acc);
    case PackFmt::kBF16: return stream_f<PackFmt::kBF16>(b, x, ldx, m, acc);
    case PackFmt::kFp8: return stream_f<PackFmt::kFp8>(b, x, ldx, m, acc);
    case PackFmt::kFp8Block: return stream_f<PackFmt::kFp8Block>(b, x, ldx, m, acc);
    case PackFmt::kInt8: return stream_f<PackFmt::kInt8>(b, x, ldx, m, acc);
    case PackFmt::kMxfp4: return stream_f<PackFmt::kMxfp4>(b, x, ldx, m, acc);
    case PackFmt::kNvfp4: return stream_f<PackFmt::kNvfp4>(b, x, ldx, m, acc);
  }
}

void stream_avx2_v1(const BlockRef& b, const float* x, int64_t ldx, int m, float* acc) {
  switch (b.fmt) {
    case PackFmt::kF32: return v1_stream_f<PackFmt::kF32>(b, x, ldx, m, acc);
    case PackFmt::kF16: return v1_stream_f<PackFmt::kF16>(b, x, ldx, m, acc);
    case PackFmt::kBF16: return v1_stream_f<PackFmt::kBF16>(b, x, ldx, m, acc);
    case PackFmt::kFp8: return v1_stream_f<PackFmt::kFp8>(b, x, ldx, m, acc);
    case PackFmt::kFp8Block: return v1_stream_f<PackFmt::kFp8Block>(b, x, ldx, m, acc);
    case PackFmt::kInt8: return v1_stream_f<PackFmt::kInt8>(b, x, ldx, m, acc);
    case PackFmt::kMxfp4: return v1_stream_f<PackFmt::kMxfp4>(b, x, ldx, m, acc);
    case PackFmt::kNvfp4: return v1_stream_f<PackFmt::kNvfp4>(b, x, ldx, m, acc);
  }
}

void dequant_panel_avx2(const BlockRef& b, float* panel) {
  switch (b.fmt) {
    case PackFmt::kF32: return panel_f<PackFmt::kF32>(b, panel);
    case PackFmt::kF16: return panel_f<PackFmt::kF16>(b, panel);
    case PackFmt::kBF16: return panel_f<PackFmt::kBF16>(b, panel);
    case PackFmt::kFp8: return panel_f<PackFmt::kFp8>(b, panel);
    case PackFmt::kFp8Block: return panel_f<PackFmt::kFp8Block>(b, panel);
    case PackFmt::kInt8: return panel_f<PackFmt::kInt8>(b, panel);
    case PackFmt::kMxfp4: return panel_f<PackFmt::kMxfp4>(b, panel);
    case PackFmt::kNvfp4: return panel_f<PackFmt::kNvfp4>(b, panel);
  }
}

// ---- f32 panels from e2m1 codes in VNNI words (kernels.hpp: dequant_panel_avx2_vnni) -----------------
// NOTES: a quad's 32 bytes per half are the words of lanes 8h .. 8h + 7, k parities interleaved (word 2l
// + o), nibble i = pair 4q + i. One vpshufb + vpermq per half sorts the words into the 8 even-k words
// then the 8 odd-k words (all four nibbles travel together); masking the low nibble of each byte gives
// pairs 0 and 2 as byte indices (pairs 1 and 3 after a shift), one lookup in the fp16 high-byte table
// the per-k decoder uses serves both, a shift or mask makes each pair's fp16 words, and F16C widens each
// 128-bit half: the kPerK panel bit for bit, -0 included.
namespace {

// Two pairs from one table lookup: `nib` holds, per word, a nibble index in the low byte and another in
// the high byte; the table gives both fp16 high bytes, and each pair's word is one shift or mask away.
inline void vnni_two_pairs(__m256i nib, __m256i lut, __m256 s, float* row_lo, float* row_hi) {
  const __m256i t = _mm256_shuffle_epi8(lut, nib);
  const __m256i lo = _mm256_slli_epi16(t, 8), hi = _mm256_and_si256(t, _mm256_set1_epi16(static_cast<short>(0xFF00)));
  _mm256_store_ps(row_lo, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(lo)), s));
  _mm256_store_ps(row_lo + 16, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(lo, 1)), s));
  _mm256_store_ps(row_hi, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(hi)), s));
  _mm256_store_ps(row_hi + 16, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(hi, 1)), s));
}

template <PackFmt F>
void panel_vnni4(const BlockRef& b, float* panel) {
  static_assert(q8_stream_native(F));
  constexpr int G = group_size(F), kQuads = G / 8;
  const __m256i lut = _mm256_broadcastsi128_si256(avx2::e2m1_lut());
  // Within each 128-bit lane: words 0, 2, 4, 6 (k even), then 1, 3, 5, 7 (k odd).
  const __m256i even_odd = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                            0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  for (int64_t g = 0; g < b.kp / G; ++g) {
    __m256 s[2];
    group_scale<F>(b.gscale, g, b.gmul, s[0], s[1]);
    for (int v = 0; v < kQuads; ++v) {
      const int64_t quad = g * kQuads + v;
      const uint8_t* d = b.data + quad * kVnniWordBytes;
      float* o = panel + quad * 8 * 16;  // k = 8 quad: rows of 16 lanes
      for (int h = 0; h < 2; ++h) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + 32 * h));
        const __m256i sorted = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(w, even_odd), 0xD8);  // even 0-7 | odd 0-7
        const __m256i m = _mm256_set1_epi8(0x0F);  // nibbles 0 | 2, then 1 | 3, of each word
        vnni_two_pairs(_mm256_and_si256(sorted, m), lut, s[h], o + 0 * 32 + 8 * h, o + 2 * 32 + 8 * h);
        vnni_two_pairs(_mm256_and_si256(_mm256_srli_epi16(sorted, 4), m), lut, s[h], o + 1 * 32 + 8 * h, o + 3 * 32 + 8 * h);
      }
    }
  }
}

}  // namespace

void dequant_panel_avx2_vnni(const BlockRef& b, float* panel) {
  switch (b.fmt) {
    case PackFmt::kMxfp4: return panel_vnni4<PackFmt::kMxfp4>(b, panel);
    case PackFmt::kNvfp4: return panel_vnni4<PackFmt::kNvfp4>(b, panel);
    case PackFmt::kFp8:
    case PackFmt::kFp8Block:  // never packed in VNNI words at this level: must not look valid
      for (int64_t i = 0; i < b.kp * 16; ++i) panel[i] = __builtin_nanf("");
      return;
    default: return dequant_panel_avx2(b, panel);
  }
}

void stream_avx2_vnni(const BlockRef& b, const float* x, int64_t ldx, int m, float* acc) {
  if (has_code_layout(b.fmt)) {
    for (int64_t i = 0; i < static_cast<int64_t>(m) * 16; ++i) acc[i] = __builtin_nanf("");
  } else {
    stream_avx2(b, x, ldx, m, acc);
  }
}

void tile_avx2(const float* panel, int64_t kp, const float* x, int64_t ldx, int m, float* acc) {
  int i = 0;
  for (; i + 6 <= m; i += 6) tile_t<6>(panel, kp, x + i * ldx, ldx, acc + i * 16);
  switch (m - i) {
    case 5: tile_t<5>(panel, kp, x + i * ldx, ldx, acc + i * 16); break;
    case 4: tile_t<4>(panel, kp, x + i * ldx, ldx, acc + i * 16); break;
    case 3: tile_t<3>(panel, kp, x + i * ldx, ldx, acc + i * 16); break;
    case 2: tile_t<2>(panel, kp, x + i * ldx, ldx, acc + i * 16); break;
    case 1: tile_t<1>(panel, kp, x + i * ldx, ldx, acc + i * 16); break;
    default: break;
  }
}

// ---- int8 activations on 4-bit weights (kernels.hpp: stream_q8_avx2) ---------------------------------
// NOTES: the AVX-512 q8 kernel's scheme (gemm_avx512vnni.cpp) on 256-bit registers, for CPUs without
// VNNI. The weights must be in the VNNI-word layout (kernels_for_spec chooses it at this level for
// int8-activation layers, every call of which takes this kernel, and for 4-bit layers with bf16
// activations, whose calls take it up to a cut on 15-bit rows): a quad's 64 bytes are the
// dwords of lanes 0-7, then 8-15, and the low / high nibbles of each dword's bytes are k 8q + {0, 4, 1,
// 5} / {2, 6, 3, 7}, the order of the packed activation codes. vpshufb maps a nibble to 2 x e2m1 + 12
// (16-entry table, both 128-bit halves); vpmaddubsw multiplies those unsigned bytes with the signed
// codes and adds byte pairs into 16 bits (at most 2 x 24 x 128 each, a 15-bit row's high part reaching
// -128, and the low and high nibbles' sums added at most 12288: no saturation), vpmaddwd with ones adds the word pairs into each lane's dword.
// The group's integer sum starts at the row's bias (-12 x its codes' sum), as on AVX-512, so it is
// exactly 2 x the e2m1 dot product; scales and the f32 fold are the same. One or two rows per pass
// (16 registers: two accumulators per row and half, the decoded halves, three constants); a token's two
// 15-bit rows run as one pass and join before the fold (stream_q15_avx2; on this level, Zen 4, the
// layer alternated with MOERUN_CPU_Q15_JOIN=0: 1.00-1.03x).
namespace {

constexpr auto kQ8Lut = q8_e2m1_table<16>();
static_assert(kQ8Lut.v[7] == 24 && kQ8Lut.v[15] == 0 && kQ8Lut.v[9] == 11, "e2m1 6, -6 and -0.5 doubled and offset");
inline __m256i q8_lut_avx2() {
  return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kQ8Lut.v)));
}
inline __m256i bcast_dword(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

// One or two rows; with Q15 (MT = 2) the two rows are one token's high and low 15-bit rows, joined per
// K group as 128 x high + low (exact, as in gemm_avx512vnni.cpp) before one fold, and acc gets one row.
template <PackFmt F, int MT, bool Q15>
void q8_avx2_t(const BlockRef& b, const Q8Rows& x, float* acc) {
  static_assert(q8_stream_native(F) && (MT == 1 || MT == 2) && (!Q15 || MT == 2));
  constexpr int G = group_size(F), kQuads = G / 8, kPerActGroup = 32 / G;
  const int64_t groups = b.kp / G;
  const __m256i lut = q8_lut_avx2(), nib = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const Q8Rows r0 = x, r1 = x.rows_from(MT > 1 ? 1 : 0);
  const int32_t* bias0 = G == 32 ? r0.bias32 : r0.bias16;
  const int32_t* bias1 = G == 32 ? r1.bias32 : r1.bias16;
  __m256 f00 = _mm256_setzero_ps(), f01 = f00, f10 = f00, f11 = f00;  // f<token><half>
  __m256 s_lo = f00, s_hi = f00;  // nvfp4: the odd group's scales, converted with the even one's
  for (int64_t g = 0; g < groups; ++g) {
    __m256i i00 = _mm256_set1_epi32(bias0[g]), i01 = i00;  // i<token><half>
    __m256i i10 = _mm256_set1_epi32(bias1[g]), i11 = i10;
    for (int v = 0; v < kQuads; ++v) {
      const int64_t quad = g * kQuads + v, k0 = quad * 8;
      prefetch_pair<kVnniWordBytes>(b, quad);
      const uint8_t* d = b.data + quad * kVnniWordBytes;
      const __m256i a0lo = bcast_dword(r0.q + k0), a0hi = bcast_dword(r0.q + k0 + 4);
      const __m256i a1lo = bcast_dword(r1.q + k0), a1hi = bcast_dword(r1.q + k0 + 4);
#define HALF(h)                                                                                        \
      {                                                                                                \
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + 32 * (h)));          \
        const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(w, nib));                         \
        const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(w, 4), nib));   \
        i0##h = _mm256_add_epi32(i0##h, _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, a0lo), \
                                                                            _mm256_maddubs_epi16(hi, a0hi)), ones)); \
        if constexpr (MT > 1)                                                                          \
          i1##h = _mm256_add_epi32(i1##h, _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, a1lo), \
                                                                              _mm256_maddubs_epi16(hi, a1hi)), ones)); \
      }
      HALF(0) HALF(1)
#undef HALF
    }
    __m256 w_lo, w_hi;
    if constexpr (F == PackFmt::kNvfp4) {  // e4m3 / 256, the global scale after the loop
      if ((g & 1) == 0) {
        avx2::e4m3x16(avx2::load128(b.gscale + g * 16), w_lo, w_hi);
        avx2::e4m3x16(avx2::load128(b.gscale + (g + 1) * 16), s_lo, s_hi);
      } else {
        w_lo = s_lo;
        w_hi = s_hi;
      }
    } else {
      group_scale<F>(b.gscale, g, b.gmul, w_lo, w_hi);
    }
    const int64_t ag = g / kPerActGroup;
    const __m256 sa0 = _mm256_set1_ps(r0.scale[ag]), sa1 = _mm256_set1_ps(r1.scale[ag]);
    if constexpr (Q15) {  // 128 x high + low, at the low row's scale
      const __m256i j0 = _mm256_add_epi32(_mm256_slli_epi32(i00, 7), i10);
      const __m256i j1 = _mm256_add_epi32(_mm256_slli_epi32(i01, 7), i11);
      f00 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(j0), w_lo), sa1, f00);
      f01 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(j1), w_hi), sa1, f01);
    } else {
      f00 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(i00), w_lo), sa0, f00);
      f01 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(i01), w_hi), sa0, f01);
      if constexpr (MT > 1) {
        f10 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(i10), w_lo), sa1, f10);
        f11 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(i11), w_hi), sa1, f11);
      }
    }
  }
  const __m256 post = _mm256_set1_ps(F == PackFmt::kNvfp4 ? 0.5f * b.gmul : 0.5f);  // doubled e2m1; global
  _mm256_storeu_ps(acc, _mm256_mul_ps(f00, post));
  _mm256_storeu_ps(acc + 8, _mm256_mul_ps(f01, post));
  if constexpr (MT > 1 && !Q15) {
    _mm256_storeu_ps(acc + 16, _mm256_mul_ps(f10, post));
    _mm256_storeu_ps(acc + 24, _mm256_mul_ps(f11, post));
  }
}

// m rows, two at a time; with Q15 m tokens, one pass each.
template <PackFmt F, bool Q15>
void q8_avx2_f(const BlockRef& b, const Q8Rows& x, int m, float* acc) {
  if constexpr (Q15) {
    for (int t = 0; t < m; ++t) q8_avx2_t<F, 2, true>(b, x.rows_from(2 * t), acc + t * 16);
  } else {
    int i = 0;
    for (; m - i >= 2; i += 2) q8_avx2_t<F, 2, false>(b, x.rows_from(i), acc + i * 16);
    if (m - i == 1) q8_avx2_t<F, 1, false>(b, x.rows_from(i), acc + i * 16);
  }
}

template <bool Q15>
void q8_avx2_any(const BlockRef& b, const Q8Rows& x, int m, float* acc) {
  switch (b.fmt) {
    case PackFmt::kMxfp4: q8_avx2_f<PackFmt::kMxfp4, Q15>(b, x, m, acc); break;
    case PackFmt::kNvfp4: q8_avx2_f<PackFmt::kNvfp4, Q15>(b, x, m, acc); break;
    default:  // the runner calls it for q8_stream_native formats only; anything else must not look valid
      for (int64_t i = 0; i < static_cast<int64_t>(m) * 16; ++i) acc[i] = __builtin_nanf("");
      break;
  }
}

}  // namespace

void stream_q8_avx2(const BlockRef& b, const Q8Rows& x, int m, float* acc) { q8_avx2_any<false>(b, x, m, acc); }
void stream_q15_avx2(const BlockRef& b, const Q8Rows& x, int m, float* acc) { q8_avx2_any<true>(b, x, m, acc); }

}  // namespace moerun::cpu::kernels
