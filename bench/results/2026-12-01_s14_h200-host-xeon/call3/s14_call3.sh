#!/usr/bin/env bash
# Session 14, call 3 (H200 host's Xeon): MOERUN_CPU_DOWN_GROUP=16 against the automatic group at M = 1024, four
# rounds in one process each; then the headline CPU benchmark at HEAD (2 threads, every row).
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
uptime | tee -a $O/steps.log
log configure+build
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-xeon -j16 --target cpu_moe_bench >> $O/build.log 2>&1 || { log BUILD FAILED; exit 1; }
B=build-xeon/bench/cpu_moe_bench
for r in 1 2 3 4; do
  log "down group 16 vs automatic, bf16 M=1024, round $r"
  timeout 45 $B --threads 2 --no-onednn --only qwen3-30b-a3b,deepseek-v2-lite,gpt-oss-20b --formats bf16 --m 1024 --budget 0.4 \
    --compare-env MOERUN_CPU_DOWN_GROUP=16 --json $O/down16_$r.json > $O/down16_$r.log 2>&1
  grep -E "^(qwen3|deepseek|gpt)" $O/down16_$r.log | grep -v "th=1 " | awk '{print $1, $3, $4, $6, $7}' | tee -a $O/steps.log
done
log "xeon-bench, 2 threads"
XEON_BENCH_THREADS=2 XEON_BENCH_LIMIT=330 XEON_BENCH_SWEEP= timeout 400 bash tools/xeon-bench.sh build-xeon $O/xb > $O/xb.out 2>&1; log "xeon-bench rc=$?"
grep -E "^(limits|amx)" $O/xb/cpu_2t.log | tee -a $O/steps.log
log done
