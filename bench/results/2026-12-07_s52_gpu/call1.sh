#!/usr/bin/env bash
# Session 52's device call, not run (no device could be started in six tries): for the next session, with
# binaries of the session's final commit (`tools/prebuilt.sh pack` and `pack-cpu`; carry
# ["build-prebuilt", "build-prebuilt-cpu"]). Both new forms are off by default until this call times them.
# GPU: 1. the suite (the expert-sorted combine now loads a thread's 8 slots at once, raw; new test
# CudaBackend.CombineBatchesAgreeBitwise); 2. MOERUN_CUDA_COMBINE_BATCH=8 (8 slots at once) against
# the rule, alternated graph replay in one process, M = 128 / 1024 / 8192, the four sweep shapes;
# 3. compute-sanitizer memcheck on the new test.
# CPU (the host's Xeon, AMX-BF16): 4. MOERUN_CPU_DOWN_TAPER=1 (the down groups' tail tapered where the
# down GEMM is tiled) against the rule (the groups whole), bf16, 2 threads, M = 256 on qwen3-30b-a3b and
# deepseek-v2-lite, then M = 64 / 1024 on qwen3; 5. moerun_tests at AMX; 6. the profile's slowest
# thread in gemm2 at M = 256 under both settings.
set -uo pipefail
DC_BUDGET=560 . tools/device-call-lib.sh
B=/tmp/s52bin
if bash tools/prebuilt.sh unpack build-prebuilt $B > /dev/null; then
  echo "GPU: $(cat $B/COMMIT) $(t)" >> $S
  timeout 170 $B/moerun_gpu_tests --gtest_output=json:$L/gpu_tests.json > $L/tests.log 2>&1
  echo "gpu tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $L/tests.log | head -5 | tr '\n' ' ')" >> $S
  for sh in qwen3-30b-a3b deepseek-v3 gpt-oss-120b-silu mixtral-8x7b; do
    [ $(left) -gt 300 ] || break
    timeout 60 $B/cuda_moe_bench --shapes $sh --ms 128,1024,8192 --no-forced --read-flush-max-m 0 \
      --ab env:MOERUN_CUDA_COMBINE_BATCH=8 --json "$L/ab_$sh.json" > "$L/ab_$sh.log" 2>&1
    echo "ab $sh rc=$? $(t)" >> $S
    grep -E " ab:" "$L/ab_$sh.log" >> $S
  done
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/moerun_gpu_tests \
    --gtest_filter='*CombineBatchesAgreeBitwise*' > $L/memcheck.log 2>&1
  echo "memcheck rc=$? $(t): $(grep 'ERROR SUMMARY' $L/memcheck.log | tail -1) $(grep -E '^\[  PASSED' $L/memcheck.log)" >> $S
else
  echo "unpack build-prebuilt failed" >> $S
fi
dc_cpu_unpack build-prebuilt-cpu /tmp/s52cpu || { dc_finish; exit 1; }
dc_ab ab_down_taper_256 100 --threads 2 --only qwen3-30b-a3b,deepseek-v2-lite --m 256 --formats bf16 \
  --no-onednn --compare-env MOERUN_CPU_DOWN_TAPER=1 --budget 4
if [ $(left) -gt 90 ]; then
  timeout 70 $DC_CPU/moerun_tests --gtest_brief=1 > $L/cpu_tests.log 2>&1
  echo "moerun_tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $L/cpu_tests.log | head -5 | tr '\n' ' ')" >> $S
fi
for v in 1 0; do
  [ $(left) -gt 30 ] || break
  MOERUN_CPU_DOWN_TAPER=$v MOERUN_CPU_PROFILE=1 timeout 25 $DC_CPU/cpu_moe_bench --threads 2 --only qwen3-30b-a3b \
    --m 256 --formats bf16 --no-onednn --budget 2 > $L/profile_taper$v.log 2>&1
  echo "profile DOWN_TAPER=$v rc=$?: $(grep -E 'slowest' $L/profile_taper$v.log | tail -1) | $(grep -E 'busy \(mean' $L/profile_taper$v.log | tail -1)" >> $S
done
[ $(left) -gt 70 ] && dc_ab ab_down_taper_qwen_64_1024 $(( $(left) - 10 )) --threads 2 --only qwen3-30b-a3b \
  --m 64,1024 --formats bf16 --no-onednn --compare-env MOERUN_CPU_DOWN_TAPER=1 --budget 3
dc_finish
