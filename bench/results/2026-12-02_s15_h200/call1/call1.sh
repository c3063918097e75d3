#!/usr/bin/env bash
# Session 15, device call 1: the one-token matrix-vector kernels (decode_gemv.cuh) against the runner's
# stream-tile chain, side by side in one process (decode_probe), the ring read sweep, and
# compute-sanitizer memcheck / racecheck on the probe's quick mode.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/probe.log" 2>&1
git log -1 --format='%H %s' >> "$OUT/probe.log"
TUNE_DECODE_PROBE=1 bash bench/cuda/tune/build.sh /tmp/probe >> "$OUT/probe.log" 2>&1 || { echo "build failed"; tail -30 "$OUT/probe.log"; exit 1; }
P=/tmp/probe/decode_probe
echo "== quick correctness under memcheck" >> "$OUT/probe.log"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $P --quick --reps 1 --max-experts 8 >> "$OUT/sanitizer.log" 2>&1; echo "memcheck rc=$?" >> "$OUT/probe.log"
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 $P --quick --reps 1 --max-experts 8 --shapes qwen3,mixtral >> "$OUT/sanitizer.log" 2>&1; echo "racecheck rc=$?" >> "$OUT/probe.log"
timeout 120 compute-sanitizer --tool synccheck --error-exitcode 9 $P --quick --reps 1 --max-experts 8 --shapes qwen3 >> "$OUT/sanitizer.log" 2>&1; echo "synccheck rc=$?" >> "$OUT/probe.log"
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK" "$OUT/sanitizer.log" >> "$OUT/probe.log"
echo "== probe round 1" >> "$OUT/probe.log"
timeout 150 $P --reps 41 >> "$OUT/probe.log" 2>&1; echo "probe rc=$?" >> "$OUT/probe.log"
echo "== read sweep" >> "$OUT/probe.log"
timeout 60 $P --read-sweep >> "$OUT/probe.log" 2>&1
echo "== probe round 2" >> "$OUT/probe.log"
timeout 150 $P --reps 41 >> "$OUT/probe.log" 2>&1; echo "probe rc=$?" >> "$OUT/probe.log"
cat "$OUT/probe.log"
