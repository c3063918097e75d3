#!/usr/bin/env bash
# Session 46, device call 3 (carry ["build-prebuilt-cpu"]), CPU only, the host's Xeon (AMX-BF16), with
# the new rule: the one-token bf16 stream pairs prefetch into L1 2048 bytes ahead at AMX
# (kAmxPairPrefetchBytes; MOERUN_CPU_PAIR_PREFETCH=1024 gives main's). Call 2's leads, each alternated
# call by call with the rule in one process, qwen3-30b-a3b M = 1, 2 threads, bf16 / fp8-block (the bf16
# stream pairs) and mxfp4 / nvfp4 (the q8 pairs: controls, except where the knob is MOERUN_CPU_PREFETCH).
# Then bf16 on the other two shapes, and issue 4's one-token fp8-block ratio, rule against main's
# distance, processes alternated.
set -uo pipefail
OUT=${OUT:-/tmp/out}
C=/tmp/s46cpu
bash tools/prebuilt.sh unpack build-prebuilt-cpu $C > /dev/null || exit 1
export LD_LIBRARY_PATH=$C${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
T0=$(date +%s)
t() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { echo $(( 330 - ($(date +%s) - T0) )); }  # (the session's device time is short)
S=$OUT/summary.txt
L=$OUT/logs; mkdir -p $L
{ cat $C/COMMIT; lscpu | grep -E "Model name|^CPU\(s\)"; echo "load: $(cat /proc/loadavg)"; } > $S
show() {
  python3 -c "
import json,sys
j=json.load(open(sys.argv[1]))
for r in j['rows']:
    if 'cpu_speedup_vs_alt' in r:
        print('   ', r['shape'], r['format'], 'knob over the rule:', round(1/r['cpu_speedup_vs_alt'],4), {k: round(v,4) for k,v in r.items() if k.startswith('speedup_alt')})
" $1 >> $S 2>&1
}
i=0
for kv in MOERUN_CPU_PAIR_PREFETCH=1024 MOERUN_CPU_PAIR_PREFETCH=3072 MOERUN_CPU_STREAM_RUN=16; do
  i=$((i + 1))
  [ $(left) -gt 60 ] || break
  timeout $(( $(left) > 80 ? 80 : $(left) )) $C/cpu_moe_bench --threads 2 --only qwen3-30b-a3b --m 1 --formats bf16,fp8-block,mxfp4,nvfp4 \
    --no-onednn --compare-env $kv --budget 2.5 --json $OUT/ab_$i.json > $L/ab_$i.log 2>&1
  echo "A/B $i $kv rc=$? $(t)" >> $S
  show $OUT/ab_$i.json
done
if [ $(left) -gt 60 ]; then
  timeout 70 $C/cpu_moe_bench --threads 2 --only deepseek-v2-lite,gpt-oss-20b --m 1 --formats bf16 \
    --no-onednn --compare-env MOERUN_CPU_PAIR_PREFETCH=1024 --budget 3 --json $OUT/ab_other.json > $L/ab_other.log 2>&1
  echo "A/B other shapes MOERUN_CPU_PAIR_PREFETCH=1024 rc=$? $(t)" >> $S
  show $OUT/ab_other.json
fi
for r in 1; do
  for v in main rule; do
    [ $(left) -gt 30 ] || break 2
    if [ $v = main ]; then env="MOERUN_CPU_PAIR_PREFETCH=1024"; else env=""; fi
    env $env timeout 35 $C/cpu_moe_bench --threads 2 --decode-ratios --formats fp8-block --budget 8 > $L/ratio_${v}_r$r.log 2>&1
    echo "decode ratio $v [$env] round $r rc=$? $(t): $(grep 'faster than bf16' $L/ratio_${v}_r$r.log | cut -c1-140)" >> $S
  done
done
(cd $OUT && tar czf logs.tgz logs ab_*.json && rm -rf logs ab_*.json)
cat $S
