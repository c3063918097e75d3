// Standard dispatch: a counting sort of (token, slot) pairs by local expert.
#include "dispatch/dispatch.hpp"

#include "moerun/error.hpp"
#include "moerun/weights.hpp"

namespace moerun::dispatch {

void build_dispatch(const MoeSpec& spec, const int32_t* ids, const float* weights, int64_t m, Dispatch& out) {
  const int el = local_experts(spec), first = first_local_expert(spec), k = spec.top_k;
  out.tokens = m;
  out.top_k = k;
  out.local_experts = el;
  out.first_expert = first;
  out.offsets.assign(static_cast<size_t>(el) + 1, 0);
  for (int64_t i = 0; i < m * k; ++i) {
    const int32_t e = ids[i] - first;
    if (e >= 0 && e < el) ++out.offsets[static_cast<size_t>(e) + 1];
  }
  for (int e = 0; e < el; ++e) out.offsets[static_cast<size_t>(e) + 1] += out.offsets[static_cast<size_t>(e)];
  const size_t rows = static_cast<size_t>(out.offsets.back());
  out.token.resize(rows);
  out.slot.resize(rows);
  out.weight.resize(rows);
  // Fill pointers: a second pass keeps token order within each expert (stable).
  std::vector<int32_t>& cursor = out.cursor_scratch;
  cursor.assign(out.offsets.begin(), out.offsets.end() - 1);
  for (int64_t t = 0; t < m; ++t)
    for (int j = 0; j < k; ++j) {
      const int32_t e = ids[t * k + j] - first;
      if (e < 0 || e >= el) continue;  // another rank's expert (EP): masked here
      const size_t row = static_cast<size_t>(cursor[static_cast<size_t>(e)]++);
      out.token[row] = static_cast<int32_t>(t);
      out.slot[row] = j;
      out.weight[row] = weights[t * k + j];
    }
}

}  // namespace moerun::dispatch
