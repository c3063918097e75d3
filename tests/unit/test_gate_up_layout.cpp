// The gate/up row orders of the cuda backend (backends/cuda/kernels/gate_up_layout.hpp): plain index
// math the GPU kernels and the weight upload share, checked here without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backends/cuda/kernels/gate_up_layout.hpp"

namespace moerun::cuda_kernels {
namespace {

constexpr GateUpLayout kAll[] = {GateUpLayout::kHalves, GateUpLayout::kPairs, GateUpLayout::kBlocks8};

// gate_up_halves_row is a permutation of [0, 2I), and gate j / up j sit where gate_up_cols says.
TEST(GateUpLayout, ColumnsAndRowsAgree) {
  for (GateUpLayout l : kAll)
    for (int inter : {8, 16, 24, 200, 1440}) {
      std::vector<int> seen(2 * static_cast<size_t>(inter), 0);
      for (int r = 0; r < 2 * inter; ++r) {
        const int h = gate_up_halves_row(l, r, inter);
        ASSERT_GE(h, 0);
        ASSERT_LT(h, 2 * inter);
        ++seen[static_cast<size_t>(h)];
      }
      for (int c : seen) EXPECT_EQ(c, 1) << "layout " << static_cast<int>(l) << " I=" << inter;
      for (int j = 0; j < inter; ++j) {
        const GateUpCols c = gate_up_cols(l, j, inter);
        EXPECT_EQ(gate_up_halves_row(l, c.gate, inter), j);
        EXPECT_EQ(gate_up_halves_row(l, c.up, inter), inter + j);
      }
    }
}

// kBlocks8: gate column c and up column c + 8 in one 16-column block, 8 consecutive gate columns
// per block (what the sm90 accumulator pairing and the 16-byte activation loads rely on).
TEST(GateUpLayout, Blocks8PairsWithinSixteenColumnBlocks) {
  const int inter = 200;
  for (int j = 0; j < inter; ++j) {
    const GateUpCols c = gate_up_cols(GateUpLayout::kBlocks8, j, inter);
    EXPECT_EQ(c.up, c.gate + 8);
    EXPECT_EQ(c.gate / 16, c.up / 16);
    EXPECT_LT(c.gate % 16, 8);
    EXPECT_EQ(c.gate / 16 * 8 + c.gate % 8, j);  // the fused epilogue's output column
  }
}

// A tile of BN consecutive rows of a kPairs or kBlocks8 w13 (BN % 16 == 0) is the same layout with
// I = BN / 2 (the mma.sync tiles read BN consecutive rows and pair them with tile-local columns).
TEST(GateUpLayout, TilesOfConsecutiveRowsKeepTheLayout) {
  const int inter = 200;
  for (GateUpLayout l : {GateUpLayout::kPairs, GateUpLayout::kBlocks8})
    for (int bn : {32, 64, 128})
      for (int tile = 0; tile * bn / 2 < inter; ++tile)
        for (int c = 0; c < bn / 2 && tile * bn / 2 + c < inter; ++c) {
          const GateUpCols local = gate_up_cols(l, c, bn / 2);
          const GateUpCols global = gate_up_cols(l, tile * bn / 2 + c, inter);
          EXPECT_EQ(tile * bn + local.gate, global.gate);
          EXPECT_EQ(tile * bn + local.up, global.up);
        }
}

// Executing the upload plan on host rows gives exactly the kBlocks8 order, every row written once.
TEST(GateUpLayout, Blocks8UploadPlanReorders) {
  for (GateUpLayout from : {GateUpLayout::kHalves, GateUpLayout::kPairs})
    for (int64_t experts : {1, 3})
      for (int64_t inter : {8, 24, 200}) {
        const int64_t rows = experts * 2 * inter;
        // Source row r holds the id of the canonical (expert, halves row) it is.
        std::vector<int64_t> src(static_cast<size_t>(rows));
        for (int64_t e = 0; e < experts; ++e)
          for (int64_t h = 0; h < 2 * inter; ++h) {
            int64_t r = h;  // where halves row h sits in `from`
            if (from == GateUpLayout::kPairs) r = h < inter ? 2 * h : 2 * (h - inter) + 1;
            src[static_cast<size_t>(e * 2 * inter + r)] = e * 2 * inter + h;
          }
        std::vector<int64_t> dst(static_cast<size_t>(rows), -1);
        std::vector<int> writes(static_cast<size_t>(rows), 0);
        for (const GateUpRowCopy& c : blocks8_upload_plan(from, experts, inter))
          for (int64_t t = 0; t < c.height; ++t)
            for (int64_t w = 0; w < c.width; ++w) {
              const int64_t d = c.dst_row + t * c.dst_pitch + w, s = c.src_row + t * c.src_pitch + w;
              ASSERT_LT(d, rows);
              ASSERT_LT(s, rows);
              dst[static_cast<size_t>(d)] = src[static_cast<size_t>(s)];
              ++writes[static_cast<size_t>(d)];
            }
        for (int64_t e = 0; e < experts; ++e)
          for (int64_t r = 0; r < 2 * inter; ++r) {
            const size_t i = static_cast<size_t>(e * 2 * inter + r);
            EXPECT_EQ(writes[i], 1) << "row " << i;
            EXPECT_EQ(dst[i], e * 2 * inter + gate_up_halves_row(GateUpLayout::kBlocks8, static_cast<int>(r),
                                                                  static_cast<int>(inter)))
                << "from " << static_cast<int>(from) << " E=" << experts << " I=" << inter << " row " << r;
          }
      }
}

}  // namespace
}  // namespace moerun::cuda_kernels
