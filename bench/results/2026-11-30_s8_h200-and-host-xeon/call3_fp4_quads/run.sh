#!/usr/bin/env bash
# Session 8, call 3 (branch fp4-quads checked out; main's tree in .old/main-src): the 4-bit quads against
# main on the host's Xeon: CPU suite at AMX, kernel bench, layer rows alternated between the binaries.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
log build
P="-DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps -DMOERUN_CUDA=OFF"
ln -sfn $PWD/.deps .old/main-src/.deps
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON $P > $O/build.log 2>&1
cmake -S .old/main-src -B build-main -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON $P > $O/build-main.log 2>&1
cmake --build build-xeon -j16 --target cpu_moe_bench cpu_kernel_bench moerun_tests >> $O/build.log 2>&1 || { grep -E " error|Error:" $O/build.log | head; exit 1; }
cmake --build build-main -j16 --target cpu_moe_bench cpu_kernel_bench >> $O/build-main.log 2>&1 || { grep -E " error|Error:" $O/build-main.log | head; exit 1; }
log "cpu tests"
timeout 150 ./build-xeon/tests/moerun_tests --gtest_brief=1 > $O/cpu_tests.log 2>&1; echo "cpu tests rc=$?" | tee -a $O/steps.log
grep -E "FAILED|Failure|tests ran|PASSED|SKIPPED" $O/cpu_tests.log | head -20 | tee -a $O/steps.log
log "kernel bench (avx512-bf16, one core), main then quads, twice"
for i in 1 2; do for v in main xeon; do
  echo "-- $v" >> $O/kernel.log
  timeout 60 taskset -c 2 build-$v/bench/cpu_kernel_bench --isa avx512-bf16 --formats mxfp4,nvfp4,bf16 --reps 7 >> $O/kernel.log 2>&1
done; done
grep -E "^-- |m=1 |m=2 |m=4 " $O/kernel.log | tee -a $O/steps.log
log "layer rows, alternating binaries"
for i in 1 2; do for v in main xeon; do
  log "layer $v $i"
  timeout 110 build-$v/bench/cpu_moe_bench --threads 2 --only qwen3-30b-a3b,gpt-oss-20b --m 1,64 --budget 0.3 --json $O/layer_${v}_$i.json > $O/layer_${v}_$i.log 2>&1
  grep -E "^(qwen3|gpt)" $O/layer_${v}_$i.log | grep -E " cpu/" | tee -a $O/steps.log
done; done
log done
