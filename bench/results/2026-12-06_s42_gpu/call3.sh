#!/usr/bin/env bash
# Session 42, device call 3: the GPU suite after the cublas capture refusal (kUnsupported before anything
# is queued), the cublas constructor's handle freed when it fails, the device workspaces' growth by half
# after a capture, and the NaN test asserting each path's variant; compute-sanitizer memcheck on the
# new and changed tests. Binary in build-prebuilt-s42/ (carry ["build-prebuilt-s42"]).
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=/tmp/s42bin
mkdir -p $B && cp build-prebuilt-s42/COMMIT $B/ && python3 -c "
import lzma, pathlib, sys
for f in pathlib.Path('build-prebuilt-s42').glob('*.xz'):
    (pathlib.Path(sys.argv[1]) / f.stem).write_bytes(lzma.decompress(f.read_bytes()))" $B
chmod +x $B/*
T0=$(date +%s)
t() { echo "($(( $(date +%s) - T0 )) s)"; }
{ cat $B/COMMIT; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $OUT/summary.txt
timeout 300 $B/moerun_gpu_tests --gtest_output=json:$OUT/gpu_tests.json > $OUT/tests.log 2>&1
echo "gpu tests rc=$? $(t)" >> $OUT/summary.txt
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.log >> $OUT/summary.txt
NEW='*NaNTokensStayNaN*:*CaptureIsRefusedWithTheReason*:*GraphSurvives*:*CaptureOfFewerTokens*:*GraphReplayEqualsEager*'
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $B/moerun_gpu_tests --gtest_filter="$NEW" > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? $(t)" >> $OUT/summary.txt
grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" $OUT/memcheck.log | tail -3 >> $OUT/summary.txt
grep -B2 -A12 "Failure" $OUT/tests.log | head -60 >> $OUT/summary.txt
cat $OUT/summary.txt
