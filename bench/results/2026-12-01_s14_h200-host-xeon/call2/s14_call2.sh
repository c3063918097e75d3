#!/usr/bin/env bash
# Session 14, call 2 (H200 host's Xeon): the gate_up epilogue's whole-row scale/bias passes (0c58e41) against
# 774e3fd: CPU tests at the AMX level, then the two builds alternated (gpt-oss-20b has expert biases;
# deepseek-v2-lite and qwen3 have none: controls), and a profile of each at gpt-oss-20b M = 1024.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
git log --oneline -1 | tee -a $O/steps.log; uptime | tee -a $O/steps.log
log configure+build new and base
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DMOERUN_BENCH_ONEDNN=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
(cd .old/base && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DMOERUN_BENCH_ONEDNN=OFF -DCMAKE_PREFIX_PATH=$PWD/../../.deps/devdeps > $O/build_base.log 2>&1)
cmake --build build-xeon -j16 --target cpu_moe_bench moerun_tests >> $O/build.log 2>&1 || { log BUILD FAILED; grep -E "error" -A3 $O/build.log | head -40 | tee -a $O/steps.log; exit 1; }
cmake --build .old/base/build -j16 --target cpu_moe_bench >> $O/build_base.log 2>&1 || { log BASE BUILD FAILED; exit 1; }
row() { grep -E "^(qwen3|deepseek|gpt)" "$1" | grep -v "th=1 " | awk '{print $1, $3, $4, $6, $7, $NF}' | tee -a $O/steps.log; }
for r in 1 2 3; do
  for v in base new; do
    [ $v = new ] && B=build-xeon/bench/cpu_moe_bench || B=.old/base/build/bench/cpu_moe_bench
    log "round $r $v"
    timeout 75 $B --threads 2 --no-onednn --only gpt-oss-20b,deepseek-v2-lite --formats bf16 --m 256,1024 --budget 0.4 \
      --json $O/ab_${v}_$r.json > $O/ab_${v}_$r.log 2>&1
    row $O/ab_${v}_$r.log
  done
done
log "profiles gpt-oss-20b M=1024"
for v in base new; do
  [ $v = new ] && B=build-xeon/bench/cpu_moe_bench || B=.old/base/build/bench/cpu_moe_bench
  MOERUN_CPU_PROFILE=1 timeout 50 $B --threads 2 --no-onednn --only gpt-oss-20b --formats bf16 --m 1024 --budget 0.5 > $O/prof_$v.log 2>&1
  echo "$v:" | tee -a $O/steps.log; grep -E "wall|busy" $O/prof_$v.log | tee -a $O/steps.log
done
log "CPU tests at the AMX level (conformance, backend)"
timeout 200 build-xeon/tests/moerun_tests --gtest_filter='CpuConformance.*:CpuBackend*' > $O/tests.log 2>&1; log "tests rc=$?"
grep -E "PASSED|FAILED|tests ran" $O/tests.log | head -20 | tee -a $O/steps.log
log done
