#!/usr/bin/env bash
# Session 51, device call 9 (CPU only; the host's Xeon, AMX-BF16): what four N-blocks a tile call (tile_amx4,
# calls of up to 16 rows) give over pairs at 64 and 256 tokens, where about 40% of qwen3's experts hold
# more than 16 rows at 256 tokens and take pairs anyway: MOERUN_CPU_AMX_NBLOCKS=2 against the rule,
# alternated call by call in one process, qwen3-30b-a3b and deepseek-v2-lite bf16, 2 threads.
# Carry ["build-prebuilt-cpu"]; `CALL_BUDGET=170 bash bench/results/2026-12-07_s51_gpu/call9.sh`.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-580} . tools/device-call-lib.sh
dc_cpu_unpack build-prebuilt-cpu /tmp/s51cpu || { dc_finish; exit 1; }
[ $(left) -gt 75 ] && dc_ab ab_nblocks2_qwen3 75 --threads 2 --only qwen3-30b-a3b --m 64,256 --formats bf16 --no-onednn \
  --compare-env MOERUN_CPU_AMX_NBLOCKS=2 --budget 3
[ $(left) -gt 60 ] && dc_ab ab_nblocks2_dsv2 60 --threads 2 --only deepseek-v2-lite --m 256 --formats bf16 --no-onednn \
  --compare-env MOERUN_CPU_AMX_NBLOCKS=2 --budget 3
dc_finish
