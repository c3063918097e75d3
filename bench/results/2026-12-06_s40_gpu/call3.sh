#!/usr/bin/env bash
# Session 40, device call 3: every kernel of one forward at M = 8192 (qwen3-30b-a3b, deepseek-v3,
# gpt-oss-120b-silu) timed by Nsight Compute at the card's own clocks (--clock-control none, unlike
# tools/gpu-profile.sh's base clocks), to split the expert stage's time between the GEMMs and the other
# passes. ca770b7's cuda_moe_bench from build-prebuilt-main/ (carry it).
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=build-prebuilt-main
for c in qwen3-30b-a3b:8192 deepseek-v3:8192 gpt-oss-120b-silu:8192; do
  shape=${c%%:*}; m=${c##*:}
  echo "== $shape M=$m ($(date +%T))"
  timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k "regex:^(grouped_kernel|gather_sorted_kernel|combine_sorted_kernel|align_fill_gather_kernel|align_fill_kernel|align_count_kernel|activation_sorted_kernel|gather_rows_kernel|weighted_scatter_kernel|expert_of_row_kernel|fill_group_args|device_kernel|routing_kernel)$" --launch-count 40 \
    $B/cuda_moe_bench --no-forced --ab none --layers 0 --shapes "$shape" --ms "$m" > "$OUT/prof_${shape}_$m.csv" 2> "$OUT/prof_${shape}_$m.err"
  echo "rc=$?"
  python3 - "$OUT/prof_${shape}_$m.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
if not rows: sys.exit("no ncu rows")
h = rows[0]; ik, iv, iu = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
seq = [(r[ik].split("(")[0][-60:], float(r[iv].replace(",", "")) * scale.get(r[iu], 1.0)) for r in rows[1:]]
out = []  # consecutive launches of one kernel folded into a run
for name, t in seq:
    if out and out[-1][0] == name: out[-1][1].append(t)
    else: out.append((name, [t]))
for name, ts in out:
    print(f"{len(ts):4d} x {sorted(ts)[len(ts) // 2]:10.2f} us (median)  {name}")
PY
done
