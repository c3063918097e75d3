#!/usr/bin/env bash
# Session 15, device call 2: the one-token chains after a write flush and after a read flush
# (decode_probe, with a bare weight read as the single-kernel reference), then tools/gpu-check.sh
# (GPU tests, sanitizers, the sweep with '-readflush' rows for M <= 16 in both moerun and torch).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
TUNE_DECODE_PROBE=1 bash bench/cuda/tune/build.sh /tmp/probe > "$OUT/probe.log" 2>&1 || { tail -30 "$OUT/probe.log"; exit 1; }
timeout 150 /tmp/probe/decode_probe --reps 41 >> "$OUT/probe.log" 2>&1; echo "probe rc=$?" >> "$OUT/probe.log"
grep -E "median|rc=" "$OUT/probe.log"
mkdir -p "$OUT/gc"
OUT="$OUT/gc" GPU_CHECK_SKIP_XEON=1 GPU_CHECK_SKIP_CPU=1 bash tools/gpu-check.sh > "$OUT/gpu-check.out" 2>&1
echo "gpu-check rc=$?"
cat "$OUT/gc/summary.log"
python3 bench/cuda/table.py "$OUT/gc/bench.json" cuda-graph-expert cuda-graph-expert-readflush torch-expert torch-expert-readflush
