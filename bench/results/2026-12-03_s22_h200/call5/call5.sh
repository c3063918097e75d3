#!/usr/bin/env bash
# Session 22, device call 5: the fused-activation engine test now also runs the swap-AB tail tiles
# (off by default, so no runner test reaches their transposed activation epilogue); the engine tests
# and memcheck on them.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
build-prebuilt/moerun_gpu_tests --gtest_filter='CudaCutlass.Small*:CudaLaunch.*' > "$OUT/tests.log" 2>&1; echo "tests rc=$?"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 build-prebuilt/moerun_gpu_tests \
  --gtest_filter='CudaCutlass.Small*' > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$?"
timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 build-prebuilt/moerun_gpu_tests \
  --gtest_filter='CudaCutlass.SmallFusedAct*' > "$OUT/racecheck.log" 2>&1; echo "racecheck rc=$?"
grep -hE "^\[  (PASSED|FAILED)|FAILED  \]|ERROR SUMMARY|RACECHECK SUMMARY" "$OUT"/*.log
