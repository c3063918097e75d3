#!/usr/bin/env bash
# Session 48, device call 2. CPU only, the host's Xeon (AMX-BF16). Binaries of 43caa93: one-token
# bf16-pair layers at AMX take runs of at most 256 bytes per k step (runner.cpp, kAmxPairRunBytesPerK:
# 8 blocks of bf16, 16 of fp8), packed by `tools/prebuilt.sh pack-cpu`; carry ["build-prebuilt-cpu"].
# MOERUN_CPU_STREAM_RUN=16 gives the previous rule at these shapes, so fp8-block is a control (16 both
# ways) and bf16 measures the change.
# 1. moerun_tests at AMX; 2. issue 4's one-token fp8-block ratio (bf16 time over fp8-block time: the
# faster bf16 lowers it) with the rule and with runs of 16, one process each; 3. the rule against runs
# of 16, qwen3 bf16 + fp8-block, deepseek-v2-lite and gpt-oss-20b bf16, 2 threads, alternated call by
# call in one process; 4. the ratios' second round; 5. qwen3 and deepseek-v2-lite at 4 threads.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-250} . tools/device-call-lib.sh  # (failed starts left little device time: the call names it)
dc_cpu_unpack build-prebuilt-cpu /tmp/s48cpu || { dc_finish; exit 1; }
timeout 60 $DC_CPU/moerun_tests --gtest_brief=1 > $L/cpu_tests.log 2>&1
echo "moerun_tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $L/cpu_tests.log | head -5 | tr '\n' ' ')" >> $S
ratio_round() {  # round $1: the rule, then runs of 16, one process each
  for v in rule run16; do
    [ $(left) -gt 30 ] || return
    if [ $v = run16 ]; then env="MOERUN_CPU_STREAM_RUN=16"; else env=""; fi
    env $env timeout 30 $DC_CPU/cpu_moe_bench --threads 2 --decode-ratios --formats fp8-block --budget 7 > $L/ratio_${v}_r$1.log 2>&1
    echo "decode ratio $v [$env] round $1 rc=$? $(t): $(grep 'faster than bf16' $L/ratio_${v}_r$1.log | cut -c1-140)" >> $S
  done
}
ratio_round 1
[ $(left) -gt 45 ] && dc_ab ab_run16_qwen3 45 --threads 2 --only qwen3-30b-a3b --m 1 --no-onednn --formats bf16,fp8-block \
  --compare-env MOERUN_CPU_STREAM_RUN=16 --budget 2.5
[ $(left) -gt 45 ] && dc_ab ab_run16_other 45 --threads 2 --only deepseek-v2-lite,gpt-oss-20b --m 1 --no-onednn --formats bf16 \
  --compare-env MOERUN_CPU_STREAM_RUN=16 --budget 2.5
ratio_round 2
[ $(left) -gt 45 ] && dc_ab ab_run16_4t 45 --threads 4 --only qwen3-30b-a3b,deepseek-v2-lite --m 1 --no-onednn --formats bf16 \
  --compare-env MOERUN_CPU_STREAM_RUN=16 --budget 2.5
dc_finish
