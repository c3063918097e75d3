#!/usr/bin/env bash
# Session 13, call 8 (H200 host's Xeon): panel_bf16_vnni (converted AMX panels decoded straight to bf16):
# the CPU tests it touches at the AMX level, the panel microbenchmark, and base (HEAD) against new in the layer.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
log build new and base
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DMOERUN_BENCH_ONEDNN=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-xeon -j16 >> $O/build.log 2>&1 || { log BUILD FAILED; grep error -A3 $O/build.log | head -30 | tee -a $O/steps.log; exit 1; }
cmake -S .old/base -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DMOERUN_BENCH_ONEDNN=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build_base.log 2>&1
cmake --build build-base -j16 --target cpu_moe_bench >> $O/build_base.log 2>&1 || { log BASE BUILD FAILED; exit 1; }
log "tests at the AMX level"
(cd build-xeon && timeout 110 ctest -j12 -R "CpuKernels|CpuBackendFormats|AmxOneAndTwo|Alloc" --output-on-failure > $O/ctest.log 2>&1); log "ctest rc=$?"
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)" $O/ctest.log | tee -a $O/steps.log
log "panels microbenchmark, one thread"
timeout 30 build-xeon/bench/cpu_kernel_bench --panels --reps 15 > $O/panels.log 2>&1; cat $O/panels.log | tee -a $O/steps.log
for r in 1 2; do
  for v in base new; do
    b=build-xeon/bench/cpu_moe_bench; [ $v = base ] && b=build-base/bench/cpu_moe_bench
    log "round $r $v"
    timeout 40 $b --threads 2 --no-onednn --quick --only qwen3-30b-a3b --formats int8-channel,fp8-block,mxfp4 --m 256,1024 --budget 0.3 --json $O/${v}_qwen3_$r.json > $O/${v}_qwen3_$r.log 2>&1
    grep -E "^qwen3" $O/${v}_qwen3_$r.log | grep "th=2" | awk '{print $1, $2, $4, $6, $7}' | tee -a $O/steps.log
    timeout 30 $b --threads 2 --no-onednn --quick --only gpt-oss-20b --formats mxfp4 --m 1024 --budget 0.3 --json $O/${v}_gptoss_$r.json > $O/${v}_gptoss_$r.log 2>&1
    grep -E "^gpt" $O/${v}_gptoss_$r.log | grep "th=2" | awk '{print $1, $2, $4, $6, $7}' | tee -a $O/steps.log
  done
done
