#!/usr/bin/env bash
# Session 14, call 1 (H200 host's Xeon): huge pages for the packed weights and workspaces against 4 KiB pages
# (MOERUN_CPU_HUGEPAGES=0), down-group sizes at M = 256 / 1024, profiles of the M = 1024 rows, and the decoded
# formats' stream cut 32 vs 64 — all side by side in one process, 2 threads.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
{ lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA|L2|L3)'; echo "THP enabled: $(cat /sys/kernel/mm/transparent_hugepage/enabled)";
  echo "THP defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag)"; grep -E 'AnonHugePages|HugePages_Total|MemFree|MemAvailable' /proc/meminfo;
  uptime; } | tee -a $O/steps.log
log configure+build
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DMOERUN_BENCH_ONEDNN=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-xeon -j16 --target cpu_moe_bench >> $O/build.log 2>&1 || { log BUILD FAILED; tail -30 $O/build.log; exit 1; }
B=build-xeon/bench/cpu_moe_bench
row() { grep -E "^(qwen3|deepseek|gpt|mixtral)" "$1" | grep -v "th=1 " | awk '{print $1, $2, $3, $4, $6, $7, $NF}' | tee -a $O/steps.log; }
for r in 1 2; do
  log "round $r: huge pages vs MOERUN_CPU_HUGEPAGES=0, bf16"
  timeout 150 $B --threads 2 --only qwen3-30b-a3b,deepseek-v2-lite,gpt-oss-20b --formats bf16 --m 1,16,256,1024 --budget 0.5 \
    --compare-env MOERUN_CPU_HUGEPAGES=0 --json $O/huge_$r.json > $O/huge_$r.log 2>&1
  grep -E "^(limits|huge)" $O/huge_$r.log | tee -a $O/steps.log; row $O/huge_$r.log
done
log "huge pages vs 4k, mxfp4 / fp8-block qwen3 M=1,64"
timeout 80 $B --threads 2 --only qwen3-30b-a3b --formats mxfp4,fp8-block --m 1,64 --budget 0.5 \
  --compare-env MOERUN_CPU_HUGEPAGES=0 --json $O/huge_q.json > $O/huge_q.log 2>&1
row $O/huge_q.log
for g in 16 32; do
  log "down group $g vs automatic, bf16 M=256,1024"
  timeout 100 $B --threads 2 --only qwen3-30b-a3b,deepseek-v2-lite,gpt-oss-20b --formats bf16 --m 256,1024 --budget 0.5 \
    --compare-env MOERUN_CPU_DOWN_GROUP=$g --json $O/down$g.json > $O/down$g.log 2>&1
  row $O/down$g.log
done
log "decoded stream cut 32 vs 64: qwen3 mxfp4, fp8-block M=512,1024"
timeout 100 $B --threads 2 --only qwen3-30b-a3b --formats mxfp4,fp8-block --m 512,1024 --budget 0.5 \
  --compare-env MOERUN_CPU_STREAM_MAX_TOKENS=32 --json $O/cut32.json > $O/cut32.log 2>&1
row $O/cut32.log
log "profiles M=1024"
for s in deepseek-v2-lite gpt-oss-20b qwen3-30b-a3b; do
  MOERUN_CPU_PROFILE=1 timeout 60 $B --threads 2 --only $s --formats bf16 --m 1024 --budget 0.5 > $O/prof_$s.log 2>&1
  grep -E "wall|busy" $O/prof_$s.log | tee -a $O/steps.log
done
log done
