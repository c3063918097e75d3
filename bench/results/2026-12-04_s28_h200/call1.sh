#!/usr/bin/env bash
# Session 28, device call 1: the fused one-token stage again, after session 27's call showed its test
# failing on a chain bug (device hidden states off a 16-byte boundary fault the stream GEMMs' cp.async;
# now staged in DeviceMoe::begin) and the stage 1-3 us slower than the chain.
# 1. The whole GPU suite; memcheck on the fused stage's tests and the misaligned-hidden test.
# 2. ncu: the fused kernel's and the chain kernels' durations and DRAM bytes at qwen3-30b-a3b M = 1.
# 3. A/B (alternated graph replay, memset and read flush) at qwen3-30b-a3b M = 1: the rule (fused,
#    plain loop) against the chain, the L2 prefetch of later units (L2=1, L2=2) and the double-buffered
#    loop (PIPE=1); then with PIPE=1 as the rule, against the chain and the L2 prefetch. Two processes each.
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
T=build-prebuilt/moerun_gpu_tests
B=build-prebuilt/cuda_moe_bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
timeout 180 $T > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$W/tests.log" | head -30
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter='CudaBackend.*OneTokenFused*:*DeviceHiddenOff*' > "$W/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -2 "$W/memcheck.log"
M='gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct'
for v in "X=1" "MOERUN_CUDA_ONE_TOKEN_PIPE=1" "MOERUN_CUDA_ONE_TOKEN_PIPE=1 MOERUN_CUDA_ONE_TOKEN_L2=2" "MOERUN_CUDA_ONE_TOKEN=0"; do
  n=$(echo "$v" | tr ' =' '__')
  env $v timeout 60 ncu --clock-control none --kernel-name regex:'one_token|grouped_gemm|combine' --launch-skip 30 --launch-count 6 \
    --metrics $M --csv $B --shapes qwen3-30b-a3b --ms 1 --no-forced --quick --ab none > "$W/ncu_$n.csv" 2> "$W/ncu_$n.err"
  echo "ncu $v rc=$?"
  grep -E "gpu__time_duration|dram__bytes_read|dram__throughput|hit_rate" "$W/ncu_$n.csv" | awk -F'","' '{printf "%-52s %-12s %s\n", $(NF-2), $NF, substr($5,1,60)}' | head -24
done
for rep in 1 2; do
  timeout 60 $B --shapes qwen3-30b-a3b --ms 1 --no-forced --ab env:MOERUN_CUDA_ONE_TOKEN=0,env:MOERUN_CUDA_ONE_TOKEN_L2=1,env:MOERUN_CUDA_ONE_TOKEN_L2=2,env:MOERUN_CUDA_ONE_TOKEN_PIPE=1 --json "$W/ab_plain_$rep.json" > "$W/ab_plain_$rep.log" 2>&1
  echo "plain rep $rep rc=$?"
  MOERUN_CUDA_ONE_TOKEN_PIPE=1 timeout 60 $B --shapes qwen3-30b-a3b --ms 1 --no-forced --ab env:MOERUN_CUDA_ONE_TOKEN=0,env:MOERUN_CUDA_ONE_TOKEN_L2=1,env:MOERUN_CUDA_ONE_TOKEN_L2=2 --json "$W/ab_pipe_$rep.json" > "$W/ab_pipe_$rep.log" 2>&1
  echo "pipe rep $rep rc=$?"
done
for f in "$W"/ab_*.log; do echo "== $(basename $f)"; grep -E "graph-expert| ab:" "$f" | awk '{printf "%-60s %s\n", $3, $5}'; done
tar czf "$OUT/call1.tgz" -C "$W" . && rm -rf "$W"
