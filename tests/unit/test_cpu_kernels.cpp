// Unit tests of the cpu backend's packing and kernels against a dense f32 loop, on every ISA level this
// machine runs. Weights are random *encoded* values (every format's bit patterns), decoded here by
// straightforward scalar code independent of the SIMD decoders.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/isa.hpp"
#include "backends/cpu/prepack.hpp"
#include "backends/cpu/q8_rows.hpp"
#include "backends/cpu/runner.hpp"
#include "core/activation.hpp"
#include "moerun/error.hpp"
#include "moerun/formats.hpp"

namespace moerun::cpu {
namespace kernels {
int64_t fp8_word_decode_mismatches();  // fp8_word_decode_check.cpp (AVX-512 flags)
}
namespace {

using kernels::PackFmt;

float dec_e4m3(uint8_t v) {
  const int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m) / 8.0f, -6) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return s ? -mag : mag;
}
float dec_e2m1(uint8_t n) {
  static const float t[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  return (n & 8) ? -t[n & 7] : t[n & 7];
}
float dec_bf16(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
float dec_f16(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -24) : std::ldexp(1.0f + m / 1024.0f, e - 15);
  return s ? -mag : mag;
}

// A canonical stack in `f` with random contents, plus its dense f32 values [E][N][K]. e4m3 codes are
// uniform bytes (NaN aside: a zero or subnormal code every 16 codes on average), or with
// `sparse_e4m3_specials` normal codes with a zero or subnormal one in about 1 of 256 places, as in
// quantized weights: then some 128-code quads of a block hold such a code and most do not, so both of
// the fp8 decoders' paths run (bf16_decode.hpp).
struct Stack {
  ExpertMatrix m;
  std::vector<float> dense;
  std::vector<std::shared_ptr<HostTensor>> own;
};

Stack make_stack(WeightFormat f, int64_t E, int64_t N, int64_t K, uint32_t seed, bool sparse_e4m3_specials = false) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  Stack s;
  s.m.format = f;
  s.m.experts = E;
  s.m.rows = N;
  s.m.cols = K;
  s.dense.assign(static_cast<size_t>(E * N * K), 0.0f);
  auto tensor = [&](DType t, Shape sh) {
    auto h = std::make_shared<HostTensor>(t, sh);
    s.own.push_back(h);
    return h;
  };
  auto e4m3_byte = [&]() {
    int v;
    if (sparse_e4m3_specials) {
      const bool special = byte(g) == 0;
      do v = byte(g); while ((v & 0x7F) == 0x7F || ((v & 0x78) == 0) != special);
    } else {
      do v = byte(g); while ((v & 0x7F) == 0x7F);
    }
    return static_cast<uint8_t>(v);
  };
  const int64_t n = E * N * K;
  switch (f) {
    case WeightFormat::kF32: {
      auto d = tensor(DType::kF32, {E, N, K});
      for (int64_t i = 0; i < n; ++i) s.dense[i] = d->as<float>()[i] = u(g);
      s.m.data = d->view();
      break;
    }
    case WeightFormat::kF16: {
      auto d = tensor(DType::kF16, {E, N, K});
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h = static_cast<uint16_t>((byte(g) & 0x80) << 8 | (byte(g) % 24 + 4) << 10 | (byte(g) << 2));
        d->as<uint16_t>()[i] = h;
        s.dense[i] = dec_f16(h);
      }
      s.m.data = d->view();
      break;
    }
    case WeightFormat::kBF16: {
      auto d = tensor(DType::kBF16, {E, N, K});
      for (int64_t i = 0; i < n; ++i) {
        float v = u(g);
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        d->as<uint16_t>()[i] = static_cast<uint16_t>(bits >> 16);
        s.dense[i] = dec_bf16(static_cast<uint16_t>(bits >> 16));
      }
      s.m.data = d->view();
      break;
    }
    case WeightFormat::kFp8PerTensor: case WeightFormat::kFp8PerChannel: case WeightFormat::kFp8Block: {
      auto d = tensor(DType::kF8E4M3, {E, N, K});
      for (int64_t i = 0; i < n; ++i) d->as<uint8_t>()[i] = e4m3_byte();
      std::shared_ptr<HostTensor> sc;
      if (f == WeightFormat::kFp8PerTensor) sc = tensor(DType::kF32, {E});
      if (f == WeightFormat::kFp8PerChannel) sc = tensor(DType::kF32, {E, N});
      if (f == WeightFormat::kFp8Block) sc = tensor(DType::kF32, {E, (N + 127) / 128, (K + 127) / 128});
      for (int64_t i = 0; i < sc->shape().numel(); ++i) sc->as<float>()[i] = 0.001f + 0.01f * (u(g) + 1.0f);
      for (int64_t e = 0; e < E; ++e)
        for (int64_t r = 0; r < N; ++r)
          for (int64_t k = 0; k < K; ++k) {
            float scale = f == WeightFormat::kFp8PerTensor ? sc->as<float>()[e]
                          : f == WeightFormat::kFp8PerChannel
                              ? sc->as<float>()[e * N + r]
                              : sc->as<float>()[(e * ((N + 127) / 128) + r / 128) * ((K + 127) / 128) + k / 128];
            const int64_t i = (e * N + r) * K + k;
            s.dense[i] = dec_e4m3(d->as<uint8_t>()[i]) * scale;
          }
      s.m.data = d->view();
      s.m.scale = sc->view();
      break;
    }
    case WeightFormat::kInt8PerChannel: {
      auto d = tensor(DType::kI8, {E, N, K});
      auto sc = tensor(DType::kF32, {E, N});
      for (int64_t i = 0; i < n; ++i) d->as<int8_t>()[i] = static_cast<int8_t>(byte(g) - 128);
      for (int64_t i = 0; i < E * N; ++i) sc->as<float>()[i] = 0.001f + 0.01f * (u(g) + 1.0f);
      for (int64_t i = 0; i < n; ++i) s.dense[i] = d->as<int8_t>()[i] * sc->as<float>()[i / K];
      s.m.data = d->view();
      s.m.scale = sc->view();
      break;
    }
    case WeightFormat::kMxfp4: case WeightFormat::kNvfp4: {
      const int G = f == WeightFormat::kMxfp4 ? 32 : 16;
      auto d = tensor(DType::kU8, {E, N, K / 2});
      auto sc = tensor(f == WeightFormat::kMxfp4 ? DType::kU8 : DType::kF8E4M3, {E, N, K / G});
      std::shared_ptr<HostTensor> gs;
      for (int64_t i = 0; i < n / 2; ++i) d->as<uint8_t>()[i] = static_cast<uint8_t>(byte(g));
      for (int64_t i = 0; i < E * N * (K / G); ++i)
        if (f == WeightFormat::kMxfp4) {
          sc->as<uint8_t>()[i] = static_cast<uint8_t>(120 + byte(g) % 12);
        } else {  // any e4m3 magnitude but the NaN (one draw: the test and the value are the same byte)
          const uint8_t v = static_cast<uint8_t>(byte(g) & 0x7F);
          sc->as<uint8_t>()[i] = v == 0x7F ? 0x38 : v;
        }
      if (f == WeightFormat::kNvfp4) {
        gs = tensor(DType::kF32, {E});
        for (int64_t e = 0; e < E; ++e) gs->as<float>()[e] = 0.01f * (1.5f + u(g));
      }
      for (int64_t e = 0; e < E; ++e)
        for (int64_t r = 0; r < N; ++r)
          for (int64_t k = 0; k < K; ++k) {
            const uint8_t b = d->as<uint8_t>()[(e * N + r) * (K / 2) + k / 2];
            const uint8_t nib = (k & 1) ? b >> 4 : b & 15;
            const uint8_t sb = sc->as<uint8_t>()[(e * N + r) * (K / G) + k / G];
            const float scale = f == WeightFormat::kMxfp4 ? std::ldexp(1.0f, sb - 127) : dec_e4m3(sb) * gs->as<float>()[e];
            s.dense[(e * N + r) * K + k] = dec_e2m1(nib) * scale;
          }
      s.m.data = d->view();
      s.m.scale = sc->view();
      if (gs) s.m.global_scale = gs->view();
      break;
    }
  }
  for (auto& h : s.own) s.m.keepalive.push_back(h);
  return s;
}

struct Level {
  const char* name;
  KernelSet ks;
};

std::vector<Level> levels() {
  std::vector<Level> out;
  const CpuIsa top = detected_isa();
  if (top >= CpuIsa::kAvx2) out.push_back({"avx2", kernels_for(CpuIsa::kAvx2)});
  if (top >= CpuIsa::kAvx512) out.push_back({"avx512", kernels_for(CpuIsa::kAvx512)});
  return out;
}

const WeightFormat kAllFormats[] = {WeightFormat::kF32,          WeightFormat::kF16,           WeightFormat::kBF16,
                                    WeightFormat::kFp8PerTensor, WeightFormat::kFp8PerChannel, WeightFormat::kFp8Block,
                                    WeightFormat::kMxfp4,        WeightFormat::kNvfp4,         WeightFormat::kInt8PerChannel};

// acc (kernel, lane scale applied) vs dense for every lane of every block.
void check_against_dense(const Stack& s, const PackedStack& p, const std::vector<float>& x, int64_t ldx, int m,
                         const std::string& what,
                         const std::function<void(const kernels::BlockRef&, float*)>& run) {
  std::vector<float> acc(static_cast<size_t>(m * 16));
  for (int64_t e = 0; e < p.experts; ++e)
    for (int64_t b = 0; b < p.nblocks; ++b) {
      run(p.block(e, b), acc.data());
      const float* ls = p.lane_scales(e, b);
      for (int i = 0; i < m; ++i)
        for (int l = 0; l < 16; ++l) {
          const int32_t r = p.lane_row[static_cast<size_t>(b * 16 + l)];
          double want = 0, mag = 0;
          if (r >= 0)
            for (int64_t k = 0; k < p.cols; ++k) {
              const double t = static_cast<double>(x[static_cast<size_t>(i * ldx + k)]) *
                               s.dense[static_cast<size_t>((e * p.rows + r) * p.cols + k)];
              want += t;
              mag += std::fabs(t);
            }
          const double got = acc[static_cast<size_t>(i * 16 + l)] * (ls ? ls[l] : 1.0f);
          ASSERT_NEAR(got, want, 1e-5 * mag + 1e-30)
              << what << " expert " << e << " block " << b << " token " << i << " lane " << l << " row " << r;
        }
    }
}

TEST(CpuKernels, EveryFormatEveryPathMatchesDenseLoop) {
  const auto lv = levels();
  if (lv.empty()) GTEST_SKIP() << "no AVX2 on this machine";
  for (WeightFormat f : kAllFormats)
    for (LaneMap map : {LaneMap::kPlain, LaneMap::kGatedSplit, LaneMap::kGatedInterleaved}) {
      // N: padding lanes in the last block, and (gated split) up halves that straddle a 128-row fp8 scale
      // block (rows 252-259 of block 15: three scale slots); K groups of 16/32/128 (the last partial)
      const int64_t E = 2, N = 2 * 132, K = 320;
      Stack s = make_stack(f, E, N, K, 1234u + static_cast<uint32_t>(f));
      std::mt19937 g(7);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (const Level& L : lv) {
        const auto p = pack_stack(s.m, map, L.ks.code_layout);  // 4-bit codes as this level reads them
        ASSERT_EQ(p->kp, 320);
        for (int m : {1, 2, 3, 4, 5, 7, 13}) {
          const int64_t ldx = p->kp + 32;
          std::vector<float> x(static_cast<size_t>(m * ldx), 0.0f);
          for (int i = 0; i < m; ++i)
            for (int64_t k = 0; k < K; ++k) x[static_cast<size_t>(i * ldx + k)] = u(g);
          const std::string what = std::string(L.name) + " format " + std::to_string(static_cast<int>(f)) + " map " +
                                   std::to_string(static_cast<int>(map)) + " m " + std::to_string(m);
          check_against_dense(s, *p, x, ldx, m, what + " stream", [&](const kernels::BlockRef& b, float* acc) {
            L.ks.stream(b, x.data(), ldx, m, acc);
          });
          std::vector<float> panel(static_cast<size_t>(p->kp * 16) + 16);
          float* pa = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(panel.data()) + 63) & ~uintptr_t{63});
          check_against_dense(s, *p, x, ldx, m, what + " tile", [&](const kernels::BlockRef& b, float* acc) {
            L.ks.panel(b, pa);
            L.ks.tile(pa, p->kp, x.data(), ldx, m, acc);
          });
        }
      }
    }
}

