# Session 36, calls 3 and 4: the GPU suite on this session's library (call 3: f75e3dd; call 4: d0a2d4b,
# the diff review's fixes; host-side changes only: the API boundary checks, the described-GPU refusal
# in DeviceMoe), memcheck on the small cases, then the one-token rows with the layer stack once more on
# whatever card this is. Binaries from build-prebuilt-main/ (its COMMIT file is printed first).
B=build-prebuilt-main
cat $B/COMMIT > $OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/summary.txt
$B/moerun_gpu_tests --gtest_output=json:$OUT/gpu_tests.json > $OUT/tests.log 2>&1; echo "gpu tests rc=$?" >> $OUT/summary.txt
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.log >> $OUT/summary.txt
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $B/moerun_gpu_tests --gtest_filter='*SmallHot*:*MZero*:*SmallGrouped*:*Graph*' > $OUT/memcheck.log 2>&1
echo "memcheck rc=$?" >> $OUT/summary.txt; grep -E "ERROR SUMMARY" $OUT/memcheck.log | tail -1 >> $OUT/summary.txt
$B/cuda_moe_bench --ms 1 --no-forced --ab none --layers 8 --json $OUT/bench.json > $OUT/bench.log 2>&1; echo "bench rc=$?" >> $OUT/summary.txt
grep -h "cuda-graph-expert" $OUT/bench.log >> $OUT/summary.txt
cat $OUT/summary.txt
