#!/usr/bin/env bash
# Session 35's device call: the GPU suite on this session's binaries (built on the dev machine, Release,
# sm_90a, in build-prebuilt-main/), the bench drivers' new argument checks, and a short sweep row set
# to see that nothing moved (qwen3 and deepseek-v3, M = 1 and 8192, no A/B, no forced engines).
set -u
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
P=build-prebuilt-main
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/device.txt" 2>&1
echo "binaries from $(cat $P/COMMIT)" >> "$OUT/device.txt"
"$P/moerun_gpu_tests" --gtest_output=json:$OUT/gpu_tests.json > "$OUT/tests.log" 2>&1
echo "gpu tests rc=$?"
grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]" "$OUT/tests.log" | head -20
"$P/cuda_moe_bench" --shapes nope > "$OUT/args.log" 2>&1; echo "--shapes nope rc=$? (2 expected)"
"$P/cuda_moe_bench" --ms 0 >> "$OUT/args.log" 2>&1; echo "--ms 0 rc=$? (2 expected)"
timeout 200 "$P/cuda_moe_bench" --shapes qwen3-30b-a3b,deepseek-v3 --ms 1,8192 --no-forced --ab none \
  --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"
grep -E "cuda-graph-expert|matmul|copy" "$OUT/bench.log" | head -20
