#!/usr/bin/env bash
# Session 46, device call 4: NOT RUN (no device could be started; NOTES.md). To run it: `git apply
# bench/results/2026-12-06_s46_gpu/amx_pair_runs16.patch`, then `tools/prebuilt.sh pack-cpu` (builds
# and packs cpu_moe_bench, moerun_tests and their oneDNN into build-prebuilt-cpu/), and carry
# ["build-prebuilt-cpu"]. CPU only, the host's Xeon (AMX-BF16): the
# two one-token rules built from calls 2-3, both at AMX only: the bf16 stream pairs prefetch into L1
# 2 KiB ahead (kAmxPairPrefetchBytes; MOERUN_CPU_PAIR_PREFETCH=1024 gives main's), and a layer whose
# every job is one token on the bf16 pairs takes runs of at most 16 blocks (kAmxPairRunMax;
# MOERUN_CPU_STREAM_RUN=32 gives main's at these shapes). 1. moerun_tests at AMX; 2. runs of 32 against
# the rule, alternated call by call in one process (mxfp4 / nvfp4 are controls: their q8 pairs keep 32);
# 3. the pairs' L2 distance on top of the new L1 one; 4. issue 4's one-token ratios, the rule against
# main's two settings, processes alternated.
set -uo pipefail
DC_BUDGET=280 . tools/device-call-lib.sh  # (the session's device time was short)
dc_cpu_unpack build-prebuilt-cpu /tmp/s46cpu || exit 1
timeout 60 $DC_CPU/moerun_tests --gtest_brief=1 > $L/cpu_tests.log 2>&1
echo "moerun_tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $L/cpu_tests.log | head -5 | tr '\n' ' ')" >> $S
dc_ab ab_run32 70 --threads 2 --only qwen3-30b-a3b --m 1 --formats bf16,fp8-block,mxfp4,nvfp4 \
  --no-onednn --compare-env MOERUN_CPU_STREAM_RUN=32 --budget 2.5
dc_ab ab_run32_other 60 --threads 2 --only deepseek-v2-lite,gpt-oss-20b --m 1 --formats bf16 \
  --no-onednn --compare-env MOERUN_CPU_STREAM_RUN=32 --budget 3
# The pairs' L2 distance (1536, tuned with L1 at 1 KiB) on top of the 2 KiB L1 one: none, and 4 KiB.
for v in 0 4096; do
  [ $(left) -gt 120 ] || break
  dc_ab ab_l2_$v 45 --threads 2 --only qwen3-30b-a3b --m 1 --formats bf16,fp8-block \
    --no-onednn --compare-env MOERUN_CPU_PAIR_PREFETCH_L2=$v --budget 2.5
done
for r in 1 2; do
  for v in main rule; do
    [ $(left) -gt 25 ] || break 2
    if [ $v = main ]; then env="MOERUN_CPU_PAIR_PREFETCH=1024 MOERUN_CPU_STREAM_RUN=32"; else env=""; fi
    env $env timeout 30 $DC_CPU/cpu_moe_bench --threads 2 --decode-ratios --formats fp8-block --budget 7 > $L/ratio_${v}_r$r.log 2>&1
    echo "decode ratio $v [$env] round $r rc=$? $(t): $(grep 'faster than bf16' $L/ratio_${v}_r$r.log | cut -c1-140)" >> $S
  done
done
dc_finish
