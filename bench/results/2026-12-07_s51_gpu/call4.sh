#!/usr/bin/env bash
# Session 51, device call 4 (CPU only; the host's Xeon, AMX-BF16): where bf16 loses at 64 and 256 tokens,
# the rows issue 4's 80% misses at M = 256 (63-76% in sessions 38 and 45). Binaries of main after the
# fp8 scale slots, `tools/prebuilt.sh pack-cpu`; carry ["build-prebuilt-cpu"];
# `CALL_BUDGET=170 bash bench/results/2026-12-07_s51_gpu/call4.sh` (call 5 reran it: 256 tokens first, each run's limits line kept).
# Each stage's time per forward (MOERUN_CPU_PROFILE=1), qwen3-30b-a3b and deepseek-v2-lite bf16 at 64 and
# 256 tokens, 2 threads; the profile of each shape's first runner a row.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-580} . tools/device-call-lib.sh
dc_cpu_unpack build-prebuilt-cpu /tmp/s51cpu || { dc_finish; exit 1; }
for shape in qwen3-30b-a3b deepseek-v2-lite; do
  for m in 256 64; do
    [ $(left) -gt 45 ] || break 2
    MOERUN_CPU_PROFILE=1 timeout 45 $DC_CPU/cpu_moe_bench --threads 2 --only $shape --m $m --formats bf16 --no-onednn \
      --budget 3 > $L/profile_${shape}_m$m.log 2>&1
    echo "$shape bf16 M=$m rc=$? $(t): $(grep -E "^$shape" $L/profile_${shape}_m$m.log | awk '{print $6, $7, $8, $9, $NF}')" >> $S
    grep -m1 -A3 "moerun cpu profile" $L/profile_${shape}_m$m.log | sed 's/^/  /' >> $S
  done
done
for f in $L/profile_*.log; do echo "$(basename $f): $(grep -m1 "^limits" $f | cut -c1-60) $(grep -m1 "^amx, alt" $f | cut -c1-110)" >> $S; done
dc_finish
