#!/usr/bin/env bash
# session 7, call 6: gpu-check of main with the down-weight L2 prefetch (tests, sanitizers, full sweep).
set -uo pipefail
cd "$(dirname "$0")/.."
GPU_CHECK_SKIP_CPU=1 GPU_CHECK_SKIP_XEON=1 timeout 560 bash tools/gpu-check.sh > $OUT/gpu-check.out 2>&1
