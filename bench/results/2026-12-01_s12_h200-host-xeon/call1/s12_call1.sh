#!/usr/bin/env bash
# Session 12, call 1 (H200 host's Xeon): CPU suite at the AMX level; the AMX tile diagnostics and the
# late_loads schedule against the current one (probe and layer); q15 against MOERUN_CPU_Q15=0; the
# one-token bf16 / 4-bit ratio; the q15 kernels in cache.
#   run: bash .old/s12_call1.sh > $OUT/run.out 2>&1; cat $OUT/r/steps.log   carry: [".deps", ".old"]
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA)' | tee -a $O/steps.log
git log --oneline -1 | tee -a $O/steps.log
log configure+build
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-xeon -j16 >> $O/build.log 2>&1 || { log BUILD FAILED; grep -E "error" -A3 $O/build.log | head -40 | tee -a $O/steps.log; exit 1; }
log "tests (the CPU suite at the detected level)"
(cd build-xeon && timeout 200 ctest -j8 --output-on-failure > $O/ctest.log 2>&1); log "ctest rc=$?"
grep -E "tests passed|tests failed" $O/ctest.log | tee -a $O/steps.log
grep -E "\(Failed\)|\(Timeout\)" $O/ctest.log | head -20 | tee -a $O/steps.log
grep -B2 -A12 "Failure$\|FAILED  \]" $O/ctest.log | head -60 >> $O/steps.log
B=build-xeon/bench/cpu_moe_bench
K=build-xeon/bench/cpu_kernel_bench
log "amx probe (late_loads)"
timeout 60 $K --amx-probe --m 32,64 --reps 9 > $O/probe.log 2>&1; cat $O/probe.log | tee -a $O/steps.log
log "bf16 layer, late_loads against the current schedule, 2 threads"
timeout 110 $B --threads 2 --no-onednn --only qwen3-30b-a3b,deepseek-v2-lite --formats bf16 --m 256,1024 --budget 0.5 \
  --compare-env MOERUN_CPU_AMX_LATE_LOADS=1 --json $O/late_2t.json > $O/late_2t.log 2>&1
grep -E "^(limits|amx)" $O/late_2t.log | tee -a $O/steps.log
grep -E "^(qwen3|deepseek)" $O/late_2t.log | awk '{print $1, $2, $3, $4, $6, $7}' | tee -a $O/steps.log
log "q15 against MOERUN_CPU_Q15=0, 2 threads"
timeout 90 $B --threads 2 --only qwen3-30b-a3b --formats mxfp4,nvfp4 --m 1,4,16,32,64 --budget 0.3 \
  --compare-env MOERUN_CPU_Q15=0 --json $O/q15_qwen3_2t.json > $O/q15_qwen3_2t.log 2>&1
grep -E "^qwen3" $O/q15_qwen3_2t.log | awk '{print $2, $3, $4, $6, $7}' | tee -a $O/steps.log
timeout 60 $B --threads 2 --only gpt-oss-20b --formats mxfp4 --m 1,8,16 --budget 0.3 \
  --compare-env MOERUN_CPU_Q15=0 --json $O/q15_gptoss_2t.json > $O/q15_gptoss_2t.log 2>&1
grep -E "^gpt" $O/q15_gptoss_2t.log | awk '{print $2, $3, $4, $6, $7}' | tee -a $O/steps.log
for i in 1 2 3; do
  log "M=1 bf16 / 4-bit, 2 threads, round $i"
  timeout 60 $B --threads 2 --quick --no-onednn --only qwen3-30b-a3b --formats bf16,mxfp4,nvfp4 --m 1 --budget 0.4 \
    --json $O/m1_2t_$i.json > $O/m1_2t_$i.log 2>&1
  grep -E "^qwen3.* cpu/.*M=1 " $O/m1_2t_$i.log | awk '{print $2, $3, $4, $5, $6, $7}' | tee -a $O/steps.log
done
log "q15 kernels in cache, one core"
timeout 60 $K --isa amx --formats mxfp4,mxfp4-q15,nvfp4,nvfp4-q15,mxfp4-q8 --reps 5 > $O/kernels_q15.log 2>&1
tail -40 $O/kernels_q15.log >> $O/steps.log
log done
