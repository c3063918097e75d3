#!/usr/bin/env bash
# Session 19, device call 6: tools/gpu-check.sh on binaries built on the development machine
# (build-prebuilt: moerun_gpu_tests, cuda_moe_bench), then A/B passes of the expert stage at
# M = 128, 1024, 8192 alternating the rule (the own wgmma engine above 12 tokens per expert) with
# CUTLASS's 128x256 and swap-AB schedules forced, for side-by-side ratios the sweep's sequential
# forced rows cannot give.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/gc"
OUT="$OUT/gc" GPU_CHECK_PREBUILT=build-prebuilt GPU_CHECK_SKIP_XEON=1 GPU_CHECK_SKIP_CPU=1 bash tools/gpu-check.sh \
  > "$OUT/call.log" 2>&1
echo "gpu-check rc=$?"
cat "$OUT/gc/summary.log"
B=build-prebuilt/cuda_moe_bench
for pass in 1 2; do
  for v in rule cutlass-sm90-grouped cutlass-sm90-swapab; do
    if [ $v = rule ]; then env -u MOERUN_CUDA_GEMM $B --ms 128,1024,8192 --no-forced --json "$OUT/ab_${pass}_$v.json" > "$OUT/ab_${pass}_$v.log" 2>&1
    else MOERUN_CUDA_GEMM=$v $B --ms 128,1024,8192 --no-forced --json "$OUT/ab_${pass}_$v.json" > "$OUT/ab_${pass}_$v.log" 2>&1; fi
    echo "ab pass $pass $v rc=$?"
  done
done
for f in "$OUT"/ab_*.log; do grep -E " cuda-graph-expert " "$f" | awk -v f="$(basename "$f" .log)" '{print f, $1, $2, $5}'; done