// Both AVX2 streaming variants at token counts that split into several groups (4, 3 + 2, 3 + 3, ...)
// and at a K that spans several L1 chunks with a partial last chunk and a partial last scale group.
TEST(CpuKernels, StreamTokenGroupsAndKChunksMatchDenseLoop) {
  if (detected_isa() < CpuIsa::kAvx2) GTEST_SKIP() << "no AVX2 on this machine";
  for (const char* variant : {"v1", "v2"}) {
    const KernelSet ks = kernels_for_variant(CpuIsa::kAvx2, variant);
    for (WeightFormat f : kAllFormats) {
      const int64_t E = 1, N = 40, K = 1312;  // kp 1312: chunks of 512 k + 288; fp8 blocks 10 x 128 + 32
      Stack s = make_stack(f, E, N, K, 77u + static_cast<uint32_t>(f));
      auto p = pack_stack(s.m, LaneMap::kPlain, ks.code_layout);
      std::mt19937 g(9);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (int m : {1, 2, 5, 6, 7, 9, 10, 13, 33}) {
        const int64_t ldx = p->kp + 16;
        std::vector<float> x(static_cast<size_t>(m * ldx), 0.0f);
        for (int i = 0; i < m; ++i)
          for (int64_t k = 0; k < K; ++k) x[static_cast<size_t>(i * ldx + k)] = u(g);
        check_against_dense(s, *p, x, ldx, m, std::string(variant) + " format " + std::to_string(static_cast<int>(f)) +
                                                   " m " + std::to_string(m),
                            [&](const kernels::BlockRef& b, float* acc) { ks.stream(b, x.data(), ldx, m, acc); });
      }
    }
  }
  EXPECT_THROW(kernels_for_variant(CpuIsa::kAvx2, "v3"), Error);
}

// The vector activations against the scalar formulas in double, over the range where they matter and
// past the exp clamp.
TEST(CpuKernels, VectorActivationsMatchScalarFormulas) {
  if (detected_isa() < CpuIsa::kAvx2) GTEST_SKIP() << "no AVX2 on this machine";
  const KernelSet ks = kernels_for(CpuIsa::kAvx2);
  std::vector<float> g, u;
  for (int i = -4000; i <= 4000; ++i) {
    g.push_back(static_cast<float>(i) * 0.025f);  // [-100, 100]
    u.push_back(0.5f + 0.001f * static_cast<float>(i % 97));
  }
  const int n = static_cast<int>(g.size());
  auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  struct Case {
    kernels::Act a;
    std::function<double(double, double)> f;
  };
  const float alpha = 1.702f, limit = 7.0f;
  const Case cases[] = {
      {kernels::Act::kSiluMul, [&](double x, double v) { return x * sig(x) * v; }},
      {kernels::Act::kSilu, [&](double x, double) { return x * sig(x); }},
      {kernels::Act::kGeluMul, [&](double x, double v) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))) * v; }},
      {kernels::Act::kGeluTanhMul,
       [&](double x, double v) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) * v; }},
      {kernels::Act::kSwigluOai,
       [&](double x, double v) {
         x = std::min<double>(x, limit);
         v = std::clamp<double>(v, -limit, limit);
         return x * sig(alpha * x) * (v + 1.0);
       }},
      {kernels::Act::kRelu2, [&](double x, double) { return x > 0 ? x * x : 0.0; }},
  };
  for (const Case& c : cases)
    for (int len : {n, 5}) {  // a full run and a tail shorter than one vector
      std::vector<float> out(static_cast<size_t>(len));
      ks.act(c.a, g.data() + (n - len) / 2, u.data() + (n - len) / 2, len, alpha, limit, out.data());
      for (int j = 0; j < len; ++j) {
        const int i = (n - len) / 2 + j;
        const double want = c.f(g[static_cast<size_t>(i)], u[static_cast<size_t>(i)]);
        // relative 2e-6, plus float rounding of terms like 1 + erf(x) that cancel (abs 1e-7 |x| (|u| + 1))
        const double gi = g[static_cast<size_t>(i)], ui = u[static_cast<size_t>(i)];
        ASSERT_NEAR(out[static_cast<size_t>(j)], want, 2e-6 * std::fabs(want) + 1e-7 * std::fabs(gi) * (std::fabs(ui) + 1.0))
            << "act " << static_cast<int>(c.a) << " x " << g[static_cast<size_t>(i)];
      }
    }
}

// rows16_to_bf16_avx2 (the output store) is moerun::f32_to_bf16 lane by lane: ties to even, carries into
// the exponent and into inf, NaN kept (quiet), subnormals and signed zeros kept; one block or several
// side by side, whole rows and a last block's tail (nl < 16), the words past it untouched.
TEST(CpuKernels, Rows16ToBf16MatchesScalarRounding) {
  if (detected_isa() < CpuIsa::kAvx2) GTEST_SKIP() << "no AVX2 on this machine";
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x3F808000u, 0x3F818000u,
                                0x3F807FFFu, 0x3F80C000u, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800000u, 0xFF800000u,
                                0x7F800001u, 0xFFC00000u, 0x7FBFFFFFu, 0x477FF000u};
  std::mt19937 rng(20261205);
  while (bits.size() < 16 * 37) bits.push_back(static_cast<uint32_t>(rng()));
  std::vector<float> in(bits.size());
  std::memcpy(in.data(), bits.data(), bits.size() * 4);
  // blocks of m rows: nb of them, bstride apart (the 37 input rows as one block, or as 3 blocks of 12)
  for (int nb : {1, 3})
    for (int nl : {16, 9, 1}) {
      const int64_t m = static_cast<int64_t>(in.size()) / 16 / nb, bstride = m * 16, ldo = 16 * nb + 5;
      std::vector<uint16_t> out(static_cast<size_t>(m * ldo), 0xABCD);
      kernels::rows16_to_bf16_avx2(in.data(), m, nb, bstride, nl, out.data(), ldo);
      for (int64_t t = 0; t < m; ++t)
        for (int c = 0; c < ldo; ++c) {
          const int q = c / 16, l = c % 16;
          const bool real = q < nb && (q < nb - 1 || l < nl);
          const uint16_t want = real ? f32_to_bf16(in[static_cast<size_t>(q * bstride + t * 16 + l)]) : uint16_t{0xABCD};
          ASSERT_EQ(out[static_cast<size_t>(t * ldo + c)], want) << "row " << t << " column " << c << " nb " << nb << " nl " << nl;
        }
    }
}

// scale_bias_rows_avx2 (the gate_up epilogue's scale and bias) against its formula lane by lane.
TEST(CpuKernels, ScaleBiasRowsMatchTheirFormula) {
  if (detected_isa() < CpuIsa::kAvx2) GTEST_SKIP() << "no AVX2 on this machine";
  std::mt19937 rng(78);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  const int64_t m = 11;
  std::vector<float> acc(static_cast<size_t>(m * 16)), ls(16), bias(16);
  for (float& v : acc) v = d(rng);
  for (float& v : ls) v = d(rng);
  for (float& v : bias) v = d(rng);
  for (int variant = 1; variant < 4; ++variant) {
    const bool use_ls = variant & 1, use_bias = variant & 2;
    std::vector<float> got = acc, want = acc;
    for (int64_t i = 0; i < m; ++i)
      for (int l = 0; l < 16; ++l) {
        float& v = want[static_cast<size_t>(i * 16 + l)];
        const float sc = ls[static_cast<size_t>(l)], b = bias[static_cast<size_t>(l)];
        v = use_ls && use_bias ? std::fma(v, sc, b) : use_ls ? v * sc : v + b;
      }
    kernels::scale_bias_rows_avx2(got.data(), m, use_ls ? ls.data() : nullptr, use_bias ? bias.data() : nullptr);
    EXPECT_TRUE(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0) << "variant " << variant;
  }
}

// down_rows_avx2 (the down GEMM's epilogue) against its formula lane by lane: y = acc (x ls) (+ bias;
// one FMA with both), out[token] += weight * y in one FMA; rows mapped by a token list (repeats accumulate in order) or
// from t0, weights given or 1, whole blocks and a 7-lane last block (lanes past it untouched).
TEST(CpuKernels, DownRowsMatchTheirFormula) {
  if (detected_isa() < CpuIsa::kAvx2) GTEST_SKIP() << "no AVX2 on this machine";
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  const int64_t m = 13, tokens = 9;
  std::vector<float> acc(static_cast<size_t>(m * 16)), ls(16), bias(16), wt(static_cast<size_t>(m));
  for (float& v : acc) v = d(rng);
  for (float& v : ls) v = d(rng);
  for (float& v : bias) v = d(rng);
  for (float& v : wt) v = d(rng);
  std::vector<int32_t> tok(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) tok[static_cast<size_t>(i)] = static_cast<int32_t>((i * 5) % tokens);
  for (int nl : {16, 7})
    for (int variant = 0; variant < 4; ++variant) {
      const bool use_ls = variant & 1, use_bias = variant & 2, use_tok = variant != 1, use_w = variant != 2;
      const int64_t t0 = use_tok ? 0 : 2;
      std::vector<float> out(static_cast<size_t>((tokens + t0 + m) * 16));
      for (float& v : out) v = d(rng);
      std::vector<float> want = out;
      for (int64_t i = 0; i < m; ++i) {
        const int64_t t = use_tok ? tok[static_cast<size_t>(i)] : t0 + i;
        for (int l = 0; l < nl; ++l) {
          const float a = acc[static_cast<size_t>(i * 16 + l)], s = ls[static_cast<size_t>(l)], b = bias[static_cast<size_t>(l)];
          const float y = use_ls && use_bias ? std::fma(a, s, b) : use_ls ? a * s : use_bias ? a + b : a;
          float& o = want[static_cast<size_t>(t * 16 + l)];
          o = std::fma(use_w ? wt[static_cast<size_t>(i)] : 1.0f, y, o);
        }
      }
      kernels::down_rows_avx2(acc.data(), m, nl, use_ls ? ls.data() : nullptr, use_bias ? bias.data() : nullptr,
                              use_tok ? tok.data() : nullptr, t0, use_w ? wt.data() : nullptr, out.data());
      EXPECT_TRUE(std::memcmp(out.data(), want.data(), out.size() * sizeof(float)) == 0)
          << "nl " << nl << " variant " << variant;
    }
}

