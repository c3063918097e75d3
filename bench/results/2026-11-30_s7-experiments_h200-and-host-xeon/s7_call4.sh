#!/usr/bin/env bash
# session 7, call 4 (Xeon): tile_amx2 pipelined loads. CPU suite (AMX), --amx-probe, moe A/B MOERUN_CPU_AMX_PIPE=1 and MOERUN_CPU_AMX_PREFETCH=0.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
lscpu | grep -E "Model name|^CPU\(s\)" | tee -a $O/steps.log
log build
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-xeon -j16 --target cpu_moe_bench cpu_kernel_bench moerun_tests >> $O/build.log 2>&1 || { grep -E " error|Error:" $O/build.log | head; exit 1; }
log "cpu tests"
timeout 120 ./build-xeon/tests/moerun_tests --gtest_brief=1 > $O/cpu_tests.log 2>&1; echo "cpu tests rc=$?" | tee -a $O/steps.log
grep -E "FAILED|Failure|tests ran|PASSED" $O/cpu_tests.log | head -20 | tee -a $O/steps.log
log "amx probe"
timeout 120 taskset -c 2 build-xeon/bench/cpu_kernel_bench --amx-probe --m 32,64,128 --reps 15 2>&1 | tee -a $O/steps.log
B=build-xeon/bench/cpu_moe_bench
for kv in MOERUN_CPU_AMX_PIPE=1 MOERUN_CPU_AMX_PREFETCH=0; do
  log "moe A/B $kv"
  timeout 110 $B --threads 2 --only qwen3-30b-a3b,deepseek-v2-lite,gpt-oss-20b --m 256,1024 --budget 0.4 --compare-env $kv --json $O/ab_${kv%%=*}.json > $O/ab_${kv%%=*}.log 2>&1
  grep -E "^(qwen|deepseek|gpt)" $O/ab_${kv%%=*}.log | grep -E " bf16 " | grep -v -E "onednn|reference" | tee -a $O/steps.log
done
log done
