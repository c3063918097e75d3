#!/usr/bin/env bash
# Session 25, device call 1.
# 1. Tests of the two new paths: the fused one-token combine (the last down block of a token sums its
#    top_k rows) and the weight L2 policy (evict-first hints on weight loads), plus the one-token and
#    graph tests they sit beside; compute-sanitizer memcheck on the two new tests.
# 2. A/B, alternated graph replay against the rule (weight L2 normal, fused combine on):
#    MOERUN_CUDA_WEIGHT_L2=once (evict-first only for experts with one M tile), =first (every weight
#    load), and MOERUN_CUDA_FUSED_COMBINE=0 (the separate combine kernel).
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
T=build-prebuilt/moerun_gpu_tests
B=build-prebuilt/cuda_moe_bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
timeout 200 $T --gtest_filter='CudaBackend.SmallOneTokenFusedCombine:CudaBackend.SmallWeightL2PolicyIsAHint:CudaBackend.SmallOneTokenDirect*:CudaBackend.*GraphReplayEqualsEager*:CudaBackend.SmallOneTokenDownPrefetch*' > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|^\[       OK" "$W/tests.log" | head -20
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter='CudaBackend.SmallOneTokenFusedCombine:CudaBackend.SmallWeightL2PolicyIsAHint' > "$W/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -3 "$W/memcheck.log"
tar czf "$OUT/call1.tgz" -C "$W" .
AB=env:MOERUN_CUDA_WEIGHT_L2=once,env:MOERUN_CUDA_WEIGHT_L2=first,env:MOERUN_CUDA_FUSED_COMBINE=0
timeout 110 $B --shapes qwen3-30b-a3b --ms 1,16,128,1024,8192 --no-forced --read-flush-max-m 0 --ab $AB --json "$W/ab_qwen3-30b-a3b.json" > "$W/ab_qwen3-30b-a3b.log" 2>&1
echo "qwen3 rc=$?"
for sh in mixtral-8x7b gpt-oss-120b-silu deepseek-v3; do
  timeout 80 $B --shapes $sh --ms 1,128,1024 --no-forced --read-flush-max-m 0 --ab $AB --json "$W/ab_$sh.json" > "$W/ab_$sh.log" 2>&1
  echo "$sh rc=$?"
done
grep -h -E " ab:" "$W"/ab_*.log | awk '{printf "%-18s %5s %-46s %s\n", $1, $2, $3, $5}'
tar czf "$OUT/call1.tgz" -C "$W" . && rm -rf "$W"
