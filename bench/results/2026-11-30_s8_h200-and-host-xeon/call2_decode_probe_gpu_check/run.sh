#!/usr/bin/env bash
# Session 8, call 2 (main checked out): 1. the one-token decode probe (.old/s8_decode_probe.cpp) on the
# host's Xeon, one thread and two at once; 2. gpu-check on main (tests + sanitizers: the l2_slice
# rounding of 85cddd0 on the GPU), then the small-M rows with the forced variants, twice.
set -uo pipefail
cd "$(dirname "$0")/.."
R=$OUT; mkdir -p $R/probe
g++ -O3 -march=sapphirerapids -std=c++20 .old/s8_decode_probe.cpp -o /tmp/dprobe 2> $R/probe/build.log || { echo probe build failed; cat $R/probe/build.log; }
lscpu > $R/probe/lscpu.txt 2>&1
(
 echo "== one thread, cpu 2"; taskset -c 2 /tmp/dprobe 3
 echo "== two at once, cpus 2 and 3"; taskset -c 3 /tmp/dprobe 2 > $R/probe/second.txt & taskset -c 2 /tmp/dprobe 2; wait; echo "-- the other:"; cat $R/probe/second.txt
) > $R/probe/probe.txt 2>&1
cat $R/probe/probe.txt
mkdir -p $R/gc
OUT=$R/gc GPU_CHECK_SKIP_CPU=1 GPU_CHECK_SKIP_XEON=1 GPU_CHECK_SKIP_BENCH=1 bash tools/gpu-check.sh > $R/gc.out 2>&1
tail -25 $R/gc.out
for i in 1 2; do
  timeout 150 build-gpu/bench/cuda_moe_bench --ms 1,16 --json $R/small$i.json > $R/small$i.log 2>&1
  echo "small bench $i rc=$?"
done
cd $R && tar czf $R/all.tgz probe gc small*.log small*.json gc.out 2>/dev/null; true
