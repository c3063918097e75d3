#!/usr/bin/env bash
# Session 22, device call 4: where the wgmma GEMMs lose against the matmul rate. ncu with the full
# section set on one gate_up and one down launch of gpt-oss-120b-silu and deepseek-v3 at M = 8192
# (the default path: no swap tails, narrow N), then the raw pages of the key metrics.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/w"
W=$OUT/w
B=build-prebuilt/cuda_moe_bench
for sh in gpt-oss-120b-silu deepseek-v3; do
  timeout 200 ncu --clock-control none --set full -k 'regex:grouped_kernel' --launch-skip 0 --launch-count 2 \
    -o "$W/ncu_$sh" $B --shapes $sh --ms 8192 --no-forced --ab none --read-flush-max-m 0 > "$W/ncu_$sh.log" 2>&1
  echo "ncu $sh rc=$?"
  ncu --import "$W/ncu_$sh.ncu-rep" --page details --csv > "$W/ncu_$sh.csv" 2>/dev/null
  ncu --import "$W/ncu_$sh.ncu-rep" --page details 2>/dev/null | grep -E "grouped_kernel|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Tensor|Issue Slots Busy|No Eligible|Active Warps Per|Warp Cycles Per Issued|Stall|Registers Per|Shared Memory Configuration|Achieved Occupancy|L1/TEX Hit|L2 Hit" | head -80
done
rm -f "$W"/*.ncu-rep
tar czf "$OUT/call4.tgz" -C "$W" . && rm -rf "$W"
