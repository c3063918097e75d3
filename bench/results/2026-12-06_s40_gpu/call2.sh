#!/usr/bin/env bash
# Session 40, device call 2: where the own sm90 grouped GEMM (wgmma_grouped.cuh) loses time at M = 8192,
# the region of issue 5 still under its 75% target (56-59% of roofline). Nsight Compute's throughput,
# compute-workload, warp-state and scheduler sections on the first two wgmma launches (gate_up, down)
# of qwen3-30b-a3b and deepseek-v3 at M = 8192, on ca770b7's cuda_moe_bench (build-prebuilt-main/).
# Run with carry ["build-prebuilt-main"].
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=build-prebuilt-main
for c in qwen3-30b-a3b:8192 deepseek-v3:8192 mixtral-8x7b:1024; do
  shape=${c%%:*}; m=${c##*:}
  echo "== $shape M=$m ($(date +%T))"
  timeout 170 ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum \
    -k "regex:^grouped_kernel$" --launch-count 2 --csv --page details \
    $B/cuda_moe_bench --no-forced --ab none --layers 0 --shapes "$shape" --ms "$m" > "$OUT/ncu_${shape}_$m.csv" 2> "$OUT/ncu_${shape}_$m.err"
  echo "rc=$? lines=$(wc -l < "$OUT/ncu_${shape}_$m.csv")"
  grep -E '"(Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Hit Rate|Issue Slots Busy|No Eligible|sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active)"' \
    "$OUT/ncu_${shape}_$m.csv" | cut -d, -f5,12- | head -30
done
