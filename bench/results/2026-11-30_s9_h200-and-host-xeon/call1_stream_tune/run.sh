#!/usr/bin/env bash
# Prepared at the end of session 8. Run with the branch cuda-stream-tune checked out (it holds main):
#   run: bash .old/s9_first_call.sh > $OUT/run.out 2>&1; cat $OUT/r/steps.log   carry: [".deps", ".old"]
# 1. the CPU suite at AMX (main's last commits b9f937f..14f2792 were not run on AVX-512);
# 2. gpu-check on the branch: GPU tests (SmallStreamTilingsBitwiseEqual, SmallTunedRunnerMatchesReference)
#    and sanitizers;
# 3. the small-M rows tuned (default) against MOERUN_CUDA_STREAM_TUNE=0, alternated twice.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
log "gpu-check (builds everything)"
OUT=$O/gc GPU_CHECK_SKIP_XEON=1 GPU_CHECK_SKIP_BENCH=1 bash tools/gpu-check.sh > $O/gc.out 2>&1
grep -E "tests rc|PASSED|FAILED|SUMMARY|rc=" $O/gc.out | tee -a $O/steps.log
for i in 1 2; do for t in 0 default; do
  log "small rows tune=$t round $i"
  if [ $t = default ]; then unset MOERUN_CUDA_STREAM_TUNE; else export MOERUN_CUDA_STREAM_TUNE=0; fi
  timeout 150 build-gpu/bench/cuda_moe_bench --ms 1,16 --no-forced --json $O/small_${t}_$i.json > $O/small_${t}_$i.log 2>&1
  grep -E "cuda-graph-expert" $O/small_${t}_$i.log | awk '{print $1,$2,$4,$5}' | tee -a $O/steps.log
done; done
unset MOERUN_CUDA_STREAM_TUNE
log done