// A NaN gate or up comes out NaN wherever the reference activation (core/activation.hpp) gives NaN,
// at every vector level: the gpt-oss clamp and relu2's max used to return the limit or zero for it
// (vminps / vmaxps return their second operand on NaN), so a NaN accumulator became a finite value.
TEST(CpuKernels, VectorActivationsKeepNaN) {
  if (detected_isa() < CpuIsa::kAvx2) GTEST_SKIP() << "no AVX2 on this machine";
  const bool avx512 = detected_isa() >= CpuIsa::kAvx512;
  const float alpha = 1.702f, limit = 7.0f, nan = std::numeric_limits<float>::quiet_NaN();
  // (gate, up) pairs: NaN in either, with the other below, inside and above the clamp.
  std::vector<float> g, u;
  for (float other : {-20.0f, -1.0f, 0.0f, 0.5f, 3.0f, 9.0f}) {
    g.push_back(nan);
    u.push_back(other);
    g.push_back(other);
    u.push_back(nan);
  }
  g.push_back(nan);
  u.push_back(nan);
  const int n = static_cast<int>(g.size());
  for (kernels::Act a : {kernels::Act::kSiluMul, kernels::Act::kGeluMul, kernels::Act::kGeluTanhMul,
                         kernels::Act::kSwigluOai, kernels::Act::kRelu2, kernels::Act::kSilu}) {
    Activation spec_act;
    spec_act.kind = static_cast<ActivationKind>(a);
    spec_act.swiglu_alpha = alpha;
    spec_act.swiglu_limit = limit;
    std::vector<float> out(static_cast<size_t>(n));
    kernels::act_avx2(a, g.data(), u.data(), n, alpha, limit, out.data());
    // act_rows_avx512 reads a block's rows: gate columns 0-7 and up columns 8-15 (gated), or 16 values.
    std::vector<float> acc, rows_out;
    const int per_row = kernels::gated(a) ? 8 : 16;
    const int64_t rows = (n + per_row - 1) / per_row;
    if (avx512) {
      acc.assign(static_cast<size_t>(rows * 16), 0.0f);
      for (int i = 0; i < n; ++i) {
        acc[static_cast<size_t>(i / per_row * 16 + i % per_row)] = g[static_cast<size_t>(i)];
        if (per_row == 8) acc[static_cast<size_t>(i / 8 * 16 + 8 + i % 8)] = u[static_cast<size_t>(i)];
      }
      rows_out.assign(static_cast<size_t>(rows * per_row), 0.0f);
      kernels::act_rows_avx512(a, acc.data(), rows, per_row, alpha, limit, rows_out.data(), per_row);
    }
    for (int i = 0; i < n; ++i) {
      const float want = apply_activation(spec_act, g[static_cast<size_t>(i)], u[static_cast<size_t>(i)]);
      const std::string what = "act " + std::to_string(static_cast<int>(a)) + " gate " +
                               std::to_string(g[static_cast<size_t>(i)]) + " up " + std::to_string(u[static_cast<size_t>(i)]);
      EXPECT_EQ(std::isnan(out[static_cast<size_t>(i)]), std::isnan(want)) << what << " (avx2) gave " << out[static_cast<size_t>(i)];
      if (avx512)
        EXPECT_EQ(std::isnan(rows_out[static_cast<size_t>(i)]), std::isnan(want)) << what << " (avx512) gave " << rows_out[static_cast<size_t>(i)];
    }
    if (a == kernels::Act::kSwigluOai || a == kernels::Act::kRelu2)  // (the cases that used to lose it)
      EXPECT_TRUE(std::isnan(apply_activation(spec_act, nan, 1.0f)));
  }
}

// act_rows_avx512 gives act_rows_avx2's values bit for bit (act_avx512.hpp: act16 is act8 on 16 lanes),
// and act_rows_bf16_avx512 those values rounded by f32_to_bf16_row: every activation, gated blocks of
// 8 and 5 columns (two rows a register, and an odd last row) and plain blocks of 16 and 11, values
// over the clamps and past the exp range, output columns past n untouched.
TEST(CpuKernels, Avx512ActivationsEqualAvx2) {
  if (detected_isa() < CpuIsa::kAvx512) GTEST_SKIP() << "no AVX-512 on this machine";
  const bool bf16 = detected_isa() >= CpuIsa::kAvx512Bf16;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-12.0f, 12.0f);
  const int64_t rows = 37, ldo = 21;
  std::vector<float> acc(static_cast<size_t>(rows * 16));
  for (float& v : acc) v = d(rng);
  acc[0] = 150.0f;  // exp clamps
  acc[1] = -150.0f;
  acc[8] = 0.0f;
  const float alpha = 1.702f, limit = 7.0f;
  for (kernels::Act a : {kernels::Act::kSiluMul, kernels::Act::kGeluMul, kernels::Act::kGeluTanhMul,
                         kernels::Act::kSwigluOai, kernels::Act::kRelu2, kernels::Act::kSilu})
    for (int n : kernels::gated(a) ? std::vector<int>{8, 5} : std::vector<int>{16, 11})
      for (int64_t m : {rows, int64_t{1}, int64_t{2}}) {
        const std::string what = "act " + std::to_string(static_cast<int>(a)) + " n " + std::to_string(n) + " rows " +
                                 std::to_string(m);
        std::vector<float> want(static_cast<size_t>(m * ldo), -7.0f), got = want;
        kernels::act_rows_avx2(a, acc.data(), m, n, alpha, limit, want.data(), ldo);
        kernels::act_rows_avx512(a, acc.data(), m, n, alpha, limit, got.data(), ldo);
        ASSERT_TRUE(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0) << what;
        if (!bf16) continue;
        std::vector<uint16_t> words(static_cast<size_t>(m * ldo), 0xABCD), rounded = words;
        kernels::act_rows_bf16_avx512(a, acc.data(), m, n, alpha, limit, words.data(), ldo);
        for (int64_t i = 0; i < m; ++i) kernels::f32_to_bf16_row(want.data() + i * ldo, n, rounded.data() + i * ldo);
        ASSERT_TRUE(std::memcmp(words.data(), rounded.data(), words.size() * sizeof(uint16_t)) == 0) << what;
      }
}

TEST(CpuKernels, AmxTilesMatchDenseLoopWithinBf16Rounding) {
  if (detected_isa() < CpuIsa::kAmx) GTEST_SKIP() << "no usable AMX-BF16 here (CPU, XCR0 or permission)";
  const KernelSet ks = kernels_for(CpuIsa::kAmx);
  for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kFp8Block, WeightFormat::kMxfp4}) {
    Stack s = make_stack(f, 1, 48, 256, 5);
    auto p = pack_stack(s.m, LaneMap::kPlain, ks.code_layout);
    for (int m : {1, 16, 17, 70}) {
      const int64_t ldx = p->kp;
      const int rows = (m + 15) / 16 * 16;
      std::vector<float> x(static_cast<size_t>(rows * ldx), 0.0f);
      std::mt19937 g(3);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (int i = 0; i < m; ++i)
        for (int64_t k = 0; k < p->cols; ++k) x[static_cast<size_t>(i * ldx + k)] = u(g);
      std::vector<uint16_t> xb(x.size());
      for (int i = 0; i < rows; ++i) kernels::f32_to_bf16_row(x.data() + i * ldx, ldx, xb.data() + i * ldx);
      std::vector<float> panel(static_cast<size_t>(p->kp * 16) + 16), acc(static_cast<size_t>(m * 16));
      float* pa = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(panel.data()) + 63) & ~uintptr_t{63});
      std::vector<uint16_t> pb(static_cast<size_t>(p->kp * 16));
      for (int64_t b = 0; b < p->nblocks; ++b) {
        ks.panel(p->block(0, b), pa);
        kernels::panel_to_bf16_vnni(pa, p->kp, pb.data());
        kernels::tile_amx(pb.data(), p->kp, xb.data(), ldx, m, acc.data(), b % 2 ? 4096 : 0);  // prefetch on / off
        for (int i = 0; i < m; ++i)
          for (int l = 0; l < 16; ++l) {
            const int32_t r = p->lane_row[static_cast<size_t>(b * 16 + l)];
            double want = 0, mag = 0;
            for (int64_t k = 0; k < p->cols; ++k) {
              const double t = static_cast<double>(x[static_cast<size_t>(i * ldx + k)]) * s.dense[static_cast<size_t>(r * p->cols + k)];
              want += t;
              mag += std::fabs(t);
            }
            ASSERT_NEAR(acc[static_cast<size_t>(i * 16 + l)], want, 1e-2 * mag) << "format " << static_cast<int>(f) << " m " << m;
          }
      }
      kernels::amx_release();
    }
  }
}

// panel_bf16_vnni (the AMX tiles' converted panels, decoded straight to bf16) bitwise against
// dequant_panel_avx512 followed by panel_to_bf16_vnni, for every packed format, on blocks of two
// experts with K not a multiple of the 32-k step (the padding pairs must come out as zeros too; the
// 4-bit formats need whole 32-k groups: 288) and a K over several fp8 / mxfp4 / nvfp4 groups. Runs wherever AVX512-BF16 does (no tiles involved).
TEST(CpuKernels, DirectBf16PanelsEqualF32PanelsRounded) {
  if (detected_isa() < CpuIsa::kAvx512Bf16) GTEST_SKIP() << "no AVX512-BF16 here";
  const KernelSet ks = kernels_for(CpuIsa::kAvx512Bf16);
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kF16, WeightFormat::kBF16, WeightFormat::kFp8PerTensor,
                         WeightFormat::kFp8PerChannel, WeightFormat::kFp8Block, WeightFormat::kMxfp4,
                         WeightFormat::kNvfp4, WeightFormat::kInt8PerChannel})
    for (const int64_t K0 : {int64_t{277}, int64_t{600}}) {
      const bool fp4 = f == WeightFormat::kMxfp4 || f == WeightFormat::kNvfp4;  // K in whole 32-k groups
      const int64_t E = 2, N = 40, K = fp4 ? (K0 + 31) / 32 * 32 : K0;
      Stack st = make_stack(f, E, N, K, 901u + static_cast<uint32_t>(f) + static_cast<uint32_t>(K));
      auto p = pack_stack(st.m, LaneMap::kPlain, ks.code_layout);
      const size_t pn = static_cast<size_t>(p->kp * 16);
      std::vector<float> fpanel(pn + 16);
      float* fa = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(fpanel.data()) + 63) & ~uintptr_t{63});
      std::vector<uint16_t> want(pn), got(pn + 32, 0xDEAD);
      for (int64_t e = 0; e < E; ++e)
        for (int64_t b = 0; b < p->nblocks; ++b) {
          ks.panel(p->block(e, b), fa);
          kernels::panel_to_bf16_vnni(fa, p->kp, want.data());
          kernels::panel_bf16_vnni(p->block(e, b), got.data());
          const std::string what = "format " + std::string(to_string(f)) + " K " + std::to_string(K) + " expert " +
                                   std::to_string(e) + " block " + std::to_string(b);
          ASSERT_EQ(std::memcmp(want.data(), got.data(), pn * sizeof(uint16_t)), 0) << what;
          for (size_t i = pn; i < pn + 32; ++i) ASSERT_EQ(got[i], 0xDEAD) << what << ": wrote past the panel";
        }
    }
}

