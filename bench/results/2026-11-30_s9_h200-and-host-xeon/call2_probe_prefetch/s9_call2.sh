#!/usr/bin/env bash
# Session 9, call 2 (main checked out): 1. the e2m1/fp8 decode probe (.old/s9_decode_probe.cpp) on the host's
# Xeon, one thread and two at once; 2. the software prefetch distance in the layer at one token, per
# format: cpu_moe_bench --quick --only qwen3 --m 1 --compare-env MOERUN_CPU_PREFETCH=<d> (call by call
# against the default 4096) for d = 2048, 8192, 16384.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
lscpu > $O/lscpu.txt 2>&1
log probe build
g++ -O3 -march=sapphirerapids -std=c++20 .old/s9_decode_probe.cpp -o /tmp/dprobe 2> $O/probe_build.log || { echo probe build failed; cat $O/probe_build.log; }
log probe one thread
taskset -c 2 /tmp/dprobe 3 > $O/probe1.txt 2>&1
log probe two at once
taskset -c 3 /tmp/dprobe 2 > $O/probe2b.txt 2>&1 & taskset -c 2 /tmp/dprobe 2 > $O/probe2a.txt 2>&1; wait
log xeon build
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-xeon -j16 --target cpu_moe_bench >> $O/build.log 2>&1 || { log build failed; tail -30 $O/build.log; exit 1; }
for d in 2048 8192 16384; do
  log "prefetch $d vs 4096"
  timeout 100 build-xeon/bench/cpu_moe_bench --threads 2 --quick --only qwen3-30b-a3b --m 1 --budget 0.4 \
    --compare-env MOERUN_CPU_PREFETCH=$d --json $O/pf_$d.json > $O/pf_$d.log 2>&1
  grep -E "cpu-alt|^qwen3.* cpu " $O/pf_$d.log | grep -v reference | tee -a $O/steps.log
done
log done
