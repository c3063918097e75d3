#!/usr/bin/env bash
# session 7, call 2: down-weight L2 prefetch in the one-token gate_up. gpu-check (tests, sanitizers,
# full sweep with the default), then M=1 A/B: MOERUN_CUDA_DOWN_PREFETCH=0/start/mid/end, alternated twice.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
log "gpu-check"
GPU_CHECK_SKIP_CPU=1 GPU_CHECK_SKIP_XEON=1 GPU_CHECK_PACK=0 OUT=$O/gpu timeout 420 bash tools/gpu-check.sh > $O/gpu-check.out 2>&1
grep -E "rc=|SUMMARY|FAILED|PASSED" $O/gpu/summary.log | tee -a $O/steps.log
if [ -x build-gpu/bench/cuda_moe_bench ]; then
  log "M=1 A/B down prefetch"
  for i in 1 2; do for k in 0 start mid end; do
    MOERUN_CUDA_DOWN_PREFETCH=$k timeout 60 build-gpu/bench/cuda_moe_bench --ms 1 --no-forced --json $O/m1_${k}_$i.json > $O/m1_${k}_$i.log 2>&1
    echo "-- prefetch=$k round $i" >> $O/steps.log; grep -E "^ *(qwen|deepseek|mixtral|gpt)" $O/m1_${k}_$i.log | grep -E "cuda-(graph|eager)" >> $O/steps.log
  done; done
fi
log done
