#!/usr/bin/env bash
# Session 47, device call 3: NOT RUN (no device could be started: NOTES.md). To run it on main, which
# now has the runs-of-16 rule, `tools/prebuilt.sh pack-cpu` and carry ["build-prebuilt-cpu"]. CPU only, the
# host's Xeon (AMX-BF16). Call 2 found the one-token pairs' run cap not monotone: against the new rule's
# 16, runs of 24 and of 8 both read faster on bf16 (qwen3-30b-a3b 5% and 7%, deepseek-v2-lite 5% and
# 7%), while 32 read 2% slower in call 1. Its fp8-block rows did not run (deepseek-v2-lite has no
# fp8-block row, which made cpu_moe_bench refuse the filter). So: 1. runs of 8 against
# the rule (MOERUN_CPU_STREAM_RUN sets gemm1's runs and gemm2's groups alike; 16 is the rule's own
# choice at these shapes), qwen3 bf16 and fp8-block, deepseek-v2-lite and gpt-oss-20b bf16, 2 threads;
# 2. issue 4's one-token ratio with runs of 8 and with the rule; 3. if time is left, runs of 12, and
# runs of 8 at 4 threads.
set -uo pipefail
DC_BUDGET=170 . tools/device-call-lib.sh  # (failed starts left about 300 s of the session's device time)
dc_cpu_unpack build-prebuilt-cpu /tmp/s47cpu || exit 1
ab_runs() {  # runs of $1 against the rule, the four one-token rows
  dc_ab ab_run$1_qwen3 40 --threads 2 --only qwen3-30b-a3b --m 1 --no-onednn --formats bf16,fp8-block \
    --compare-env MOERUN_CPU_STREAM_RUN=$1 --budget 2.5
  dc_ab ab_run$1_other 40 --threads 2 --only deepseek-v2-lite,gpt-oss-20b --m 1 --no-onednn --formats bf16 \
    --compare-env MOERUN_CPU_STREAM_RUN=$1 --budget 2.5
}
ab_runs 8
for v in run8 rule; do
  [ $(left) -gt 25 ] || break
  if [ $v = run8 ]; then env="MOERUN_CPU_STREAM_RUN=8"; else env=""; fi
  env $env timeout 30 $DC_CPU/cpu_moe_bench --threads 2 --decode-ratios --formats fp8-block --budget 7 > $L/ratio_$v.log 2>&1
  echo "decode ratio $v [$env] rc=$? $(t): $(grep 'faster than bf16' $L/ratio_$v.log | cut -c1-140)" >> $S
done
[ $(left) -gt 65 ] && ab_runs 12
[ $(left) -gt 45 ] && dc_ab ab_run8_4t 40 --threads 4 --only qwen3-30b-a3b --m 1 --no-onednn --formats bf16,fp8-block \
  --compare-env MOERUN_CPU_STREAM_RUN=8 --budget 2.5
dc_finish
