#!/usr/bin/env bash
# Session 30, device call 1: NOT RUN (no device was lent in session 30: two refusals, then "no new
# device machine is lent"). Session 29's call3.sh, trimmed to fit one 600-second call; the first call of
# the next session.
# Binaries: main at 2b6eb05 with bench/results/2026-12-04_s29_h200/wgmma_stagger.patch applied (the
# experiment; its knobs unset, the kernel runs as committed), built on the dev machine
# (cmake -G Ninja -DCMAKE_BUILD_TYPE=Release; targets moerun_gpu_tests cuda_moe_bench) and carried as
# build-prebuilt/.
# 1. The GPU suite with default knobs (all but the 78-second CUTLASS rows test, which call 2's
#    gpu-check runs): the first run of cc86bf2 (fast SiLU / SwiGLU-OAI) and of the grown direct
#    one-token test; memcheck on that test.
# 2. A/B, alternated graph replay against the rule at M = 1024, 8192: consumer 1 of the wgmma engine
#    started 1000 ns late, or after consumer 0 has finished 1 / 2 / 3 k steps.
# 3. racecheck on the wgmma small tests with the step stagger on (whatever time is left).
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
B=build-prebuilt/cuda_moe_bench
T=build-prebuilt/moerun_gpu_tests
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
timeout 120 $T --gtest_filter='-CudaCutlass.SmallGroupedGemmWritesOnlyItsRows' > "$W/tests.log" 2>&1
echo "tests rc=$? ($(( $(date +%s) - T0 )) s)"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$W/tests.log" | head -20
timeout 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $T --gtest_filter='CudaLaunch.OneTokenKernel*' > "$W/memcheck.log" 2>&1
echo "memcheck rc=$? ($(( $(date +%s) - T0 )) s)"; tail -1 "$W/memcheck.log"
for sh in qwen3-30b-a3b gpt-oss-120b-silu mixtral-8x7b; do
  timeout 130 $B --shapes $sh --ms 1024,8192 --no-forced --read-flush-max-m 0 \
    --ab env:MOERUN_CUDA_WGMMA_STAGGER=1000,env:MOERUN_CUDA_WGMMA_STAGGER_STEPS=1,env:MOERUN_CUDA_WGMMA_STAGGER_STEPS=2,env:MOERUN_CUDA_WGMMA_STAGGER_STEPS=3 \
    --json "$W/ab_$sh.json" > "$W/ab_$sh.log" 2>&1
  echo "$sh rc=$? ($(( $(date +%s) - T0 )) s)"
  grep -h -E "graph-expert  | ab:" "$W/ab_$sh.log" | awk '{printf "%-18s %5s %-50s %s\n", $1, $2, $3, $5}'
done
l=$(left)
if [ "$l" -gt 30 ]; then
  MOERUN_CUDA_WGMMA_STAGGER_STEPS=2 timeout $l compute-sanitizer --tool racecheck --error-exitcode 9 $T \
    --gtest_filter='CudaFusedAct.*:CudaBackend.SmallTailSplitMatchesUnsplit' > "$W/racecheck.log" 2>&1
  echo "racecheck (steps=2) rc=$?"; grep -E "RACECHECK SUMMARY" "$W/racecheck.log" | tail -1
fi
tar czf "$OUT/call1.tgz" -C "$W" . && rm -rf "$W"