// tile_amx2 (two N-blocks per call, 2x2 register blocking) against the scalar loop over the bf16 values
// it multiplies (x rounded to bf16, the panels' bf16 words) and bitwise against one tile_amx call per
// panel: token counts around the 16-row A tiles and the 32-token passes (1-16 rows: one A tile; 17-31:
// two, the second partial), an odd number of 32-k steps (kp 288), x rows with a stride past kp, nonzero
// rows past m (they must not leak into rows < m), and pairs of distinct panels: adjacent packed bf16
// blocks, converted panels of fp8-block and mxfp4 blocks, a pair across experts and one in reverse
// order. Writes past acc0 / acc1's m rows are caught by canaries.
TEST(CpuKernels, AmxTwoBlockTilesMatchOneBlockTilesAndScalarLoop) {
  if (detected_isa() < CpuIsa::kAmx) GTEST_SKIP() << "no usable AMX-BF16 here (CPU, XCR0 or permission)";
  const KernelSet ks = kernels_for(CpuIsa::kAmx);
  const float kCanary = -12345.0f;
  for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kFp8Block, WeightFormat::kMxfp4}) {
    const int64_t E = 2, N = 48, K = f == WeightFormat::kMxfp4 ? 288 : 277;  // 3 blocks per expert
    Stack s = make_stack(f, E, N, K, 21u + static_cast<uint32_t>(f));
    auto p = pack_stack(s.m, LaneMap::kPlain, ks.code_layout);
    const int64_t kp = p->kp;
    ASSERT_EQ(kp, 288);  // 9 steps of 32 k
    ASSERT_EQ(p->nblocks, 3);
    const size_t pn = static_cast<size_t>(kp * 16);
    // The bf16 VNNI panel of every block: the packed block itself for bf16, else converted like run_block.
    std::vector<float> fpanel(pn + 16);
    float* fa = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(fpanel.data()) + 63) & ~uintptr_t{63});
    std::vector<std::vector<uint16_t>> conv(static_cast<size_t>(E * 3));
    std::vector<const uint16_t*> panel(static_cast<size_t>(E * 3));
    for (int64_t e = 0; e < E; ++e)
      for (int64_t b = 0; b < 3; ++b) {
        const size_t i = static_cast<size_t>(e * 3 + b);
        if (f == WeightFormat::kBF16) {
          panel[i] = reinterpret_cast<const uint16_t*>(p->block(e, b).data);
        } else {
          ks.panel(p->block(e, b), fa);
          conv[i].assign(pn, 0);
          kernels::panel_to_bf16_vnni(fa, kp, conv[i].data());
          panel[i] = conv[i].data();
        }
      }
    ASSERT_NE(std::memcmp(panel[0], panel[1], pn * 2), 0);  // distinct panels
    const std::pair<int, int> pairs[] = {{0, 1}, {1, 2}, {2, 3}, {5, 0}};  // block index e * 3 + b
    for (int m : {1, 15, 16, 17, 31, 32, 33, 47, 48, 49, 63, 64, 65, 81, 100, 1024}) {
      const int64_t ldx = kp + 32;
      const int rows = (m + 15) / 16 * 16;
      std::mt19937 g(static_cast<uint32_t>(m));
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(rows * ldx), 0.0f);
      for (int i = 0; i < rows; ++i)
        for (int64_t k = 0; k < ldx; ++k)
          // zero in [K, kp) (the kernels' contract); rows past m and columns past kp: nonzero junk
          if (k < K || k >= kp || i >= m) x[static_cast<size_t>(i * ldx + k)] = (i >= m ? 50.0f : 1.0f) * u(g);
      std::vector<uint16_t> xb(x.size());
      for (int i = 0; i < rows; ++i) kernels::f32_to_bf16_row(x.data() + i * ldx, ldx, xb.data() + i * ldx);
      for (size_t pi = 0; pi < std::size(pairs); ++pi) {
        const uint16_t* p0 = panel[static_cast<size_t>(pairs[pi].first)];
        const uint16_t* p1 = panel[static_cast<size_t>(pairs[pi].second)];
        const int prefetch = pi == 0 ? 0 : pi == 1 ? 512 : pi == 2 ? 1024 : 4096;
        // where the last pass's prefetches run on to (a guess that may be anywhere: prefetches never fault)
        const int64_t next_step = pi == 1 ? static_cast<int64_t>(2 * pn) : pi == 3 ? -static_cast<int64_t>(7 * pn) : 0;
        const size_t n = static_cast<size_t>(m) * 16;
        std::vector<float> acc0(n + 16, kCanary), acc1(n + 16, kCanary), one0(n), one1(n);
        kernels::tile_amx2(p0, p1, kp, xb.data(), ldx, m, acc0.data(), acc1.data(), prefetch, next_step);
        kernels::tile_amx(p0, kp, xb.data(), ldx, m, one0.data(), prefetch);
        kernels::tile_amx(p1, kp, xb.data(), ldx, m, one1.data(), prefetch);
        const std::string what = "format " + std::to_string(static_cast<int>(f)) + " m " + std::to_string(m) +
                                 " pair " + std::to_string(pi);
        for (size_t i = n; i < n + 16; ++i) {
          ASSERT_EQ(acc0[i], kCanary) << what << ": wrote past acc0";
          ASSERT_EQ(acc1[i], kCanary) << what << ": wrote past acc1";
        }
        ASSERT_EQ(std::memcmp(acc0.data(), one0.data(), n * sizeof(float)), 0) << what << ": block 0 differs from tile_amx";
        ASSERT_EQ(std::memcmp(acc1.data(), one1.data(), n * sizeof(float)), 0) << what << ": block 1 differs from tile_amx";
        if (m <= kernels::kAmxQuadMaxRows) {  // four blocks a call: tile_amx4, bitwise tile_amx per block
          const uint16_t* quad[4] = {p0, p1, panel[static_cast<size_t>((pairs[pi].first + 2) % (E * 3))],
                                     panel[static_cast<size_t>((pairs[pi].second + 3) % (E * 3))]};
          const int64_t stride = static_cast<int64_t>(n) + 16;  // each block's rows, then a canary row
          std::vector<float> acc4(static_cast<size_t>(4 * stride), kCanary), one(n);
          kernels::tile_amx4(quad, kp, xb.data(), ldx, m, acc4.data(), stride, prefetch, next_step);
          for (int q = 0; q < 4; ++q) {
            kernels::tile_amx(quad[q], kp, xb.data(), ldx, m, one.data(), prefetch, q % 2 ? next_step : 0);
            ASSERT_EQ(std::memcmp(acc4.data() + q * stride, one.data(), n * sizeof(float)), 0)
                << what << ": tile_amx4 block " << q << " differs from tile_amx";
            for (int64_t i = static_cast<int64_t>(n); i < stride; ++i)
              ASSERT_EQ(acc4[static_cast<size_t>(q * stride + i)], kCanary) << what << ": tile_amx4 wrote past block " << q;
          }
        }
        for (int q = 0; q < 2; ++q) {
          const uint16_t* pq = q ? p1 : p0;
          const std::vector<float>& acc = q ? acc1 : acc0;
          for (int i = 0; i < m; ++i)
            for (int l = 0; l < 16; ++l) {
              double want = 0, mag = 0;
              for (int64_t k = 0; k < kp; ++k) {
                const double t = static_cast<double>(dec_bf16(xb[static_cast<size_t>(i * ldx + k)])) *
                                 dec_bf16(pq[static_cast<size_t>((k / 2) * 32 + l * 2 + (k & 1))]);
                want += t;
                mag += std::fabs(t);
              }
              ASSERT_NEAR(acc[static_cast<size_t>(i * 16 + l)], want, 1e-4 * mag)
                  << what << " block " << q << " token " << i << " lane " << l;
            }
        }
      }
    }
    kernels::amx_release();
  }
}

// The tile kernels' prefetch addresses (kernels::amx_prefetch_offset): over a call's k steps the lines
// cover `prefetch` bytes ahead of every B tile; with a next step, the part that passes the panel's end
// lands on the next call's panel instead, its first `prefetch` bytes, each line once, whatever the
// distance (a KiB step straddles the end at 256 / 512 / 1536 bytes); without one it runs straight on.
TEST(CpuKernels, AmxPrefetchRunsOnIntoTheNextPanel) {
  for (int64_t kp : {64, 768, 1408, 2048, 2880}) {
    const int64_t bytes = kp * 32;
    for (int prefetch : {64, 256, 512, 1024, 1536, 4096}) {
      for (int64_t next_step : {int64_t{0}, 3 * kp * 16, -5 * kp * 16}) {
        std::vector<int64_t> in_panel, beyond;
        for (int64_t k = 0; k < kp; k += 32)
          for (int l = 0; l < 1024; l += 64) {
            const int64_t o = kernels::amx_prefetch_offset(kp, prefetch, k, l, next_step);
            ASSERT_EQ(o % 64, 0);
            if (o >= 0 && o < bytes) in_panel.push_back(o);
            else beyond.push_back(o);
          }
        std::sort(in_panel.begin(), in_panel.end());
        std::sort(beyond.begin(), beyond.end());
        const std::string what = "kp " + std::to_string(kp) + " prefetch " + std::to_string(prefetch) +
                                 " next_step " + std::to_string(next_step);
        // this panel: every line from `prefetch` on, once
        const int64_t first = std::min<int64_t>(prefetch, bytes);
        ASSERT_EQ(static_cast<int64_t>(in_panel.size()), (bytes - first) / 64) << what;
        for (size_t i = 0; i < in_panel.size(); ++i)
          ASSERT_EQ(in_panel[i], first + 64 * static_cast<int64_t>(i)) << what;
        // the rest: the next panel's first lines (or straight past the end)
        const int64_t skipped = std::max<int64_t>(0, prefetch - bytes);  // a distance past a whole panel
        const int64_t start = (next_step != 0 ? next_step * 2 : bytes) + skipped;
        ASSERT_EQ(static_cast<int64_t>(beyond.size()), std::min<int64_t>(prefetch, bytes) / 64) << what;
        for (size_t i = 0; i < beyond.size(); ++i) ASSERT_EQ(beyond[i], start + 64 * static_cast<int64_t>(i)) << what;
      }
    }
  }
}

// The AVX512-BF16 streaming kernel against the f32 streaming kernel (stream_avx512) on the same
// bf16-valued x, every packed format (e4m3 codes include the subnormals; make_stack draws no NaN), token
// counts that use every register group (1, 2, 3, 5, 8 and 8 + 5) and, at the AMX level, the decode
// stream's one-group calls and its passes of 2-4 groups (16-100 tokens), and an odd K (fp4: a multiple of its
// scale group). Both accumulate products exactly representable in f32 (bf16 x bf16, or bf16 x f32 on the
// kernel's f32 fallback) in f32: they differ only in summation order and in where group scales apply.
// Both are also checked against the dense double loop.
void stream_bf16_matches_f32_stream(const KernelSet& ks);
void stream_bf16_decodes_every_code(const KernelSet& ks, int m);

