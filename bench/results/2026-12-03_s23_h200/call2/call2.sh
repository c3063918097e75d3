#!/usr/bin/env bash
# Session 23, device call 2: the paired mode after call 1 (correct, memcheck and racecheck clean, but
# 1.3-1.9x slower than unpaired): its remote stage releases no longer carry a cluster-scope release
# (which compiled to MEMBAR.ALL.GPU on every k step). Its tests again, then paired against unpaired,
# alternated graph replay, the four sweep shapes at M = 1024 and 8192; the bench prints how many
# clusters of two fit.
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
T=build-prebuilt/moerun_gpu_tests
B=build-prebuilt/cuda_moe_bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
timeout 200 $T --gtest_filter='CudaCutlass.*:CudaBackend.SmallPaired*:CudaFusedAct.*' > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$W/tests.log" | head -30
grep -c "bit for bit" "$W/tests.log"
for sh in deepseek-v3 gpt-oss-120b-silu mixtral-8x7b qwen3-30b-a3b; do
  timeout 120 $B --shapes $sh --ms 1024,8192 --no-forced --read-flush-max-m 0 \
    --ab env:MOERUN_CUDA_PAIR=1 --json "$W/ab_$sh.json" > "$W/ab_$sh.log" 2>&1
  echo "$sh rc=$?"
done
grep -h "paired mode fits" "$W"/ab_*.log | head -1
grep -h -E " ab:| cuda-graph-expert " "$W"/ab_*.log | grep -v alternated | awk '{printf "%-18s %5s %-40s %s\n", $1, $2, $3, $5}'
tar czf "$OUT/call2.tgz" -C "$W" . && rm -rf "$W"
