#!/usr/bin/env bash
# session 7, call 1 (branch s7-try = main + amx-kchunk-experiment + decode-combine-experiment):
# GPU: build, GPU tests, sanitizers, bench M=1,16 (fused combine on); A/B M=1 with MOERUN_CUDA_FUSED_COMBINE=0/1 alternating.
# Xeon: CPU suite at AMX, cpu_kernel_bench --amx-group, cpu_moe_bench A/B MOERUN_CPU_AMX_GROUP.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
log "xeon build (background)"
( cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/xbuild.log 2>&1 &&
  cmake --build build-xeon -j6 --target cpu_moe_bench cpu_kernel_bench moerun_tests >> $O/xbuild.log 2>&1; echo "xeon build rc=$?" >> $O/xbuild.log ) &
XB=$!
log "gpu-check"
GPU_CHECK_SKIP_CPU=1 GPU_CHECK_SKIP_XEON=1 GPU_CHECK_PACK=0 BENCH_ARGS="--ms 1,16" TORCH_ARGS="--ms 1,16" OUT=$O/gpu timeout 400 bash tools/gpu-check.sh > $O/gpu-check.out 2>&1
grep -E "rc=|SUMMARY|FAILED" $O/gpu/summary.log | tee -a $O/steps.log
wait $XB; tail -1 $O/xbuild.log | tee -a $O/steps.log
if [ -x build-gpu/bench/cuda_moe_bench ]; then
  log "gpu A/B fused combine M=1"
  for i in 1 2; do for k in 0 1; do
    MOERUN_CUDA_FUSED_COMBINE=$k timeout 60 build-gpu/bench/cuda_moe_bench --ms 1 --json $O/m1_fc${k}_$i.json > $O/m1_fc${k}_$i.log 2>&1
    echo "-- fused_combine=$k round $i" >> $O/steps.log; grep -E "^ *(qwen|deepseek|mixtral|gpt)" $O/m1_fc${k}_$i.log | grep -i "cuda" >> $O/steps.log
  done; done
fi
if [ -x build-xeon/tests/moerun_tests ]; then
  log "cpu tests (AMX)"
  timeout 120 ./build-xeon/tests/moerun_tests --gtest_brief=1 > $O/cpu_tests.log 2>&1; echo "cpu tests rc=$?" | tee -a $O/steps.log
  grep -E "FAILED|Failure|tests ran|PASSED" $O/cpu_tests.log | head -20 | tee -a $O/steps.log
  log "amx group kernel bench"
  timeout 90 taskset -c 2 build-xeon/bench/cpu_kernel_bench --amx-group --m 16,32,64,128,256 --reps 15 2>&1 | tee -a $O/steps.log
  B=build-xeon/bench/cpu_moe_bench
  for g in 4 2; do
    log "moe A/B MOERUN_CPU_AMX_GROUP=$g"
    timeout 100 $B --threads 2 --only qwen3-30b-a3b,deepseek-v2-lite --m 64,256,1024 --budget 0.4 --compare-env MOERUN_CPU_AMX_GROUP=$g --json $O/ab_group$g.json > $O/ab_group$g.log 2>&1
    grep -E "^(qwen|deepseek)" $O/ab_group$g.log | grep -E "bf16" | grep -v onednn | tee -a $O/steps.log
  done
fi
log done
