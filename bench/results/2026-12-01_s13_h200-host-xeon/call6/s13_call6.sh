#!/usr/bin/env bash
# Session 13, call 6 (H200 host's Xeon): bf16 calls of 17-128 tokens per expert on the AMX decode stream
# (MOERUN_CPU_STREAM_MAX_TOKENS=128) against the AMX tiles (the cut of 16), alternating in one process.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
log configure+build
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-xeon -j16 --target cpu_moe_bench >> $O/build.log 2>&1 || { log BUILD FAILED; exit 1; }
B=build-xeon/bench/cpu_moe_bench
for r in 1 2; do
  log "round $r: qwen3, deepseek-v2-lite, gpt-oss-20b bf16 M 256, 1024"
  timeout 170 $B --threads 2 --no-onednn --only qwen3-30b-a3b,deepseek-v2-lite,gpt-oss-20b --formats bf16 --m 256,1024 --budget 0.4 \
    --compare-env MOERUN_CPU_STREAM_MAX_TOKENS=128 --json $O/cut128_$r.json > $O/cut128_$r.log 2>&1
  grep -E "^(limits)" $O/cut128_$r.log | tee -a $O/steps.log
  grep -E "^(qwen3|deepseek|gpt)" $O/cut128_$r.log | grep -v "th=1 " | awk '{print $1, $3, $4, $6, $7}' | tee -a $O/steps.log
  log "round $r: mixtral bf16 M 256"
  timeout 60 $B --threads 2 --no-onednn --only mixtral-8x7b --formats bf16 --m 256 --budget 0.4 \
    --compare-env MOERUN_CPU_STREAM_MAX_TOKENS=128 --json $O/cut128_mixtral_$r.json > $O/cut128_mixtral_$r.log 2>&1
  grep -E "^(mixtral)" $O/cut128_mixtral_$r.log | grep -v "th=1 " | awk '{print $1, $3, $4, $6, $7}' | tee -a $O/steps.log
done
