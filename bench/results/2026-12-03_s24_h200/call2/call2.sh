#!/usr/bin/env bash
# Session 24, device call 2: 1. the warp gather's test and the 128-column blocks' memcheck; 2. A/B of
# the token gather by warps (MOERUN_CUDA_GATHER=warp) against one block per row, alternated graph
# replay, every shape at M = 128, 1024, 8192; 3. ncu of one qwen3-30b-a3b expert stage at M = 1024
# (wgmma engine) and M = 128 (stream tiles): where the M = 1024 row loses against M = 128 with the
# same weight bytes (0.393 against 0.311 ms in session 23).
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
T=build-prebuilt/moerun_gpu_tests
B=build-prebuilt/cuda_moe_bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
timeout 60 $T --gtest_filter='CudaBackend.SmallWarpGather*' > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure" "$W/tests.log" | head
for sh in qwen3-30b-a3b deepseek-v3 gpt-oss-120b-silu mixtral-8x7b; do
  timeout 90 $B --shapes $sh --ms 128,1024,8192 --no-forced --read-flush-max-m 0 \
    --ab env:MOERUN_CUDA_GATHER=warp --json "$W/ab_$sh.json" > "$W/ab_$sh.log" 2>&1
  echo "$sh rc=$?"
done
grep -h -E " ab:" "$W"/ab_*.log | awk '{printf "%-18s %5s %-40s %s\n", $1, $2, $3, $5}'
tar czf "$OUT/call2.tgz" -C "$W" .
for m in 1024 128; do
  timeout 120 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
    -k 'regex:grouped_kernel|gather|combine|align|stream|gemm' --launch-skip 0 --launch-count 8 \
    $B --shapes qwen3-30b-a3b --ms $m --no-forced --ab none --read-flush-max-m 0 > "$W/ncu_qwen3_$m.log" 2>&1
  echo "ncu $m rc=$?"
  grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Memory Throughput" "$W/ncu_qwen3_$m.log" | head -60
done
tar czf "$OUT/call2.tgz" -C "$W" .
timeout 150 compute-sanitizer --tool memcheck $T --gtest_filter='CudaBackend.SmallWarpGather*:CudaBackend.Small128ColumnBlocksMatch256' > "$W/memcheck.log" 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$W/memcheck.log" | head -3
tar czf "$OUT/call2.tgz" -C "$W" . && rm -rf "$W"
