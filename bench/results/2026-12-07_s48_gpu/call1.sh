#!/usr/bin/env bash
# Session 48, device call 1, asked for as nvidia-h200. Binaries of main 1d4b9b8, packed by
# `tools/prebuilt.sh pack` and `pack-cpu`; carry ["build-prebuilt", "build-prebuilt-cpu"].
# GPU first: issue 5's headline from the current main (the last H200 table is session 42's; only H100s
# have run the kernels since): tools/gpu-check.sh on the prebuilt binaries into $OUT/gpu (suite, CPU
# suite, memcheck on the M = 0 and graph tests only: the code's sanitizer runs were on an H100 in session
# 47, and the device time is short), the sweep against the torch pipeline, then one token through a
# stack of 8 layers as a decode step sees it.
# CPU after it, the host's Xeon (AMX-BF16), with what time is left: session 47's call3.sh, not run then.
# Session 47 found the one-token pairs' run cap not monotone: against the rule's 16, runs of 24 and of 8
# both read faster on bf16 (qwen3-30b-a3b 5% and 7%, deepseek-v2-lite 5% and 7%), 32 read 2% slower.
# So: 1. runs of 8 against the rule (MOERUN_CPU_STREAM_RUN sets gemm1's runs and gemm2's groups alike),
# qwen3 bf16 and fp8-block, deepseek-v2-lite and gpt-oss-20b bf16, 2 threads; 2. issue 4's one-token
# ratio with runs of 8 and with the rule; 3. runs of 12; 4. runs of 8 at 4 threads.
set -uo pipefail
DC_BUDGET=565 . tools/device-call-lib.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  OUT=$OUT/gpu GPU_CHECK_PREBUILT=build-prebuilt GPU_CHECK_SANITIZERS=memcheck \
    GPU_CHECK_SANITIZER_FILTER='*MZero*:*Graph*' timeout 420 bash tools/gpu-check.sh > $L/gpu-check.out 2>&1
  echo "gpu-check rc=$? $(t): $(grep -E 'gpu-check:|PASSED|FAILED' $OUT/gpu/summary.log | tr '\n' ' ')" >> $S
  timeout 60 /tmp/gpu-check-prebuilt/cuda_moe_bench --ms 1 --no-forced --ab none --layers 8 \
    --json $L/layers.json > $L/layers.log 2>&1
  echo "layers rc=$? $(t)" >> $S
else
  echo "not an H200: no headline $(t)" >> $S
fi
dc_cpu_unpack build-prebuilt-cpu /tmp/s48cpu || { dc_finish; exit 1; }
ab_runs() {  # runs of $1 against the rule, the four one-token rows
  [ $(left) -gt 45 ] && dc_ab ab_run$1_qwen3 40 --threads 2 --only qwen3-30b-a3b --m 1 --no-onednn \
    --formats bf16,fp8-block --compare-env MOERUN_CPU_STREAM_RUN=$1 --budget 2.5
  [ $(left) -gt 45 ] && dc_ab ab_run$1_other 40 --threads 2 --only deepseek-v2-lite,gpt-oss-20b --m 1 \
    --no-onednn --formats bf16 --compare-env MOERUN_CPU_STREAM_RUN=$1 --budget 2.5
}
ab_runs 8
for v in run8 rule; do
  [ $(left) -gt 35 ] || break
  if [ $v = run8 ]; then env="MOERUN_CPU_STREAM_RUN=8"; else env=""; fi
  env $env timeout 30 $DC_CPU/cpu_moe_bench --threads 2 --decode-ratios --formats fp8-block --budget 7 > $L/ratio_$v.log 2>&1
  echo "decode ratio $v [$env] rc=$? $(t): $(grep 'faster than bf16' $L/ratio_$v.log | cut -c1-140)" >> $S
done
ab_runs 12
[ $(left) -gt 45 ] && dc_ab ab_run8_4t 40 --threads 4 --only qwen3-30b-a3b --m 1 --no-onednn --formats bf16,fp8-block \
  --compare-env MOERUN_CPU_STREAM_RUN=8 --budget 2.5
dc_finish
