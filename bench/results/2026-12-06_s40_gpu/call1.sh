#!/usr/bin/env bash
# Session 40, device call 1: the GPU suite on ca770b7's binaries (build-prebuilt-main/; no CUDA, runner
# or bench change since), then the headline sweep as tools/gpu-check.sh runs it (torch baseline,
# cuda_moe_bench defaults), then the one-token rows with the layer stack. Run with carry ["build-prebuilt-main"].
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=build-prebuilt-main
T0=$(date +%s)
t() { echo "($(( $(date +%s) - T0 )) s)"; }
{ cat $B/COMMIT; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $OUT/summary.txt
timeout 300 $B/moerun_gpu_tests --gtest_output=json:$OUT/gpu_tests.json > $OUT/tests.log 2>&1
echo "gpu tests rc=$? $(t)" >> $OUT/summary.txt
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.log >> $OUT/summary.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 200 > "$OUT/smi.csv" 2>&1 &
smi=$!
PYTHONUNBUFFERED=1 timeout 200 python3 bench/cuda/torch_baseline.py --json $OUT/torch.json > $OUT/bench.log 2>&1
echo "torch rc=$? $(t)" >> $OUT/summary.txt
timeout 200 $B/cuda_moe_bench --json $OUT/bench.json --torch $OUT/torch.json >> $OUT/bench.log 2>&1
echo "bench rc=$? $(t)" >> $OUT/summary.txt
timeout 120 $B/cuda_moe_bench --ms 1 --no-forced --ab none --layers 8 --json $OUT/layers.json > $OUT/layers.log 2>&1
echo "layers rc=$? $(t)" >> $OUT/summary.txt
kill $smi 2>/dev/null
grep -h "cuda-graph-expert" $OUT/layers.log >> $OUT/summary.txt
cat $OUT/summary.txt
