#!/usr/bin/env bash
# Session 45, device call 3 (carry ["build-prebuilt-cpu"]): issue 4's one-token format ratios on the
# GPU host's Xeon (AMX-BF16), alternated call by call (`--decode-ratios`), at 2 threads (the headline's
# form) and at 4.
set -uo pipefail
OUT=${OUT:-/tmp/out}
C=/tmp/s45cpu
bash tools/prebuilt.sh unpack build-prebuilt-cpu $C > /dev/null || exit 1
export LD_LIBRARY_PATH=$C${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
T0=$(date +%s)
t() { echo "($(( $(date +%s) - T0 )) s)"; }
{ cat $C/COMMIT; lscpu | grep -E "Model name|^CPU\(s\)"; echo "load: $(cat /proc/loadavg)"; } > $OUT/summary.txt
for th in 2 4; do
  timeout 150 $C/cpu_moe_bench --threads $th --decode-ratios --budget 15 --json $OUT/ratios_${th}t.json > $OUT/ratios_${th}t.log 2>&1
  echo "decode ratios, $th threads rc=$? $(t)" >> $OUT/summary.txt
  grep -E "faster than bf16|^limits" $OUT/ratios_${th}t.log | cut -c1-160 >> $OUT/summary.txt
done
cat $OUT/summary.txt
(cd $OUT && tar czf logs.tgz ratios_*.log && rm -f ratios_*.log)
