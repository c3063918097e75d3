#!/usr/bin/env bash
# Session 10, call 4: q8 against MOERUN_CPU_Q8=0 (same process, calls alternating) with the weight copies
# rotated, at 1-16 tokens per expert, 2 threads (twice) and 16 threads: the q8 crossover at the AMX level.
#   run: bash .old/s10_call4.sh > $OUT/run.out 2>&1; cat $OUT/r/steps.log   carry: [".deps", ".old"]
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
log configure+build
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-xeon -j16 --target cpu_moe_bench >> $O/build.log 2>&1 || { log BUILD FAILED; grep -E "error" -A3 $O/build.log | head -40 | tee -a $O/steps.log; exit 1; }
B=build-xeon/bench/cpu_moe_bench
Q=mxfp4+int8-token-group,nvfp4+int8-token-group
for run in 2:1 2:2 16:1; do
  th=${run%:*}; i=${run#*:}
  ms=1,4,16,64,128,192,256; [ $th = 16 ] && ms=1,16,64,128,256
  log "q8 against MOERUN_CPU_Q8=0, $th threads, round $i"
  timeout 170 $B --threads $th --only qwen3-30b-a3b --formats $Q --m $ms --budget 0.3 --compare-env MOERUN_CPU_Q8=0 --json $O/cmp_${th}t_$i.json > $O/cmp_${th}t_$i.log 2>&1
  grep -E "^qwen3" $O/cmp_${th}t_$i.log | awk '{print $2, $3, $4, $6, $7}' | paste - - | tee -a $O/steps.log
done
log done
