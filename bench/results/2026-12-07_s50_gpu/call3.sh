#!/usr/bin/env bash
# Session 50, device call 3, prepared for the next session (CPU only; the host's Xeon, AMX-BF16): where
# the one-token fp8-block layer loses to bf16's byte rate (92% in the layer, 97.5% in the probe's pair
# stream: NOTES.md). Binaries of main after 4a7922c, `tools/prebuilt.sh pack-cpu`; carry
# ["build-prebuilt-cpu"]; `CALL_BUDGET=190 bash bench/results/2026-12-07_s50_gpu/call3.sh`, about 150 s (the
# CPU pack holds cpu_kernel_bench since this session).
# 1. the decode ratio with MOERUN_CPU_PROFILE=1: each format's stages (gemm1 / gemm2 kernels, epilogues,
#    the slowest thread) over the same alternated forwards, two rounds;
# 2. the kernels alone from memory, one thread, both GEMM shapes of qwen3-30b-a3b (one block a call);
# 3. the probe again (its numbers beside the layer's on the same host).
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-580} . tools/device-call-lib.sh
dc_cpu_unpack build-prebuilt-cpu /tmp/s50cpu || { dc_finish; exit 1; }
for r in 1 2; do
  [ $(left) -gt 55 ] || break
  MOERUN_CPU_PROFILE=1 timeout 55 $DC_CPU/cpu_moe_bench --threads 2 --decode-ratios --formats fp8-block --budget 7 \
    > $L/ratio_profile_r$r.log 2>&1
  echo "decode ratio + profile round $r rc=$? $(t): $(grep 'faster than bf16' $L/ratio_profile_r$r.log | cut -c1-100)" >> $S
  for f in "bf16 act" "fp8-block act"; do  # each format's first runner (one per weight copy)
    grep -m1 -A3 "I=768 $f" $L/ratio_profile_r$r.log | grep -E "busy" | sed "s/^/  ${f% act}: /" >> $S
  done
done
for shape in 1536,2048 2048,768; do
  [ $(left) -gt 25 ] || break
  timeout 25 $DC_CPU/cpu_kernel_bench --isa avx512-bf16 --formats bf16,fp8-block --m 1 --mem-m 1 --shape $shape --reps 21 \
    > $L/kernel_$shape.log 2>&1
  echo "kernel bench $shape rc=$? $(t):" >> $S; grep -E "mem m=1" $L/kernel_$shape.log >> $S
done
[ $(left) -gt 25 ] && g++ -O2 -std=c++20 -fopenmp -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 \
  bench/results/2026-12-07_s50_gpu/fp8_decode_probe.cpp -o /tmp/probe > $L/probe_build.log 2>&1 \
  && timeout 25 /tmp/probe 1 7 > $L/probe.log 2>&1
echo "probe rc=$? $(t):" >> $S; grep -E "threads 2" $L/probe.log >> $S
dc_finish
