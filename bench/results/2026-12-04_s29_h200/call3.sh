#!/usr/bin/env bash
# Session 29, device call 3 (NOT RUN: no device was lent after call 2; the first call of the next session).
# Build main (cc86bf2: SiLU and SwiGLU-OAI on __expf / __fdividef in every CUDA kernel) with
# `git apply bench/results/2026-12-04_s29_h200/wgmma_stagger.patch` (the experiment, not committed),
# copy the test and bench binaries to build-prebuilt/, then run this with carry build-prebuilt.
# The stagger experiment:
# MOERUN_CUDA_WGMMA_STAGGER=ns holds the wgmma engine's second consumer warpgroup back that long at
# start, so that the two consumers' epilogues fall at different times (each hides behind the other's
# MMA) if the lag persists (the ring of 4 stages bounds it). MOERUN_CUDA_WGMMA_STAGGER_STEPS=D (1-3)
# starts consumer 1 once consumer 0 has finished D k steps instead (a lag in stages, not in time).
# 1. The whole GPU suite (default knobs); memcheck on the direct one-token test.
# 2. A/B, alternated graph replay against the rule, M = 1024, 8192: stagger 1000 ns, 1 / 2 / 3 steps.
#    (If one pays: the whole GPU suite again with it set, and racecheck on the wgmma small tests.)
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
B=build-prebuilt/cuda_moe_bench
T=build-prebuilt/moerun_gpu_tests
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
timeout 240 $T > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$W/tests.log" | head -20
# (the direct one-token test grew to 2-3 units a CTA after the review: memcheck it again)
timeout 100 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $T --gtest_filter='CudaLaunch.OneTokenKernel*' > "$W/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -1 "$W/memcheck.log"
for sh in qwen3-30b-a3b gpt-oss-120b-silu mixtral-8x7b; do
  timeout 150 $B --shapes $sh --ms 1024,8192 --no-forced --read-flush-max-m 0 \
    --ab env:MOERUN_CUDA_WGMMA_STAGGER=1000,env:MOERUN_CUDA_WGMMA_STAGGER_STEPS=1,env:MOERUN_CUDA_WGMMA_STAGGER_STEPS=2,env:MOERUN_CUDA_WGMMA_STAGGER_STEPS=3 \
    --json "$W/ab_$sh.json" > "$W/ab_$sh.log" 2>&1
  echo "$sh rc=$?"
  grep -h -E "graph-expert  | ab:" "$W/ab_$sh.log" | awk '{printf "%-18s %5s %-50s %s\n", $1, $2, $3, $5}'
done
tar czf "$OUT/call3.tgz" -C "$W" . && rm -rf "$W"
