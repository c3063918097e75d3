#!/usr/bin/env bash
# Session 47, device call 1: session 46's unrun call4.sh as written (the CPU part, first), then a GPU
# check of the segment search fold. Binaries of main fb2c1a9 plus the working tree:
# bench/results/2026-12-06_s46_gpu/amx_pair_runs16.patch applied, and the two other device searches for
# "the expert whose segment holds row r" (routing.cu's expert_of_row_kernel, sorted_passes.cu's
# expert_of) now the wgmma kernel's helper, renamed segment_of. Packed by `tools/prebuilt.sh pack` and
# `pack-cpu`; carry ["build-prebuilt", "build-prebuilt-cpu"].
# GPU (after the CPU part): 5. the suite; `moerun verify` of cuda and cublas (cublas's activation looks
# up each row's expert bias through launch_expert_of_row, the cuda backend's activation and combine
# through segment_of); 6. compute-sanitizer memcheck on the conformance cases with expert biases, empty
# experts and a hot expert; 7. the sweep against the torch pipeline.
# CPU only, the host's Xeon (AMX-BF16): the
# two one-token rules built from calls 2-3, both at AMX only: the bf16 stream pairs prefetch into L1
# 2 KiB ahead (kAmxPairPrefetchBytes; MOERUN_CPU_PAIR_PREFETCH=1024 gives main's), and a layer whose
# every job is one token on the bf16 pairs takes runs of at most 16 blocks (kAmxPairRunMax;
# MOERUN_CPU_STREAM_RUN=32 gives main's at these shapes). 1. moerun_tests at AMX; 2. runs of 32 against
# the rule, alternated call by call in one process (mxfp4 / nvfp4 are controls: their q8 pairs keep 32);
# 3. the pairs' L2 distance on top of the new L1 one; 4. issue 4's one-token ratios, the rule against
# main's two settings, processes alternated.
set -uo pipefail
DC_BUDGET=280 . tools/device-call-lib.sh  # (the session's device time was short)
dc_cpu_unpack build-prebuilt-cpu /tmp/s46cpu || exit 1
timeout 60 $DC_CPU/moerun_tests --gtest_brief=1 > $L/cpu_tests.log 2>&1
echo "moerun_tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $L/cpu_tests.log | head -5 | tr '\n' ' ')" >> $S
dc_ab ab_run32 70 --threads 2 --only qwen3-30b-a3b --m 1 --formats bf16,fp8-block,mxfp4,nvfp4 \
  --no-onednn --compare-env MOERUN_CPU_STREAM_RUN=32 --budget 2.5
dc_ab ab_run32_other 60 --threads 2 --only deepseek-v2-lite,gpt-oss-20b --m 1 --formats bf16 \
  --no-onednn --compare-env MOERUN_CPU_STREAM_RUN=32 --budget 3
# The pairs' L2 distance (1536, tuned with L1 at 1 KiB) on top of the 2 KiB L1 one: none, and 4 KiB.
for v in 0 4096; do
  [ $(left) -gt 120 ] || break
  dc_ab ab_l2_$v 45 --threads 2 --only qwen3-30b-a3b --m 1 --formats bf16,fp8-block \
    --no-onednn --compare-env MOERUN_CPU_PAIR_PREFETCH_L2=$v --budget 2.5
done
for r in 1 2; do
  for v in main rule; do
    [ $(left) -gt 25 ] || break 2
    if [ $v = main ]; then env="MOERUN_CPU_PAIR_PREFETCH=1024 MOERUN_CPU_STREAM_RUN=32"; else env=""; fi
    env $env timeout 30 $DC_CPU/cpu_moe_bench --threads 2 --decode-ratios --formats fp8-block --budget 7 > $L/ratio_${v}_r$r.log 2>&1
    echo "decode ratio $v [$env] round $r rc=$? $(t): $(grep 'faster than bf16' $L/ratio_${v}_r$r.log | cut -c1-140)" >> $S
  done
done
# GPU
B=/tmp/s47bin
if bash tools/prebuilt.sh unpack build-prebuilt $B > /dev/null; then
  echo "GPU: $(cat $B/COMMIT) $(t)" >> $S
  timeout 170 $B/moerun_gpu_tests --gtest_output=json:$L/gpu_tests.json > $L/tests.log 2>&1
  echo "gpu tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $L/tests.log | head -5 | tr '\n' ' ')" >> $S
  for be in cuda cublas; do
    timeout 60 $B/moerun verify --backend $be --cases 40 --seed 47 > $L/verify_$be.log 2>&1
    echo "verify $be rc=$? $(t): $(grep -E 'passed|repeatable' $L/verify_$be.log | tail -2 | tr '\n' ' ')" >> $S
  done
  filt='*GpuConformance.SmallGptOssStyle*:*GpuConformance.SmallEmptyExpertsAndFp16*:*GpuConformance.SmallHotExpert*:*GpuConformance.SmallGroupedSigmoidBias*'
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/moerun_gpu_tests --gtest_filter="$filt" > $L/memcheck.log 2>&1
  echo "memcheck rc=$? $(t): $(grep 'ERROR SUMMARY' $L/memcheck.log | tail -1) $(grep -E '^\[  PASSED' $L/memcheck.log)" >> $S
  PYTHONUNBUFFERED=1 timeout 90 python3 bench/cuda/torch_baseline.py --json $OUT/torch.json > $L/bench.log 2>&1
  echo "torch rc=$? $(t)" >> $S
  torch_arg=()
  [ -s $OUT/torch.json ] && torch_arg=(--torch $OUT/torch.json)
  timeout 90 $B/cuda_moe_bench --json $OUT/bench.json "${torch_arg[@]}" >> $L/bench.log 2>&1
  echo "bench rc=$? $(t)" >> $S
  grep -E "warning|MISMATCH|no CUDA graph" $L/bench.log | head -5 >> $S
  python3 bench/cuda/table.py $OUT/bench.json cuda-graph-expert > $OUT/table.md 2>&1
else
  echo "unpack build-prebuilt failed" >> $S
fi
DC_KEEP="bench.json torch.json" dc_finish
