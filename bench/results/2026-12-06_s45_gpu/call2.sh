#!/usr/bin/env bash
# Session 45, device call 2 (carry ["build-prebuilt"]): the conformance harness's bitwise-repeatability
# report on the GPU and at the AMX level. GPU suite whole (with GpuConformance.StandardCasesMatchAndRepeatBitwise
# for cuda and cublas), `moerun verify` of cuda and cublas (60 cases each, the new repeatable line),
# the CPU conformance tests at every level of the host's Xeon (AMX included; they now expect every
# case repeatable) and `moerun verify --backend cpu`. Everything into one archive (the device tool
# returns at most 8 files). Then the sweep and the tail-split A/B (an H200 was offered for this call).
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=/tmp/s45bin
bash tools/prebuilt.sh unpack build-prebuilt $B || exit 1
T0=$(date +%s)
t() { echo "($(( $(date +%s) - T0 )) s)"; }
{ cat $B/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E "Model name"; } > $OUT/summary.txt
timeout 200 $B/moerun_gpu_tests --gtest_output=json:$OUT/gpu_tests.json > $OUT/tests.log 2>&1
echo "gpu tests rc=$? $(t)" >> $OUT/summary.txt
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|StandardCases.*(OK|FAILED)" $OUT/tests.log >> $OUT/summary.txt
for be in cuda cublas; do
  timeout 90 $B/moerun verify --backend $be --cases 60 --seed 4545 > $OUT/verify_$be.log 2>&1
  echo "verify $be rc=$? $(t): $(tail -2 $OUT/verify_$be.log | tr '\n' ' ')" >> $OUT/summary.txt
done
timeout 120 $B/moerun_tests --gtest_filter='CpuConformance.*:VerifyHarness.*' > $OUT/cpu_conformance.log 2>&1
echo "cpu conformance rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)|SKIPPED \]' $OUT/cpu_conformance.log | tr '\n' ' ')" >> $OUT/summary.txt
timeout 60 $B/moerun verify --backend cpu --cases 200 --seed 4545 > $OUT/verify_cpu.log 2>&1
echo "verify cpu rc=$? $(t): $(tail -2 $OUT/verify_cpu.log | tr '\n' ' ')" >> $OUT/summary.txt
# The sweep against the torch pipeline (on an H200 this is the headline's form), and the tail split
# against none at M >= 1024.
TZ=UTC nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 200 > "$OUT/smi.csv" 2>&1 &
smi=$!
PYTHONUNBUFFERED=1 timeout 90 python3 bench/cuda/torch_baseline.py --json $OUT/torch.json > $OUT/bench.log 2>&1
echo "torch rc=$? $(t)" >> $OUT/summary.txt
torch_arg=()
[ -s $OUT/torch.json ] && torch_arg=(--torch $OUT/torch.json)
timeout 80 $B/cuda_moe_bench --json $OUT/bench.json "${torch_arg[@]}" >> $OUT/bench.log 2>&1
echo "bench rc=$? $(t)" >> $OUT/summary.txt
timeout 60 $B/cuda_moe_bench --ms 1024,8192 --no-forced --layers 0 --ab env:MOERUN_CUDA_KSPLIT=1 \
  --json $OUT/ab_ksplit.json > $OUT/ab_ksplit.log 2>&1
echo "ab ksplit rc=$? $(t)" >> $OUT/summary.txt
kill $smi 2>/dev/null
cat $OUT/summary.txt
(cd $OUT && tar czf logs.tgz gpu_tests.json tests.log verify_*.log cpu_conformance.log bench.log ab_ksplit.log torch.json smi.csv \
  && rm -f gpu_tests.json tests.log verify_*.log cpu_conformance.log bench.log ab_ksplit.log torch.json smi.csv)
