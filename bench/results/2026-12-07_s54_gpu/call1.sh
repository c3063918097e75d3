#!/usr/bin/env bash
# Session 54, device call 1: main's final binaries (build-prebuilt and build-prebuilt-cpu; carry
# ["build-prebuilt", "build-prebuilt-cpu"]), no knob set. Whatever card comes (an H200 gives the
# headline a new row set; an H100 the same rows for the record):
# GPU: 1. the GPU suite; 2. the headline sweep against the torch pipeline (graph replay, memset and
# read flush, cuBLAS alternated at M >= 1024), clocks and power sampled; 3. one token through a stack
# of 8 layers.
# CPU (the host's Xeon, AMX-BF16): 4. the CPU suite at AMX; 5. issue 4's target rows, bf16 with
# Debian's oneDNN at 2 threads on qwen3-30b-a3b and deepseek-v2-lite; 6. the format ratios at one
# token (bf16 against fp8-block, mxfp4, nvfp4 alternated), in the time left.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-560} . tools/device-call-lib.sh  # (CALL_BUDGET: the seconds the call was given, less 40)
B=/tmp/s54bin
if bash tools/prebuilt.sh unpack build-prebuilt $B > /dev/null; then
  echo "GPU: $(cat $B/COMMIT) $(t)" >> $S
  timeout 170 $B/moerun_gpu_tests > $L/gpu_tests.log 2>&1
  echo "gpu tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)' $L/gpu_tests.log | tr '\n' ' ')" >> $S
  grep -E "FAILED  \]" $L/gpu_tests.log | head -5 >> $S
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 200 > "$L/smi.csv" 2>&1 &
  smi=$!
  PYTHONUNBUFFERED=1 timeout 120 python3 bench/cuda/torch_baseline.py --json $OUT/torch.json > $L/bench.log 2>&1
  echo "torch rc=$? $(t)" >> $S
  torch_arg=()
  [ -s $OUT/torch.json ] && torch_arg=(--torch $OUT/torch.json)
  timeout 120 $B/cuda_moe_bench --json $OUT/bench.json "${torch_arg[@]}" >> $L/bench.log 2>&1
  echo "bench rc=$? $(t)" >> $S
  grep -E "warning|MISMATCH|no CUDA graph" $L/bench.log | head -5 >> $S
  timeout 60 $B/cuda_moe_bench --ms 1 --no-forced --ab none --layers 8 --json $OUT/layers.json > $L/layers.log 2>&1
  echo "layers rc=$? $(t)" >> $S
  kill $smi 2>/dev/null
  [ -s $OUT/bench.json ] && python3 bench/cuda/table.py $OUT/bench.json cuda-graph-expert >> $S 2>&1
else
  echo "unpack build-prebuilt failed" >> $S
fi
if [ $(left) -gt 60 ] && dc_cpu_unpack build-prebuilt-cpu /tmp/s54cpu; then
  timeout $(( $(left) > 150 ? 150 : $(left) - 10 )) $DC_CPU/moerun_tests --gtest_brief=1 > $L/cpu_tests.log 2>&1
  echo "moerun_tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)' $L/cpu_tests.log | tr '\n' ' ')" >> $S
  grep -E "FAILED  \]" $L/cpu_tests.log | head -5 >> $S
  if [ $(left) -gt 60 ]; then
    timeout $(( $(left) * 2 / 3 )) $DC_CPU/cpu_moe_bench --threads 2 --only qwen3-30b-a3b,deepseek-v2-lite --formats bf16 \
      --budget 0.3 --json $OUT/cpu_bf16.json > $L/cpu_bf16.log 2>&1
    echo "cpu bf16 rows, 2 threads rc=$? $(t)" >> $S
    [ -s $OUT/cpu_bf16.json ] && python3 bench/cpu/table.py $OUT/cpu_bf16.json >> $S 2>&1
  fi
  if [ $(left) -gt 30 ]; then
    timeout $(( $(left) - 10 )) $DC_CPU/cpu_moe_bench --threads 2 --decode-ratios --budget 12 \
      --json $OUT/cpu_decode_ratios.json > $L/cpu_decode_ratios.log 2>&1
    echo "decode ratios, 2 threads rc=$? $(t)" >> $S
    grep -E "faster than bf16|^limits" $L/cpu_decode_ratios.log | cut -c1-160 >> $S
  fi
fi
DC_KEEP="bench.json torch.json layers.json cpu_bf16.json cpu_decode_ratios.json" dc_finish
