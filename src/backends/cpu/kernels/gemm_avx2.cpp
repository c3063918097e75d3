// cpu/kernels/gemm_avx2.cpp — AVX2 + FMA + F16C kernels (kernels.hpp). Compiled with -mavx2 -mfma -mf16c;
// reached only through isa.cpp's dispatch when the CPU and the cap allow AVX2.
#include <immintrin.h>

#include <algorithm>

#include "backends/cpu/kernels/dequant_avx2.hpp"
#include "backends/cpu/kernels/kernels.hpp"

namespace moerun::cpu::kernels {
namespace {

using avx2::Dec;
using avx2::group_scale;

// ---- streaming: weights decoded once, MT tokens' accumulators in registers ----------------------------
// NOTES: accumulators are named variables, not arrays: GCC keeps arrays of vectors in memory and stores
// them every iteration (12 stores per k step halved the tile kernel's speed). With MT <= 2 the even and
// odd k of a pair go to separate accumulators so each FMA chain is short (latency 4-5 cycles); from
// MT = 3 there are enough independent chains already.
#define MOERUN_T4(X) X(0) X(1) X(2) X(3)
template <PackFmt F, int MT>
void stream_t(const BlockRef& b, const float* x, int64_t ldx, float* acc) {
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
void stream_f(const BlockRef& b, const float* x, int64_t ldx, int m, float* acc) {
  int i = 0;
  for (; i + 4 <= m; i += 4) stream_t<F, 4>(b, x + i * ldx, ldx, acc + i * 16);
  switch (m - i) {
    case 3: stream_t<F, 3>(b, x + i * ldx, ldx, acc + i * 16); break;
    case 2: stream_t<F, 2>(b, x + i * ldx, ldx, acc + i * 16); break;
    case 1: stream_t<F, 1>(b, x + i * ldx, ldx, acc + i * 16); break;
    default: break;
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

}  // namespace

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

}  // namespace moerun::cpu::kernels
