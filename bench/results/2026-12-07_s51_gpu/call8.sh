#!/usr/bin/env bash
# Session 51, device call 8 (CPU only; the host's Xeon, AMX-BF16): the final binaries (a2d44cc: the fp8
# scale slots and the tick-reading profile) on another machine of the kind: moerun_tests at AMX, then
# issue 4's one-token fp8 ratio, three rounds, one process each, with each process's read bandwidth.
# Carry ["build-prebuilt-cpu"]; `CALL_BUDGET=150 bash bench/results/2026-12-07_s51_gpu/call8.sh`.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-580} . tools/device-call-lib.sh
dc_cpu_unpack build-prebuilt-cpu /tmp/s51cpu || { dc_finish; exit 1; }
timeout 60 $DC_CPU/moerun_tests --gtest_brief=1 > $L/cpu_tests.log 2>&1
echo "moerun_tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $L/cpu_tests.log | head -5 | tr '\n' ' ')" >> $S
for r in 1 2 3; do
  [ $(left) -gt 30 ] || break
  timeout 30 $DC_CPU/cpu_moe_bench --threads 2 --decode-ratios --formats fp8-block --budget 7 > $L/ratio_r$r.log 2>&1
  echo "ratio r$r rc=$? $(t): $(grep 'faster than bf16' $L/ratio_r$r.log | cut -c1-130) | $(grep -m1 '^limits' $L/ratio_r$r.log | cut -c29-60)" >> $S
  grep -E "^qwen3.*M=1 " $L/ratio_r$r.log | awk '{print "    " $2, $6, $7, $8, $9}' >> $S
done
dc_finish
