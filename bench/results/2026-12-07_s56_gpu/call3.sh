#!/usr/bin/env bash
# Session 56, device call 3: only on an H200 (the headline's card), main's binaries (build-prebuilt; carry
# ["build-prebuilt"]): the headline sweep against the torch pipeline and one token through 8 layers, then
# the GPU suite in the time left. On any other card it stops at once (calls 1 and 2 ran the suites).
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-560} . tools/device-call-lib.sh
B=/tmp/s56bin
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo "not an H200: stopped" >> $S
elif bash tools/prebuilt.sh unpack build-prebuilt $B > /dev/null; then
  echo "binaries: $(cat $B/COMMIT) $(t)" >> $S
  dc_h200_sweep $B
  [ "$(left)" -gt 140 ] && dc_gpu_suite $B $(( $(left) - 15 ))
else
  echo "unpack build-prebuilt failed" >> $S
fi
DC_KEEP="bench.json torch.json layers.json" dc_finish
