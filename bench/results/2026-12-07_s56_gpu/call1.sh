#!/usr/bin/env bash
# Session 56, device call 1: main's binaries (build-prebuilt; carry ["build-prebuilt"]), no knob set.
# 1. the GPU suite (the cuda and cublas backends refuse shared experts in another format, by capability);
# 2. only on an H200: the headline sweep against the torch pipeline, one token through 8 layers;
# 3. the host suite in the time left: conformance at the host's AMX level, where the cpu backend's
#    shared experts in another format (CpuBackend.SharedExpertsInAnotherFormat, the standard cases'
#    mixed specs) meet the AMX kernels this machine lacks.
set -uo pipefail
DC_BUDGET=${CALL_BUDGET:-560} . tools/device-call-lib.sh  # (CALL_BUDGET: the seconds the call was given, less 40)
B=/tmp/s56bin
if bash tools/prebuilt.sh unpack build-prebuilt $B > /dev/null; then
  echo "binaries: $(cat $B/COMMIT) $(t)" >> $S
  dc_gpu_suite $B 170
  dc_h200_sweep $B
  dc_host_suite $B
else
  echo "unpack build-prebuilt failed" >> $S
fi
DC_KEEP="bench.json torch.json layers.json" dc_finish
