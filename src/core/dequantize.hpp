// Dequantization without the stack check, private to the library: for loops over many rows of one
// stack that check_expert_matrix() has accepted once (the reference backend's per-expert loop).
// moerun/formats.hpp's dequantize_row() is this behind that check.
#pragma once

#include <cstdint>

#include "moerun/formats.hpp"

namespace moerun {

// Row `row` of expert `expert` of a canonical host stack, which the caller has checked
// (check_expert_matrix) and whose bounds it keeps: no checks here.
void dequantize_row_unchecked(const ExpertMatrix& m, int64_t expert, int64_t row, float* out);

}  // namespace moerun
