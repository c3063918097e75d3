#!/usr/bin/env bash
# Session 49, device call 1: session 48's call2.sh (not run then), then, on an H200 with time left,
# issue 5's headline from main. Binaries of b9c8e95, packed by `tools/prebuilt.sh pack-cpu` and `pack`;
# carry ["build-prebuilt-cpu", "build-prebuilt"].
# CPU, the host's Xeon (AMX-BF16): one-token bf16-pair layers at AMX take runs of at most 256 bytes per k
# step since 43caa93 (8 blocks of bf16, 16 of fp8); MOERUN_CPU_STREAM_RUN=16 gives the previous rule at
# these shapes, so fp8-block is a control and bf16 measures the change.
# 1. issue 4's one-token fp8-block ratio (bf16 time over fp8-block time) with the rule and with runs of
# 16, one process each, two rounds (first: the device time left is short); 2. moerun_tests at AMX; 3. the
# rule against runs of 16, qwen3 bf16 + fp8-block, deepseek-v2-lite and gpt-oss-20b bf16, 2 threads,
# alternated call by call in one process; 4. qwen3 and deepseek-v2-lite at 4 threads.
# GPU (H200 only, when 300 s are left): tools/gpu-check.sh on the prebuilt binaries (suite, memcheck on
# the M = 0 and graph tests), the sweep against the torch pipeline.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-580} . tools/device-call-lib.sh
dc_cpu_unpack build-prebuilt-cpu /tmp/s49cpu || { dc_finish; exit 1; }
ratio_round() {  # round $1: the rule, then runs of 16, one process each
  for v in rule run16; do
    [ $(left) -gt 30 ] || return
    if [ $v = run16 ]; then env="MOERUN_CPU_STREAM_RUN=16"; else env=""; fi
    env $env timeout 30 $DC_CPU/cpu_moe_bench --threads 2 --decode-ratios --formats fp8-block --budget 7 > $L/ratio_${v}_r$1.log 2>&1
    echo "decode ratio $v [$env] round $1 rc=$? $(t): $(grep 'faster than bf16' $L/ratio_${v}_r$1.log | cut -c1-140)" >> $S
  done
}
ratio_round 1
ratio_round 2
[ $(left) -gt 60 ] && { timeout 60 $DC_CPU/moerun_tests --gtest_brief=1 > $L/cpu_tests.log 2>&1
  echo "moerun_tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $L/cpu_tests.log | head -5 | tr '\n' ' ')" >> $S; }
[ $(left) -gt 45 ] && dc_ab ab_run16_qwen3 45 --threads 2 --only qwen3-30b-a3b --m 1 --no-onednn --formats bf16,fp8-block \
  --compare-env MOERUN_CPU_STREAM_RUN=16 --budget 2.5
[ $(left) -gt 45 ] && dc_ab ab_run16_other 45 --threads 2 --only deepseek-v2-lite,gpt-oss-20b --m 1 --no-onednn --formats bf16 \
  --compare-env MOERUN_CPU_STREAM_RUN=16 --budget 2.5
[ $(left) -gt 45 ] && dc_ab ab_run16_4t 45 --threads 4 --only qwen3-30b-a3b,deepseek-v2-lite --m 1 --no-onednn --formats bf16 \
  --compare-env MOERUN_CPU_STREAM_RUN=16 --budget 2.5
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ $(left) -gt 300 ] && [ -d build-prebuilt ]; then
  OUT=$OUT/gpu GPU_CHECK_PREBUILT=build-prebuilt GPU_CHECK_SANITIZERS=memcheck \
    GPU_CHECK_SANITIZER_FILTER='*MZero*:*Graph*' timeout $(( $(left) - 15 )) bash tools/gpu-check.sh > $L/gpu-check.out 2>&1
  echo "gpu-check rc=$? $(t): $(grep -E 'gpu-check:|PASSED|FAILED' $OUT/gpu/summary.log | tr '\n' ' ')" >> $S
else
  echo "no GPU headline: $(nvidia-smi --query-gpu=name --format=csv,noheader), $(left) s left $(t)" >> $S
fi
dc_finish
