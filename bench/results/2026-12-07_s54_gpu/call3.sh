#!/usr/bin/env bash
# Session 54, device call 3: the host-side fixes of the CUDA review (build-prebuilt of the working
# tree after ec49c8c; carry ["build-prebuilt"]): the GPU suite with the three new tests, then
# compute-sanitizer memcheck on the new tests that fit it (the out-of-memory one allocates nearly all
# the card, which the sanitizer's own reservations would change), then racecheck on one of them; on an
# H200, the headline sweep in the time left.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-560} . tools/device-call-lib.sh
B=/tmp/s54bin3
if bash tools/prebuilt.sh unpack build-prebuilt $B > /dev/null; then
  echo "GPU: $(cat $B/COMMIT) $(t)" >> $S
  timeout 200 $B/moerun_gpu_tests > $L/gpu_tests.log 2>&1
  echo "gpu tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)' $L/gpu_tests.log | tr '\n' ' ')" >> $S
  grep -E "FAILED  \]|Failure" $L/gpu_tests.log | head -8 >> $S
  grep -E "^\[ +(OK|FAILED) +\] CudaBackend\.(TheCallers|OutOfDevice|Overlapping)" $L/gpu_tests.log >> $S
  f='CudaBackend.TheCallersStaleErrorDoesNotFailAForward:CudaBackend.OverlappingOutputAndLoneTopkIdsAreRefused:CudaBackend.TensorsOfAnotherDeviceAreRefused'
  timeout 200 compute-sanitizer --tool memcheck --leak-check full $B/moerun_gpu_tests --gtest_filter="$f" > $L/memcheck.log 2>&1
  echo "memcheck rc=$? $(t): $(grep -E 'ERROR SUMMARY|LEAK SUMMARY' $L/memcheck.log | tr '\n' ' ') $(grep -E '^\[  (PASSED|FAILED)' $L/memcheck.log | tr '\n' ' ')" >> $S
  timeout 60 compute-sanitizer --tool racecheck $B/moerun_gpu_tests \
    --gtest_filter=CudaBackend.OverlappingOutputAndLoneTopkIdsAreRefused > $L/racecheck.log 2>&1
  echo "racecheck rc=$? $(t): $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $L/racecheck.log | tr '\n' ' ')" >> $S
  # On an H200 (the headline's card), the headline sweep in the time left: call1.sh's steps 2-3.
  if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ $(left) -gt 150 ]; then
    PYTHONUNBUFFERED=1 timeout 90 python3 bench/cuda/torch_baseline.py --json $OUT/torch.json > $L/bench.log 2>&1
    echo "torch rc=$? $(t)" >> $S
    torch_arg=()
    [ -s $OUT/torch.json ] && torch_arg=(--torch $OUT/torch.json)
    timeout $(( $(left) > 100 ? 100 : $(left) - 5 )) $B/cuda_moe_bench --json $OUT/bench.json "${torch_arg[@]}" >> $L/bench.log 2>&1
    echo "bench rc=$? $(t)" >> $S
    [ $(left) -gt 30 ] && timeout $(( $(left) - 10 )) $B/cuda_moe_bench --ms 1 --no-forced --ab none --layers 8 \
      --json $OUT/layers.json > $L/layers.log 2>&1 && echo "layers rc=0 $(t)" >> $S
    [ -s $OUT/bench.json ] && python3 bench/cuda/table.py $OUT/bench.json cuda-graph-expert >> $S 2>&1
  fi
else
  echo "unpack build-prebuilt failed" >> $S
fi
DC_KEEP="bench.json torch.json layers.json" dc_finish
