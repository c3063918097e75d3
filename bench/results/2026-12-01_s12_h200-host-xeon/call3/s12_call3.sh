#!/usr/bin/env bash
# Session 12, call 3 (H200 host's Xeon): the passes around the GEMMs (bf16 rows copied as they are,
# the activation straight to bf16, routing over the threads, vectorized bf16 store) against the
# previous commit (.old/base, git archive of 53c5394), two binaries alternated; the CPU tests at AMX.
#   run: bash .old/s12_call3.sh > $OUT/run.out 2>&1; cat $OUT/r/steps.log   carry: [".deps", ".old"]
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
D=$PWD/.deps/devdeps
log build new and base
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$D > $O/build.log 2>&1
cmake --build build-xeon -j16 --target cpu_moe_bench moerun_tests moerun_alloc_tests >> $O/build.log 2>&1 || { log BUILD FAILED; grep -E "error" -A3 $O/build.log | head -40 | tee -a $O/steps.log; exit 1; }
cmake -S .old/base -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$D > $O/build-base.log 2>&1
cmake --build build-base -j16 --target cpu_moe_bench >> $O/build-base.log 2>&1 || { log BASE BUILD FAILED; grep -E "error" -A3 $O/build-base.log | head -20 | tee -a $O/steps.log; exit 1; }
log "tests at the AMX level: Cpu* and the allocation test"
timeout 150 build-xeon/tests/moerun_tests --gtest_filter='Cpu*' --gtest_brief=1 > $O/tests.log 2>&1; log "moerun_tests Cpu* rc=$?"
tail -3 $O/tests.log | tee -a $O/steps.log
timeout 60 build-xeon/tests/moerun_alloc_tests > $O/alloc.log 2>&1; log "moerun_alloc_tests rc=$?"
grep -E "PASSED|FAILED|\] M=" $O/alloc.log | head -10 | tee -a $O/steps.log
show() { grep -E "^(qwen3|deepseek|gpt)" $1 | grep -v " th=1 " | awk -v t=$2 '{print t, $1, $2, $3, $4, $6, $7, $NF}' | tee -a $O/steps.log; }
for i in 1 2 3; do
  for v in base xeon; do
    log "round $i $v: bf16 qwen3 + deepseek-v2-lite M=1,16,256,1024, 2 threads"
    timeout 75 build-$v/bench/cpu_moe_bench --threads 2 --no-onednn --only qwen3-30b-a3b,deepseek-v2-lite --formats bf16 \
      --m 1,16,256,1024 --budget 0.4 --json $O/ab_${v}_$i.json > $O/ab_${v}_$i.log 2>&1
    show $O/ab_${v}_$i.log $v
  done
done
log "profile new: bf16 qwen3 M=256,1024, 2 threads"
MOERUN_CPU_PROFILE=1 timeout 60 build-xeon/bench/cpu_moe_bench --threads 2 --no-onednn --only qwen3-30b-a3b --formats bf16 --m 256,1024 --budget 0.5 > $O/prof.log 2>&1
grep -E "moerun cpu profile|wall:|busy" $O/prof.log | tee -a $O/steps.log
log done
