#!/usr/bin/env bash
# Session 21, device call 2, on binaries built on the development machine (build-prebuilt/):
# 1. the graph-survives-growth test (new) and the split-K tests, and memcheck on both;
# (call 1's bench passes stopped at mixtral: its A/B replayed a rule graph captured before the CUTLASS
# contender's forward grew the runner's scratch; the rule's graph is now captured after the contender's)
# 2. the rule against CUTLASS's 128x256 schedule forced and against the rule without split K
#    (MOERUN_CUDA_KSPLIT=1), each pair of graphs alternated call by call (cuda_moe_bench --ab),
#    M = 128, 1024 and 8192, two passes (deepseek-v3 ran in call 1);
# 3. each kernel of the expert stage timed by ncu (qwen3-30b-a3b and gpt-oss-120b-silu at M = 8192,
#    mixtral-8x7b at M = 1024): where the time goes between the passes and the GEMMs.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/w"
W=$OUT/w
B=build-prebuilt/cuda_moe_bench
build-prebuilt/moerun_gpu_tests --gtest_filter='*Graph*:*SplitK*' > "$W/tests.log" 2>&1; echo "graph + split tests rc=$?"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 build-prebuilt/moerun_gpu_tests \
  --gtest_filter='*GraphSurvives*:*SmallSplitK*' > "$W/memcheck.log" 2>&1; echo "memcheck rc=$?"
grep -E "PASSED|FAILED|ERROR SUMMARY" "$W/tests.log" "$W/memcheck.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
for pass in 1 2; do
  timeout 170 $B --shapes mixtral-8x7b,qwen3-30b-a3b,gpt-oss-120b-silu --ms 128,1024,8192 --no-forced --read-flush-max-m 0 --ab cutlass-sm90-grouped,ksplit=1 \
    --json "$W/ab_$pass.json" > "$W/ab_$pass.log" 2>&1
  echo "pass $pass rc=$?"
done
grep -h -E " ab:| cuda-graph-expert " "$W"/ab_*.log | awk '{printf "%-18s %5s %-32s %s\n", $1, $2, $3, $5}'
for sm in qwen3-30b-a3b:8192 gpt-oss-120b-silu:8192 mixtral-8x7b:1024; do
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
tar czf "$OUT/call2.tgz" -C "$W" . && rm -rf "$W"
