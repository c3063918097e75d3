#!/usr/bin/env bash
# Session 51, device call 6 (CPU only; the host's Xeon, AMX-BF16): is bf16 at 256 tokens slower than in
# session 45? Calls 4 and 5 read qwen3-30b-a3b M = 256 at 66-67 ms (2 threads) where session 45's table
# had 40.3 ms, while M = 64 moved no more than the host's bandwidth. Binaries of 7b38c22 (session 45's
# table; cpu_moe_bench only, packed by hand into build-prebuilt-cpu-s45) against main's
# (build-prebuilt-cpu), processes alternated, s45 first in round 1 and second in round 2.
# Carry ["build-prebuilt-cpu", "build-prebuilt-cpu-s45"]; `CALL_BUDGET=230 bash bench/results/2026-12-07_s51_gpu/call6.sh`.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-580} . tools/device-call-lib.sh
dc_cpu_unpack build-prebuilt-cpu-s45 /tmp/s51s45 || { dc_finish; exit 1; }
S45=$DC_CPU
dc_cpu_unpack build-prebuilt-cpu /tmp/s51new || { dc_finish; exit 1; }
NEW=$DC_CPU
row() {  # row VERSION M ROUND
  local B=$S45; [ $1 = main ] && B=$NEW
  timeout 28 $B/cpu_moe_bench --threads 2 --only qwen3-30b-a3b --m $2 --formats bf16 --no-onednn --budget 3 \
    > $L/m$2_$1_r$3.log 2>&1
  echo "M=$2 $1 r$3 rc=$? $(t): $(grep -E "^qwen3.*th=2" $L/m$2_$1_r$3.log | awk '{print $6, $7, $8, $9, $NF}') | $(grep -m1 '^limits' $L/m$2_$1_r$3.log | cut -c29-60)" >> $S
}
for m in 256 64; do
  [ $(left) -gt 28 ] && row s45 $m 1; [ $(left) -gt 28 ] && row main $m 1
  [ $(left) -gt 28 ] && row main $m 2; [ $(left) -gt 28 ] && row s45 $m 2
done
dc_finish
