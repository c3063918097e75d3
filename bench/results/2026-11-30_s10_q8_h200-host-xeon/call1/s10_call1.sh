#!/usr/bin/env bash
# Session 10, call 1: the q8 kernel (int8 activations, 4-bit weights) on the H200 host's Xeon.
#   run: bash .old/s10_call1.sh > $OUT/run.out 2>&1; cat $OUT/r/steps.log   carry: [".deps", ".old"]
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
lscpu | grep -E "Model name|^CPU\(s\)" | tee -a $O/steps.log
echo "flags: $(grep -o -w -E 'avx512_vnni|avx512vbmi|avx512_bf16|amx_int8|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')" | tee -a $O/steps.log
log configure+build
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-xeon -j16 >> $O/build.log 2>&1 || { log BUILD FAILED; grep -E "error" -A3 $O/build.log | head -40 | tee -a $O/steps.log; exit 1; }
log "tests (the CPU suite at the detected level)"
(cd build-xeon && timeout 300 ctest -j8 --output-on-failure > $O/ctest.log 2>&1); log "ctest rc=$?"
grep -E "tests passed|tests failed" $O/ctest.log | tee -a $O/steps.log
grep -E "\(Failed\)|\(Timeout\)|Skipped\)" $O/ctest.log | head -20 | tee -a $O/steps.log
grep -B2 -A12 "Failure\|FAILED  \]" $O/ctest.log | head -60 >> $O/steps.log
log "kernel bench, one core"
taskset -c 2 timeout 150 build-xeon/bench/cpu_kernel_bench --isa avx512-bf16 --variants v2 --formats mxfp4,mxfp4-q8,nvfp4,nvfp4-q8 --m 1,2,4,8,16 --reps 15 > $O/kbench.log 2>&1
cat $O/kbench.log >> $O/steps.log
F=bf16,mxfp4,nvfp4,mxfp4+int8-token-group,nvfp4+int8-token-group
for i in 1 2 3; do
  log "layer M=1 round $i"
  timeout 100 build-xeon/bench/cpu_moe_bench --threads 2 --quick --only qwen3-30b-a3b --formats $F --m 1 --budget 0.4 --json $O/layer_$i.json > $O/layer_$i.log 2>&1
  grep -E "^qwen3.* cpu/" $O/layer_$i.log | awk '{print $2, $3, $4, $6, $7}' | tee -a $O/steps.log
done
log "q8 against MOERUN_CPU_Q8=0, same process"
timeout 150 build-xeon/bench/cpu_moe_bench --threads 2 --only qwen3-30b-a3b --formats mxfp4+int8-token-group,nvfp4+int8-token-group --m 1,4,16,64 --budget 0.3 --compare-env MOERUN_CPU_Q8=0 --json $O/cmp.json > $O/cmp.log 2>&1
grep -E "^qwen3" $O/cmp.log | awk '{print $2, $3, $4, $6, $7}' | tee -a $O/steps.log
log done
