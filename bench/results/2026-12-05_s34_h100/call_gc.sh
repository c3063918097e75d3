#!/usr/bin/env bash
# Session 33, device call "gc": main's binaries (git-ignored build-prebuilt-main/, built on the dev
# machine at the commit in build-prebuilt-main/COMMIT: cmake -G Ninja -DCMAKE_BUILD_TYPE=Release,
# targets moerun_gpu_tests cuda_moe_bench, sm_90a). Session 26's gpu-check with the same knobs took
# 326 s.
# 1. tools/gpu-check.sh: the GPU suite (the fast SiLU / SwiGLU-OAI of cc86bf2 has not yet run on a
#    GPU), memcheck and racecheck on the small cases, the torch baseline and the headline sweep.
# 2. memcheck on the direct one-token tests (not in gpu-check's memcheck filter), if time is left.
# CALL_GC_SANITIZERS=memcheck drops racecheck (about 100 s) when little device time is left.
set -uo pipefail
OUT=${OUT:-/tmp/out}
T0=$(date +%s)
GPU_CHECK_PREBUILT=build-prebuilt-main GPU_CHECK_SKIP_CPU=1 GPU_CHECK_SKIP_XEON=1 \
  GPU_CHECK_SANITIZERS="${CALL_GC_SANITIZERS:-memcheck racecheck}" bash tools/gpu-check.sh
left=$(( 580 - ($(date +%s) - T0) ))
if [ "$left" -gt 40 ]; then
  timeout $left compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
    build-prebuilt-main/moerun_gpu_tests --gtest_filter='CudaLaunch.OneTokenKernel*' > "$OUT/memcheck_one_token.log" 2>&1
  echo "memcheck one-token rc=$? ($(( $(date +%s) - T0 )) s)"; tail -1 "$OUT/memcheck_one_token.log"
fi
