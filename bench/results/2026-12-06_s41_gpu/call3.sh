#!/usr/bin/env bash
# Session 41, device call 3: the routing change (sigmoid scores without a bias rank as their logits; a
# group with one non-NaN expert ranks above the all-NaN groups), on the host and in the cuda routing
# kernel alike, and the oracle / CLI / core fixes of the same commit. moerun_gpu_tests built here,
# xz-compressed in build-prebuilt-s41/ (COMMIT says the base). Run with carry ["build-prebuilt-s41"].
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
timeout 60 $B/moerun_gpu_tests --gtest_filter='CudaRouting.*' > $OUT/routing.log 2>&1
echo "routing rc=$? $(t)" >> $OUT/summary.txt
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|Failure" $OUT/routing.log | head -8 >> $OUT/summary.txt
timeout 300 $B/moerun_gpu_tests --gtest_output=json:$OUT/gpu_tests.json > $OUT/tests.log 2>&1
echo "gpu tests rc=$? $(t)" >> $OUT/summary.txt
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.log >> $OUT/summary.txt
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/moerun_gpu_tests --gtest_filter='CudaRouting.*' \
  > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? $(t)" >> $OUT/summary.txt
grep -E "ERROR SUMMARY" $OUT/memcheck.log | tail -1 >> $OUT/summary.txt
cat $OUT/summary.txt
