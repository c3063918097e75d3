#!/usr/bin/env bash
# Session 51, device call 10 (CPU only; the host's Xeon, AMX-BF16): four-block AMX calls for 17-32 rows as
# two 16-row tile_amx4 passes (MOERUN_CPU_AMX_QUAD_ROWS=32, binaries of the commit that adds it) against
# the rule's tile_amx2 pairs: moerun_tests with the knob set (AMX runs only on this host), then
# alternated call by call in one process, bf16, 2 threads, qwen3-30b-a3b and deepseek-v2-lite at 256 tokens.
# Carry ["build-prebuilt-cpu"]; `CALL_BUDGET=115 bash bench/results/2026-12-07_s51_gpu/call10.sh`.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-580} . tools/device-call-lib.sh
dc_cpu_unpack build-prebuilt-cpu /tmp/s51cpu || { dc_finish; exit 1; }
MOERUN_CPU_AMX_QUAD_ROWS=32 timeout 40 $DC_CPU/moerun_tests --gtest_brief=1 > $L/cpu_tests_quad32.log 2>&1
echo "moerun_tests (QUAD_ROWS=32) rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $L/cpu_tests_quad32.log | head -5 | tr '\n' ' ')" >> $S
[ $(left) -gt 35 ] && dc_ab ab_quad32_qwen3 35 --threads 2 --only qwen3-30b-a3b --m 256 --formats bf16 --no-onednn \
  --compare-env MOERUN_CPU_AMX_QUAD_ROWS=32 --budget 3
[ $(left) -gt 30 ] && dc_ab ab_quad32_dsv2 30 --threads 2 --only deepseek-v2-lite --m 256 --formats bf16 --no-onednn \
  --compare-env MOERUN_CPU_AMX_QUAD_ROWS=32 --budget 3
dc_finish
