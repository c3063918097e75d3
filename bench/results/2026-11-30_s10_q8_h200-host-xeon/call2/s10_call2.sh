#!/usr/bin/env bash
# Session 10, call 2: the q8 path after fusing the quantization passes; CPU suite (tolerance fix); layer
# timings q8 against MOERUN_CPU_Q8=0 at 2 and 16 threads, and bf16 / 4-bit ratios at M = 1.
#   run: bash .old/s10_call2.sh > $OUT/run.out 2>&1; cat $OUT/r/steps.log   carry: [".deps", ".old"]
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
log configure+build
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-xeon -j16 >> $O/build.log 2>&1 || { log BUILD FAILED; grep -E "error" -A3 $O/build.log | head -40 | tee -a $O/steps.log; exit 1; }
log "tests (the CPU suite at the detected level)"
(cd build-xeon && timeout 300 ctest -j8 --output-on-failure > $O/ctest.log 2>&1); log "ctest rc=$?"
grep -E "tests passed|tests failed" $O/ctest.log | tee -a $O/steps.log
grep -E "\(Failed\)|\(Timeout\)" $O/ctest.log | head -20 | tee -a $O/steps.log
grep -B2 -A12 "Failure$\|FAILED  \]" $O/ctest.log | head -60 >> $O/steps.log
grep -E "^planned|mismatch" $O/ctest.log | head -5 | tee -a $O/steps.log
B=build-xeon/bench/cpu_moe_bench
Q=mxfp4+int8-token-group,nvfp4+int8-token-group
for th in 2 16; do for i in 1 2; do
  [ $th = 16 ] && [ $i = 2 ] && continue
  log "q8 against MOERUN_CPU_Q8=0, $th threads, round $i"
  timeout 100 $B --threads $th --only qwen3-30b-a3b --formats $Q --m 1,4,16,64 --budget 0.3 --compare-env MOERUN_CPU_Q8=0 --json $O/cmp_${th}t_$i.json > $O/cmp_${th}t_$i.log 2>&1
  grep -E "^qwen3" $O/cmp_${th}t_$i.log | awk '{print $2, $3, $4, $6, $7}' | tee -a $O/steps.log
done; done
F=bf16,mxfp4,nvfp4,$Q
for th in 2 16; do for i in 1 2 3; do
  [ $th = 16 ] && [ $i = 3 ] && continue
  log "M=1 formats, $th threads, round $i"
  timeout 100 $B --threads $th --quick --only qwen3-30b-a3b --formats $F --m 1 --budget 0.4 --json $O/m1_${th}t_$i.json > $O/m1_${th}t_$i.log 2>&1
  grep -E "^qwen3.* cpu/.*M=1 " $O/m1_${th}t_$i.log | awk '{print $2, $3, $4, $5, $6, $7}' | tee -a $O/steps.log
done; done
log "profile: mxfp4 int8 M=1, 2 threads"
MOERUN_CPU_PROFILE=1 timeout 60 $B --threads 2 --quick --only qwen3-30b-a3b --formats mxfp4+int8-token-group,mxfp4 --m 1 --budget 0.3 > $O/prof.log 2>&1
grep -v "^  weights" $O/prof.log | tail -40 >> $O/steps.log
log done
