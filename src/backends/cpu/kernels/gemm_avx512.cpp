// cpu/kernels/gemm_avx512.cpp — AVX-512F/BW/VL/DQ kernels (kernels.hpp): one zmm is one k step of a
// 16-lane N-block. Compiled with AVX-512 flags; reached only when isa.cpp found AVX-512 usable.
#include <immintrin.h>

#include <algorithm>

#include "backends/cpu/kernels/act_avx512.hpp"
#include "backends/cpu/kernels/avx512_decode.hpp"
#include "backends/cpu/kernels/kernels.hpp"

namespace moerun::cpu::kernels {
namespace {

// Accumulators are named variables (GCC keeps arrays of vectors in memory; see gemm_avx2.cpp).
#define MOERUN_T8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
template <PackFmt F, int MT>
void stream_t(const BlockRef& b, const float* x, int64_t ldx, float* acc) {
  constexpr int G = group_size(F);
  constexpr bool kSplit = MT <= 4;
  const int64_t pairs = b.kp / 2, gp = G ? G / 2 : pairs;
  const __m512 z = _mm512_setzero_ps();
#define DECL(t) __m512 e##t = z, o##t = z; const float* x##t = x + (t) * ldx;
  MOERUN_T8(DECL)
#undef DECL
  for (int64_t p0 = 0; p0 < pairs; p0 += gp) {
    __m512 s = _mm512_set1_ps(1.0f);
    if constexpr (G != 0) s = group_scale<F>(b.gscale, p0 / gp, b.gmul);
    const int64_t pe = std::min(p0 + gp, pairs);
    // fp8: two pairs per step, one load of VNNI words (kernels.hpp); other formats one pair (the
    // two-pair step measured 10-25% slower for mxfp4 here)
    constexpr int S = kFp8Words<F> ? 2 : 1;
    for (int64_t p = p0; p < pe; p += S) {
      prefetch_pair<2 * S * bytes_per_k(F)>(b, p / S);
      __m512 we0, wo0, we1 = z, wo1 = z;
      if constexpr (S == 2) load2x2<F>(b.data, p, we0, wo0, we1, wo1);
      else load2<F>(b.data, p, we0, wo0);
      if constexpr (G != 0) {
        we0 = _mm512_mul_ps(we0, s); wo0 = _mm512_mul_ps(wo0, s);
        if constexpr (S == 2) { we1 = _mm512_mul_ps(we1, s); wo1 = _mm512_mul_ps(wo1, s); }
      }
#define STEP(t)                                                                                  \
      if constexpr (MT > (t)) {                                                                  \
        e##t = _mm512_fmadd_ps(we, _mm512_set1_ps(x##t[2 * q]), e##t);                           \
        if constexpr (kSplit) o##t = _mm512_fmadd_ps(wo, _mm512_set1_ps(x##t[2 * q + 1]), o##t); \
        else e##t = _mm512_fmadd_ps(wo, _mm512_set1_ps(x##t[2 * q + 1]), e##t);                 \
      }
      {
        const int64_t q = p;
        const __m512 we = we0, wo = wo0;
        MOERUN_T8(STEP)
      }
      if constexpr (S == 2) {
        const int64_t q = p + 1;
        const __m512 we = we1, wo = wo1;
        MOERUN_T8(STEP)
      }
#undef STEP
    }
  }
#define STORE(t) if constexpr (MT > (t)) _mm512_storeu_ps(acc + (t) * 16, _mm512_add_ps(e##t, o##t));
  MOERUN_T8(STORE)
#undef STORE
}

template <PackFmt F>
void stream_f(const BlockRef& b, const float* x, int64_t ldx, int m, float* acc) {
  int i = 0;
  for (; i + 8 <= m; i += 8) stream_t<F, 8>(b, x + i * ldx, ldx, acc + i * 16);
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
  for_each_panel_pair<F>(b, [panel](int64_t p, __m512 we, __m512 wo) {
    _mm512_store_ps(panel + p * 32, we);
    _mm512_store_ps(panel + p * 32 + 16, wo);
  });
}

#define MOERUN_R12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
template <int MR>
void tile_t(const float* panel, int64_t kp, const float* x, int64_t ldx, float* acc) {
  const __m512 z = _mm512_setzero_ps();
#define DECL(r) __m512 c##r = z; const float* x##r = x + (r) * ldx;
  MOERUN_R12(DECL)
#undef DECL
  for (int64_t k = 0; k < kp; ++k) {
    const __m512 bv = _mm512_load_ps(panel + k * 16);
#define STEP(r) if constexpr (MR > (r)) c##r = _mm512_fmadd_ps(_mm512_set1_ps(x##r[k]), bv, c##r);
    MOERUN_R12(STEP)
#undef STEP
  }
#define STORE(r) if constexpr (MR > (r)) _mm512_storeu_ps(acc + (r) * 16, c##r);
  MOERUN_R12(STORE)
#undef STORE
}

template <int MR>
void tile_rest(const float* panel, int64_t kp, const float* x, int64_t ldx, int m, float* acc) {
  if constexpr (MR > 0) {
    if (m == MR) return tile_t<MR>(panel, kp, x, ldx, acc);
    return tile_rest<MR - 1>(panel, kp, x, ldx, m, acc);
  }
}

#define MOERUN_FMT_SWITCH(fmt, F, ...)                                        \
  switch (fmt) {                                                              \
    case PackFmt::kF32: { constexpr PackFmt F = PackFmt::kF32; __VA_ARGS__; } break;            \
    case PackFmt::kF16: { constexpr PackFmt F = PackFmt::kF16; __VA_ARGS__; } break;            \
    case PackFmt::kBF16: { constexpr PackFmt F = PackFmt::kBF16; __VA_ARGS__; } break;          \
    case PackFmt::kFp8: { constexpr PackFmt F = PackFmt::kFp8; __VA_ARGS__; } break;            \
    case PackFmt::kFp8Block: { constexpr PackFmt F = PackFmt::kFp8Block; __VA_ARGS__; } break;  \
    case PackFmt::kInt8: { constexpr PackFmt F = PackFmt::kInt8; __VA_ARGS__; } break;          \
    case PackFmt::kMxfp4: { constexpr PackFmt F = PackFmt::kMxfp4; __VA_ARGS__; } break;        \
    case PackFmt::kNvfp4: { constexpr PackFmt F = PackFmt::kNvfp4; __VA_ARGS__; } break;        \
  }

}  // namespace

void stream_avx512(const BlockRef& b, const float* x, int64_t ldx, int m, float* acc) {
  MOERUN_FMT_SWITCH(b.fmt, F, stream_f<F>(b, x, ldx, m, acc))
}

void dequant_panel_avx512(const BlockRef& b, float* panel) { MOERUN_FMT_SWITCH(b.fmt, F, panel_f<F>(b, panel)) }

void act_rows_avx512(Act a, const float* acc, int64_t rows, int n, float alpha, float limit, float* out,
                     int64_t ldo) {
  const auto mask = [](int c) { return static_cast<__mmask16>((1u << c) - 1); };
  act_rows_16(
      a, acc, rows, n, alpha, limit,
      [&](__m512 v, int64_t i, int c) {  // c <= 8: lanes 0-7 to row i, 8-15 to row i + 1
        const __mmask8 m = static_cast<__mmask8>(mask(c));
        _mm256_mask_storeu_ps(out + i * ldo, m, _mm512_castps512_ps256(v));
        _mm256_mask_storeu_ps(out + (i + 1) * ldo, m, _mm512_extractf32x8_ps(v, 1));
      },
      [&](__m512 v, int64_t i, int c) { _mm512_mask_storeu_ps(out + i * ldo, mask(c), v); },
      [&](const float* v, int64_t i, int c) {
        for (int l = 0; l < c; ++l) out[i * ldo + l] = v[l];
      });
}

void tile_avx512(const float* panel, int64_t kp, const float* x, int64_t ldx, int m, float* acc) {
  constexpr int kMr = 12;
  int i = 0;
  for (; i + kMr <= m; i += kMr) tile_t<kMr>(panel, kp, x + i * ldx, ldx, acc + i * 16);
  if (i < m) tile_rest<kMr - 1>(panel, kp, x + i * ldx, ldx, m - i, acc + i * 16);
}

}  // namespace moerun::cpu::kernels
