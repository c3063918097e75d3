#!/usr/bin/env bash
# The CPU benchmark on the device machine's host CPU (a Sapphire-Rapids-class Xeon: AVX-512, AMX-BF16),
# called from the device script:  bash tools/xeon-bench.sh <build-dir> [<out-dir>]   (out default: $OUT)
#   1. (re)configures <build-dir> with the bench on (the oneDNN baseline comes from the system, else from
#      .deps/dnnl.tar.xz made by tools/devdeps/make-dnnl.sh, which CMake unpacks into <build-dir>/_deps)
#      and builds cpu_moe_bench;
#   2. cpu_moe_bench, every row, at 2 threads and at all cores (cpu_2t.json, cpu_<N>t.json);
#   3. the stream/tile crossover sweep at 2 threads: bf16 qwen3-30b-a3b and deepseek-v2-lite at M 16, 64,
#      256 with MOERUN_CPU_STREAM_MAX_TOKENS = 4, 8, 16, 32, 64 (cpu_sweep_2t.json);
#   4. issue 4's format targets at one token, alternated call by call against bf16 at 2 threads
#      (cpu_moe_bench --decode-ratios: cpu_ratios_2t.json; XEON_BENCH_RATIOS=0 skips it);
#   5. bench/cpu/table.py of each into cpu_tables.md.
# Logs: xeon-bench.log (this script's steps with times), cpu_*.log, build-cpubench.log. Each step has a
# time limit (the JSON is rewritten after every model, so a step cut short keeps the rows it finished);
# the whole runs in about 4 minutes after the build, at most 365 s of limits. Exits 1 if a step failed
# or was cut short. The steps run in this script's process group (timeout --foreground), so a limit
# put on the whole script (gpu-check's) stops the step running then too.
# Knobs: XEON_BENCH_THREADS (default "2 $(nproc)"), XEON_BENCH_BUDGET (seconds of timed calls per row,
# default 0.3), XEON_BENCH_SWEEP (default 4,8,16,32,64; empty: no sweep), XEON_BENCH_QUICK=1 (--quick runs),
# XEON_BENCH_LIMIT (seconds per cpu_moe_bench pass; default 110 at 2 threads, 75 above).
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:?usage: xeon-bench.sh <build-dir> [<out-dir>]}
OUT=${2:-${OUT:-$PWD/out}}
mkdir -p "$OUT"
LOG=$OUT/xeon-bench.log
T0=$(date +%s)
log() { echo "== $* (+$(( $(date +%s) - T0 )) s, $(date +%T))" | tee -a "$LOG"; }
: > "$LOG"
lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\))' | tee -a "$LOG"
echo "flags: $(grep -o -w -E 'avx512f|avx512_bf16|amx_tile|amx_bf16|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')" | tee -a "$LOG"

log configure "$B"
cfg=(-S . -B "$B" -DMOERUN_BENCH=ON)
if [ ! -f "$B/CMakeCache.txt" ]; then
  command -v ninja > /dev/null && cfg+=(-G Ninja)
  cfg+=(-DCMAKE_BUILD_TYPE=Release)
  [ -d .deps/devdeps ] && cfg+=("-DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps")
fi
cmake "${cfg[@]}" > "$OUT/build-cpubench.log" 2>&1 || { log "configure FAILED"; tail -30 "$OUT/build-cpubench.log"; exit 1; }
dnnl=$(grep -E '^MOERUN_BENCH_ONEDNN_USED:' "$B/CMakeCache.txt" | cut -d= -f2-)
if [ -z "$dnnl" ] || [ "$dnnl" = none ]; then
  log "oneDNN: none found (no system oneDNN, no .deps/dnnl.tar.xz): the baseline column is absent"
else
  log "oneDNN: $dnnl"
fi
log build cpu_moe_bench
cmake --build "$B" -j"$(nproc)" --target cpu_moe_bench >> "$OUT/build-cpubench.log" 2>&1 ||
  { log "build FAILED"; grep -E "error|Error" "$OUT/build-cpubench.log" | head -30; exit 1; }
