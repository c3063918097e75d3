#!/usr/bin/env bash
# Session 24, device call 6: the GPU tests after the review refactor (f5bc4d1: the runner's split-K
# choice read once per GEMM, the refused-knob tests sharing one helper), every test but the long engine
# test, which does not go through the runner.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 150 build-prebuilt/moerun_gpu_tests --gtest_filter='-CudaCutlass.SmallGroupedGemmWritesOnlyItsRows' > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$OUT/tests.log" | head
