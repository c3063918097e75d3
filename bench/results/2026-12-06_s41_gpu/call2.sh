#!/usr/bin/env bash
# Session 41, device call 2: the cuda host fixes (split-K workspace held across token counts, f32 rows
# only where read, capacities reset by a failed allocation, device checks and scope, f32 refusal).
# Binaries built here (COMMIT says the base): moerun_gpu_tests
# with the fixes, moerun_gpu_tests_nof1 the same without the held split workspace (to show the new test
# fails there), cuda_moe_bench with the fixes; xz-compressed in build-prebuilt-s41/ (the carry limit).
# Run with carry ["build-prebuilt-s41"].
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=/tmp/s41bin
mkdir -p $B && cp build-prebuilt-s41/COMMIT $B/ && python3 -c "
import lzma, pathlib, sys
for f in pathlib.Path('build-prebuilt-s41').glob('*.xz'):
    (pathlib.Path(sys.argv[1]) / f.stem).write_bytes(lzma.decompress(f.read_bytes()))" $B
chmod +x $B/*
T0=$(date +%s)
t() { echo "($(( $(date +%s) - T0 )) s)"; }
{ cat $B/COMMIT; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $OUT/summary.txt
NEW='*CaptureOfFewerTokensAfterALargerEagerForward*:*TensorsOfAnotherDeviceAreRefused*'
timeout 120 $B/moerun_gpu_tests_nof1 --gtest_filter="$NEW" > $OUT/nof1.log 2>&1
echo "without the held split workspace rc=$? $(t)" >> $OUT/summary.txt
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|refused" $OUT/nof1.log | head -6 >> $OUT/summary.txt
timeout 300 $B/moerun_gpu_tests --gtest_output=json:$OUT/gpu_tests.json > $OUT/tests.log 2>&1
echo "gpu tests rc=$? $(t)" >> $OUT/summary.txt
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.log >> $OUT/summary.txt
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $B/moerun_gpu_tests \
  --gtest_filter="$NEW:*GraphSurvives*:*CaptureThatWouldAllocate*" > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? $(t)" >> $OUT/summary.txt
grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" $OUT/memcheck.log | tail -3 >> $OUT/summary.txt
timeout 150 $B/cuda_moe_bench --json $OUT/bench.json > $OUT/bench.log 2>&1
echo "bench rc=$? $(t)" >> $OUT/summary.txt
cat $OUT/summary.txt
