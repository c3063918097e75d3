#!/usr/bin/env bash
# Session 21, device call 1, on binaries built on the development machine (build-prebuilt/):
# 1. gpu-check without the sweep: GPU tests (split K in the wgmma engine is new), memcheck, racecheck;
# 2. the rule against CUTLASS's 128x256 schedule forced and against the rule without split K
#    (MOERUN_CUDA_KSPLIT=1), each pair of graphs alternated call by call (cuda_moe_bench --ab),
#    M = 128, 1024 and 8192, two passes;
# 3. each kernel of the expert stage timed by ncu (qwen3-30b-a3b and gpt-oss-120b-silu at M = 8192,
#    mixtral-8x7b at M = 1024): where the time goes between the passes and the GEMMs.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/gc" "$OUT/w"
W=$OUT/w
B=build-prebuilt/cuda_moe_bench
OUT="$OUT/gc" GPU_CHECK_PREBUILT=build-prebuilt GPU_CHECK_SKIP_XEON=1 GPU_CHECK_SKIP_CPU=1 GPU_CHECK_SKIP_BENCH=1 \
  bash tools/gpu-check.sh > "$W/gpu-check.out" 2>&1
echo "gpu-check rc=$?"; grep -E "rc=|SUMMARY|FAILED|Failure" "$OUT/gc/summary.log" | head -20
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
for pass in 1 2; do
  timeout 170 $B --ms 128,1024,8192 --no-forced --read-flush-max-m 0 --ab cutlass-sm90-grouped,ksplit=1 \
    --json "$W/ab_$pass.json" > "$W/ab_$pass.log" 2>&1
  echo "pass $pass rc=$?"
done
grep -h -E " ab:| cuda-graph-expert " "$W"/ab_*.log | awk '{printf "%-18s %5s %-32s %s\n", $1, $2, $3, $5}'
for sm in qwen3-30b-a3b:8192 gpt-oss-120b-silu:8192 mixtral-8x7b:1024; do
  sh=${sm%%:*}; m=${sm##*:}
  timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --csv --launch-count 24 \
    -k 'regex:gather_sorted|align_|grouped_kernel|combine_sorted|routing_kernel|activation_' \
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
