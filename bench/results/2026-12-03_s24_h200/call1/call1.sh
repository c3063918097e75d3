#!/usr/bin/env bash
# Session 24, device call 1 (session 23 call 6 as planned): 128-column blocks in the wgmma engine (WgmmaTiles::n128,
# MOERUN_CUDA_N128=0|1|auto), aimed at short last waves (mixtral-8x7b's down GEMM at M = 1024: about
# 384 256-column tiles on 132 SMs). 1. Its tests; 2. A/B against the rule, alternated graph replay:
# mixtral at M = 128, 1024, 8192 with =auto and =1, the other shapes at 1024 and 8192 with =1;
# 3. memcheck of the engine test last (it may be cut by the timeout).
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
T=build-prebuilt/moerun_gpu_tests
B=build-prebuilt/cuda_moe_bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
timeout 150 $T --gtest_filter='CudaCutlass.*:CudaBackend.Small128*:CudaFusedAct.*:CudaLaunch.*' > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$W/tests.log" | head; grep -c "bit for bit" "$W/tests.log"
timeout 100 $B --shapes mixtral-8x7b --ms 128,1024,8192 --no-forced --read-flush-max-m 0 \
  --ab env:MOERUN_CUDA_N128=auto,env:MOERUN_CUDA_N128=1 --json "$W/ab_mixtral.json" > "$W/ab_mixtral.log" 2>&1
echo "mixtral rc=$?"
for sh in deepseek-v3 gpt-oss-120b-silu qwen3-30b-a3b; do
  timeout 80 $B --shapes $sh --ms 1024,8192 --no-forced --read-flush-max-m 0 \
    --ab env:MOERUN_CUDA_N128=1 --json "$W/ab_$sh.json" > "$W/ab_$sh.log" 2>&1
  echo "$sh rc=$?"
done
grep -h -E " ab:" "$W"/ab_*.log | awk '{printf "%-18s %5s %-40s %s\n", $1, $2, $3, $5}'
tar czf "$OUT/call1.tgz" -C "$W" .
timeout 70 compute-sanitizer --tool memcheck $T --gtest_filter='CudaCutlass.SmallGroupedGemmWritesOnlyItsRows' > "$W/memcheck.log" 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$W/memcheck.log" | head -3
tar czf "$OUT/call1.tgz" -C "$W" . && rm -rf "$W"
