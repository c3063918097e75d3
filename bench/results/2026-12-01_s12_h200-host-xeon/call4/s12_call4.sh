#!/usr/bin/env bash
# Session 12, call 4 (H200 host's Xeon): the CPU tests at AMX (Cpu*, the allocation test) on e1980ca;
# AMX tile knobs at M = 256 / 1024 (prefetch distance 8 / 16 KiB, one N-block per call); e1980ca
# against 53c5394 (.old/base) alternated, two more rounds.
#   run: bash .old/s12_call4.sh > $OUT/run.out 2>&1; cat $OUT/r/steps.log   carry: [".deps", ".old"]
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
cmake --build build-base -j16 --target cpu_moe_bench >> $O/build-base.log 2>&1 || { log BASE BUILD FAILED; exit 1; }
log "tests at the AMX level: Cpu* and the allocation test"
timeout 150 build-xeon/tests/moerun_tests --gtest_filter='Cpu*' --gtest_brief=1 > $O/tests.log 2>&1; log "moerun_tests Cpu* rc=$?"
tail -2 $O/tests.log | tee -a $O/steps.log
timeout 60 build-xeon/tests/moerun_alloc_tests > $O/alloc.log 2>&1; log "moerun_alloc_tests rc=$?"
grep -E "PASSED|FAILED|\] M=" $O/alloc.log | head -10 | tee -a $O/steps.log
B=build-xeon/bench/cpu_moe_bench
show() { grep -E "^(qwen3|deepseek|gpt)" $1 | grep -v " th=1 " | awk -v t=$2 '{print t, $1, $2, $3, $4, $6, $7, $NF}' | tee -a $O/steps.log; }
for env in MOERUN_CPU_AMX_PREFETCH=16384 MOERUN_CPU_AMX_PREFETCH=8192 MOERUN_CPU_AMX_NBLOCKS=1; do
  log "bf16 tiles, $env against the default, 2 threads"
  n=${env#MOERUN_CPU_}; n=${n//=/_}
  timeout 70 $B --threads 2 --no-onednn --only qwen3-30b-a3b,deepseek-v2-lite --formats bf16 --m 256,1024 --budget 0.5 \
    --compare-env $env --json $O/knob_$n.json > $O/knob_$n.log 2>&1; show $O/knob_$n.log knob
done
for i in 1 2; do
  for v in base xeon; do
    log "round $i $v: bf16 qwen3 + deepseek-v2-lite M=1,256,1024, 2 threads"
    timeout 60 build-$v/bench/cpu_moe_bench --threads 2 --no-onednn --only qwen3-30b-a3b,deepseek-v2-lite --formats bf16 \
      --m 1,256,1024 --budget 0.4 --json $O/ab_${v}_$i.json > $O/ab_${v}_$i.log 2>&1
    show $O/ab_${v}_$i.log $v
  done
done
log done
