#!/usr/bin/env bash
# Session 13, call 7 (H200 host's Xeon): the bf16 AMX stream cut at 24 and 32 tokens per expert against 16,
# M = 256 (16, 24 and 32 tokens per expert on qwen3, deepseek-v2-lite, gpt-oss-20b), alternating in one process.
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
for r in 1 2 3; do
  for n in 32 24; do
    log "round $r: cut $n against 16"
    timeout 80 $B --threads 2 --no-onednn --only qwen3-30b-a3b,deepseek-v2-lite,gpt-oss-20b --formats bf16 --m 256 --budget 0.4 \
      --compare-env MOERUN_CPU_STREAM_MAX_TOKENS=$n --json $O/cut${n}_$r.json > $O/cut${n}_$r.log 2>&1
    grep -E "^(limits)" $O/cut${n}_$r.log | tee -a $O/steps.log
    grep -E "^(qwen3|deepseek|gpt)" $O/cut${n}_$r.log | grep -v "th=1 " | grep "M=256" | awk '{print $1, $3, $4, $6, $7}' | tee -a $O/steps.log
  done
done
