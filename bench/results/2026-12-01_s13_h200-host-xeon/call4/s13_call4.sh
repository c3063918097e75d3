#!/usr/bin/env bash
# Session 13, call 4 (H200 host's Xeon): split passes (tile_amx2 split_wide): CPU tests at the AMX level, layer A/B.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
git log --oneline -1 | tee -a $O/steps.log; git status --short | head -20 | tee -a $O/steps.log
log configure+build
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-xeon -j16 >> $O/build.log 2>&1 || { log BUILD FAILED; grep -E "error" -A3 $O/build.log | head -40 | tee -a $O/steps.log; exit 1; }
log "CPU tests at the AMX level"
(cd build-xeon && timeout 150 ctest -j8 -R "Cpu|Alloc" --output-on-failure > $O/ctest.log 2>&1); log "ctest rc=$?"
grep -E "tests passed|tests failed" $O/ctest.log | tee -a $O/steps.log
grep -E "\(Failed\)|\(Timeout\)" $O/ctest.log | head -20 | tee -a $O/steps.log
B=build-xeon/bench/cpu_moe_bench
for r in 1 2; do
  log "bf16 layer, split passes against MOERUN_CPU_AMX_SPLIT_WIDE=0, 2 threads, round $r"
  timeout 120 $B --threads 2 --no-onednn --only qwen3-30b-a3b,deepseek-v2-lite --formats bf16 --m 256,1024 --budget 0.5 \
    --compare-env MOERUN_CPU_AMX_SPLIT_WIDE=0 --json $O/split_2t_$r.json > $O/split_2t_$r.log 2>&1
  grep -E "^(limits)" $O/split_2t_$r.log | tee -a $O/steps.log
  grep -E "^(qwen3|deepseek)" $O/split_2t_$r.log | tee -a $O/steps.log
done
log "profile qwen3 bf16 M=1024 2 threads, split on / off"
for v in 1 0; do
  MOERUN_CPU_AMX_SPLIT_WIDE=$v MOERUN_CPU_PROFILE=1 timeout 60 $B --threads 2 --no-onednn --quick --only qwen3-30b-a3b --formats bf16 --m 1024 --budget 0.5 > $O/prof_$v.log 2>&1
  grep -iE "gemm|forward|tile" $O/prof_$v.log | head -12 | tee -a $O/steps.log
done
