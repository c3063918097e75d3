# tools/device-call-lib.sh — what every device-call script (bench/results/*/callN.sh) repeats: source it
# from the repository root at the start of such a script.
#
#   DC_BUDGET=280 . tools/device-call-lib.sh   sets S ($OUT/summary.txt, started with the machine's facts),
#                                              L ($OUT/logs), T0; the functions below
#   t                                          "(N s)" since the start, for summary lines
#   left                                       seconds left of DC_BUDGET (default 560: a 600 s call)
#   dc_cpu_unpack DIR DEST                     unpack a `tools/prebuilt.sh pack-cpu` folder into DEST, put
#                                              DEST on LD_LIBRARY_PATH, note its COMMIT in the summary
#   dc_ab NAME SECONDS ARGS...                 cpu_moe_bench ARGS (from $DC_CPU) with --json $OUT/NAME.json
#                                              and log $L/NAME.log, its rc in the summary, then the
#                                              alternatives' table (bench/cpu/table.py) when ARGS compare
#   dc_gpu_suite BIN SECONDS                   BIN/moerun_gpu_tests, its pass/fail lines in the summary
#   dc_host_suite BIN                          BIN/moerun_tests in the time left (conformance at the host's
#                                              AMX level, the readers), its pass/fail lines in the summary
#   dc_h200_sweep BIN                          only on an H200 (the headline's card): the torch pipeline,
#                                              BIN/cuda_moe_bench's headline sweep ($OUT/bench.json,
#                                              torch.json), one token through 8 layers (layers.json),
#                                              clocks sampled, the graph-expert table in the summary
#   dc_finish                                  pack $L and $OUT/*.json but the named ones (DC_KEEP) into
#                                              $OUT/logs.tgz (the device tool brings back 8 files), print S
#
# WHY: the device tool returns at most 8 files and a call's output tail, so every script keeps one
# summary and one archive; these lines were copied from call to call since session 40.
OUT=${OUT:-/tmp/out}
dc_budget=${DC_BUDGET:-560}  # (copied: an assignment before `.` lasts only while the file is read)
T0=$(date +%s)
S=$OUT/summary.txt
L=$OUT/logs
mkdir -p "$L"
t() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { echo $(( dc_budget - ($(date +%s) - T0) )); }
{ command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  lscpu | grep -E "Model name|^CPU\(s\)"; echo "load: $(cat /proc/loadavg)"; } > "$S"

dc_cpu_unpack() {
  bash tools/prebuilt.sh unpack "$1" "$2" > /dev/null || { echo "unpack $1 failed" >> "$S"; return 1; }
  export LD_LIBRARY_PATH=$2${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  DC_CPU=$2
  { cat "$2/COMMIT"; echo "flags: $(grep -o -w -E 'amx_bf16|amx_tile|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"; } >> "$S"
}

dc_ab() {
  local name=$1 secs=$2
  shift 2
  timeout "$secs" "$DC_CPU/cpu_moe_bench" "$@" --json "$OUT/$name.json" > "$L/$name.log" 2>&1
  echo "$name rc=$? $(t): $*" >> "$S"
  [ -s "$OUT/$name.json" ] && python3 bench/cpu/table.py "$OUT/$name.json" | grep -A16 "| alternative |" >> "$S" 2>&1
  return 0
}

dc_gpu_suite() {
  timeout "$2" "$1/moerun_gpu_tests" > "$L/gpu_tests.log" 2>&1
  echo "gpu tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)' "$L/gpu_tests.log" | tr '\n' ' ')" >> "$S"
  grep -E "FAILED  \]" "$L/gpu_tests.log" | head -5 >> "$S"
  return 0
}

dc_host_suite() {
  if [ "$(left)" -gt 40 ]; then
    timeout $(( $(left) - 15 )) "$1/moerun_tests" --gtest_brief=1 > "$L/cpu_tests.log" 2>&1
    echo "moerun_tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)' "$L/cpu_tests.log" | tr '\n' ' ')" >> "$S"
    grep -E "FAILED  \]" "$L/cpu_tests.log" | head -5 >> "$S"
  fi
  return 0
}

dc_h200_sweep() {
  if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    echo "not an H200: no sweep" >> "$S"
    return 0
  fi
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 200 > "$L/smi.csv" 2>&1 &
  local smi=$!
  PYTHONUNBUFFERED=1 timeout 120 python3 bench/cuda/torch_baseline.py --json "$OUT/torch.json" > "$L/bench.log" 2>&1
  echo "torch rc=$? $(t)" >> "$S"
  local torch_arg=()
  [ -s "$OUT/torch.json" ] && torch_arg=(--torch "$OUT/torch.json")
  timeout 150 "$1/cuda_moe_bench" --json "$OUT/bench.json" "${torch_arg[@]}" >> "$L/bench.log" 2>&1
  echo "bench rc=$? $(t)" >> "$S"
  grep -E "warning|MISMATCH|no CUDA graph" "$L/bench.log" | head -5 >> "$S"
  timeout 60 "$1/cuda_moe_bench" --ms 1 --no-forced --ab none --layers 8 --json "$OUT/layers.json" > "$L/layers.log" 2>&1
  echo "layers rc=$? $(t)" >> "$S"
  kill "$smi" 2>/dev/null
  [ -s "$OUT/bench.json" ] && python3 bench/cuda/table.py "$OUT/bench.json" cuda-graph-expert >> "$S" 2>&1
  return 0
}

dc_finish() {
  local keep=" ${DC_KEEP:-} " j
  for j in "$OUT"/*.json; do
    [ -e "$j" ] && [[ $keep != *" $(basename "$j") "* ]] && mv "$j" "$L/"
  done
  (cd "$OUT" && tar czf logs.tgz logs && rm -rf logs)
  cat "$S"
}
