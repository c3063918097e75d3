#!/usr/bin/env bash
# Session 28, device call 4: the fused one-token stage with gate_up's (slot, column) items taken from a
# grid-wide counter (call 3: the static split left its warps a quarter of the time in barriers).
# Its tests and the ones beside it; memcheck on them, racecheck on the small one; ncu duration, DRAM
# rate and stalls; A/B against the chain at qwen3-30b-a3b M = 1, two processes.
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
T=build-prebuilt/moerun_gpu_tests
B=build-prebuilt/cuda_moe_bench
F='CudaBackend.*OneToken*:CudaLaunch.OneToken*:*DeviceHiddenOff*:CudaBackend.*GraphReplayEqualsEager*:CudaBackend.SmallTunedRunner*'
timeout 120 $T --gtest_filter="$F" > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$W/tests.log" | head -20
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $T --gtest_filter='CudaBackend.*OneTokenFused*:*DeviceHiddenOff*/0' > "$W/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -1 "$W/memcheck.log"
timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 $T --gtest_filter='CudaBackend.SmallOneTokenFused*' > "$W/racecheck.log" 2>&1
echo "racecheck rc=$?"; tail -1 "$W/racecheck.log"
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__cycles_active.avg,smsp__warps_issue_stalled_long_scoreboard.avg,smsp__warps_issue_stalled_barrier.avg,smsp__warps_issue_stalled_short_scoreboard.avg,smsp__warps_issue_stalled_wait.avg,smsp__warps_issue_stalled_lg_throttle.avg,smsp__warps_issue_stalled_selected.avg
timeout 90 ncu --clock-control none --kernel-name regex:'one_token_kernel' --launch-skip 5 --launch-count 2 --metrics $M \
  $B --shapes qwen3-30b-a3b --ms 1 --no-forced --quick --ab none > "$W/ncu.txt" 2> "$W/ncu.err"
echo "ncu rc=$?"; sed -n '/one_token_kernel/,$p' "$W/ncu.txt" | grep -E "stalled|duration|bytes|throughput|cycles_active"
for rep in 1 2; do
  timeout 60 $B --shapes qwen3-30b-a3b --ms 1 --no-forced --ab env:MOERUN_CUDA_ONE_TOKEN=0 --json "$W/ab_$rep.json" > "$W/ab_$rep.log" 2>&1
  echo "rep $rep rc=$?"; grep -E "graph-expert| ab:" "$W/ab_$rep.log" | awk '{printf "%-60s %s\n", $3, $5}'
done
tar czf "$OUT/call4.tgz" -C "$W" . && rm -rf "$W"
