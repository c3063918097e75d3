#!/usr/bin/env bash
# Session 26, device call 5: call 3's A/B again (MOERUN_CUDA_FILL_GATHER=0, the separate gather pass,
# against the rule's fill gather), M = 1024 and 8192, each shape twice in separate processes.
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
B=build-prebuilt/cuda_moe_bench
for rep in 1 2; do
  for sh in qwen3-30b-a3b mixtral-8x7b gpt-oss-120b-silu deepseek-v3; do
    timeout 60 $B --shapes $sh --ms 1024,8192 --no-forced --read-flush-max-m 0 --ab env:MOERUN_CUDA_FILL_GATHER=0 --json "$W/ab_${sh}_$rep.json" > "$W/ab_${sh}_$rep.log" 2>&1
    echo "$sh rep $rep rc=$?"
  done
done
grep -E " ab:" "$W"/ab_*.log | sed 's|.*/ab_||' | awk '{printf "%-28s %5s %-46s %s\n", $1, $2, $3, $5}'
tar czf "$OUT/call5.tgz" -C "$W" . && rm -rf "$W"
