#!/usr/bin/env bash
# Session 23, device call 3: why the paired mode does not gain (call 2: 2-20% slower than unpaired,
# mixtral M = 8192 with nearly all tiles paired 2.5% slower). ncu of the gate_up and down launches of
# deepseek-v3 at M = 8192, unpaired and then paired (MOERUN_CUDA_PAIR=1), same sections: does the L2
# read traffic drop, and what do the warps wait on?
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
B=build-prebuilt/cuda_moe_bench
for mode in 0 1; do
  MOERUN_CUDA_PAIR=$mode timeout 200 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats \
    --metrics lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_op_read.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__m_xbar2l1tex_read_bytes.sum \
    -k 'regex:grouped_kernel' --launch-skip 0 --launch-count 2 \
    -o "$W/ncu_pair$mode" $B --shapes deepseek-v3 --ms 8192 --no-forced --ab none --read-flush-max-m 0 > "$W/ncu_pair$mode.log" 2>&1
  echo "ncu pair=$mode rc=$?"
  ncu --import "$W/ncu_pair$mode.ncu-rep" --page details --csv > "$W/ncu_pair$mode.csv" 2>/dev/null
  ncu --import "$W/ncu_pair$mode.ncu-rep" --page details 2>/dev/null | grep -E "grouped_kernel|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|lts__t_sectors|hmma|xbar2l1tex|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Grid Size|Cluster|SM Frequency" | head -60
done
rm -f "$W"/*.ncu-rep
tar czf "$OUT/call3.tgz" -C "$W" . && rm -rf "$W"
