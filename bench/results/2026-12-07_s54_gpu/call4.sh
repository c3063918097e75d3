#!/usr/bin/env bash
# Session 54, device call 4: the headline sweep (call1.sh's GPU steps 2-3) with the packed binaries
# (build-prebuilt, their commit printed; carry ["build-prebuilt"]), only where the card is an H200 (the
# headline's); on any other card it stops at once, so that a machine of the wrong kind costs seconds.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-560} . tools/device-call-lib.sh
B=/tmp/s54bin4
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo "not an H200: no sweep" >> $S
elif bash tools/prebuilt.sh unpack build-prebuilt $B > /dev/null; then
  echo "GPU: $(cat $B/COMMIT) $(t)" >> $S
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
  timeout 80 $B/cuda_moe_bench --ms 1 --no-forced --ab none --layers 8 --json $OUT/layers.json > $L/layers.log 2>&1
  echo "layers rc=$? $(t)" >> $S
  kill $smi 2>/dev/null
  [ -s $OUT/bench.json ] && python3 bench/cuda/table.py $OUT/bench.json >> $S 2>&1
else
  echo "unpack build-prebuilt failed" >> $S
fi
DC_KEEP="bench.json torch.json layers.json" dc_finish
