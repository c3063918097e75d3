#!/usr/bin/env bash
# Session 35, calls 4-7, each on that call's binaries: 4 the policy made in the copy's asm block, 5 the
# stage base through __shfl_sync, 6 through shfl.sync in inline PTX, 7 read from a shared-memory table
# (the fix). Each call printed one of the counts below (4: LDGSTS, 5-6: SHFL, 7: LDS). SASS of the
# bf16 16x32 stream kernel first (for the fault, if it comes back), then the suite, memcheck on the
# decode tests, and the A/B against the plain copies at M = 1, 16, 128 (memset and read flush).
set -u
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
P=build-prebuilt-main
{ nvidia-smi --query-gpu=name,driver_version --format=csv; cat $P/COMMIT; } > "$OUT/device.txt" 2>&1
cuobjdump -sass -fun '_ZN6moerun12cuda_kernels19grouped_gemm_kernelI13__nv_bfloat16NS0_9TileShapeILi16ELi32ELi1ELi2ELi8EEEEEvNS0_17GroupedGemmParamsE' \
  "$P/moerun_gpu_tests" > "$OUT/stream_m16n32_bf16.sass" 2>&1
echo "sass: LDGSTS forms (desc UR16 is the default descriptor):"
echo "LDGSTS: $(grep -c LDGSTS $OUT/stream_m16n32_bf16.sass), SHFL: $(grep -c SHFL $OUT/stream_m16n32_bf16.sass), LDS: $(grep -c LDS $OUT/stream_m16n32_bf16.sass)"; grep -oE "LDGSTS[^;]*" "$OUT/stream_m16n32_bf16.sass" | sed -E 's/\[R[0-9]+/[R/; s/\+0x[0-9a-f]+//; s/\]\[R[0-9]+\.64\]/][R.64]/; s/P[0-9]$/P/' | sort | uniq -c
"$P/moerun_gpu_tests" --gtest_output=json:$OUT/gpu_tests.json > "$OUT/tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]" "$OUT/tests.log" | head -8
compute-sanitizer --tool memcheck --print-limit 20 "$P/moerun_gpu_tests" \
  --gtest_filter='*WeightL2*:CudaBackend.SmallOneTokenDirect:CudaBackend.SmallStreamTilingsBitwiseEqual:CudaBackend.SmallOneTokenDownPrefetch' \
  > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|PASSED  \]' $OUT/memcheck.log | tr '\n' ' ')"
timeout 300 "$P/cuda_moe_bench" --ms 1,16,128 --no-forced --ab env:MOERUN_CUDA_WEIGHT_L2=normal \
  --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"
grep -E "limits|cuda-graph-expert |ab:" "$OUT/bench.log" | head -60
