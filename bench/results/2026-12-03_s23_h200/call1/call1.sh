#!/usr/bin/env bash
# Session 23, device call 1, on binaries built on the development machine (build-prebuilt/): the
# wgmma engine's paired mode (MOERUN_CUDA_PAIR=1: clusters of two CTAs, each weight tile copied
# half by each and multicast to both).
# 1. its tests (the engine test with the paired engines, the runner test against the unpaired
#    engine), under timeouts in case a cluster wait hangs;
# 2. memcheck and racecheck of the engine test;
# 3. paired against unpaired, alternated graph replay, the four sweep shapes at M = 1024 and 8192.
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
T=build-prebuilt/moerun_gpu_tests
B=build-prebuilt/cuda_moe_bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
timeout 200 $T --gtest_filter='CudaCutlass.*:CudaBackend.SmallPaired*:CudaLaunch.*:CudaFusedAct.*' > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|paired\]|Failure" "$W/tests.log" | head -30
timeout 150 compute-sanitizer --tool memcheck $T --gtest_filter='CudaCutlass.SmallGroupedGemmWritesOnlyItsRows' > "$W/memcheck.log" 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$W/memcheck.log" | head -5
timeout 150 compute-sanitizer --tool racecheck $T --gtest_filter='CudaCutlass.SmallGroupedGemmWritesOnlyItsRows' > "$W/racecheck.log" 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$W/racecheck.log" | head -5
for sh in deepseek-v3 gpt-oss-120b-silu mixtral-8x7b qwen3-30b-a3b; do
  timeout 120 $B --shapes $sh --ms 1024,8192 --no-forced --read-flush-max-m 0 \
    --ab env:MOERUN_CUDA_PAIR=1 --json "$W/ab_$sh.json" > "$W/ab_$sh.log" 2>&1
  echo "$sh rc=$?"
done
grep -h -E " ab:| cuda-graph-expert " "$W"/ab_*.log | awk '{printf "%-18s %5s %-40s %s\n", $1, $2, $3, $5}'
tar czf "$OUT/call1.tgz" -C "$W" . && rm -rf "$W"
