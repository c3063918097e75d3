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
OUT=${OUT:-/tmp/out}
C=/tmp/s46cpu
bash tools/prebuilt.sh unpack build-prebuilt-cpu $C > /dev/null || exit 1
export LD_LIBRARY_PATH=$C${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
T0=$(date +%s)
t() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { echo $(( 280 - ($(date +%s) - T0) )); }  # (the session's device time is short)
S=$OUT/summary.txt
L=$OUT/logs; mkdir -p $L
{ cat $C/COMMIT; lscpu | grep -E "Model name|^CPU\(s\)"; echo "load: $(cat /proc/loadavg)"; } > $S
timeout 60 $C/moerun_tests --gtest_brief=1 > $L/cpu_tests.log 2>&1
echo "moerun_tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $L/cpu_tests.log | head -5 | tr '\n' ' ')" >> $S
show() { python3 bench/cpu/table.py $1 | grep -A12 "| alternative |" >> $S 2>&1; }  # (the rule against the knob)
timeout 70 $C/cpu_moe_bench --threads 2 --only qwen3-30b-a3b --m 1 --formats bf16,fp8-block,mxfp4,nvfp4 \
  --no-onednn --compare-env MOERUN_CPU_STREAM_RUN=32 --budget 2.5 --json $OUT/ab_run32.json > $L/ab_run32.log 2>&1
echo "A/B MOERUN_CPU_STREAM_RUN=32 rc=$? $(t)" >> $S
show $OUT/ab_run32.json
timeout 60 $C/cpu_moe_bench --threads 2 --only deepseek-v2-lite,gpt-oss-20b --m 1 --formats bf16 \
  --no-onednn --compare-env MOERUN_CPU_STREAM_RUN=32 --budget 3 --json $OUT/ab_run32_other.json > $L/ab_run32_other.log 2>&1
echo "A/B other shapes MOERUN_CPU_STREAM_RUN=32 rc=$? $(t)" >> $S
show $OUT/ab_run32_other.json
# The pairs' L2 distance (1536, tuned with L1 at 1 KiB) on top of the 2 KiB L1 one: none, and 4 KiB.
for kv in MOERUN_CPU_PAIR_PREFETCH_L2=0 MOERUN_CPU_PAIR_PREFETCH_L2=4096; do
  [ $(left) -gt 120 ] || break
  timeout 45 $C/cpu_moe_bench --threads 2 --only qwen3-30b-a3b --m 1 --formats bf16,fp8-block \
    --no-onednn --compare-env $kv --budget 2.5 --json $OUT/ab_${kv##*=}.json > $L/ab_l2_${kv##*=}.log 2>&1
  echo "A/B $kv rc=$? $(t)" >> $S
  show $OUT/ab_${kv##*=}.json
done
for r in 1 2; do
  for v in main rule; do
    [ $(left) -gt 25 ] || break 2
    if [ $v = main ]; then env="MOERUN_CPU_PAIR_PREFETCH=1024 MOERUN_CPU_STREAM_RUN=32"; else env=""; fi
    env $env timeout 30 $C/cpu_moe_bench --threads 2 --decode-ratios --formats fp8-block --budget 7 > $L/ratio_${v}_r$r.log 2>&1
    echo "decode ratio $v [$env] round $r rc=$? $(t): $(grep 'faster than bf16' $L/ratio_${v}_r$r.log | cut -c1-140)" >> $S
  done
done
(cd $OUT && tar czf logs.tgz logs ab_*.json && rm -rf logs ab_*.json)
cat $S
