#!/usr/bin/env bash
# Session 26, device call 6: the wgmma gate_up gathering the tokens in its operand load
# (MOERUN_CUDA_GEMM_GATHER=1) against the rule (the fill gather) on the memory-bound rows, where the
# gather's 2 * rows * H bytes are a larger share than on the compute-bound rows session 20 timed.
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
B=build-prebuilt/cuda_moe_bench
for sh in qwen3-30b-a3b gpt-oss-120b-silu deepseek-v3 mixtral-8x7b; do
  ms=1024; [ $sh = qwen3-30b-a3b ] && ms=512,1024,2048
  timeout 60 $B --shapes $sh --ms $ms --no-forced --read-flush-max-m 0 --ab env:MOERUN_CUDA_GEMM_GATHER=1 --json "$W/ab_$sh.json" > "$W/ab_$sh.log" 2>&1
  echo "$sh rc=$?"
done
grep -h -E " ab:" "$W"/ab_*.log | awk '{printf "%-18s %5s %-46s %s\n", $1, $2, $3, $5}'
tar czf "$OUT/call6.tgz" -C "$W" . && rm -rf "$W"
