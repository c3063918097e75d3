#!/usr/bin/env bash
# Session 53, device call 2, right after session 52's call1.sh (same binaries: build-prebuilt and
# build-prebuilt-cpu of e321bb6; carry ["build-prebuilt", "build-prebuilt-cpu"]). Knobs that
# call 1 found faster are passed in the environment of this script (MOERUN_CUDA_COMBINE_BATCH,
# MOERUN_CPU_DOWN_TAPER) and reach both benches; each bench's JSON records what was set.
# GPU (asked for as nvidia-h200; on an H100 the same rows, for the record): 1. the headline sweep
# against the torch pipeline (graph replay, memset flush and read flush, cuBLAS alternated at
# M >= 1024), with the card's clocks and power sampled; 2. one token through a stack of 8 layers.
# CPU (the host's Xeon, AMX-BF16): 3. every row at 2 threads with Debian's oneDNN (issue 4's headline
# form), in the time left.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-560} . tools/device-call-lib.sh  # (CALL_BUDGET: the seconds the call was given, less 40)
B=/tmp/s53bin
echo "env: MOERUN_CUDA_COMBINE_BATCH=${MOERUN_CUDA_COMBINE_BATCH:-} MOERUN_CPU_DOWN_TAPER=${MOERUN_CPU_DOWN_TAPER:-}" >> $S
if bash tools/prebuilt.sh unpack build-prebuilt $B > /dev/null; then
  echo "GPU: $(cat $B/COMMIT) $(t)" >> $S
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 200 > "$L/smi.csv" 2>&1 &
  smi=$!
  PYTHONUNBUFFERED=1 timeout $(( $(left) > 150 ? 150 : $(left) )) python3 bench/cuda/torch_baseline.py --json $OUT/torch.json > $L/bench.log 2>&1
  echo "torch rc=$? $(t)" >> $S
  torch_arg=()
  [ -s $OUT/torch.json ] && torch_arg=(--torch $OUT/torch.json)
  timeout 150 $B/cuda_moe_bench --json $OUT/bench.json "${torch_arg[@]}" >> $L/bench.log 2>&1
  echo "bench rc=$? $(t)" >> $S
  grep -E "warning|MISMATCH|no CUDA graph" $L/bench.log | head -5 >> $S
  timeout 80 $B/cuda_moe_bench --ms 1 --no-forced --ab none --layers 8 --json $OUT/layers.json > $L/layers.log 2>&1
  echo "layers rc=$? $(t)" >> $S
  kill $smi 2>/dev/null
  [ -s $OUT/bench.json ] && python3 bench/cuda/table.py $OUT/bench.json cuda-graph-expert >> $S 2>&1
else
  echo "unpack build-prebuilt failed" >> $S
fi
if [ $(left) -gt 120 ] && dc_cpu_unpack build-prebuilt-cpu /tmp/s53cpu; then
  timeout $(( $(left) - 15 )) $DC_CPU/cpu_moe_bench --threads 2 --budget 0.3 --json $OUT/cpu_2t.json > $L/cpu_2t.log 2>&1
  echo "cpu every row, 2 threads rc=$? $(t)" >> $S
  [ -s $OUT/cpu_2t.json ] && python3 bench/cpu/table.py $OUT/cpu_2t.json >> $S 2>&1
fi
DC_KEEP="bench.json torch.json layers.json cpu_2t.json" dc_finish
