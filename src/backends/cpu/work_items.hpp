// cpu/work_items.hpp — the runner's work items (gate_up's, and the down GEMM's), and how their tail is cut.
//
// The runner (runner.cpp NOTES) hands a stage's items to the threads by a dynamic schedule in list
// order. Items are runs of consecutive N-blocks so that each thread streams contiguous weights; the
// price is that a thread finishing early waits for the others' last items. taper_tail cuts the last
// items smaller so that the wait is about a small item, not a whole run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace moerun::cpu {

// A work item: N-blocks b .. b + nb - 1 (whole pairs for calls that take AMX tiles) of job `job`; the down
// GEMM's items (ws.items2) cover every job's blocks b .. b + nb - 1 and leave `job` at 0.
struct RunnerItem {
  int32_t job = 0, b = 0, nb = 1;
};

// Tapered tail: the items a dynamic schedule hands out last are split so that their sizes halve
// towards the end: counted from the end, `threads` pieces of at most base / 8 blocks, then `threads` of
// base / 4, then `threads` of base / 2 (never below min_nb), each piece the end of the item it came
// from, in block order. Only items that can_split accepts are split; the first other item (from the
// end) ends the taper. In place, without allocating when `items` can hold one item per block (every
// piece holds at least one block).
template <class CanSplit>
void taper_tail(std::vector<RunnerItem>& items, int threads, int64_t base, int64_t min_nb, CanSplit can_split) {
  const int64_t pieces_max = 3 * static_cast<int64_t>(threads);
  const auto cap = [&](int64_t i) {  // piece i from the end
    return std::max<int64_t>(min_nb, base >> (3 - i / threads));
  };
  // Pass 1: how many pieces the tail becomes, and how many items it takes (the first of them keeps a
  // remainder when the pieces run out inside it).
  int64_t pieces = 0, taken = 0;
  bool remainder = false;
  for (size_t r = items.size(); r-- > 0 && pieces < pieces_max;) {
    if (!can_split(items[r])) break;
    ++taken;
    for (int64_t left = items[r].nb; left > 0;) {
      if (pieces == pieces_max) {
        remainder = true;
        break;
      }
      left -= std::min(left, cap(pieces++));
    }
  }
  if (pieces == taken && !remainder) return;  // nothing to split
  const size_t old_size = items.size(), new_size = old_size - static_cast<size_t>(taken) + static_cast<size_t>(pieces) +
                                                   (remainder ? 1 : 0);
  items.resize(new_size);  // (within capacity: see above)
  // Pass 2, from the back: the write position never passes below the item being read.
  size_t w = new_size;
  int64_t piece = 0;
  for (size_t r = old_size; r-- > old_size - static_cast<size_t>(taken);) {
    const RunnerItem it = items[r];
    int32_t end = it.b + it.nb;
    while (end > it.b && piece < pieces_max) {
      const auto nb = static_cast<int32_t>(std::min<int64_t>(end - it.b, cap(piece++)));
      end -= nb;
      items[--w] = RunnerItem{it.job, end, nb};
    }
    if (end > it.b) items[--w] = RunnerItem{it.job, it.b, end - it.b};
  }
}

}  // namespace moerun::cpu
