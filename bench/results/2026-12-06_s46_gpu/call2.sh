#!/usr/bin/env bash
# Session 46, device call 2 (carry ["build-prebuilt-cpu"]), CPU only, the host's Xeon (AMX-BF16):
# why one-token fp8-block reads weights at only ~87% of bf16's byte rate at 2 threads (1.73x, not 2x).
# Call 1 showed it is not the shift port (the byte-shuffle decoder tied). Each existing knob below is
# alternated call by call with the rule in one process, bf16 and fp8-block rows at M = 1, 2 threads.
set -uo pipefail
OUT=${OUT:-/tmp/out}
C=/tmp/s46cpu
bash tools/prebuilt.sh unpack build-prebuilt-cpu $C > /dev/null || exit 1
export LD_LIBRARY_PATH=$C${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
T0=$(date +%s)
t() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { echo $(( 560 - ($(date +%s) - T0) )); }
S=$OUT/summary.txt
L=$OUT/logs; mkdir -p $L
{ cat $C/COMMIT; lscpu | grep -E "Model name|^CPU\(s\)|L2 cache|L3 cache"; echo "load: $(cat /proc/loadavg)"; } > $S
which perf > /dev/null 2>&1 && echo "perf: $(which perf)" >> $S
i=0
for kv in MOERUN_CPU_PREFETCH=512 MOERUN_CPU_PREFETCH=2048 MOERUN_CPU_PAIR_PREFETCH_L2=768 MOERUN_CPU_PAIR_PREFETCH_L2=3072 \
          MOERUN_CPU_STREAM_PAIRS=0 MOERUN_CPU_STREAM_RUN=4 MOERUN_CPU_STREAM_RUN=16 MOERUN_CPU_PREFETCH_L2=0,MOERUN_CPU_PAIR_PREFETCH_L2=0; do
  i=$((i + 1))
  [ $(left) -gt 40 ] || break
  timeout $(( $(left) > 60 ? 60 : $(left) )) $C/cpu_moe_bench --threads 2 --only qwen3-30b-a3b --m 1 --formats bf16,fp8-block \
    --no-onednn --compare-env $kv --budget 3 --json $OUT/ab_$i.json > $L/ab_$i.log 2>&1
  echo "A/B $i $kv rc=$? $(t)" >> $S
  python3 -c "
import json,sys
j=json.load(open(sys.argv[1]))
for r in j['rows']:
    if 'cpu_speedup_vs_alt' in r:
        print('   ', r.get('format', r.get('weights','?')), 'knob over the rule:', round(1/r['cpu_speedup_vs_alt'],4), {k: round(v,4) for k,v in r.items() if k.startswith('speedup_alt')})
" $OUT/ab_$i.json >> $S 2>&1
done
(cd $OUT && tar czf logs.tgz logs ab_*.json && rm -rf logs ab_*.json)
cat $S
