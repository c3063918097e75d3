#!/usr/bin/env bash
# Session 51, device call 7 (CPU only; the host's Xeon, AMX-BF16): what MOERUN_CPU_PROFILE=1 costs, before
# and after a8e0f02 (busy time in TSC ticks instead of omp_get_wtime). Calls 4-5 read qwen3-30b-a3b bf16
# M = 256 at 66 ms with the profile, call 6 at 44-47 ms without.
# Carry ["build-prebuilt-cpu", "build-prebuilt-cpu-f1"] (a8e0f02 and f1bf812, `tools/prebuilt.sh pack-cpu`
# each); `CALL_BUDGET=200 bash bench/results/2026-12-07_s51_gpu/call7.sh`.
# 1. the clock source and what one read costs (clock_probe.cpp);
# 2. each binary with the profile against without, alternated call by call in one process, M = 256,
#    then M = 1; the profiled runners' reports are in the logs.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-580} . tools/device-call-lib.sh
echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource) (available: $(cat /sys/devices/system/clocksource/clocksource0/available_clocksource))" >> $S
g++ -O2 -fopenmp bench/results/2026-12-07_s51_gpu/clock_probe.cpp -o /tmp/clock_probe > $L/probe_build.log 2>&1 \
  && timeout 20 /tmp/clock_probe > $L/clock_probe.log 2>&1
echo "clock probe rc=$? $(t):" >> $S; cat $L/clock_probe.log >> $S
dc_cpu_unpack build-prebuilt-cpu-f1 /tmp/s51f1 || { dc_finish; exit 1; }
OLD=$DC_CPU
dc_cpu_unpack build-prebuilt-cpu /tmp/s51new || { dc_finish; exit 1; }
NEW=$DC_CPU
for m in 256 1; do
  for v in old new; do
    [ $(left) -gt 40 ] || break 2
    DC_CPU=$OLD; [ $v = new ] && DC_CPU=$NEW
    dc_ab ab_profile_${v}_m$m 40 --threads 2 --only qwen3-30b-a3b --m $m --formats bf16 --no-onednn \
      --compare-env MOERUN_CPU_PROFILE=1 --budget 3
    grep -m1 -A3 "moerun cpu profile" $L/ab_profile_${v}_m$m.log | sed "s/^/  $v: /" >> $S
  done
done
dc_finish
