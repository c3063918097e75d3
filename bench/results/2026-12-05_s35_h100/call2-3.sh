#!/usr/bin/env bash
# Session 35, calls 2 and 3 (call 2 ran it without the hint_probe2 and ldgsts_forms lines; call 3 after
# the policy was made unconditionally): the stream tiles' L2 evict-first hint on the weight copies (MOERUN_CUDA_WEIGHT_L2,
# default first). The hinted copy under compute-sanitizer alone (session 26 saw an illegal instruction
# in a similar form), the GPU suite, memcheck on the decode tests, then the A/B against the plain
# copies at M = 1, 16, 128 on the four shapes (memset flush; read flush too at M <= 16).
set -u
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
P=build-prebuilt-main
{ nvidia-smi --query-gpu=name,driver_version --format=csv; cat $P/COMMIT; } > "$OUT/device.txt" 2>&1
compute-sanitizer --tool memcheck $P/hint_probe > "$OUT/hint_probe.log" 2>&1; echo "hint probe rc=$?: $(tail -2 $OUT/hint_probe.log | tr '\n' ' ')"
compute-sanitizer --tool memcheck $P/hint_probe2 > "$OUT/hint_probe2.log" 2>&1; echo "conditional-policy probe rc=$?: $(grep -m1 -E 'err=|Illegal' $OUT/hint_probe2.log)"
cuobjdump --dump-sass $P/hint_probe2 2>/dev/null | grep -E "LDGSTS|POLICY|R2UR" | head -8 > "$OUT/hint_probe2_sass.txt"
cuobjdump --dump-sass $P/hint_probe 2>/dev/null | grep -E "LDGSTS|POLICY" | head -5 > "$OUT/hint_probe_sass.txt"
cuobjdump --dump-sass "$P/moerun_gpu_tests" 2>/dev/null | grep -oE "LDGSTS[^;]*" | sed -E 's/R[0-9]+/R/g; s/UR[0-9]+/UR/g' | sort | uniq -c | sort -rn | head -12 > "$OUT/ldgsts_forms.txt"
"$P/moerun_gpu_tests" --gtest_output=json:$OUT/gpu_tests.json > "$OUT/tests.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]" "$OUT/tests.log" | head -20
compute-sanitizer --tool memcheck "$P/moerun_gpu_tests" \
  --gtest_filter='*WeightL2*:CudaBackend.SmallOneTokenDirect:CudaBackend.SmallStreamTilingsBitwiseEqual:CudaBackend.SmallOneTokenDownPrefetch' \
  > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $OUT/memcheck.log | tr '\n' ' ')"
timeout 300 "$P/cuda_moe_bench" --ms 1,16,128 --no-forced --ab env:MOERUN_CUDA_WEIGHT_L2=normal \
  --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"
grep -E "limits|cuda-graph-expert |ab:" "$OUT/bench.log" | head -60
