#!/usr/bin/env bash
# Session 15, device call 4: tools/gpu-check.sh with the card's clocks and power sampled during the
# sweep (smi.csv) and the matmul rate measured before and after it (median of 10 flushed calls, and
# sustained over ~1 s) and, for M >= 1024, alternated with the headline row; then a second pass over
# M = 1024 and 8192 (20 reps a row) for the spread between passes.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/gc"
OUT="$OUT/gc" GPU_CHECK_SKIP_XEON=1 GPU_CHECK_SKIP_CPU=1 bash tools/gpu-check.sh > "$OUT/call.log" 2>&1
echo "gpu-check rc=$?"
cat "$OUT/gc/summary.log"
tar xzf "$OUT/gc/gpu-check.tgz" -C /tmp ./smi.csv ./torch.json 2> /dev/null
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 100 > "$OUT/smi2.csv" 2>&1 &
smi=$!
build-gpu/bench/cuda_moe_bench --ms 1024,8192 --no-forced --json "$OUT/bench2.json" --torch /tmp/torch.json >> "$OUT/call.log" 2>&1
echo "second pass rc=$?"
kill $smi
python3 bench/cuda/table.py "$OUT/gc/bench.json" cuda-graph-expert cuda-graph-expert-readflush cuda-eager-full
python3 bench/cuda/table.py "$OUT/bench2.json" cuda-graph-expert
grep -E "^limits" "$OUT/call.log"
python3 bench/cuda/clocks.py "$OUT/gc/bench.json" /tmp/smi.csv cuda-graph-expert
python3 bench/cuda/clocks.py "$OUT/bench2.json" "$OUT/smi2.csv" cuda-graph-expert
