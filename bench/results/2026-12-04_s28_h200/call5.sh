#!/usr/bin/env bash
# Session 28, device call 5: when the fused one-token stage's down slice comes (MOERUN_CUDA_ONE_TOKEN_SLICE:
# start = bulk copy to shared memory first; late = after the CTA's gate_up loads; none = read from
# global after the barrier; l2 = prefetched to L2 at the start). Tests; memcheck; ncu duration, DRAM and
# stalls per mode; A/B of each against the chain at qwen3-30b-a3b M = 1, two processes.
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
T=build-prebuilt/moerun_gpu_tests
B=build-prebuilt/cuda_moe_bench
F='CudaBackend.*OneToken*:CudaLaunch.OneToken*:*DeviceHiddenOff*'
timeout 120 $T --gtest_filter="$F" > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$W/tests.log" | head -20
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter='CudaBackend.SmallOneTokenFused*' > "$W/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -1 "$W/memcheck.log"
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__cycles_active.avg,smsp__warps_issue_stalled_long_scoreboard.avg,smsp__warps_issue_stalled_barrier.avg,smsp__warps_issue_stalled_short_scoreboard.avg,smsp__warps_issue_stalled_wait.avg,smsp__warps_issue_stalled_sleeping.avg,smsp__warps_issue_stalled_selected.avg
for mode in start late none l2; do
  MOERUN_CUDA_ONE_TOKEN_SLICE=$mode timeout 90 ncu --clock-control none --kernel-name regex:'one_token_kernel' --launch-skip 5 --launch-count 2 --metrics $M \
    $B --shapes qwen3-30b-a3b --ms 1 --no-forced --quick --ab none > "$W/ncu_$mode.txt" 2> "$W/ncu_$mode.err"
  echo "ncu $mode rc=$?"; sed -n '/one_token_kernel/,$p' "$W/ncu_$mode.txt" | grep -E "stalled|duration|bytes|throughput|cycles_active" | awk '{print $1, $(NF)}' | paste -sd' '
done
AB=env:MOERUN_CUDA_ONE_TOKEN=0,env:MOERUN_CUDA_ONE_TOKEN_SLICE=late,env:MOERUN_CUDA_ONE_TOKEN_SLICE=none,env:MOERUN_CUDA_ONE_TOKEN_SLICE=l2
for rep in 1 2; do
  timeout 90 $B --shapes qwen3-30b-a3b --ms 1 --no-forced --ab $AB --json "$W/ab_$rep.json" > "$W/ab_$rep.log" 2>&1
  echo "rep $rep rc=$?"; grep -E "graph-expert| ab:" "$W/ab_$rep.log" | awk '{printf "%-60s %s\n", $3, $5}'
done
tar czf "$OUT/call5.tgz" -C "$W" . && rm -rf "$W"
