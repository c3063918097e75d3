#!/usr/bin/env bash
# Session 24, device call 4.
# 1. A/B, alternated graph replay against the rule: the tail split (MOERUN_CUDA_KSPLIT=tail: only the
#    last partial wave's output tiles split in K, launch.hpp's wgmma_tail_splits) and, again, the
#    weight maps without L2 promotion (MOERUN_CUDA_L2_PROMOTION=none, 0.5-1% ahead in call 3);
#    mixtral-8x7b at M = 128, 1024, 8192 (its down GEMM at 1024: about 320 tiles, 56 left for a third
#    wave), the other shapes at 1024 and 8192.
# 2. The alignment in blocks of 256 rows (was 2048): this binary against call 3's
#    (cuda_moe_bench_call3, the same code but for the alignment and the tail split, which is off by
#    default), alternated per shape, two runs each, M = 1024 and 8192.
# 3. Tests: the engine test (tail split on grids of 8 and 16 CTAs), the runner test, the host rules,
#    and the conformance suite (the alignment is on every forward's path).
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
T=build-prebuilt/moerun_gpu_tests
B=build-prebuilt/cuda_moe_bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
timeout 110 $B --shapes mixtral-8x7b --ms 128,1024,8192 --no-forced --read-flush-max-m 0 \
  --ab env:MOERUN_CUDA_KSPLIT=tail,env:MOERUN_CUDA_L2_PROMOTION=none --json "$W/ab_mixtral-8x7b.json" > "$W/ab_mixtral-8x7b.log" 2>&1
echo "mixtral rc=$?"
for sh in gpt-oss-120b-silu deepseek-v3 qwen3-30b-a3b; do
  timeout 90 $B --shapes $sh --ms 1024,8192 --no-forced --read-flush-max-m 0 \
    --ab env:MOERUN_CUDA_KSPLIT=tail,env:MOERUN_CUDA_L2_PROMOTION=none --json "$W/ab_$sh.json" > "$W/ab_$sh.log" 2>&1
  echo "$sh rc=$?"
done
grep -h -E " ab:" "$W"/ab_*.log | awk '{printf "%-18s %5s %-46s %s\n", $1, $2, $3, $5}'
tar czf "$OUT/call4.tgz" -C "$W" .
for sh in qwen3-30b-a3b mixtral-8x7b gpt-oss-120b-silu deepseek-v3; do
  for run in 1 2; do
    for b in old new; do
      bin=$B; [ $b = old ] && bin=build-prebuilt/cuda_moe_bench_call3
      timeout 60 $bin --shapes $sh --ms 1024,8192 --no-forced --read-flush-max-m 0 --ab none \
        --json "$W/${sh}_${b}_$run.json" > "$W/${sh}_${b}_$run.log" 2>&1 || echo "$sh $b $run rc=$?"
    done
  done
done
for f in "$W"/*_{old,new}_*.log; do
  grep -h " cuda-graph-expert " "$f" | grep -v alternated | awk -v f="$(basename $f .log)" '{printf "%-34s %5s %s\n", f, $2, $5}'
done | sort
tar czf "$OUT/call4.tgz" -C "$W" .
timeout 200 $T --gtest_filter='CudaBackend.SmallTailSplit*:CudaLaunch.*:CudaCutlass.SmallGroupedGemmWritesOnlyItsRows:*GpuConformance*' > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$W/tests.log" | head; grep -E "KSPLIT=tail" "$W/tests.log" | head -8
tar czf "$OUT/call4.tgz" -C "$W" . && rm -rf "$W"
