#!/usr/bin/env bash
# Session 9, call 8 (main): GPU tests and sanitizers after the stream-tune review fixes; creation times.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
OUT=$O/gc GPU_CHECK_SKIP_CPU=1 GPU_CHECK_SKIP_XEON=1 GPU_CHECK_SKIP_BENCH=1 bash tools/gpu-check.sh > $O/gc.out 2>&1
grep -E "tests rc|PASSED|FAILED|Failure|SUMMARY|rc=" $O/gc/summary.log
timeout 100 build-gpu/bench/cuda_moe_bench --ms 1 --no-forced --json $O/create.json > $O/create.log 2>&1
grep -E "created in|cuda-graph-expert" $O/create.log
