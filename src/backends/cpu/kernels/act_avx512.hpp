// cpu/kernels/act_avx512.hpp — the GEMM1 epilogue's activations on 16 lanes, shared by gemm_avx512.cpp
// (f32 intermediate rows) and gemm_avx512bf16.cpp (rounded to bf16 as they are stored).
//
// act16 is act8 (gemm_avx2.cpp) on 512-bit registers, operation for operation: the same exp polynomial,
// clamps and rounding modes, so every lane gets the same value as act8 gives it (tests:
// Avx512ActivationsEqualAvx2). A gated block's rows hold 8 gate and 8 up values, so one act16 covers two
// rows, where act8 covers one. gelu-erf stays scalar (act_avx2).
//
// Internal linkage (an unnamed namespace) like avx512_decode.hpp: the including files are compiled with
// different -m flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/kernels/kernels.hpp"

namespace moerun::cpu::kernels {
namespace {

inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}
inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}
// a != kGeluMul (scalar: the callers route it to act_avx2).
inline __m512 act16(Act a, __m512 g, __m512 u, float alpha, float limit) {
  switch (a) {
    case Act::kSiluMul: return _mm512_mul_ps(_mm512_mul_ps(g, sigmoid16(g)), u);
    case Act::kSilu: return _mm512_mul_ps(g, sigmoid16(g));
    case Act::kGeluTanhMul: {
      const __m512 y = _mm512_mul_ps(_mm512_set1_ps(0.79788456080286536f),
                                     _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), g), _mm512_mul_ps(g, g), g));
      return _mm512_mul_ps(_mm512_mul_ps(g, sigmoid16(_mm512_add_ps(y, y))), u);
    }
    case Act::kSwigluOai:
      if (limit > 0.0f) {
        // The data goes second: vminps / vmaxps return the second operand when either is NaN, and a
        // NaN must stay NaN (the reference's std::min / std::clamp, torch.clamp).
        const __m512 l = _mm512_set1_ps(limit);
        g = _mm512_min_ps(l, g);
        u = _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), l), _mm512_min_ps(l, u));
      }
      return _mm512_mul_ps(_mm512_mul_ps(g, sigmoid16(_mm512_mul_ps(_mm512_set1_ps(alpha), g))),
                           _mm512_add_ps(u, _mm512_set1_ps(1.0f)));
    case Act::kRelu2: {
      const __m512 r = _mm512_max_ps(_mm512_setzero_ps(), g);  // (NaN stays NaN)
      return _mm512_mul_ps(r, r);
    }
    case Act::kGeluMul: break;
  }
  return _mm512_setzero_ps();
}

// act_rows' contract (kernels.hpp) with the 16 results of each step handed to store(v, row, lanes, n):
// lanes 0-7 of v for row i and 8-15 for row i + 1 (gated blocks, two rows a step), or all 16 for row i
// (plain blocks); n values of the row are real. gelu-erf rows are computed by act_avx2 into an L1 row
// and handed over the same way (store_f32row(row_values, row, n)).
template <class Store2, class Store1, class StoreRow>
inline void act_rows_16(Act a, const float* acc, int64_t rows, int n, float alpha, float limit, Store2 store2,
                        Store1 store1, StoreRow store_row) {
  if (a == Act::kGeluMul) {
    alignas(64) float v[16];
    for (int64_t i = 0; i < rows; ++i) {
      act_avx2(a, acc + i * 16, acc + i * 16 + 8, n, alpha, limit, v);
      store_row(v, i, n);
    }
    return;
  }
  if (gated(a)) {  // row i: gate in lanes 0-7, up in 8-15; two rows per register
    const __m512i gi = _mm512_set_epi32(23, 22, 21, 20, 19, 18, 17, 16, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i ui = _mm512_set_epi32(31, 30, 29, 28, 27, 26, 25, 24, 15, 14, 13, 12, 11, 10, 9, 8);
    int64_t i = 0;
    for (; i + 2 <= rows; i += 2) {
      const __m512 r0 = _mm512_loadu_ps(acc + i * 16), r1 = _mm512_loadu_ps(acc + i * 16 + 16);
      store2(act16(a, _mm512_permutex2var_ps(r0, gi, r1), _mm512_permutex2var_ps(r0, ui, r1), alpha, limit), i, n);
    }
    if (i < rows) {  // the last row alone: its gate and up values in lanes 0-7
      const __m512 r0 = _mm512_loadu_ps(acc + i * 16);
      store1(act16(a, r0, _mm512_permutexvar_ps(ui, r0), alpha, limit), i, n);
    }
    return;
  }
  for (int64_t i = 0; i < rows; ++i) store1(act16(a, _mm512_loadu_ps(acc + i * 16), _mm512_setzero_ps(), alpha, limit), i, n);
}

}  // namespace
}  // namespace moerun::cpu::kernels
