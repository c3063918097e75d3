#!/usr/bin/env bash
# Session 51, device call 2 (CPU only; the host's Xeon, AMX-BF16): call 1's rows that ran once, now
# alternated: fp8 block scales as scale slots (2dd7ad3) against one f32 per lane (d69b813).
# Carry ["build-prebuilt-cpu", "build-prebuilt-cpu-old"]; `CALL_BUDGET=240 bash bench/results/2026-12-07_s51_gpu/call2.sh`.
# 1. qwen3-30b-a3b fp8-block at 4 and 16 tokens, old / new, three rounds (call 1: new 2-3% slower in
#    one pair of processes, within the spread of processes there);
# 2. deepseek-v2-lite fp8-block at one token, old / new, two rounds;
# 3. the new binaries' one-token stages (MOERUN_CPU_PROFILE=1) over the alternated ratio's forwards.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-580} . tools/device-call-lib.sh
dc_cpu_unpack build-prebuilt-cpu-old /tmp/s51old || { dc_finish; exit 1; }
OLD=$DC_CPU
dc_cpu_unpack build-prebuilt-cpu /tmp/s51new || { dc_finish; exit 1; }
NEW=$DC_CPU
row() {  # row NAME VERSION SHAPE M
  local B=$OLD; [ $2 = new ] && B=$NEW
  timeout 25 $B/cpu_moe_bench --threads 2 --only $3 --m $4 --formats fp8-block --no-onednn --budget 3 > $L/$1.log 2>&1
  echo "$1 rc=$? $(t): $(grep -E "^$3" $L/$1.log | awk '{print $2, $4, $6, $7, $8, $9}' | tr '\n' ' ')" >> $S
}
for r in 1 2 3; do
  for v in old new; do [ $(left) -gt 25 ] && row m4_16_${v}_r$r $v qwen3-30b-a3b 4,16; done
done
for r in 1 2; do
  for v in old new; do [ $(left) -gt 25 ] && row dsv2_m1_${v}_r$r $v deepseek-v2-lite 1; done
done
[ $(left) -gt 30 ] && { MOERUN_CPU_PROFILE=1 timeout 30 $NEW/cpu_moe_bench --threads 2 --decode-ratios --formats fp8-block \
  --budget 7 > $L/ratio_profile_new.log 2>&1
  echo "ratio + profile (new) rc=$? $(t): $(grep 'faster than bf16' $L/ratio_profile_new.log | cut -c1-130)" >> $S
  for f in "bf16 act" "fp8-block act"; do
    grep -m1 -A3 "I=768 $f" $L/ratio_profile_new.log | grep -E "busy" | sed "s/^/  ${f% act}: /" >> $S
  done; }
dc_finish
