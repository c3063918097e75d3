#!/usr/bin/env bash
# Session 24, device call 5, the session's final binaries (the tail split on by default, the alignment
# in 256-row blocks): 1. A/B of no split (MOERUN_CUDA_KSPLIT=1) against the new default, alternated
# graph replay: mixtral-8x7b at M = 128, 1024, 8192 (the one sweep launch it splits: the down GEMM at
# 1024), qwen3-30b-a3b at 1024 (no split: the same path, the spread of the method); 2. tools/gpu-check.sh
# in full (GPU tests, compute-sanitizer memcheck and racecheck, torch baseline, the sweep). The CPU
# suite, the host Xeon's bench and racecheck with the mma tile forced are left out (no CPU or mma.sync
# code changed this session; the call must fit 600 s).
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W" "$OUT/gc"
B=build-prebuilt/cuda_moe_bench
timeout 80 $B --shapes mixtral-8x7b --ms 128,1024,8192 --no-forced --read-flush-max-m 0 \
  --ab env:MOERUN_CUDA_KSPLIT=1 --json "$W/ab_mixtral-8x7b.json" > "$W/ab_mixtral-8x7b.log" 2>&1
echo "mixtral rc=$?"
timeout 40 $B --shapes qwen3-30b-a3b --ms 1024 --no-forced --read-flush-max-m 0 \
  --ab env:MOERUN_CUDA_KSPLIT=1 --json "$W/ab_qwen3-30b-a3b.json" > "$W/ab_qwen3-30b-a3b.log" 2>&1
echo "qwen3 rc=$?"
grep -h -E " ab:" "$W"/ab_*.log | awk '{printf "%-18s %5s %-40s %s\n", $1, $2, $3, $5}'
tar czf "$OUT/call5.tgz" -C "$W" . && rm -rf "$W"
OUT="$OUT/gc" GPU_CHECK_PREBUILT=build-prebuilt GPU_CHECK_SKIP_XEON=1 GPU_CHECK_SKIP_CPU=1 GPU_CHECK_SANITIZERS="memcheck racecheck" \
  bash tools/gpu-check.sh > /dev/null 2>&1
echo "gpu-check rc=$?"; grep -E "rc=|SUMMARY|FAILED|Failure|PASSED|==" "$OUT/gc/summary.log" | head -30
