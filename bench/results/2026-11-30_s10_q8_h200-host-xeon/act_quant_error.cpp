// The output change int8 (and fp8) activation quantization causes on the reference backend (docs/formats.md).
// Build from the repository root after a build in build/:
//   g++ -std=c++20 -O2 -Iinclude -Isrc act_quant_error.cpp build/src/libmoerun.a -fopenmp -o a && ./a
// How far int8 activation quantization moves a layer's output (reference backend), mxfp4 and nvfp4.
#include <cmath>
#include <cstdio>
#include <random>
#include "backends/reference/reference_backend.hpp"
#include "moerun/formats.hpp"
#include "moerun/platform.hpp"
#include "moerun/weights.hpp"
using namespace moerun;
int main() {
  for (WeightFormat f : {WeightFormat::kMxfp4, WeightFormat::kNvfp4, WeightFormat::kFp8Block})
    for (int seed = 1; seed <= 3; ++seed) {
      MoeSpec s;
      s.name = "t"; s.num_experts = 8; s.top_k = 2; s.hidden = 512; s.intermediate = 256;
      s.weight_format = f; s.act_dtype = DType::kF32;
      MoeWeights w = random_weights(s, seed);
      const int64_t M = 16;
      HostTensor x(DType::kF32, {M, s.hidden}), lg(DType::kF32, {M, s.num_experts});
      std::mt19937 g(seed); std::normal_distribution<float> n(0, 1);
      for (int64_t i = 0; i < x.shape().numel(); ++i) x.as<float>()[i] = n(g);
      for (int64_t i = 0; i < lg.shape().numel(); ++i) lg.as<float>()[i] = n(g);
      double out[2][M * 512];
      for (int q = 0; q < 2; ++q) {
        MoeSpec sq = s; sq.act_quant = q ? (f == WeightFormat::kFp8Block ? ActQuant::kFp8PerTokenGroup : ActQuant::kInt8PerTokenGroup) : ActQuant::kNone;
        auto r = make_reference_backend()->create_runner(sq, w, Platform::detect(), {});
        HostTensor o(DType::kF32, {M, s.hidden});
        ForwardArgs a; a.hidden = x.view(); a.router_logits = lg.view(); a.output = o.view();
        r->forward(a);
        for (int64_t i = 0; i < M * 512; ++i) out[q][i] = o.as<float>()[i];
      }
      double e = 0, nn = 0;
      for (int64_t i = 0; i < M * 512; ++i) { e += (out[1][i] - out[0][i]) * (out[1][i] - out[0][i]); nn += out[0][i] * out[0][i]; }
      std::printf("%s seed %d: rel L2 %.4f\n", std::string(to_string(f)).c_str(), seed, std::sqrt(e / nn));
    }
}
