#!/usr/bin/env bash
# Session 27, device call 1: the fused one-token stage (kernels/one_token.cu).
# 1. Its test, the one-token, graph and conformance tests beside it; compute-sanitizer memcheck,
#    racecheck and synccheck on its test.
# 2. A/B, alternated graph replay against the rule (the fused stage): MOERUN_CUDA_ONE_TOKEN=0 (the
#    three-kernel chain) at M = 1 on qwen3-30b-a3b (the headline shape it takes), after a memset and
#    after a read flush, in two processes.
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
T=build-prebuilt/moerun_gpu_tests
B=build-prebuilt/cuda_moe_bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$W/smi.txt" 2>&1
F='CudaBackend.OneToken*:CudaLaunch.OneToken*:CudaBackend.SmallOneToken*:CudaBackend.*GraphReplayEqualsEager*:CudaBackend.SmallTunedRunner*:*GpuConformance*'
timeout 240 $T --gtest_filter="$F" > "$W/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|^\[       OK" "$W/tests.log" | head -40
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter='CudaBackend.OneTokenFusedMatchesChainAndReference' > "$W/$tool.log" 2>&1
  echo "$tool rc=$?"; tail -2 "$W/$tool.log"
done
for rep in 1 2; do
  timeout 60 $B --shapes qwen3-30b-a3b --ms 1 --no-forced --ab env:MOERUN_CUDA_ONE_TOKEN=0 --json "$W/ab_$rep.json" > "$W/ab_$rep.log" 2>&1
  echo "rep $rep rc=$?"
done
grep -h -E "graph-expert|graph-full| ab:" "$W"/ab_*.log | awk '{printf "%-18s %5s %-50s %s\n", $1, $2, $3, $5}'
tar czf "$OUT/call1.tgz" -C "$W" . && rm -rf "$W"
