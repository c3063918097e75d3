#!/usr/bin/env bash
# Session 13, call 5 (H200 host's Xeon): the headline CPU benchmark at HEAD, 2 threads, every row.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
git log --oneline -1 | tee -a $O/steps.log; git status --short | grep -v "^?? .old" | head | tee -a $O/steps.log
log "xeon-bench, 2 threads"
XEON_BENCH_THREADS=2 XEON_BENCH_LIMIT=330 XEON_BENCH_SWEEP= timeout 420 bash tools/xeon-bench.sh build-xeon $O/xb > $O/xb.out 2>&1; log "xeon-bench rc=$?"
grep -E "^(limits|amx)" $O/xb/cpu_2t.log | tee -a $O/steps.log
