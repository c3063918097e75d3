#!/usr/bin/env bash
# Session 38, a leaner call for what device time was left after the failed starts: first the one-token
# rows with the layer stack (the H200 row session 36 left to do), then the GPU suite. Binaries from
# build-prebuilt-main/ (d0a2d4b; the CUDA kernels and runner are the current tree's). Carry
# ["build-prebuilt-main"].
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=build-prebuilt-main
T0=$(date +%s)
t() { echo "($(( $(date +%s) - T0 )) s)"; }
{ cat $B/COMMIT; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $OUT/summary.txt
timeout 150 $B/cuda_moe_bench --ms 1 --no-forced --ab none --layers 8 --json $OUT/layers.json > $OUT/layers.log 2>&1
echo "layers rc=$? $(t)" >> $OUT/summary.txt
grep -h "cuda-graph-expert\|limits\|copy" $OUT/layers.log | head -30 >> $OUT/summary.txt
timeout 200 $B/moerun_gpu_tests --gtest_output=json:$OUT/gpu_tests.json > $OUT/tests.log 2>&1
echo "gpu tests rc=$? $(t)" >> $OUT/summary.txt
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.log >> $OUT/summary.txt
cat $OUT/summary.txt
