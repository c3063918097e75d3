#!/usr/bin/env bash
# Session 22, device call 3, on binaries built on the development machine (build-prebuilt/):
# programmatic dependent launch (PDL) now also on the expert-sorted chain (gather, the wgmma GEMMs,
# activation, combine; the decode chain had it already).
# 1. gpu-check without the sweep: GPU tests, memcheck, racecheck;
# 2. the rule against itself with PDL off everywhere (MOERUN_CUDA_PDL=0), alternated, M = 128, 1024
#    and 8192, four shapes, two passes.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/gc" "$OUT/w"
W=$OUT/w
B=build-prebuilt/cuda_moe_bench
OUT="$OUT/gc" GPU_CHECK_PREBUILT=build-prebuilt GPU_CHECK_SKIP_XEON=1 GPU_CHECK_SKIP_CPU=1 GPU_CHECK_SKIP_BENCH=1 \
  bash tools/gpu-check.sh > "$W/gpu-check.out" 2>&1
echo "gpu-check rc=$?"; grep -E "rc=|SUMMARY|FAILED|Failure|PASSED" "$OUT/gc/summary.log" | head -20
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
for pass in 1 2; do
  timeout 200 $B --ms 128,1024,8192 --no-forced --read-flush-max-m 0 --ab env:MOERUN_CUDA_PDL=0 \
    --json "$W/ab_$pass.json" > "$W/ab_$pass.log" 2>&1
  echo "pass $pass rc=$?"
done
grep -h -E " ab:" "$W"/ab_*.log | awk '{printf "%-18s %5s %-32s %s\n", $1, $2, $3, $5}'
tar czf "$OUT/call3.tgz" -C "$W" . && rm -rf "$W"
