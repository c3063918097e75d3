#!/usr/bin/env bash
# Session 9, call 5 (branch cpu-nvfp4-scale-pair at 86e57ca; main's tree in .old/main-src):
# 1. gpu-check (GPU tests, CPU suite at AMX with the exact-decode test fixed, sanitizers);
# 2. runner creation with the per-shape cache (first and second runner of each shape);
# 3. nvfp4 scale pairs against main again: kernel bench three alternations, layer two.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
log "gpu-check (builds everything)"
OUT=$O/gc GPU_CHECK_SKIP_XEON=1 GPU_CHECK_SKIP_BENCH=1 bash tools/gpu-check.sh > $O/gc.out 2>&1
grep -E "tests rc|PASSED|FAILED|SUMMARY|rc=" $O/gc/summary.log | tee -a $O/steps.log
log "runner creation (cache)"
timeout 120 build-gpu/bench/cuda_moe_bench --ms 1 --no-forced --json $O/create.json > $O/create.log 2>&1
grep -E "created in|cuda-graph-expert" $O/create.log | tee -a $O/steps.log
log "cpu builds"
P="-DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps -DMOERUN_CUDA=OFF"
ln -sfn $PWD/.deps .old/main-src/.deps
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON $P > $O/build.log 2>&1
cmake -S .old/main-src -B build-main -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON $P > $O/build-main.log 2>&1
cmake --build build-xeon -j16 --target cpu_moe_bench cpu_kernel_bench >> $O/build.log 2>&1 || { grep -E " error|Error:" $O/build.log | head; exit 1; }
cmake --build build-main -j16 --target cpu_moe_bench cpu_kernel_bench >> $O/build-main.log 2>&1 || { grep -E " error|Error:" $O/build-main.log | head; exit 1; }
log "kernel bench (avx512-bf16, one core), main then branch, three times"
for i in 1 2 3; do for v in main xeon; do
  echo "-- $v" >> $O/kernel.log
  timeout 60 taskset -c 2 build-$v/bench/cpu_kernel_bench --isa avx512-bf16 --formats nvfp4,mxfp4 --m 1 --reps 15 >> $O/kernel.log 2>&1
done; done
grep -E "^-- |m=1 " $O/kernel.log | tee -a $O/steps.log
log "layer rows (qwen3, M = 1), alternating binaries"
for i in 1 2; do for v in main xeon; do
  log "layer $v $i"
  timeout 80 build-$v/bench/cpu_moe_bench --threads 2 --quick --only qwen3-30b-a3b --m 1 --budget 0.4 --json $O/layer_${v}_$i.json > $O/layer_${v}_$i.log 2>&1
  grep -E "th=2" $O/layer_${v}_$i.log | grep -E " cpu/" | awk '{print $2, $3, $6}' | tee -a $O/steps.log
done; done
log done
