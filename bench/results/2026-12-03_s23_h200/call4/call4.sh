#!/usr/bin/env bash
# Session 23, device call 4, the final binaries of the session (paired mode built, off by default):
# 1. the default path against the session's starting commit 1a765f9 (its bench built from that
#    commit, cuda_moe_bench_1a765f9): the kernel now carries the paired mode's branches, so check the
#    unpaired path did not lose. Old and new binaries alternated per shape, two runs each, M = 1024
#    and 8192, graph replay of the rule;
# 2. tools/gpu-check.sh in full: GPU tests, memcheck, racecheck, torch baseline and the sweep.
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W" "$OUT/gc"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
for sh in deepseek-v3 gpt-oss-120b-silu mixtral-8x7b qwen3-30b-a3b; do
  for run in 1 2; do
    for b in old new; do
      bin=build-prebuilt/cuda_moe_bench; [ $b = old ] && bin=build-prebuilt/cuda_moe_bench_1a765f9
      timeout 90 $bin --shapes $sh --ms 1024,8192 --no-forced --read-flush-max-m 0 --ab none \
        --json "$W/${sh}_${b}_$run.json" > "$W/${sh}_${b}_$run.log" 2>&1 || echo "$sh $b $run rc=$?"
    done
  done
done
for f in "$W"/*_{old,new}_*.log; do
  grep -h " cuda-graph-expert " "$f" | grep -v alternated | awk -v f="$(basename $f .log)" '{printf "%-34s %5s %s\n", f, $2, $5}'
done | sort
tar czf "$OUT/call4.tgz" -C "$W" . && rm -rf "$W"
OUT="$OUT/gc" GPU_CHECK_PREBUILT=build-prebuilt GPU_CHECK_SKIP_XEON=1 GPU_CHECK_SKIP_CPU=1 \
  bash tools/gpu-check.sh > /dev/null 2>&1
echo "gpu-check rc=$?"; grep -E "rc=|SUMMARY|FAILED|Failure|PASSED" "$OUT/gc/summary.log" | head -20