// At the AMX level stream_bf16 is the AMX decode stream (mxfp4, fp8 and bf16 on tiles): the same checks.
TEST(CpuKernels, Avx512Bf16StreamMatchesF32StreamOnBf16Activations) {
  if (detected_isa() < CpuIsa::kAvx512Bf16) GTEST_SKIP() << "no AVX512-BF16 + AVX512-VBMI here";
  for (CpuIsa isa : {CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (isa > detected_isa()) break;
    SCOPED_TRACE(std::string(to_string(isa)));
    stream_bf16_matches_f32_stream(kernels_for(isa));
    if (isa == CpuIsa::kAmx) kernels::amx_release();
  }
  // v1 at the AVX512-BF16 level: the kernel with token groups of at most 8 (MOERUN_CPU_DOT_TOKENS=8).
  SCOPED_TRACE("avx512-bf16 v1");
  const KernelSet v1 = kernels_for_variant(CpuIsa::kAvx512Bf16, "v1");
  ASSERT_EQ(v1.stream_bf16, kernels::stream_avx512bf16_g8);
  stream_bf16_matches_f32_stream(v1);
}

void stream_bf16_matches_f32_stream(const KernelSet& ks) {
  ASSERT_NE(ks.stream_bf16, nullptr);
  for (WeightFormat f : kAllFormats) {
    for (bool sparse : {false, true}) {  // fp8 also with sparse zero / subnormal codes (make_stack)
      const bool fp8 = f == WeightFormat::kFp8PerTensor || f == WeightFormat::kFp8PerChannel || f == WeightFormat::kFp8Block;
      if (sparse && !fp8) continue;
      const bool fp4 = f == WeightFormat::kMxfp4 || f == WeightFormat::kNvfp4;
      // fp8 block also gated at N = 2 x 132: block 15's up rows 252-259 straddle a 128-row scale block,
      // so its lanes read three scale slots (kernels.hpp, group_scales_bytes)
      for (const LaneMap map : {LaneMap::kPlain, LaneMap::kGatedSplit}) {
        if (map == LaneMap::kGatedSplit && f != WeightFormat::kFp8Block) continue;
        // kp 352: fp8 blocks 128 + 128 + 75 (padded to 96)
        const int64_t E = 1, N = map == LaneMap::kPlain ? 40 : 2 * 132, K = fp4 ? 352 : 331;
        Stack s = make_stack(f, E, N, K, 4242u + static_cast<uint32_t>(f), sparse);
        auto p = pack_stack(s.m, map, ks.code_layout);
        ASSERT_EQ(p->kp, 352);
        if (sparse) {  // both decoder paths: quads (128 codes, two VNNI-word loads) with and without a zero / subnormal
          int with = 0, without = 0;
          for (int64_t b = 0; b < p->nblocks; ++b)
            for (int64_t q = 0; q < p->kp / 8; ++q) {
              const uint8_t* c = p->block(0, b).data + q * 2 * kernels::kVnniWordBytes;
              bool special = false;
              for (int j = 0; j < 2 * kernels::kVnniWordBytes; ++j) special = special || (c[j] & 0x78) == 0;
              ++(special ? with : without);
            }
          ASSERT_GT(with, 0);
          ASSERT_GT(without, 0);
        }
        std::mt19937 g(11);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        // 3-5: two chains a token; 13-16: one register group with its K groups' sums in acc (fp8 block);
        // 17, 31, 33: groups of 9 + 8, 16 + 15, 11 + 11 + 11. 16-100: the AMX decode stream's passes of
        // 2-4 row groups (64 tokens each, then the rest).
        for (int m : {1, 2, 3, 4, 5, 8, 13, 16, 17, 31, 33, 48, 64, 65, 100}) {
          const int64_t ldx = p->kp + 32;
          std::vector<float> x(static_cast<size_t>(m * ldx), 0.0f);
          for (int i = 0; i < m; ++i)
            for (int64_t k = 0; k < K; ++k) x[static_cast<size_t>(i * ldx + k)] = u(g);
          std::vector<uint16_t> xb(x.size());
          for (int i = 0; i < m; ++i) kernels::f32_to_bf16_row(x.data() + i * ldx, ldx, xb.data() + i * ldx);
          for (size_t j = 0; j < x.size(); ++j) x[j] = dec_bf16(xb[j]);  // the f32 kernel sees the same values
          const std::string what = "format " + std::string(to_string(f)) + (sparse ? " (sparse specials)" : "") + " N " +
                                   std::to_string(N) + " m " + std::to_string(m);
          std::vector<float> want(static_cast<size_t>(m * 16)), got(want.size());
          for (int64_t b = 0; b < p->nblocks; ++b) {
            kernels::BlockRef ref = p->block(0, b);
            ks.stream(ref, x.data(), ldx, m, want.data());
            ref.prefetch = b % 2 ? 4096 : 0;  // results must not depend on the software prefetch
            ref.prefetch_l2 = b % 4 == 1 ? 16384 : 0;
            ks.stream_bf16(ref, xb.data(), ldx, m, got.data());
            for (int i = 0; i < m; ++i)
              for (int l = 0; l < 16; ++l) {
                const int32_t r = p->lane_row[static_cast<size_t>(b * 16 + l)];
                double mag = 0;  // sum of |x w| (the packed scale of the lane is not applied to acc)
                if (r >= 0)
                  for (int64_t k = 0; k < K; ++k)
                    mag += std::fabs(static_cast<double>(x[static_cast<size_t>(i * ldx + k)]) *
                                     s.dense[static_cast<size_t>(r * K + k)]);
                const float* ls = p->lane_scales(0, b);
                if (ls && ls[l] != 0.0f) mag /= ls[l];  // padding lanes: scale 0, mag 0
                ASSERT_NEAR(got[static_cast<size_t>(i * 16 + l)], want[static_cast<size_t>(i * 16 + l)], 4e-6 * mag + 1e-30)
                    << what << " block " << b << " token " << i << " lane " << l;
              }
          }
          check_against_dense(s, *p, x, ldx, m, what + " bf16 stream", [&](const kernels::BlockRef& b, float* acc) {
            ks.stream_bf16(b, xb.data(), ldx, m, acc);
          });
        }
      }
    }
  }
}

// Stream pairs (kernels::stream2_avx512bf16): two blocks at one token give bitwise what two one-token
// stream_avx512bf16 calls give, for every format (those outside the dots go block by block), fp8 with
// and without zero / subnormal codes, blocks near and far apart (the same block twice, too), K with a
// partial last group, and with or without software prefetch.
TEST(CpuKernels, StreamPairsEqualTwoOneTokenCalls) {
  if (detected_isa() < CpuIsa::kAvx512Bf16) GTEST_SKIP() << "no AVX512-BF16 + AVX512-VBMI here";
  const KernelSet ks = kernels_for(CpuIsa::kAvx512Bf16);
  ASSERT_NE(ks.stream2_bf16, nullptr);
  for (WeightFormat f : kAllFormats)
    for (bool sparse : {false, true}) {
      const bool fp8 = f == WeightFormat::kFp8PerTensor || f == WeightFormat::kFp8PerChannel || f == WeightFormat::kFp8Block;
      if (sparse && !fp8) continue;
      const bool fp4 = f == WeightFormat::kMxfp4 || f == WeightFormat::kNvfp4;
      for (int64_t K : {fp4 ? int64_t{352} : int64_t{331}, int64_t{1024}})
        for (const LaneMap map : {LaneMap::kPlain, LaneMap::kGatedSplit}) {  // (gated, N = 2 x 132: fp8 block's three slots)
          const int64_t E = 2, N = map == LaneMap::kPlain ? 72 : 2 * 132;
          Stack s = make_stack(f, E, N, K, 777u + static_cast<uint32_t>(f) + static_cast<uint32_t>(K), sparse);
          auto p = pack_stack(s.m, map, ks.code_layout);
          std::mt19937 g(5);
          std::uniform_real_distribution<float> u(-1.0f, 1.0f);
          std::vector<float> x(static_cast<size_t>(p->kp), 0.0f);
          for (int64_t k = 0; k < K; ++k) x[static_cast<size_t>(k)] = u(g);
          std::vector<uint16_t> xb(x.size());
          kernels::f32_to_bf16_row(x.data(), p->kp, xb.data());
          const std::string what = std::string(to_string(f)) + (sparse ? " (sparse specials)" : "") + " K " + std::to_string(K) +
                                   " N " + std::to_string(N);
          for (int64_t e = 0; e < E; ++e)
            for (int64_t b0 = 0; b0 < p->nblocks; ++b0)
              for (int64_t b1 : {b0, (b0 + 1) % p->nblocks, p->nblocks - 1 - b0}) {
                kernels::BlockRef r0 = p->block(e, b0), r1 = p->block(E - 1 - e, b1);
                r0.prefetch = r1.prefetch = (b0 % 2) ? 1024 : 0;
                r0.prefetch_l2 = r1.prefetch_l2 = (b0 % 2) ? 4096 : 0;
                float want0[16], want1[16], got0[16], got1[16];
                ks.stream_bf16(r0, xb.data(), p->kp, 1, want0);
                ks.stream_bf16(r1, xb.data(), p->kp, 1, want1);
                ks.stream2_bf16(r0, r1, xb.data(), got0, got1);
                EXPECT_EQ(std::memcmp(got0, want0, sizeof want0), 0) << what << " expert " << e << " block " << b0;
                EXPECT_EQ(std::memcmp(got1, want1, sizeof want1), 0) << what << " expert " << E - 1 - e << " block " << b1;
              }
        }
    }
}

// The q8 kernel's stream pairs (kernels::stream2_q8_avx512vnni): two blocks on one int8 row, or a token's two
// 15-bit rows, give bitwise what two stream_q8_avx512vnni calls give; 3 rows go block by block (and
// still agree). mxfp4 and nvfp4, blocks of two experts, near and far apart, with and without prefetch.
// The same for the joined q15 kernel (stream2_q15_avx512vnni against stream_q15_avx512vnni).
TEST(CpuKernels, Q8StreamPairsEqualTwoCalls) {
  if (detected_isa() < CpuIsa::kAvx512Bf16) GTEST_SKIP() << "no AVX512-VNNI + AVX512-VBMI here";
  const KernelSet ks = kernels_for(CpuIsa::kAvx512Bf16);
  ASSERT_NE(ks.stream2_q8, nullptr);
  for (WeightFormat f : {WeightFormat::kMxfp4, WeightFormat::kNvfp4}) {
    const int64_t E = 2, N = 72, K = 352;
    Stack s = make_stack(f, E, N, K, 991u + static_cast<uint32_t>(f));
    auto p = pack_stack(s.m, LaneMap::kPlain, kernels::CodeLayout::kVnniWords);
    std::mt19937 g(9);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> x(static_cast<size_t>(3 * p->kp), 0.0f);
    for (int i = 0; i < 3; ++i)
      for (int64_t k = 0; k < K; ++k) x[static_cast<size_t>(i * p->kp + k)] = u(g);
    Q8Buffer buf;
    const Q8Slots slots = buf.reserve(3, p->kp);
    for (int i = 0; i < 3; ++i) pack_q8_row(x.data() + i * p->kp, p->kp, slots.row(i));
    for (int m : {1, 2, 3})
      for (int64_t b0 = 0; b0 < p->nblocks; ++b0)
        for (int64_t b1 : {b0, (b0 + 1) % p->nblocks, p->nblocks - 1 - b0}) {
          kernels::BlockRef r0 = p->block(0, b0), r1 = p->block(1, b1);
          r0.prefetch = r1.prefetch = (b0 % 2) ? 1024 : 0;
          std::vector<float> want0(static_cast<size_t>(m * 16)), want1(want0.size()), got0(want0.size()), got1(want0.size());
          ks.stream_q8(r0, slots.view(), m, want0.data());
          ks.stream_q8(r1, slots.view(), m, want1.data());
          ks.stream2_q8(r0, r1, slots.view(), m, got0.data(), got1.data());
          const std::string what = std::string(to_string(f)) + " m " + std::to_string(m) + " blocks " +
                                   std::to_string(b0) + ", " + std::to_string(b1);
          EXPECT_EQ(std::memcmp(got0.data(), want0.data(), want0.size() * sizeof(float)), 0) << what;
          EXPECT_EQ(std::memcmp(got1.data(), want1.data(), want1.size() * sizeof(float)), 0) << what;
        }
    // The joined q15 kernel's pairs (stream2_q15_avx512vnni) on tokens of two 15-bit rows each.
    const Q8Slots q15 = buf.reserve(6, p->kp);
    for (int i = 0; i < 3; ++i) pack_q15_rows(x.data() + i * p->kp, p->kp, q15.row(2 * i));
    for (int m : {1, 2})
      for (int64_t b0 = 0; b0 < p->nblocks; ++b0) {
        const int64_t b1 = p->nblocks - 1 - b0;
        kernels::BlockRef r0 = p->block(0, b0), r1 = p->block(1, b1);
        std::vector<float> want0(static_cast<size_t>(m * 16)), want1(want0.size()), got0(want0.size()), got1(want0.size());
        kernels::stream_q15_avx512vnni(r0, q15.view(), m, want0.data());
        kernels::stream_q15_avx512vnni(r1, q15.view(), m, want1.data());
        kernels::stream2_q15_avx512vnni(r0, r1, q15.view(), m, got0.data(), got1.data());
        const std::string what = std::string(to_string(f)) + " q15 m " + std::to_string(m) + " block " + std::to_string(b0);
        EXPECT_EQ(std::memcmp(got0.data(), want0.data(), want0.size() * sizeof(float)), 0) << what;
        EXPECT_EQ(std::memcmp(got1.data(), want1.data(), want1.size() * sizeof(float)), 0) << what;
      }
  }
}

// Every e4m3 code (NaN aside) and every e2m1 nibble through the bf16 kernel: a one-hot x selects the
// weight of one k, so acc is exactly the decoded weight (times its group scale), compared bit for bit
// with the f32 kernel (nvfp4: with dequantize_row, see below). At the AMX level with two identical
// tokens, which the AMX decode stream takes (one token stays on VDPBF16PS).
TEST(CpuKernels, Avx512Bf16StreamDecodesEveryCodeExactly) {
  if (detected_isa() < CpuIsa::kAvx512Bf16) GTEST_SKIP() << "no AVX512-BF16 + AVX512-VBMI here";
  for (CpuIsa isa : {CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (isa > detected_isa()) break;
    SCOPED_TRACE(std::string(to_string(isa)));
    stream_bf16_decodes_every_code(kernels_for(isa), isa == CpuIsa::kAmx ? 2 : 1);
    if (isa == CpuIsa::kAmx) kernels::amx_release();
  }
}

// The fp8 decoders' fast path (all codes normal) gives the table path's words on every 16-bit word
// whose code is normal: both bytes of all 65536 words.
TEST(CpuKernels, Fp8WordDecodeAllWords) {
  if (detected_isa() < CpuIsa::kAvx512) GTEST_SKIP() << "no AVX-512 here";
  EXPECT_EQ(kernels::fp8_word_decode_mismatches(), 0);
}

void stream_bf16_decodes_every_code(const KernelSet& ks, int m) {
  for (WeightFormat f : {WeightFormat::kFp8PerChannel, WeightFormat::kFp8Block, WeightFormat::kMxfp4, WeightFormat::kNvfp4,
                         WeightFormat::kBF16}) {
    Stack s = make_stack(f, 1, 16, 256, 99u + static_cast<uint32_t>(f));
    const bool fp8 = f == WeightFormat::kFp8PerChannel || f == WeightFormat::kFp8Block;
    if (fp8)  // every row holds codes 0..255 except the NaNs
      for (int64_t i = 0; i < 16 * 256; ++i) {
        uint8_t c = static_cast<uint8_t>(i + i / 256);
        if ((c & 0x7F) == 0x7F) c = static_cast<uint8_t>(c ^ 1);
        s.m.data.as<uint8_t>()[i] = c;
      }
    auto p = pack_stack(s.m, LaneMap::kPlain, ks.code_layout);
    const int64_t ldx = p->kp;
    std::vector<uint16_t> xb(static_cast<size_t>(m * ldx), 0);  // m identical rows
    std::vector<float> x(static_cast<size_t>(ldx), 0.0f);
    std::vector<float> want(16), got(static_cast<size_t>(m) * 16);
    std::vector<float> rows(static_cast<size_t>(16 * p->cols));  // dequantize_row of the 16 rows
    for (int64_t r = 0; r < 16; ++r) dequantize_row(s.m, 0, r, rows.data() + r * p->cols);
    for (int64_t k = 0; k < p->cols; ++k) {
      std::fill(xb.begin(), xb.end(), uint16_t{0});
      std::fill(x.begin(), x.end(), 0.0f);
      for (int i = 0; i < m; ++i) xb[static_cast<size_t>(i * ldx + k)] = 0x3F80;  // 1.0
      x[static_cast<size_t>(k)] = 1.0f;
      ks.stream(p->block(0, 0), x.data(), ldx, 1, want.data());
      ks.stream_bf16(p->block(0, 0), xb.data(), ldx, m, got.data());
      // Both bf16 kernels scale nvfp4 weights as dequantize_row does, (e2m1 x block) x global with one
      // rounding: the AMX decode stream in its decoder, the VDPBF16PS kernel by folding the e4m3 group
      // scales into its sums and the global scale into the finished ones. The f32 kernel multiplies by
      // (block x global), one ulp apart at times.
      if (f == WeightFormat::kNvfp4)
        for (int l = 0; l < 16; ++l) {
          const int32_t r = p->lane_row[static_cast<size_t>(l)];
          want[static_cast<size_t>(l)] = r >= 0 ? rows[static_cast<size_t>(r * p->cols + k)] : 0.0f;
        }
      for (int i = 0; i < m; ++i)
        for (int l = 0; l < 16; ++l)
          ASSERT_EQ(got[static_cast<size_t>(i * 16 + l)], want[static_cast<size_t>(l)])
              << to_string(f) << " k " << k << " token " << i << " lane " << l;
      // At these levels the f32 kernel decodes fp8 through the same fp8_word_bf16, so fp8 is also held
      // to dequantize_row (the format codecs): value / 256 times the lane scale (256 x the channel
      // scale) or inside the kernel times the block scale (x 256) is the same single rounding.
      if (fp8) {
        const float* ls = p->lane_scales(0, 0);
        for (int l = 0; l < 16; ++l) {
          const int32_t r = p->lane_row[static_cast<size_t>(l)];
          const float ref = r >= 0 ? rows[static_cast<size_t>(r * p->cols + k)] : 0.0f;
          ASSERT_EQ(got[static_cast<size_t>(l)] * (ls ? ls[l] : 1.0f), ref) << to_string(f) << " k " << k << " lane " << l;
        }
      }
    }
  }
}

// ---- int8 activations (ActQuant::kInt8PerTokenGroup) ------------------------------------------------

// pack_q8_row holds exactly the codes the reference's fake quantization rounds to, in the kernel's order
// (kernels.hpp: k = 8j + {0, 4, 1, 5, 2, 6, 3, 7} within each chunk), with each group's scale and the
// bias sums that take the e2m1 offset back out. Runs on any machine (no SIMD).
TEST(CpuKernels, Q8RowsHoldTheFakeQuantizedCodesInKernelOrder) {
  const int64_t K = 72, kp = 96;  // three 32-k groups, the last one partial (zeros past K)
  std::mt19937 g(5);
  std::normal_distribution<float> n(0.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(kp), 0.0f);
  for (int64_t k = 0; k < K; ++k) x[static_cast<size_t>(k)] = n(g);
  x[3] = 0.0f;
  for (int64_t k = 32; k < 64; ++k) x[static_cast<size_t>(k)] = 0.0f;  // an all-zero group: scale 1, codes 0
  x[70] = -1e-3f;                                                         // a small group beside zeros
  std::vector<float> fake(x.begin(), x.begin() + K);
  fake_quantize_act_int8_per_token_group(fake.data(), 1, K);
  Q8Buffer buf;
  const Q8Slots row = buf.reserve(2, kp).row(1);  // row 1: the strides must hold
  std::vector<float> back(x);
  pack_q8_row(back.data(), kp, row, back.data());  // in place, as the runner does
  for (int64_t k = 0; k < kp; ++k) ASSERT_EQ(back[static_cast<size_t>(k)], k < K ? fake[static_cast<size_t>(k)] : 0.0f) << k;
  static const int kPos[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // chunk position of k = 8j + i
  for (int64_t grp = 0; grp < kp / 32; ++grp) {
    int sum16[2] = {0, 0};
    for (int i = 0; i < 32; ++i) {
      const int64_t k = grp * 32 + i;
      const int code = row.q[grp * 32 + (i / 8) * 8 + kPos[i % 8]];
      ASSERT_LE(std::abs(code), 127);
      const float want = k < K ? fake[static_cast<size_t>(k)] : 0.0f;
      ASSERT_EQ(static_cast<float>(code) * row.scale[grp], want) << "k " << k;
      sum16[i / 16] += code;
    }
    EXPECT_EQ(row.bias16[2 * grp], -kernels::kQ8E2m1Offset * sum16[0]);
    EXPECT_EQ(row.bias16[2 * grp + 1], -kernels::kQ8E2m1Offset * sum16[1]);
    EXPECT_EQ(row.bias32[grp], -kernels::kQ8E2m1Offset * (sum16[0] + sum16[1]));
  }
  EXPECT_EQ(row.scale[1], 1.0f);
  EXPECT_THROW(pack_q8_row(x.data(), 100, row), Error);  // not whole 32-k groups
  EXPECT_THROW(pack_q8_row(x.data(), 128, row), Error);  // longer than the row stride
}

// The kernel sets a layer like s gets at the q8 kernel's levels this machine has (avx2, avx512-bf16).
std::vector<Level> q8_kernel_levels(const MoeSpec& s) {
  std::vector<Level> out;
  if (detected_isa() >= CpuIsa::kAvx2) out.push_back({"avx2", kernels_for_spec(s, CpuIsa::kAvx2)});
  if (detected_isa() >= CpuIsa::kAvx512Bf16) out.push_back({"avx512-bf16", kernels_for_spec(s, CpuIsa::kAvx512Bf16)});
  return out;
}

// The q8 kernels of the levels this machine has (AVX2's on the VNNI-word layout an int8-activation layer
// gets there; the VNNI one at avx512-bf16 and amx).
std::vector<Level> q8_levels() {
  MoeSpec s;
  s.weight_format = WeightFormat::kMxfp4;
  s.act_quant = ActQuant::kInt8PerTokenGroup;
  return q8_kernel_levels(s);
}

// The q8 kernel against the dense loop on the dequantized activations, every register group size and
// its tails, both 4-bit formats, at each level that has it.
TEST(CpuKernels, Q8StreamMatchesDenseLoop) {
  const auto lv = q8_levels();
  if (lv.empty()) GTEST_SKIP() << "no AVX2 here";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed = " + std::to_string(seed));
  for (const Level& level : lv)
  for (WeightFormat f : {WeightFormat::kMxfp4, WeightFormat::kNvfp4}) {
    const KernelSet& ks = level.ks;
    ASSERT_NE(ks.stream_q8, nullptr) << level.name;
    const int64_t E = 2, N = 40, K = 352;
    Stack s = make_stack(f, E, N, K, seed + static_cast<uint32_t>(f));
    auto p = pack_stack(s.m, LaneMap::kPlain, ks.code_layout);
    std::mt19937 g(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (int m : {1, 2, 3, 5, 7, 8, 9, 16, 17}) {
      const int64_t ld = p->kp + 64;  // a row stride longer than the blocks' K
      std::vector<float> x(static_cast<size_t>(m * ld), 0.0f);
      for (int i = 0; i < m; ++i)
        for (int64_t k = 0; k < K; ++k) x[static_cast<size_t>(i * ld + k)] = n(g) * (k % 64 < 32 ? 1.0f : 1e-3f);
      Q8Buffer buf;
      const Q8Slots q = buf.reserve(m, ld);
      for (int i = 0; i < m; ++i) {
        pack_q8_row(x.data() + i * ld, p->kp, q.row(i));
        fake_quantize_act_int8_per_token_group(x.data() + i * ld, 1, K);  // what the dense loop multiplies
      }
      check_against_dense(s, *p, x, ld, m, std::string(level.name) + " " + std::string(to_string(f)) + " q8 m " + std::to_string(m),
                          [&](const kernels::BlockRef& b, float* acc) { ks.stream_q8(b, q.view(), m, acc); });
    }
  }
}

// Every e2m1 code and scale of random stacks through the q8 kernel: a one-hot activation 1.0 (code 64,
// scale 2^-6) selects one k, so acc must equal dequantize_row bit for bit, nvfp4 included (its global
// scale multiplies the finished sum once, as dequantize_row rounds (e2m1 x block) x global).
TEST(CpuKernels, Q8StreamDecodesEveryCodeExactly) {
  const auto lv = q8_levels();
  if (lv.empty()) GTEST_SKIP() << "no AVX2 here";
  for (const Level& level : lv)
  for (WeightFormat f : {WeightFormat::kMxfp4, WeightFormat::kNvfp4}) {
    const KernelSet& ks = level.ks;
    Stack s = make_stack(f, 1, 16, 256, 77u + static_cast<uint32_t>(f));
    auto p = pack_stack(s.m, LaneMap::kPlain, ks.code_layout);
    std::vector<float> rows(static_cast<size_t>(16 * p->cols));
    for (int64_t r = 0; r < 16; ++r) dequantize_row(s.m, 0, r, rows.data() + r * p->cols);
    Q8Buffer buf;
    const Q8Slots q = buf.reserve(1, p->kp);
    std::vector<float> x(static_cast<size_t>(p->kp)), acc(16);
    for (int64_t k = 0; k < p->cols; ++k) {
      std::fill(x.begin(), x.end(), 0.0f);
      x[static_cast<size_t>(k)] = 1.0f;
      pack_q8_row(x.data(), p->kp, q);
      ks.stream_q8(p->block(0, 0), q.view(), 1, acc.data());
      for (int l = 0; l < 16; ++l) {
        const int32_t r = p->lane_row[static_cast<size_t>(l)];
        ASSERT_EQ(acc[static_cast<size_t>(l)], r >= 0 ? rows[static_cast<size_t>(r * p->cols + k)] : 0.0f)
            << level.name << " " << to_string(f) << " k " << k << " lane " << l;
      }
    }
  }
}

// ---- 15-bit activations for 4-bit layers with bf16 activations (q8_rows.hpp pack_q15_rows) ---------

// The value a pair of q15 rows holds at column k (hi x its scale + lo x its scale), in double.
double q15_value(const Q8Slots& two, int64_t k) {
  static const int kPos[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // chunk position of k = 8j + i
  const int64_t at = (k / 8) * 8 + kPos[k % 8];
  const Q8Slots hi = two.row(0), lo = two.row(1);
  return static_cast<double>(hi.q[at]) * hi.scale[k / 32] + static_cast<double>(lo.q[at]) * lo.scale[k / 32];
}

// Per 32 columns: hi in [-128, 127], lo in [0, 127], scales 2^(e + 7) and 2^e, the pair within half a
// step 2^(e - 1) of x, that half step under 1/16383 of the group's largest magnitude, and bf16 values within
// 2^6 of that largest exact; bias sums as pack_q8_row's; a group with a NaN or infinity gets NaN scales.
// Runs on any machine (no SIMD).
TEST(CpuKernels, Q15RowsHoldEachValueWithinHalfAStep) {
  const int64_t kp = 256;  // 8 groups
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed = " + std::to_string(seed));
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-30, 30);
  std::vector<float> x(static_cast<size_t>(kp));
  for (int64_t k = 0; k < kp; ++k)  // bf16 values over a wide range of magnitudes inside each group
    x[static_cast<size_t>(k)] = bf16_to_f32(f32_to_bf16(std::ldexp(n(g), ex(g))));
  for (int64_t k = 64; k < 96; ++k) x[static_cast<size_t>(k)] = 0.0f;               // group 2: all zero
  x[100] = std::numeric_limits<float>::quiet_NaN();                                   // group 3: NaN
  x[140] = -std::numeric_limits<float>::infinity();                                   // group 4: infinity
  for (int64_t k = 160; k < 192; ++k) x[static_cast<size_t>(k)] = std::ldexp(k % 2 ? 1.75f : -1.25f, 125);  // near the top
  for (int64_t k = 192; k < 224; ++k) x[static_cast<size_t>(k)] = std::ldexp(static_cast<float>(k - 200), -140);  // subnormal
  Q8Buffer buf;
  const Q8Slots two = buf.reserve(4, kp + 32).row(1);  // rows 1 and 2 of a longer stride
  pack_q15_rows(x.data(), kp, two);
  static const int kPos[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  for (int64_t grp = 0; grp < kp / 32; ++grp) {
    const Q8Slots hi = two.row(0), lo = two.row(1);
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < 32; ++i) {
      finite = finite && std::isfinite(x[static_cast<size_t>(grp * 32 + i)]);
      amax = std::max(amax, std::fabs(x[static_cast<size_t>(grp * 32 + i)]));
    }
    int sums[2][2] = {{0, 0}, {0, 0}};
    for (int i = 0; i < 32; ++i) {
      const int64_t at = grp * 32 + (i / 8) * 8 + kPos[i % 8];
      ASSERT_GE(lo.q[at], 0);
      sums[0][i / 16] += hi.q[at];
      sums[1][i / 16] += lo.q[at];
    }
    for (int r = 0; r < 2; ++r) {
      const Q8Slots& o = r == 0 ? hi : lo;
      EXPECT_EQ(o.bias16[2 * grp], -kernels::kQ8E2m1Offset * sums[r][0]) << "group " << grp;
      EXPECT_EQ(o.bias16[2 * grp + 1], -kernels::kQ8E2m1Offset * sums[r][1]) << "group " << grp;
      EXPECT_EQ(o.bias32[grp], -kernels::kQ8E2m1Offset * (sums[r][0] + sums[r][1])) << "group " << grp;
    }
    if (!finite) {
      EXPECT_TRUE(std::isnan(hi.scale[grp]) && std::isnan(lo.scale[grp])) << "group " << grp;
      for (int i = 0; i < 32; ++i) EXPECT_EQ(hi.q[grp * 32 + i] | lo.q[grp * 32 + i], 0);
      continue;
    }
    ASSERT_EQ(hi.scale[grp], 128.0f * lo.scale[grp]) << "group " << grp;
    int e = 0;
    ASSERT_EQ(std::frexp(lo.scale[grp], &e), 0.5f) << "a power of two, group " << grp;
    const double half_step = std::ldexp(0.5, e - 1);  // lo.scale = 2^(e - 1)
    for (int i = 0; i < 32; ++i) {
      const int64_t k = grp * 32 + i;
      const double v = x[static_cast<size_t>(k)], got = q15_value(two, k);
      ASSERT_LE(std::fabs(got - v), half_step) << "k " << k;
      if (amax >= std::ldexp(1.0f, -100)) {  // smaller groups meet the smallest step, 2^-126
        ASSERT_LT(half_step, static_cast<double>(amax) / kQ15Max) << "k " << k;
        if (std::fabs(v) >= std::ldexp(static_cast<double>(amax), -6))
          ASSERT_EQ(got, v) << "bf16 value within 2^6 of the group's largest, k " << k;
      }
    }
  }
  // Past kQ15Max x 2^114 (within 2^-14 of FLT_MAX) the codes saturate, finite.
  std::vector<float> top(32, std::numeric_limits<float>::max());
  top[1] = -top[1];
  pack_q15_rows(top.data(), 32, two);
  EXPECT_EQ(q15_value(two, 0), std::ldexp(static_cast<double>(kQ15Max), 114));
  EXPECT_EQ(q15_value(two, 1), -std::ldexp(static_cast<double>(kQ15Max), 114));
  EXPECT_THROW(pack_q15_rows(x.data(), 100, two), Error);      // not whole 32-k groups
  EXPECT_THROW(pack_q15_rows(x.data(), kp + 64, two), Error);  // longer than the row stride
}

// The kernel set a 4-bit layer with bf16 activations gets at each VNNI level this machine has.
// The q15 kernels of the levels this machine has: each level's kernel that joins a token's two rows
// (stream_q15_avx2, stream_q15_avx512vnni: the default) and the one whose rows the runner sums
// (MOERUN_CPU_Q15_JOIN=0).
std::vector<Level> q15_levels() {
  MoeSpec s;
  s.weight_format = WeightFormat::kMxfp4;
  s.act_dtype = DType::kBF16;
  std::vector<Level> out = q8_kernel_levels(s);
  for (size_t i = 0, n = out.size(); i < n; ++i) {
    EXPECT_TRUE(out[i].ks.q8_joins_rows) << out[i].name;
    const bool avx2 = out[i].ks.stream_q8 == kernels::stream_q15_avx2;
    Level apart{avx2 ? "avx2 rows apart" : "avx512-bf16 rows apart", out[i].ks};
    apart.ks.stream_q8 = avx2 ? kernels::stream_q8_avx2 : kernels::stream_q8_avx512vnni;
    apart.ks.stream2_q8 = avx2 ? nullptr : kernels::stream2_q8_avx512vnni;
    apart.ks.q8_joins_rows = false;
    out.push_back(apart);
  }
  return out;
}

// The q8 kernel on two rows a token, joined in the kernel or summed after as the runner does, against the
// dense loop on the values the rows hold (the integer products are exact, so the f32 folds' rounding is all
// that differs).
TEST(CpuKernels, Q15StreamMatchesDenseLoop) {
  const auto lv = q15_levels();
  if (lv.empty()) GTEST_SKIP() << "no AVX2 here";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed = " + std::to_string(seed));
  for (const Level& level : lv)
    for (WeightFormat f : {WeightFormat::kMxfp4, WeightFormat::kNvfp4}) {
      const KernelSet& ks = level.ks;
      ASSERT_NE(ks.stream_q8, nullptr) << level.name;
      ASSERT_EQ(ks.q8_rows_per_token, 2) << level.name;
      const int64_t E = 2, N = 40, K = 352;
      Stack s = make_stack(f, E, N, K, seed + static_cast<uint32_t>(f));
      auto p = pack_stack(s.m, LaneMap::kPlain, ks.code_layout);
      std::mt19937 g(seed);
      std::normal_distribution<float> n(0.0f, 1.0f);
      for (int m : {1, 2, 3, 4, 5, 9}) {
        const int64_t ld = p->kp + 64;
        std::vector<float> x(static_cast<size_t>(m * ld), 0.0f);
        for (int i = 0; i < m; ++i)
          for (int64_t k = 0; k < K; ++k) x[static_cast<size_t>(i * ld + k)] = n(g) * (k % 64 < 32 ? 1.0f : 1e-3f);
        Q8Buffer buf;
        const Q8Slots q = buf.reserve(2 * m, ld);
        for (int i = 0; i < m; ++i) {
          pack_q15_rows(x.data() + i * ld, p->kp, q.row(2 * i));
          for (int64_t k = 0; k < K; ++k)
            x[static_cast<size_t>(i * ld + k)] = static_cast<float>(q15_value(q.row(2 * i), k));  // exact in f32
        }
        check_against_dense(s, *p, x, ld, m, std::string(level.name) + " " + std::string(to_string(f)) + " q15 m " + std::to_string(m),
                            [&](const kernels::BlockRef& b, float* acc) {
                              if (ks.q8_joins_rows) return ks.stream_q8(b, q.view(), ks.q8_call_count(m), acc);
                              std::vector<float> rows(static_cast<size_t>(2 * m * 16));
                              ks.stream_q8(b, q.view(), ks.q8_call_count(m), rows.data());
                              for (int i = 0; i < m; ++i)
                                for (int l = 0; l < 16; ++l)
                                  acc[i * 16 + l] = rows[static_cast<size_t>(2 * i * 16 + l)] + rows[static_cast<size_t>((2 * i + 1) * 16 + l)];
                            });
      }
    }
}

// The AVX2 f32 panel decoded from VNNI words equals, bit for bit, the one decoded from the per-k layout
// of the same stack: every e2m1 code (-0 included), random and extreme scales (e8m0 bytes 0, 1 and 254).
TEST(CpuKernels, Avx2VnniPanelEqualsPerKPanel) {
  if (detected_isa() < CpuIsa::kAvx2) GTEST_SKIP() << "no AVX2 here";
  for (WeightFormat f : {WeightFormat::kMxfp4, WeightFormat::kNvfp4}) {
    Stack s = make_stack(f, 2, 40, 320, 31u + static_cast<uint32_t>(f));
    auto* codes = const_cast<uint8_t*>(static_cast<const uint8_t*>(s.m.data.data));  // every code pair, -0 too
    for (int64_t i = 0; i < 2 * 40 * 320 / 2; ++i) codes[i] = static_cast<uint8_t>(i * 7 + i / 256);
    if (f == WeightFormat::kMxfp4) {
      auto* sc = const_cast<uint8_t*>(static_cast<const uint8_t*>(s.m.scale.data));  // owned by s.own
      sc[0] = 0;
      sc[1] = 1;
      sc[2] = 254;
    }
    auto perk = pack_stack(s.m, LaneMap::kPlain, kernels::CodeLayout::kPerK);
    auto vnni = pack_stack(s.m, LaneMap::kPlain, kernels::CodeLayout::kVnniWords);
    const size_t n = static_cast<size_t>(perk->kp * 16);
    std::vector<float> abuf(n + 16), bbuf(n + 16);  // panels are 64-byte aligned (aligned stores)
    auto align = [](float* p) { return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63}); };
    float* a = align(abuf.data());
    float* b = align(bbuf.data());
    for (int64_t e = 0; e < perk->experts; ++e)
      for (int64_t blk = 0; blk < perk->nblocks; ++blk) {
        kernels::dequant_panel_avx2(perk->block(e, blk), a);
        kernels::dequant_panel_avx2_vnni(vnni->block(e, blk), b);
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0)
              << to_string(f) << " expert " << e << " block " << blk << " k " << i / 16 << " lane " << i % 16 << ": "
              << a[i] << " vs " << b[i];
      }
  }
}

// The f32 stream an AVX2 layer in VNNI words gets refuses its codes (NaN, never a per-k misread) and
// streams the formats without a code layout as stream_avx2 does.
TEST(CpuKernels, Avx2VnniStreamGuardsItsCodes) {
  if (detected_isa() < CpuIsa::kAvx2) GTEST_SKIP() << "no AVX2 here";
  for (WeightFormat f : {WeightFormat::kMxfp4, WeightFormat::kNvfp4, WeightFormat::kBF16}) {
    Stack s = make_stack(f, 1, 16, 128, 5u);
    auto p = pack_stack(s.m, LaneMap::kPlain, kernels::CodeLayout::kVnniWords);
    std::vector<float> x(static_cast<size_t>(2 * p->kp), 0.5f), got(32), want(32);
    kernels::stream_avx2_vnni(p->block(0, 0), x.data(), p->kp, 2, got.data());
    if (f == WeightFormat::kBF16) {
      kernels::stream_avx2(p->block(0, 0), x.data(), p->kp, 2, want.data());
      EXPECT_EQ(got, want);
    } else {
      for (float v : got) EXPECT_TRUE(std::isnan(v)) << to_string(f);
    }
  }
}

// mxfp4 scales are multiplied into the decoded weights (BlockRef::e8m0_fold, the AMX decode stream)
// only when every scale byte keeps e2m1 x scale a normal number; one extreme byte anywhere turns it off
// for the stack, which then keeps the per-group fold. Both ways match the dense loop, on the streaming
// kernel of every level this machine has (tiny scales only: a large one overflows the sums).
TEST(CpuKernels, Mxfp4ScaleFoldOnlyWhereProductsStayNormal) {
  for (int extreme : {0, 1, 2, 252, 253, 255}) {
    Stack s = make_stack(WeightFormat::kMxfp4, 1, 32, 256, 77);
    const int64_t K = 256, ng = K / 32, r = 3, g = 5;
    auto* sc = const_cast<uint8_t*>(static_cast<const uint8_t*>(s.m.scale.data));  // owned by s.own
    sc[r * ng + g] = static_cast<uint8_t>(extreme);
    const auto* d = static_cast<const uint8_t*>(s.m.data.data);
    for (int64_t k = g * 32; k < (g + 1) * 32; ++k) {  // the dense values of that group, rescaled
      const uint8_t nib = (k & 1) ? d[r * (K / 2) + k / 2] >> 4 : d[r * (K / 2) + k / 2] & 15;
      s.dense[static_cast<size_t>(r * K + k)] = extreme == 255 ? NAN : dec_e2m1(nib) * std::ldexp(1.0f, extreme - 127);
    }
    auto p = pack_stack(s.m, LaneMap::kPlain, kernels::CodeLayout::kVnniWords);
    const bool foldable = extreme >= 2 && extreme <= 252;
    EXPECT_EQ(p->e8m0_fold, foldable) << "scale byte " << extreme;
    EXPECT_EQ(p->block(0, 0).e8m0_fold, foldable) << "scale byte " << extreme;
    if (extreme > 2) continue;
    for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
      if (isa > detected_isa()) break;
      const KernelSet ks = kernels_for(isa);
      p = pack_stack(s.m, LaneMap::kPlain, ks.code_layout);
      for (int m : {1, 2, 17, 33}) {
        const int64_t ldx = p->kp;
        std::mt19937 gen(static_cast<uint32_t>(m));
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::vector<float> x(static_cast<size_t>(m * ldx), 0.0f);
        std::vector<uint16_t> xb(x.size());
        for (int i = 0; i < m; ++i)
          for (int64_t k = 0; k < K; ++k) x[static_cast<size_t>(i * ldx + k)] = u(gen);
        for (size_t j = 0; j < x.size(); ++j) {  // (the AVX-512 row converter needs AVX512-BF16)
          xb[j] = moerun::f32_to_bf16(x[j]);
          x[j] = dec_bf16(xb[j]);
        }
        const std::string what = "scale byte " + std::to_string(extreme) + " " + std::string(to_string(isa)) +
                                 " m " + std::to_string(m);
        check_against_dense(s, *p, x, ldx, m, what, [&](const kernels::BlockRef& b, float* acc) {
          if (ks.stream_bf16) ks.stream_bf16(b, xb.data(), ldx, m, acc);
          else ks.stream(b, x.data(), ldx, m, acc);
        });
      }
      if (isa == CpuIsa::kAmx) kernels::amx_release();
    }
  }
}

