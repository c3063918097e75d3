#!/usr/bin/env bash
# Session 22, device call 2, on binaries built on the development machine (build-prebuilt/), after
# call 1 (swap-AB tails measured slower: now off by default; split-K workspace laid out per unit;
# narrow last blocks also load a 64- or 128-row weight box):
# 1. narrow N against full-width N on gpt-oss-120b-silu (the one sweep shape with a partial last
#    column block), alternated, M = 1024 and 8192, two passes;
# 2. tools/gpu-check.sh in full: GPU tests, memcheck, racecheck, torch baseline and the sweep (the
#    headline table).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/gc" "$OUT/w"
W=$OUT/w
B=build-prebuilt/cuda_moe_bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
for pass in 1 2; do
  timeout 100 $B --shapes gpt-oss-120b-silu --ms 1024,8192 --no-forced --read-flush-max-m 0 \
    --ab env:MOERUN_CUDA_NARROW_N=0,env:MOERUN_CUDA_SWAP_TAILS=48 --json "$W/ab_$pass.json" > "$W/ab_$pass.log" 2>&1
  echo "pass $pass rc=$?"
done
grep -h -E " ab:| cuda-graph-expert " "$W"/ab_*.log | awk '{printf "%-18s %5s %-40s %s\n", $1, $2, $3, $5}'
tar czf "$OUT/call2.tgz" -C "$W" . && rm -rf "$W"
OUT="$OUT/gc" GPU_CHECK_PREBUILT=build-prebuilt GPU_CHECK_SKIP_XEON=1 GPU_CHECK_SKIP_CPU=1 \
  bash tools/gpu-check.sh > /dev/null 2>&1
echo "gpu-check rc=$?"; grep -E "rc=|SUMMARY|FAILED|Failure|PASSED" "$OUT/gc/summary.log" | head -20
