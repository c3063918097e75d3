#!/usr/bin/env bash
# Session 51, device call 1 (CPU only; the host's Xeon, AMX-BF16): fp8 block scales as scale slots
# (2dd7ad3, layout cpu-nb16-v3) against one f32 per lane (d69b813), processes alternated.
# Packs: `tools/prebuilt.sh pack-cpu` of each commit, the old one moved to build-prebuilt-cpu-old; carry
# ["build-prebuilt-cpu", "build-prebuilt-cpu-old"]; `CALL_BUDGET=300 bash bench/results/2026-12-07_s51_gpu/call1.sh`.
# 1. moerun_tests of the new binaries at AMX (every kernel reads the new scales);
# 2. issue 4's one-token ratio (bf16 over fp8-block, alternated in each process; bf16's path did not
#    change), old / new / old / new / old / new;
# 3. the kernels alone from memory, one thread, fp8-block, gate_up's and down's shapes, old / new twice
#    (GB/s of each binary's own packed bytes: the new one's are 2.3% fewer);
# 4. fp8-block at 4 and 16 tokens (the AMX tiles decode the same scales), old / new.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-580} . tools/device-call-lib.sh
dc_cpu_unpack build-prebuilt-cpu-old /tmp/s51old || { dc_finish; exit 1; }
OLD=$DC_CPU
dc_cpu_unpack build-prebuilt-cpu /tmp/s51new || { dc_finish; exit 1; }
NEW=$DC_CPU
timeout 60 $NEW/moerun_tests --gtest_brief=1 > $L/cpu_tests.log 2>&1
echo "moerun_tests (new) rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)|FAILED  \]' $L/cpu_tests.log | head -5 | tr '\n' ' ')" >> $S
for r in 1 2 3; do
  for v in old new; do
    [ $(left) -gt 30 ] || break 2
    B=$OLD; [ $v = new ] && B=$NEW
    timeout 30 $B/cpu_moe_bench --threads 2 --decode-ratios --formats fp8-block --budget 7 > $L/ratio_${v}_r$r.log 2>&1
    echo "ratio $v r$r rc=$? $(t): $(grep 'faster than bf16' $L/ratio_${v}_r$r.log | cut -c1-130)" >> $S
    grep -E "^qwen3.*M=1 " $L/ratio_${v}_r$r.log | awk '{print "    " $2, $6, $7, $8, $9}' >> $S
  done
done
for r in 1 2; do
  for v in old new; do
    [ $(left) -gt 20 ] || break 2
    B=$OLD; [ $v = new ] && B=$NEW
    for shape in 1536,2048 2048,768; do
      timeout 20 $B/cpu_kernel_bench --isa avx512-bf16 --formats fp8-block --m 1 --mem-m 1 --shape $shape --reps 21 \
        > $L/kernel_${v}_${shape}_r$r.log 2>&1
      echo "kernel $v $shape r$r rc=$? $(t): $(grep -E 'mem m=1' $L/kernel_${v}_${shape}_r$r.log)" >> $S
    done
  done
done
for v in old new; do
  [ $(left) -gt 30 ] || break
  B=$OLD; [ $v = new ] && B=$NEW
  timeout 30 $B/cpu_moe_bench --threads 2 --only qwen3-30b-a3b --m 4,16 --formats fp8-block --no-onednn --budget 3 \
    > $L/m4_16_$v.log 2>&1
  echo "fp8-block M=4,16 $v rc=$? $(t):" >> $S; grep -E "^qwen3" $L/m4_16_$v.log | awk '{print "    " $2, $4, $6, $7, $8, $9}' >> $S
done
dc_finish