TEST(CpuKernels, OddKIsPaddedWithZeros) {
  const auto lv = levels();
  if (lv.empty()) GTEST_SKIP();
  for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kFp8Block, WeightFormat::kInt8PerChannel}) {
    Stack s = make_stack(f, 1, 19, 37, 99);
    std::vector<float> x(static_cast<size_t>(3 * 64), 0.0f);
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 37; ++k) x[static_cast<size_t>(i * 64 + k)] = 0.1f * (k - i);
    for (const Level& L : lv) {
      const auto p = pack_stack(s.m, LaneMap::kPlain, L.ks.code_layout);
      EXPECT_EQ(p->kp, 64);
      check_against_dense(s, *p, x, p->kp, 3, L.name, [&](const kernels::BlockRef& b, float* acc) {
        L.ks.stream(b, x.data(), p->kp, 3, acc);
      });
    }
  }
}

// Both code layouts (kernels.hpp) hold every canonical fp8 byte and e2m1 nibble at the place
// fp8_code / e2m1_code read, with zeros past the true K and in padding lanes: checked code by code,
// independent of any kernel.
TEST(CpuKernels, CodeLayoutsHoldEveryCodeOnce) {
  for (const kernels::CodeLayout layout : {kernels::CodeLayout::kPerK, kernels::CodeLayout::kVnniWords})
    for (const WeightFormat f : {WeightFormat::kMxfp4, WeightFormat::kNvfp4, WeightFormat::kFp8PerTensor,
                                 WeightFormat::kFp8Block}) {
      SCOPED_TRACE(std::string(to_string(f)) + (layout == kernels::CodeLayout::kPerK ? " per-k" : " vnni-words"));
      const bool fp4 = f == WeightFormat::kMxfp4 || f == WeightFormat::kNvfp4;
      // N: a half-filled second block; K padded: nvfp4 48 -> 64, fp8 70 -> 96
      const int64_t E = 2, N = 24, K = f == WeightFormat::kMxfp4 ? 96 : fp4 ? 48 : 70;
      Stack s = make_stack(f, E, N, K, 7);
      const auto p = pack_stack(s.m, LaneMap::kPlain, layout);
      ASSERT_EQ(p->kp, (K + 31) / 32 * 32);
      const uint8_t* src = static_cast<const uint8_t*>(s.m.data.data);
      int64_t nonzero = 0;
      for (int64_t e = 0; e < E; ++e)
        for (int64_t b = 0; b < p->nblocks; ++b) {
          const kernels::BlockRef ref = p->block(e, b);
          for (int l = 0; l < 16; ++l)
            for (int64_t k = 0; k < p->kp; ++k) {
              const int64_t r = 16 * b + l;
              int want = 0;
              if (r < N && k < K) {
                if (fp4) {
                  const uint8_t byte = src[(e * N + r) * (K / 2) + k / 2];
                  want = (k & 1) ? byte >> 4 : byte & 15;
                } else {
                  want = src[(e * N + r) * K + k];
                }
              }
              const int odd = static_cast<int>(k & 1);
              const int got = fp4 ? kernels::e2m1_code(layout, ref.data, k / 2, l, odd)
                                  : kernels::fp8_code(layout, ref.data, k / 2, l, odd);
              ASSERT_EQ(got, want) << "expert " << e << " block " << b << " lane " << l << " k " << k;
              nonzero += got != 0;
            }
        }
      EXPECT_GT(nonzero, E * N * K / 2);  // the random stack is not mostly zeros
    }
}