BENCH=$B/bench/cpu_moe_bench
if ldd "$BENCH" | grep -q "not found"; then log "cpu_moe_bench has unresolved libraries:"; ldd "$BENCH" | tee -a "$LOG"; exit 1; fi
ldd "$BENCH" | grep -E 'dnnl|OpenCL' | tee -a "$LOG"

q=(); [ "${XEON_BENCH_QUICK:-0}" = 1 ] && q=(--quick)
budget=${XEON_BENCH_BUDGET:-0.3}
threads=${XEON_BENCH_THREADS:-"2 $(nproc)"}
# seconds per pass (XEON_BENCH_LIMIT overrides both); the 2-thread pass is the slower one
limit_for() { [ -n "${XEON_BENCH_LIMIT:-}" ] && echo "$XEON_BENCH_LIMIT" && return; [ "$1" -le 2 ] && echo 110 || echo 75; }
jsons=()
failed=0
for th in $threads; do
  log "cpu_moe_bench --threads $th (all rows, budget $budget s/row)"
  rm -f "$OUT/cpu_${th}t.json"  # (a JSON of an earlier run in the same folder is not this run's)
  timeout --foreground "$(limit_for "$th")" "$BENCH" --threads "$th" --budget "$budget" "${q[@]}" --json "$OUT/cpu_${th}t.json" \
    > "$OUT/cpu_${th}t.log" 2>&1
  rc=$?
  log "threads $th rc=$rc$([ $rc = 124 ] && echo ' (time limit: rows after the last finished model are missing)')"
  [ $rc = 0 ] || failed=1
  grep -E '^(limits|total|WARNING)' "$OUT/cpu_${th}t.log" | tee -a "$LOG"
  [ -s "$OUT/cpu_${th}t.json" ] && jsons+=("$OUT/cpu_${th}t.json")
done
sweep=${XEON_BENCH_SWEEP-4,8,16,32,64}
if [ -n "$sweep" ]; then
  log "stream/tile crossover sweep at 2 threads: n in $sweep"
  rm -f "$OUT/cpu_sweep_2t.json"
  timeout --foreground 60 "$BENCH" --threads 2 --stream-sweep "$sweep" --m 16,64,256 --budget 0.15 --json "$OUT/cpu_sweep_2t.json" \
    > "$OUT/cpu_sweep_2t.log" 2>&1
  rc=$?
  log "sweep rc=$rc"
  [ $rc = 0 ] || failed=1
  grep -E '^(total|WARNING)' "$OUT/cpu_sweep_2t.log" | tee -a "$LOG"
  [ -s "$OUT/cpu_sweep_2t.json" ] && jsons+=("$OUT/cpu_sweep_2t.json")
fi
if [ "${XEON_BENCH_RATIOS:-1}" != 0 ]; then
  log "decode ratios at 2 threads (formats alternated call by call against bf16)"
  rm -f "$OUT/cpu_ratios_2t.json"
  timeout --foreground 120 "$BENCH" --threads 2 --decode-ratios --budget 15 --json "$OUT/cpu_ratios_2t.json" > "$OUT/cpu_ratios_2t.log" 2>&1
  rc=$?
  log "ratios rc=$rc"
  [ $rc = 0 ] || failed=1
  grep -E 'faster than bf16|^total' "$OUT/cpu_ratios_2t.log" | tee -a "$LOG"
  [ -s "$OUT/cpu_ratios_2t.json" ] && jsons+=("$OUT/cpu_ratios_2t.json")
fi
# One table.py per file: a file cut short mid-write must not cost the others their tables.
: > "$OUT/cpu_tables.md"
for j in "${jsons[@]}"; do
  python3 bench/cpu/table.py "$j" >> "$OUT/cpu_tables.md" 2>> "$LOG" || { log "table.py FAILED on $j"; failed=1; }
done
cat "$OUT/cpu_tables.md"
log "xeon-bench done$([ $failed = 0 ] || echo ', with failures (above)')"
exit $failed
