#!/usr/bin/env bash
# Session 26, device call 3: the tokens gathered in the alignment's fill grid (AlignGather).
# 1. Every GPU test (the alignment changed under every multi-token path); compute-sanitizer memcheck
#    and racecheck on the new test and the alignment's other callers' small cases.
# 2. A/B, alternated graph replay against the rule (gather in the fill): MOERUN_CUDA_FILL_GATHER=0
#    (the gather pass after the fill, as before) at M = 512, 1024, 8192 (rows above 2048: the grids).
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
T=build-prebuilt/moerun_gpu_tests
B=build-prebuilt/cuda_moe_bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
timeout 240 $T --gtest_output=json:$W/gpu_tests.json > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|Failure" "$W/tests.log" | head -20
grep -E "FillGather" "$W/tests.log"
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter='CudaBackend.FillGather*:*SmallHot*:*MZero*' > "$W/$tool.log" 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$W/$tool.log" | tail -3
done
tar czf "$OUT/call3.tgz" -C "$W" .
for sh in qwen3-30b-a3b mixtral-8x7b gpt-oss-120b-silu deepseek-v3; do
  timeout 70 $B --shapes $sh --ms 512,1024,8192 --no-forced --read-flush-max-m 0 --ab env:MOERUN_CUDA_FILL_GATHER=0 --json "$W/ab_$sh.json" > "$W/ab_$sh.log" 2>&1
  echo "$sh rc=$?"
done
grep -h -E "graph-expert  | ab:" "$W"/ab_*.log | awk '{printf "%-18s %5s %-46s %s\n", $1, $2, $3, $5}'
tar czf "$OUT/call3.tgz" -C "$W" . && rm -rf "$W"
