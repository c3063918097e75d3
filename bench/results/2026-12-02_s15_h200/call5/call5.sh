#!/usr/bin/env bash
# Session 15, device call 5: the final tree's GPU tests, compute-sanitizer runs and the CPU suite on
# the H200 host's Xeon (AMX, its own compiler): the AMX tile-configuration fix and the workspace pool
# on a second machine. No benchmark.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{ g++ --version | head -1; lscpu | grep -E "Model name"; git log -1 --format='%H %s'; } > "$OUT/host.log" 2>&1
OUT="$OUT" GPU_CHECK_SKIP_BENCH=1 GPU_CHECK_SKIP_XEON=1 GPU_CHECK_PACK=0 bash tools/gpu-check.sh > "$OUT/call.log" 2>&1
echo "gpu-check rc=$?"
timeout 100 build-gpu/tests/moerun_alloc_tests --gtest_brief=1 > "$OUT/alloc_tests.log" 2>&1; echo "alloc tests rc=$?" | tee -a "$OUT/summary.log"
tail -3 "$OUT/alloc_tests.log"
rm -f "$OUT/build.log" "$OUT/gpu_tests.json"
cat "$OUT/host.log" "$OUT/summary.log"
