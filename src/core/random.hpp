// core/random.hpp — a small, portable, seedable generator (identical streams on every platform and
// standard library, unlike std::normal_distribution).
#pragma once

#include <cstdint>

namespace moerun {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : s_(seed) {}
  uint64_t next() noexcept {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float uniform_pm1() noexcept { return static_cast<float>(next() >> 40) * (2.0f / 16777216.0f) - 1.0f; }
  // Uniform integer in [0, n).
  uint32_t below(uint32_t n) noexcept { return static_cast<uint32_t>((next() >> 32) * n >> 32); }

 private:
  uint64_t s_;
};

// A seed derived from a base seed and a stream index, so that parallel fills are deterministic.
inline uint64_t derive_seed(uint64_t seed, uint64_t stream) noexcept {
  SplitMix64 g(seed ^ (stream * 0xD1B54A32D192ED03ull));
  return g.next();
}

}  // namespace moerun
