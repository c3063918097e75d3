#!/usr/bin/env bash
# Session 50, device call 2 (CPU only; the host's Xeon, AMX-BF16). Binaries of 58a7013 (the low byte of
# each fp8 VNNI word by one vpmaddubsw; MOERUN_CPU_FP8_DECODE=shift, in that commit only, the old
# decode), `tools/prebuilt.sh pack-cpu`; carry ["build-prebuilt-cpu"].
# 1. fp8_decode_probe.cpp (this folder): the one-token pair stream with the shift decode, the madd one,
#    madd without the normal-code check, no decode, and bf16, alternated, 1 and 2 threads.
# 2. moerun_tests at AMX (the AMX decode stream takes the new decode too).
# 3. MOERUN_CPU_FP8_DECODE=shift against the rule, qwen3-30b-a3b and deepseek-v2-lite fp8-block at one
#    token, 2 threads, alternated call by call in one process (deepseek-v2-lite with
#    DC_AB_MORE=,deepseek-v2-lite); then 4 threads, where the budget allows.
# 4. issue 4's one-token ratio (bf16 over fp8-block), three rounds, one process each.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-580} . tools/device-call-lib.sh
dc_cpu_unpack build-prebuilt-cpu /tmp/s50cpu || { dc_finish; exit 1; }
g++ -O2 -std=c++20 -fopenmp -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 \
  bench/results/2026-12-07_s50_gpu/fp8_decode_probe.cpp -o /tmp/probe > $L/probe_build.log 2>&1 \
  && timeout 60 /tmp/probe 1 11 > $L/probe.log 2>&1
echo "probe rc=$? $(t):" >> $S; grep -E "threads|GiB" $L/probe.log >> $S
[ $(left) -gt 60 ] && { timeout 60 $DC_CPU/moerun_tests --gtest_brief=1 > $L/cpu_tests.log 2>&1
  echo "moerun_tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $L/cpu_tests.log | head -5 | tr '\n' ' ')" >> $S; }
[ $(left) -gt 50 ] && dc_ab ab_fp8_decode 50 --threads 2 --only qwen3-30b-a3b${DC_AB_MORE:-} --m 1 --no-onednn \
  --formats fp8-block --compare-env MOERUN_CPU_FP8_DECODE=shift --budget 3
ratio_round() {
  [ $(left) -gt 30 ] || return
  timeout 30 $DC_CPU/cpu_moe_bench --threads 2 --decode-ratios --formats fp8-block --budget 7 > $L/ratio_r$1.log 2>&1
  echo "decode ratio round $1 rc=$? $(t): $(grep 'faster than bf16' $L/ratio_r$1.log | cut -c1-140)" >> $S
}
ratio_round 1
[ $(left) -gt 40 ] && dc_ab ab_fp8_decode_4t 40 --threads 4 --only qwen3-30b-a3b --m 1 --no-onednn \
  --formats fp8-block --compare-env MOERUN_CPU_FP8_DECODE=shift --budget 3
ratio_round 2
ratio_round 3
dc_finish
