#!/usr/bin/env bash
# Session 43, device call 2: the final binaries (build-prebuilt/COMMIT; carry
# ["build-prebuilt"]): the GPU suite, the CPU suite, `moerun verify` of cuda and cublas on specs drawn
# from what each supports, compute-sanitizer memcheck and racecheck on the routing, router-linear and
# launcher tests, then the sweep against the torch pipeline on the same routing, now also as a
# CUDA-graph replay of its no-sync form (torch_baseline.py keeps the fastest of bincount, scatter and
# scatter-graph), and the one-token layer stack. (One call: device starts were scarce.)
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=/tmp/s43bin
bash tools/prebuilt.sh unpack build-prebuilt $B || exit 1
T0=$(date +%s)
t() { echo "($(( $(date +%s) - T0 )) s)"; }
{ cat $B/COMMIT; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $OUT/summary.txt
timeout 170 $B/moerun_gpu_tests --gtest_output=json:$OUT/gpu_tests.json > $OUT/tests.log 2>&1
echo "gpu tests rc=$? $(t)" >> $OUT/summary.txt
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.log >> $OUT/summary.txt
timeout 130 $B/moerun_tests --gtest_brief=1 > $OUT/cpu_tests.log 2>&1
echo "cpu tests rc=$? $(t)" >> $OUT/summary.txt
for be in cuda cublas; do
  timeout 60 $B/moerun verify --backend $be --cases 40 --seed 43 > $OUT/verify_$be.log 2>&1
  echo "verify $be rc=$? $(t): $(tail -1 $OUT/verify_$be.log)" >> $OUT/summary.txt
done
filt='*RouterFromWeights*:CudaRouting.*:CudaLaunch.*:*SmallNaN*:*SmallGrouped*:*GraphReplay*'
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/moerun_gpu_tests --gtest_filter="$filt" > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? $(t): $(grep 'ERROR SUMMARY' $OUT/memcheck.log | tail -1)" >> $OUT/summary.txt
timeout 40 compute-sanitizer --tool racecheck --error-exitcode 9 $B/moerun_gpu_tests --gtest_filter='CudaRouting.*:*RouterFromWeights*' > $OUT/racecheck.log 2>&1
echo "racecheck rc=$? $(t): $(grep 'RACECHECK SUMMARY' $OUT/racecheck.log | tail -1)" >> $OUT/summary.txt
TZ=UTC nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 200 > "$OUT/smi.csv" 2>&1 &
smi=$!
PYTHONUNBUFFERED=1 timeout 90 python3 bench/cuda/torch_baseline.py --json $OUT/torch.json > $OUT/bench.log 2>&1
echo "torch rc=$? $(t)" >> $OUT/summary.txt
torch_arg=()
[ -s $OUT/torch.json ] && torch_arg=(--torch $OUT/torch.json)
timeout 80 $B/cuda_moe_bench --json $OUT/bench.json "${torch_arg[@]}" >> $OUT/bench.log 2>&1
echo "bench rc=$? $(t)" >> $OUT/summary.txt
timeout 30 $B/cuda_moe_bench --ms 1 --no-forced --ab none --layers 8 --json $OUT/layers.json > $OUT/layers.log 2>&1
echo "layers rc=$? $(t)" >> $OUT/summary.txt
kill $smi 2>/dev/null
grep -E "warning|MISMATCH|no CUDA graph" $OUT/bench.log | head -5 >> $OUT/summary.txt
cat $OUT/summary.txt
# (the device tool brings back a few files: the logs go into one archive)
(cd $OUT && tar czf logs.tgz gpu_tests.json cpu_tests.log verify_*.log memcheck.log racecheck.log bench.log layers.log \
  && rm -f gpu_tests.json cpu_tests.log verify_*.log memcheck.log racecheck.log bench.log layers.log)
