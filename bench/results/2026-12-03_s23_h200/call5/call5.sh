#!/usr/bin/env bash
# Session 23, device call 5: pair is now a template argument of the wgmma kernel (the unpaired kernel
# carries none of its code; call 4 had mixtral-8x7b M = 1024 2.3% slower than 1a765f9 with it chosen
# at run time). 1. The paired and engine tests again; 2. old (1a765f9) and new alternated, two runs
# each, on mixtral-8x7b and qwen3-30b-a3b at M = 1024 and 8192, graph replay of the rule.
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
timeout 200 build-prebuilt/moerun_gpu_tests --gtest_filter='CudaCutlass.*:CudaBackend.SmallPaired*:CudaFusedAct.*' > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$W/tests.log" | head; grep -c "bit for bit" "$W/tests.log"
for sh in mixtral-8x7b qwen3-30b-a3b; do
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
tar czf "$OUT/call5.tgz" -C "$W" . && rm -rf "$W"
