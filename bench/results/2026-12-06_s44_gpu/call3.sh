#!/usr/bin/env bash
# Session 44, device call 3 (carry ["build-prebuilt"], binaries of build-prebuilt/COMMIT, built with
# tail_split_whole_groups.patch applied): the tail split on whole (expert, column block) groups
# (reproducible forwards). The GPU suite (with CudaLaunch.TailSplitDoesNotDependOnTheRowOrder and
# CudaBackend.RepeatedForwardsAreBitwiseEqual), memcheck and racecheck on the split tests, then the
# M >= 1024 rows with the tail split alternated against none (MOERUN_CUDA_KSPLIT=1), to see what the
# split still gains now that a group straddling the last wave splits from its first tile (or runs whole).
# First, where build-prebuilt-before/ is carried too (moerun_gpu_tests of main with only
# tail_split_row_order_test.patch), the row-order test on main's kernel: expected to FAIL there, which
# shows the defect is real and the test sees it.
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=/tmp/s44bin
bash tools/prebuilt.sh unpack build-prebuilt $B || exit 1
T0=$(date +%s)
t() { echo "($(( $(date +%s) - T0 )) s)"; }
{ cat $B/COMMIT; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $OUT/summary.txt
if [ -d build-prebuilt-before ]; then
  bash tools/prebuilt.sh unpack build-prebuilt-before /tmp/s44before > /dev/null || exit 1
  timeout 60 /tmp/s44before/moerun_gpu_tests --gtest_filter='CudaLaunch.TailSplitDoesNotDependOnTheRowOrder' > $OUT/before.log 2>&1
  echo "main's kernel, row-order test rc=$? (1 expected): $(grep -E 'outputs that depend|Which is' $OUT/before.log | head -4 | tr '\n' ' ')" >> $OUT/summary.txt
fi
# (all but the 63-second SmallGroupedGemmWritesOnlyItsRows: 354 s of device time were left, a machine's
# start included)
timeout 60 $B/moerun_gpu_tests --gtest_filter=-CudaCutlass.SmallGroupedGemmWritesOnlyItsRows \
  --gtest_output=json:$OUT/gpu_tests.json > $OUT/tests.log 2>&1
echo "gpu tests rc=$? $(t)" >> $OUT/summary.txt
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|Repeated" $OUT/tests.log >> $OUT/summary.txt
filt='*TailSplit*:*Repeated*:CudaLaunch.SplitK*'
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/moerun_gpu_tests --gtest_filter="$filt" > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? $(t): $(grep 'ERROR SUMMARY' $OUT/memcheck.log | tail -1)" >> $OUT/summary.txt
timeout 40 compute-sanitizer --tool racecheck --error-exitcode 9 $B/moerun_gpu_tests --gtest_filter='*TailSplit*' > $OUT/racecheck.log 2>&1
echo "racecheck rc=$? $(t): $(grep 'RACECHECK SUMMARY' $OUT/racecheck.log | tail -1)" >> $OUT/summary.txt
timeout 60 $B/cuda_moe_bench --ms 1024,8192 --no-forced --layers 0 --ab env:MOERUN_CUDA_KSPLIT=1 --json $OUT/ab_ksplit.json > $OUT/ab_ksplit.log 2>&1
echo "ab ksplit rc=$? $(t)" >> $OUT/summary.txt
cat $OUT/summary.txt
(cd $OUT && tar czf logs.tgz gpu_tests.json tests.log memcheck.log racecheck.log $(ls before.log 2>/dev/null) && rm -f gpu_tests.json tests.log memcheck.log racecheck.log before.log)
