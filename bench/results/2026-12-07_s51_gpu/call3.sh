#!/usr/bin/env bash
# Session 51, device call 3 (CPU only; the host's Xeon, AMX-BF16): the fp8 block scale slots against
# their old traffic in one process: MOERUN_CPU_FP8_SCALES=lanes (binaries of the commit that adds it)
# puts each K group's slots a 64-byte line apart, the bytes of the f32 per lane before 2dd7ad3.
# Carry ["build-prebuilt-cpu"]; `CALL_BUDGET=200 bash bench/results/2026-12-07_s51_gpu/call3.sh`.
# qwen3-30b-a3b fp8-block at 1, 4 and 16 tokens, 2 threads, alternated call by call, two rounds; then
# one token at 4 threads.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-580} . tools/device-call-lib.sh
dc_cpu_unpack build-prebuilt-cpu /tmp/s51cpu || { dc_finish; exit 1; }
for r in 1 2; do
  [ $(left) -gt 70 ] && dc_ab ab_fp8_scales_r$r 70 --threads 2 --only qwen3-30b-a3b --m 1,4,16 --no-onednn \
    --formats fp8-block --compare-env MOERUN_CPU_FP8_SCALES=lanes --budget 3
done
[ $(left) -gt 35 ] && dc_ab ab_fp8_scales_4t 35 --threads 4 --only qwen3-30b-a3b --m 1 --no-onednn \
  --formats fp8-block --compare-env MOERUN_CPU_FP8_SCALES=lanes --budget 3
dc_finish
