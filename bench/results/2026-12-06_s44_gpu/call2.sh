#!/usr/bin/env bash
# Session 44, device call 2: the CPU benchmark on the GPU machine's host Xeon (AMX-BF16), with the
# cpu_moe_bench built on the development machine and Debian's oneDNN beside it (carry
# ["build-prebuilt-cpu"], made as NOTES.md says): every row at 2 threads (issue 4's headline form),
# then issue 4's one-token format ratios alternated against bf16; bench/cpu/table.py of both.
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=/tmp/s44cpu
bash tools/prebuilt.sh unpack build-prebuilt-cpu $B || exit 1
export LD_LIBRARY_PATH=$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
T0=$(date +%s)
t() { echo "($(( $(date +%s) - T0 )) s)"; }
{ cat $B/COMMIT; lscpu | grep -E "Model name|^CPU\(s\)|NUMA node\(s\)"
  echo "flags: $(grep -o -w -E 'amx_bf16|amx_tile|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "load: $(cat /proc/loadavg)"
  ldd $B/cpu_moe_bench | grep -E "dnnl|OpenCL|not found"; } > $OUT/summary.txt
timeout 170 $B/cpu_moe_bench --threads 2 --budget 0.3 --json $OUT/cpu_2t.json > $OUT/cpu_2t.log 2>&1
echo "every row, 2 threads rc=$? $(t)" >> $OUT/summary.txt
timeout 60 $B/cpu_moe_bench --threads 2 --decode-ratios --budget 8 --json $OUT/cpu_ratios_2t.json > $OUT/cpu_ratios_2t.log 2>&1
echo "decode ratios rc=$? $(t)" >> $OUT/summary.txt
for j in cpu_2t cpu_ratios_2t; do
  [ -s $OUT/$j.json ] && python3 bench/cpu/table.py $OUT/$j.json > $OUT/$j.md 2>&1
done
cat $OUT/summary.txt
