#!/usr/bin/env bash
# Session 22, device call 1, on binaries built on the development machine (build-prebuilt/):
# 1. gpu-check without the sweep: GPU tests (the wgmma engine's swap-AB tail tiles and narrow last
#    column blocks are new), memcheck, racecheck;
# 2. the rule (swap-AB tails of up to 48 rows, narrow N) against itself with each form off
#    (MOERUN_CUDA_SWAP_TAILS=0, MOERUN_CUDA_NARROW_N=0) and with tails of up to 16 rows, each pair of
#    graphs alternated call by call (cuda_moe_bench --ab), M = 128, 1024 and 8192, four shapes;
# 3. ncu per kernel on gpt-oss-120b-silu M = 8192 (the row the tails are for), default form.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/gc" "$OUT/w"
W=$OUT/w
B=build-prebuilt/cuda_moe_bench
OUT="$OUT/gc" GPU_CHECK_PREBUILT=build-prebuilt GPU_CHECK_SKIP_XEON=1 GPU_CHECK_SKIP_CPU=1 GPU_CHECK_SKIP_BENCH=1 \
  bash tools/gpu-check.sh > "$W/gpu-check.out" 2>&1
echo "gpu-check rc=$?"; grep -E "rc=|SUMMARY|FAILED|Failure" "$OUT/gc/summary.log" | head -20
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
timeout 280 $B --ms 128,1024,8192 --no-forced --read-flush-max-m 0 \
  --ab env:MOERUN_CUDA_SWAP_TAILS=0,env:MOERUN_CUDA_NARROW_N=0,env:MOERUN_CUDA_SWAP_TAILS=16 \
  --json "$W/ab_1.json" > "$W/ab_1.log" 2>&1
echo "pass 1 rc=$?"
grep -h -E " ab:| cuda-graph-expert " "$W"/ab_*.log | awk '{printf "%-18s %5s %-40s %s\n", $1, $2, $3, $5}'
for sm in gpt-oss-120b-silu:8192; do
  sh=${sm%%:*}; m=${sm##*:}
  timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 12 \
    -k 'regex:gather_sorted|grouped_kernel|combine_sorted' \
    $B --shapes $sh --ms $m --no-forced --ab none --read-flush-max-m 0 > "$W/ncu_$sh.csv" 2>&1
  echo "ncu $sh M=$m rc=$?"
  python3 - "$W/ncu_$sh.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
if rows:
    h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value"); ui = h.index("Metric Unit")
    for r in rows[1:13]:
        print(f"  {r[ki][:70]:70s} {r[vi]:>12s} {r[ui]}")
PY
done
tar czf "$OUT/call1.tgz" -C "$W" . && rm -rf "$W"
