#!/usr/bin/env bash
# Session 29, device call 1.
# 1. The GPU suite (but the 78-second CUTLASS rows test) with the fused one-token stage's review
#    fixes (residency check, refusal fallback, alignment checks) and the direct kernel test
#    CudaLaunch.OneTokenKernelLeavesBarrierZero; memcheck on that test.
# 2. What the wgmma engine's epilogue costs (an experiment build: the patch
# wgmma_epilogue_probe.patch, not committed). MOERUN_CUDA_WGMMA_PROBE=1 skips the epilogue's global
# stores, =2 the whole epilogue (results wrong; timing only). A/B, alternated graph replay against the
# rule, at M = 1024 and 8192 on three headline shapes: the bound on what hiding the epilogue behind
# the next tile's MMA (store warps, or ping-pong consumers) could gain.
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
B=build-prebuilt/cuda_moe_bench
T=build-prebuilt/moerun_gpu_tests
timeout 150 $T --gtest_filter='-CudaCutlass.SmallGroupedGemmWritesOnlyItsRows' > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|OneTokenKernel" "$W/tests.log" | head -20
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter='CudaLaunch.OneTokenKernel*' > "$W/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -1 "$W/memcheck.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
for sh in qwen3-30b-a3b gpt-oss-120b-silu mixtral-8x7b; do
  timeout 110 $B --shapes $sh --ms 1024,8192 --no-forced --read-flush-max-m 0 \
    --ab env:MOERUN_CUDA_WGMMA_PROBE=1,env:MOERUN_CUDA_WGMMA_PROBE=2 --json "$W/ab_$sh.json" > "$W/ab_$sh.log" 2>&1
  echo "$sh rc=$?"
  grep -h -E "graph-expert  | ab:" "$W/ab_$sh.log" | awk '{printf "%-18s %5s %-50s %s\n", $1, $2, $3, $5}'
done
tar czf "$OUT/call1.tgz" -C "$W" . && rm -rf "$W"