TEST(CpuKernels, RefusesUnknownLayout) {
  Stack s = make_stack(WeightFormat::kBF16, 1, 16, 32, 1);
  s.m.layout = "someone-elses-layout";
  try {
    pack_stack(s.m, LaneMap::kPlain, kernels::CodeLayout::kVnniWords);
    FAIL() << "accepted an unknown layout";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("someone-elses-layout"), std::string::npos);
  }
  // A prepared copy is accepted for the same lane map only.
  Stack t = make_stack(WeightFormat::kBF16, 1, 16, 32, 1);
  ExpertMatrix prepared = prepared_matrix(pack_stack(t.m, LaneMap::kPlain, kernels::CodeLayout::kVnniWords), t.m);
  EXPECT_EQ(prepared.layout, "cpu-nb16-v3:plain");
  EXPECT_NO_THROW(packed_of(prepared, LaneMap::kPlain, kernels::CodeLayout::kPerK));  // bf16: one layout only
  EXPECT_THROW(packed_of(prepared, LaneMap::kGatedSplit, kernels::CodeLayout::kVnniWords), Error);
  // fp8 and 4-bit codes prepared for the AVX-512 levels are refused by AVX2 kernels, and the other way round.
  Stack q = make_stack(WeightFormat::kMxfp4, 1, 16, 64, 1);
  ExpertMatrix words = prepared_matrix(pack_stack(q.m, LaneMap::kPlain, kernels::CodeLayout::kVnniWords), q.m);
  EXPECT_EQ(words.layout, "cpu-nb16-v3:plain:vnni-words");
  EXPECT_NO_THROW(packed_of(words, LaneMap::kPlain, kernels::CodeLayout::kVnniWords));
  EXPECT_THROW(packed_of(words, LaneMap::kPlain, kernels::CodeLayout::kPerK), Error);
  ExpertMatrix pairs = prepared_matrix(pack_stack(q.m, LaneMap::kPlain, kernels::CodeLayout::kPerK), q.m);
  EXPECT_EQ(pairs.layout, "cpu-nb16-v3:plain:per-k");
  EXPECT_THROW(packed_of(pairs, LaneMap::kPlain, kernels::CodeLayout::kVnniWords), Error);
  Stack f8 = make_stack(WeightFormat::kFp8Block, 1, 16, 64, 1);
  ExpertMatrix f8w = prepared_matrix(pack_stack(f8.m, LaneMap::kPlain, kernels::CodeLayout::kVnniWords), f8.m);
  EXPECT_EQ(f8w.layout, "cpu-nb16-v3:plain:vnni-words");
  EXPECT_THROW(packed_of(f8w, LaneMap::kPlain, kernels::CodeLayout::kPerK), Error);
}

