#!/usr/bin/env bash
# Session 12, call 5 (H200 host's Xeon): the q8 kernel with two integer chains per row up to 4 rows
# (working tree) against one chain (.old/base = HEAD 6-... before it), in cache and in the layer; the
# one-token bf16 / 4-bit ratio; the bf16 M = 1024 profile of the final code; the allocation test.
#   run: bash .old/s12_call5.sh > $OUT/run.out 2>&1; cat $OUT/r/steps.log   carry: [".deps", ".old"]
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
D=$PWD/.deps/devdeps
log build new and base
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$D > $O/build.log 2>&1
cmake --build build-xeon -j16 --target cpu_moe_bench cpu_kernel_bench moerun_tests moerun_alloc_tests >> $O/build.log 2>&1 || { log BUILD FAILED; grep -E "error" -A3 $O/build.log | head -40 | tee -a $O/steps.log; exit 1; }
cmake -S .old/base -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$D > $O/build-base.log 2>&1
cmake --build build-base -j16 --target cpu_moe_bench cpu_kernel_bench >> $O/build-base.log 2>&1 || { log BASE BUILD FAILED; exit 1; }
log "tests at the AMX level: Cpu* and the allocation test"
timeout 150 build-xeon/tests/moerun_tests --gtest_filter='Cpu*' --gtest_brief=1 > $O/tests.log 2>&1; log "moerun_tests Cpu* rc=$?"
tail -2 $O/tests.log | tee -a $O/steps.log
timeout 60 build-xeon/tests/moerun_alloc_tests > $O/alloc.log 2>&1; log "moerun_alloc_tests rc=$?"
for i in 1 2 3; do
  for v in base xeon; do
    log "kernels in cache, round $i $v"
    timeout 40 build-$v/bench/cpu_kernel_bench --isa amx --formats mxfp4-q15,nvfp4-q15,mxfp4-q8,nvfp4-q8 --reps 5 --m 1,2,3,4,8 \
      > $O/kern_${v}_$i.log 2>&1
    grep cached $O/kern_${v}_$i.log | awk -v t=$v '{print t, $1, $3, $4}' | paste -s -d' ' | tee -a $O/steps.log
  done
done
show() { grep -E "^(qwen3|deepseek|gpt)" $1 | grep -v " th=1 " | awk -v t=$2 '{print t, $1, $2, $3, $4, $6, $7, $NF}' | tee -a $O/steps.log; }
for i in 1 2; do
  for v in base xeon; do
    log "layer round $i $v: qwen3 bf16 / mxfp4 / nvfp4 M=1,32, 2 threads"
    timeout 50 build-$v/bench/cpu_moe_bench --threads 2 --no-onednn --quick --only qwen3-30b-a3b --formats bf16,mxfp4,nvfp4 \
      --m 1,32 --budget 0.4 --json $O/layer_${v}_$i.json > $O/layer_${v}_$i.log 2>&1
    show $O/layer_${v}_$i.log $v
  done
done
log "profile: bf16 qwen3 M=256,1024, 2 threads"
MOERUN_CPU_PROFILE=1 timeout 50 build-xeon/bench/cpu_moe_bench --threads 2 --no-onednn --only qwen3-30b-a3b --formats bf16 --m 256,1024 --budget 0.5 > $O/prof.log 2>&1
grep -E "wall:|busy" $O/prof.log | head -4 | tee -a $O/steps.log
log done
