#!/usr/bin/env bash
# Session 34, device call 3 (ran on an H200): the GPU suite on main's final binaries of the session (f3941fa: the knob
# table after its review; build-prebuilt-main/, built on the dev machine, Release, sm_90a), and the
# benchmark driver's refusal of a mistyped contender on a machine with a GPU. About 160 s.
set -uo pipefail
OUT=${OUT:-/tmp/out}
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/smi.txt" 2>&1; cat "$OUT/smi.txt"
echo "binaries: $(cat build-prebuilt-main/COMMIT)"
timeout 400 build-prebuilt-main/moerun_gpu_tests > "$OUT/tests.log" 2>&1
echo "gpu tests rc=$? ($(( $(date +%s) - T0 )) s)"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|Failure" "$OUT/tests.log" | head -20
build-prebuilt-main/cuda_moe_bench --shapes qwen3-30b-a3b --ms 1 --ab ksplit=8 > "$OUT/ab_refused.log" 2>&1
echo "cuda_moe_bench --ab ksplit=8 rc=$? (2 expected): $(head -c 160 "$OUT/ab_refused.log")"
