// Session 17: times pack_q15_rows on one 2048-column row and hashes its output (to check that a rewrite
// gives the same rows). Build from the repository root after `make test`:
//   g++ -O2 -std=c++20 -Isrc -Iinclude pack_q15_timing.cpp build/src/libmoerun.a -fopenmp -o /tmp/t && /tmp/t
// 2d33673: 6.19 us, hash 1a954478; 39c6d88: 3.92 us, hash 1a954478.
#include "backends/cpu/q8_rows.hpp"
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
using namespace moerun::cpu;
int main() {
  const int kp = 2048;
  std::vector<float> x(kp);
  std::mt19937 g(1); std::normal_distribution<float> n;
  for (auto& v : x) v = n(g);
  Q8Buffer b; Q8Slots s = b.reserve(2, kp);
  double best = 1e9;
  for (int r = 0; r < 20; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 100; ++i) pack_q15_rows(x.data(), kp, s);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 100);
  }
  unsigned h = 0; for (int i = 0; i < 2 * kp; ++i) h = h * 31 + (uint8_t)s.q[i];
  for (int i = 0; i < 2 * kp / 32; ++i) h = h * 31 + (unsigned)s.scale[i] + s.bias16[i] ;
  printf("pack_q15_rows(2048): %.2f us  hash %08x\n", best * 1e6, h);
}
