#!/usr/bin/env bash
# Session 14, call 4 (H200): the sorted passes (gather / activation / combine) of four builds timed side by
# side: base (f73dd8f), new (grid-stride activation, 4 items per thread; combine loads 8 rows at once),
# u2 (activation 2 items per thread), b4 (combine 4 rows at once). Three alternated rounds.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee -a $O/steps.log
log build
for v in base new u2 b4; do
  (TUNE_PASSES_ONLY=1 TUNE_PASSES_SRC=$PWD/.old/pv/$v.cu bash bench/cuda/tune/build.sh build-pv-$v > $O/build_$v.log 2>&1) &
done
wait
ls build-pv-*/cutlass_tune | tee -a $O/steps.log
for r in 1 2 3; do
  for v in base new u2 b4; do
    log "round $r $v"
    timeout 60 build-pv-$v/cutlass_tune --ms 128,1024,8192 > $O/passes_${v}_$r.log 2>&1
    grep passes $O/passes_${v}_$r.log | awk -v v=$v '{print v, $1, $2, $5, $10, $15}' | tee -a $O/steps.log
  done
done
log done
