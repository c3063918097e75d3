#!/usr/bin/env bash
# Session 28, device call 2: where the fused one-token stage's time goes (call 1: 1.7-3.3 us slower
# than the chain at qwen3-30b-a3b M = 1). ncu on the fused kernel itself (call 1's filter caught only
# the stream tune's kernels): its duration against the graph-replay time (launch and cooperative-launch
# overhead vs in-kernel time), DRAM bytes and throughput, warp stall reasons; plain and double-buffered
# loops. Then the chain's kernels from graph replay (after the tune: --launch-skip past it).
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
B=build-prebuilt/cuda_moe_bench
for v in "X=1" "MOERUN_CUDA_ONE_TOKEN_PIPE=1"; do
  n=$(echo "$v" | tr ' =' '__')
  env $v timeout 90 ncu --clock-control none --kernel-name regex:'one_token_kernel' --launch-skip 5 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats --section Occupancy \
    $B --shapes qwen3-30b-a3b --ms 1 --no-forced --quick --ab none > "$W/ncu_$n.txt" 2> "$W/ncu_$n.err"
  echo "ncu $v rc=$?"
  grep -E "one_token_kernel|Duration|DRAM Throughput|Memory Throughput|Stall|Warp Cycles|Issued Warp|Achieved Occupancy|L2 Hit|Mem Busy|Max Bandwidth" "$W/ncu_$n.txt" | head -40
done
# The chain (MOERUN_CUDA_ONE_TOKEN=0, the stream tune off so that its timings are not the ones caught).
MOERUN_CUDA_STREAM_TUNE=0 MOERUN_CUDA_ONE_TOKEN=0 timeout 90 ncu --clock-control none --kernel-name regex:'grouped_gemm_kernel|combine_kernel' --launch-skip 30 --launch-count 6 \
  --section SpeedOfLight --section WarpStateStats $B --shapes qwen3-30b-a3b --ms 1 --no-forced --quick --ab none > "$W/ncu_chain.txt" 2> "$W/ncu_chain.err"
echo "ncu chain rc=$?"
grep -E "grouped_gemm_kernel|combine_kernel|Duration|DRAM Throughput|Warp Cycles Per Issued" "$W/ncu_chain.txt" | cut -c1-120 | head -30
tar czf "$OUT/call2.tgz" -C "$W" . && rm -rf "$W"
