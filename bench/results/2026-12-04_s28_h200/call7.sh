#!/usr/bin/env bash
# Session 28, device call 7: the binaries to commit. The fused one-token stage back on its FMA loop,
# its down slice always copied late, opt-in (MOERUN_CUDA_ONE_TOKEN=1); the kernel's shared-memory
# limit set to the device's maximum (call 5: a smaller layer first left a larger one's launch
# invalid). The whole GPU suite; memcheck and racecheck on the fused stage run alone (as call 5 did)
# and on the misaligned-hidden conformance case; the A/B at qwen3-30b-a3b M = 1, two processes.
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
T=build-prebuilt/moerun_gpu_tests
B=build-prebuilt/cuda_moe_bench
timeout 300 $T > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$W/tests.log" | head -20
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter='CudaBackend.SmallOneTokenFused*:*DeviceHiddenOff*/0' > "$W/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -1 "$W/memcheck.log"
timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 $T --gtest_filter='CudaBackend.SmallOneTokenFused*' > "$W/racecheck.log" 2>&1
echo "racecheck rc=$?"; tail -1 "$W/racecheck.log"
for rep in 1 2; do
  timeout 90 $B --shapes qwen3-30b-a3b --ms 1 --no-forced --ab env:MOERUN_CUDA_ONE_TOKEN=1 --json "$W/ab_$rep.json" > "$W/ab_$rep.log" 2>&1
  echo "rep $rep rc=$?"; grep -E "graph-expert| ab:" "$W/ab_$rep.log" | awk '{printf "%-60s %s\n", $3, $5}'
done
tar czf "$OUT/call7.tgz" -C "$W" . && rm -rf "$W"
