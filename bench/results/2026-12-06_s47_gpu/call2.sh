#!/usr/bin/env bash
# Session 47, device call 2 (carry ["build-prebuilt-cpu"], the same binaries as call 1). CPU only, the
# host's Xeon (AMX-BF16): the shape of the one-token pairs' run cap around the new rule's 16
# (kAmxPairRunMax), since call 1 had deepseek-v2-lite bf16 1.2% slower with it than with runs of 32
# while qwen3 fp8-block gained 6.1%. MOERUN_CPU_STREAM_RUN sets gemm1's runs and gemm2's groups alike;
# at these shapes 16 is the rule's own choice. 1. runs of 24 and of 8 against the rule (2 threads);
# 2. deepseek-v2-lite and qwen3 at 4 threads against runs of 32.
set -uo pipefail
DC_BUDGET=300 . tools/device-call-lib.sh
dc_cpu_unpack build-prebuilt-cpu /tmp/s47cpu || exit 1
rows=(--only qwen3-30b-a3b,deepseek-v2-lite,gpt-oss-20b --m 1 --no-onednn)
for v in 24 8; do
  dc_ab ab_run${v} 80 --threads 2 "${rows[@]}" --formats bf16 --compare-env MOERUN_CPU_STREAM_RUN=$v --budget 2.5
  dc_ab ab_run${v}_fp8 40 --threads 2 --only qwen3-30b-a3b,deepseek-v2-lite --m 1 --no-onednn --formats fp8-block \
    --compare-env MOERUN_CPU_STREAM_RUN=$v --budget 2.5
done
[ $(left) -gt 60 ] && dc_ab ab_run32_4t 60 --threads 4 --only qwen3-30b-a3b,deepseek-v2-lite --m 1 --no-onednn \
  --formats bf16,fp8-block --compare-env MOERUN_CPU_STREAM_RUN=32 --budget 2.5
[ $(left) -gt 50 ] && dc_ab ab_run32_r2 50 --threads 2 --only deepseek-v2-lite --m 1 --no-onednn \
  --formats bf16,fp8-block --compare-env MOERUN_CPU_STREAM_RUN=32 --budget 3
dc_finish
