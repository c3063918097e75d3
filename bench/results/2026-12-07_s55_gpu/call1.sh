#!/usr/bin/env bash
# Session 55, device call 1: main's binaries (build-prebuilt; carry ["build-prebuilt"]), no knob set.
# 1. the GPU suite (its refusal checks now share tests/unit/error_of.hpp's expect_refused);
# 2. only on an H200 (the headline's card): the headline sweep against the torch pipeline and one
#    token through a stack of 8 layers, clocks sampled;
# 3. the host suite (moerun_tests: conformance at the host's AMX level, the Hugging Face readers) in
#    the time left.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-560} . tools/device-call-lib.sh  # (CALL_BUDGET: the seconds the call was given, less 40)
B=/tmp/s55bin
if bash tools/prebuilt.sh unpack build-prebuilt $B > /dev/null; then
  echo "binaries: $(cat $B/COMMIT) $(t)" >> $S
  timeout 170 $B/moerun_gpu_tests > $L/gpu_tests.log 2>&1
  echo "gpu tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)' $L/gpu_tests.log | tr '\n' ' ')" >> $S
  grep -E "FAILED  \]" $L/gpu_tests.log | head -5 >> $S
  if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
      --format=csv -lms 200 > "$L/smi.csv" 2>&1 &
    smi=$!
    PYTHONUNBUFFERED=1 timeout 120 python3 bench/cuda/torch_baseline.py --json $OUT/torch.json > $L/bench.log 2>&1
    echo "torch rc=$? $(t)" >> $S
    torch_arg=()
    [ -s $OUT/torch.json ] && torch_arg=(--torch $OUT/torch.json)
    timeout 150 $B/cuda_moe_bench --json $OUT/bench.json "${torch_arg[@]}" >> $L/bench.log 2>&1
    echo "bench rc=$? $(t)" >> $S
    grep -E "warning|MISMATCH|no CUDA graph" $L/bench.log | head -5 >> $S
    timeout 60 $B/cuda_moe_bench --ms 1 --no-forced --ab none --layers 8 --json $OUT/layers.json > $L/layers.log 2>&1
    echo "layers rc=$? $(t)" >> $S
    kill $smi 2>/dev/null
    [ -s $OUT/bench.json ] && python3 bench/cuda/table.py $OUT/bench.json cuda-graph-expert >> $S 2>&1
  else
    echo "not an H200: no sweep" >> $S
  fi
  if [ $(left) -gt 40 ]; then
    timeout $(( $(left) - 15 )) $B/moerun_tests --gtest_brief=1 > $L/cpu_tests.log 2>&1
    echo "moerun_tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)' $L/cpu_tests.log | tr '\n' ' ')" >> $S
    grep -E "FAILED  \]" $L/cpu_tests.log | head -5 >> $S
  fi
else
  echo "unpack build-prebuilt failed" >> $S
fi
DC_KEEP="bench.json torch.json layers.json" dc_finish
