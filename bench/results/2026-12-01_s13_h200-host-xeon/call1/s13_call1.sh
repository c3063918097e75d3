#!/usr/bin/env bash
# Session 13, call 1 (H200 host's Xeon): the AMX operand-placement diagnostic; the headline CPU benchmark at HEAD.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA)' | tee -a $O/steps.log
git log --oneline -1 | tee -a $O/steps.log; git status --short | head | tee -a $O/steps.log
log configure+build
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-xeon -j16 --target cpu_moe_bench cpu_kernel_bench >> $O/build.log 2>&1 || { log BUILD FAILED; grep -E "error" -A3 $O/build.log | head -40 | tee -a $O/steps.log; exit 1; }
K=build-xeon/bench/cpu_kernel_bench
for r in 1 2; do
  log "amx placement round $r"
  timeout 60 $K --amx-placement --threads 1,2 --seconds 3 > $O/placement_$r.log 2>&1; cat $O/placement_$r.log | tee -a $O/steps.log
done
log "xeon-bench"
timeout 420 bash tools/xeon-bench.sh build-xeon $O/xb > $O/xb.out 2>&1; log "xeon-bench rc=$?"
tail -5 $O/xb.out | tee -a $O/steps.log
