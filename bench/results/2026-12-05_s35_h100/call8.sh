#!/usr/bin/env bash
# Session 35, call 8: the GPU suite on the final code (the evict-first hint off by default; its test
# turns it on), and memcheck on the decode tests.
set -u
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
P=build-prebuilt-main
{ nvidia-smi --query-gpu=name,driver_version --format=csv; cat $P/COMMIT; } > "$OUT/device.txt" 2>&1
"$P/moerun_gpu_tests" --gtest_output=json:$OUT/gpu_tests.json > "$OUT/tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]" "$OUT/tests.log" | head -8
compute-sanitizer --tool memcheck --print-limit 20 "$P/moerun_gpu_tests" \
  --gtest_filter='*WeightL2*:CudaBackend.SmallOneTokenDirect:CudaBackend.SmallStreamTilingsBitwiseEqual:CudaBackend.SmallOneTokenDownPrefetch' \
  > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|PASSED  \]' $OUT/memcheck.log | tr '\n' ' ')"
