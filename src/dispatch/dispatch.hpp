// dispatch/dispatch.hpp — the "standard" dispatch format: (token, slot) pairs grouped by expert.
//
// Built on the host from top-k ids. Only this rank's experts are kept (expert parallelism masks the
// others: their slots are dropped here and contribute nothing to this rank's partial output).
#pragma once

#include <cstdint>
#include <vector>

#include "moerun/spec.hpp"

namespace moerun::dispatch {

struct Dispatch {
  int64_t tokens = 0;                 // M
  int top_k = 0;
  int local_experts = 0;              // El
  int first_expert = 0;               // global id of local expert 0
  std::vector<int32_t> offsets;       // [El + 1]: rows of local expert e are [offsets[e], offsets[e+1])
  std::vector<int32_t> token;         // [rows]: the token each row reads
  std::vector<int32_t> slot;          // [rows]: its position in the token's top-k (0..k-1)
  std::vector<float> weight;          // [rows]: its router weight
  std::vector<int32_t> cursor_scratch;  // build_dispatch's fill pointers, kept to avoid reallocating

  int64_t rows() const noexcept { return static_cast<int64_t>(token.size()); }
  // Room for `rows` rows, so that build_dispatch allocates nothing for calls with as many or fewer.
  void reserve(int64_t rows) {
    token.reserve(static_cast<size_t>(rows));
    slot.reserve(static_cast<size_t>(rows));
    weight.reserve(static_cast<size_t>(rows));
  }
  int32_t count(int e) const noexcept { return offsets[e + 1] - offsets[e]; }
};

// ids/weights [m, k]. Rows within an expert keep token order (stable). Reuses `out`'s capacity so a
// steady-state forward does not allocate.
void build_dispatch(const MoeSpec& spec, const int32_t* ids, const float* weights, int64_t m,
                    Dispatch& out);

}  // namespace moerun::dispatch
