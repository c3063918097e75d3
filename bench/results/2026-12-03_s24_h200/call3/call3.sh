#!/usr/bin/env bash
# Session 24, device call 3: 1. A/B of the weight maps' L2 promotion (MOERUN_CUDA_L2_PROMOTION=none and
# 128 against the default 256), alternated graph replay, every shape at M = 1024 and 8192; 2. ncu of
# one qwen3-30b-a3b expert stage at M = 1024 and 8192, each kernel of the rule's path (alignment,
# gather, the two wgmma GEMMs, combine), so the M = 1024 row's time can be split by kernel (call 2's
# filter caught the stream tuner's kernels instead).
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
B=build-prebuilt/cuda_moe_bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
for sh in qwen3-30b-a3b gpt-oss-120b-silu mixtral-8x7b deepseek-v3; do
  timeout 100 $B --shapes $sh --ms 1024,8192 --no-forced --read-flush-max-m 0 \
    --ab env:MOERUN_CUDA_L2_PROMOTION=none,env:MOERUN_CUDA_L2_PROMOTION=128 --json "$W/ab_$sh.json" > "$W/ab_$sh.log" 2>&1
  echo "$sh rc=$?"
done
grep -h -E " ab:" "$W"/ab_*.log | awk '{printf "%-18s %5s %-46s %s\n", $1, $2, $3, $5}'
tar czf "$OUT/call3.tgz" -C "$W" .
for m in 1024 8192; do
  timeout 90 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
    -k 'regex:grouped_kernel|gather_sorted|combine_sorted|align_count|align_fill' --launch-skip 0 --launch-count 6 \
    $B --shapes qwen3-30b-a3b --ms $m --no-forced --ab none --read-flush-max-m 0 > "$W/ncu_qwen3_$m.log" 2>&1
  echo "ncu $m rc=$?"
  grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Memory Throughput" "$W/ncu_qwen3_$m.log" | cut -c1-150 | head -40
done
tar czf "$OUT/call3.tgz" -C "$W" . && rm -rf "$W"
