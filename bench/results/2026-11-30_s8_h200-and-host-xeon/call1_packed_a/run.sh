#!/usr/bin/env bash
# Prepared at the end of session 7 for the next session's first Xeon call. Run it with the branch
# amx-packed-a-experiment checked out (it carries main's fixed AMX diagnostics too):
#   run: bash .old/s8_first_xeon_call.sh > $OUT/run.out 2>&1; cat $OUT/r/steps.log   carry: [".deps", ".old"]
# 1. the aligned, alternating AMX diagnostics (contiguous vs strided A) three times;
# 2. the CPU suite at AMX (tile_amx2_packed bitwise, the layer with and without packing);
# 3. the probe's packed-A column; 4. the layer A/B with MOERUN_CPU_AMX_PACK_A=0.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
git log --oneline -1 > $O/commit.txt 2>/dev/null
log build
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-xeon -j16 --target cpu_moe_bench cpu_kernel_bench moerun_tests >> $O/build.log 2>&1 || { grep -E " error|Error:" $O/build.log | head; exit 1; }
B=build-xeon/bench/cpu_moe_bench
for i in 1 2 3; do
  log "diagnostics $i"
  timeout 60 $B --threads 2 --only qwen3-30b-a3b --m 1 --budget 0.05 --quick --json $O/lim$i.json 2>&1 | grep -E "^(limits|amx)" | tee -a $O/steps.log
done
log "cpu tests"
timeout 120 ./build-xeon/tests/moerun_tests --gtest_brief=1 > $O/cpu_tests.log 2>&1; echo "cpu tests rc=$?" | tee -a $O/steps.log
grep -E "FAILED|Failure|tests ran|PASSED" $O/cpu_tests.log | head -20 | tee -a $O/steps.log
log probe
timeout 90 taskset -c 2 build-xeon/bench/cpu_kernel_bench --amx-probe --m 32,64,128 --reps 15 2>&1 | tee -a $O/steps.log
log "layer A/B MOERUN_CPU_AMX_PACK_A=0"
timeout 150 $B --threads 2 --only qwen3-30b-a3b,deepseek-v2-lite,gpt-oss-20b --m 256,1024 --budget 0.4 --compare-env MOERUN_CPU_AMX_PACK_A=0 --json $O/ab_pack.json > $O/ab_pack.log 2>&1
tail -40 $O/ab_pack.log | tee -a $O/steps.log
log done
