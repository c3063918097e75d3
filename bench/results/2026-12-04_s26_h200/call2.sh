#!/usr/bin/env bash
# Session 26, device call 2 (the weight L2 hint of call 1 taken out; the fused combine kept).
# 1. The fused one-token combine's test and the one-token and graph tests beside it; compute-sanitizer
#    memcheck and racecheck on it.
# 2. A/B, alternated graph replay against the rule (fused combine on): MOERUN_CUDA_FUSED_COMBINE=0 (the
#    separate combine kernel) at M=1 (where it acts) and M=2 (where it does not: the control) on the
#    four headline shapes.
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
T=build-prebuilt/moerun_gpu_tests
B=build-prebuilt/cuda_moe_bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
F='CudaBackend.SmallOneTokenFusedCombine:CudaBackend.SmallOneTokenDirect*:CudaBackend.*GraphReplayEqualsEager*:CudaBackend.SmallOneTokenDownPrefetch*'
timeout 200 $T --gtest_filter="$F" > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|^\[       OK" "$W/tests.log" | head -20
for tool in memcheck racecheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter='CudaBackend.SmallOneTokenFusedCombine' > "$W/$tool.log" 2>&1
  echo "$tool rc=$?"; tail -2 "$W/$tool.log"
done
for sh in qwen3-30b-a3b mixtral-8x7b gpt-oss-120b-silu deepseek-v3; do
  timeout 60 $B --shapes $sh --ms 1,2 --no-forced --read-flush-max-m 0 --ab env:MOERUN_CUDA_FUSED_COMBINE=0 --json "$W/ab_$sh.json" > "$W/ab_$sh.log" 2>&1
  echo "$sh rc=$?"
done
grep -h -E "graph-expert  | ab:" "$W"/ab_*.log | awk '{printf "%-18s %5s %-46s %s\n", $1, $2, $3, $5}'
tar czf "$OUT/call2.tgz" -C "$W" . && rm -rf "$W"