TEST(CpuKernels, WrongScaleShapeIsAFormatError) {
  Stack s = make_stack(WeightFormat::kFp8PerChannel, 2, 16, 32, 1);
  HostTensor bad(DType::kF32, {2, 15});
  s.m.scale = bad.view();
  EXPECT_THROW(pack_stack(s.m, LaneMap::kPlain, kernels::CodeLayout::kVnniWords), Error);
}

TEST(CpuKernels, ReportsDetectedIsa) {
  const IsaFeatures& f = detected_features();
  std::printf("cpu backend ISA: detected %d (avx2 %d fma %d f16c %d avx512f %d bw %d vl %d bf16 %d amx %d/%d perm %d; "
              "VDPBF16PS / FMA issue rate %.2f)\n",
              static_cast<int>(detected_isa()), f.avx2, f.fma, f.f16c, f.avx512f, f.avx512bw, f.avx512vl,
              f.avx512_bf16, f.amx_tile, f.amx_bf16, f.amx_permitted, f.bf16_dot_rate);
  EXPECT_GE(static_cast<int>(detected_isa()), 0);
  // measured where the AVX512-BF16 level can run, and a plausible rate there
  if (detected_isa() >= CpuIsa::kAvx512Bf16) {
    EXPECT_GT(f.bf16_dot_rate, 0.05);
    EXPECT_LT(f.bf16_dot_rate, 20.0);
  } else {
    EXPECT_EQ(f.bf16_dot_rate, 0.0);
  }
}

// The AVX512-BF16 level's stream cut follows the measured VDPBF16PS rate: every call streams where it
// issues as fast as an FMA, the tiles take over past kAvx512Bf16StreamMaxTokens where it is slower.
TEST(CpuKernels, Bf16DotRateDecidesTheAvx512Bf16Cut) {
  EXPECT_EQ(avx512bf16_stream_max(0.0), kAvx512Bf16StreamMaxTokens);
  EXPECT_EQ(avx512bf16_stream_max(0.5), kAvx512Bf16StreamMaxTokens);
  EXPECT_EQ(avx512bf16_stream_max(1.0), kStreamMaxTokensLimit);
  EXPECT_EQ(kernels_for(CpuIsa::kAvx512Bf16).stream_max_m_bf16, avx512bf16_stream_max(detected_features().bf16_dot_rate));
  // the AMX level keeps its own cuts (its decode stream, then tiles)
  EXPECT_EQ(kernels_for(CpuIsa::kAmx).stream_max_m_bf16, kAvx512Bf16StreamMaxTokens);
}

}  // namespace
}  // namespace moerun::cpu
