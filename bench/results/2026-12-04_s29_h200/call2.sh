#!/usr/bin/env bash
# Session 29, device call 2 (experiment build: wgmma_epilogue_probe.patch as of this call).
# 1. The GPU suite (but the 78-second CUTLASS rows test), default knobs, with the fixed
#    OneTokenKernelLeavesBarrierZero; and again with MOERUN_CUDA_WGMMA_PROBE=4 (each consumer warp
#    stages and stores only its own 16 rows, __syncwarp instead of the consumer-wide barriers: the
#    output must be bitwise the same, so every bitwise test between paths still holds).
# 2. memcheck on the direct one-token test (API errors not reported: it provokes one on purpose);
#    racecheck on the wgmma engine's small tests under PROBE=4.
# 3. A/B, alternated graph replay against the rule, M = 1024, 8192: PROBE=3 (SiLU with __expf and
#    __fdividef), 4 (warp-own staging), 5 (both), 2 (no epilogue: the bound).
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
B=build-prebuilt/cuda_moe_bench
T=build-prebuilt/moerun_gpu_tests
timeout 150 $T --gtest_filter='-CudaCutlass.SmallGroupedGemmWritesOnlyItsRows' > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$W/tests.log" | head -20
MOERUN_CUDA_WGMMA_PROBE=4 timeout 150 $T --gtest_filter='-CudaCutlass.SmallGroupedGemmWritesOnlyItsRows' > "$W/tests_probe4.log" 2>&1
echo "tests probe4 rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$W/tests_probe4.log" | head -20
timeout 100 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $T --gtest_filter='CudaLaunch.OneTokenKernel*' > "$W/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -1 "$W/memcheck.log"
MOERUN_CUDA_WGMMA_PROBE=4 timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 $T \
  --gtest_filter='Schedules/CutlassSchedule.*/2:CudaFusedAct.Small*:CudaBackend.SmallTailSplit*:CudaBackend.Small128*' > "$W/racecheck.log" 2>&1
echo "racecheck probe4 rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" "$W/racecheck.log" | tail -3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
for sh in qwen3-30b-a3b gpt-oss-120b-silu mixtral-8x7b; do
  timeout 150 $B --shapes $sh --ms 1024,8192 --no-forced --read-flush-max-m 0 \
    --ab env:MOERUN_CUDA_WGMMA_PROBE=3,env:MOERUN_CUDA_WGMMA_PROBE=4,env:MOERUN_CUDA_WGMMA_PROBE=5,env:MOERUN_CUDA_WGMMA_PROBE=2 \
    --json "$W/ab_$sh.json" > "$W/ab_$sh.log" 2>&1
  echo "$sh rc=$?"
  grep -h -E "graph-expert  | ab:" "$W/ab_$sh.log" | awk '{printf "%-18s %5s %-50s %s\n", $1, $2, $3, $5}'
done
tar czf "$OUT/call2.tgz" -C "$W" . && rm -rf "$W"
