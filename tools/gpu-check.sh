#!/usr/bin/env bash
# One device call: build (cmake, -j$(nproc), sm_90a), GPU tests, the CPU suite, compute-sanitizer memcheck
# and racecheck on small cases, then the benchmark sweep (torch baseline first). Logs and JSON go to
# $OUT (default ./out).
# Knobs: GPU_CHECK_QUICK=1 short benchmark; GPU_CHECK_SKIP_BENCH=1 no benchmark; GPU_CHECK_SKIP_CPU=1
# no CPU suite; GPU_CHECK_SKIP_XEON=1 no CPU benchmark on the host's Xeon (tools/xeon-bench.sh; the
# default with prebuilt binaries); GPU_CHECK_PREBUILT=<dir> use moerun_gpu_tests, cuda_moe_bench (and moerun_tests) from
# <dir> when they run on this machine (built elsewhere for sm_90a; <dir> may be a folder packed by
# tools/prebuilt.sh), else build; BENCH_ARGS / TORCH_ARGS extra
# arguments for cuda_moe_bench / torch_baseline.py (e.g. "--ms 1024,8192"); GPU_CHECK_SANITIZERS
# the compute-sanitizer runs (default "memcheck racecheck racecheck-m64"); GPU_CHECK_SANITIZER_FILTER a
# gtest filter for every one of them instead of their own (a short check of one change's tests);
# GPU_CHECK_PACK=0 leaves every output file loose instead of packing them into $OUT/gpu-check.tgz (only
# what this run added to $OUT: give it an empty or fresh folder, as the device tool's $OUT is).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
# What OUT held before this run stays out of the packing at the end (it removes what it packed).
preexisting=$(ls -A "$OUT")
B=build-gpu
log() { echo "== $* ($(date +%T))" | tee -a "$OUT/summary.log"; }
# Each step's status goes to summary.log; the script exits 1 if any step failed (the device tool's rc).
failed=()
status() {  # status NAME RC
  echo "$1 rc=$2" | tee -a "$OUT/summary.log"
  [ "$2" = 0 ] || failed+=("$1 (rc $2$([ "$2" = 124 ] && echo ", timed out"))")
}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; lscpu | grep -E 'Model name'; nvcc --version | tail -1; } > "$OUT/summary.log" 2>&1
TESTS=$B/tests/moerun_gpu_tests
BENCH=$B/bench/cuda_moe_bench
pre=${GPU_CHECK_PREBUILT:-}
if [ -n "$pre" ] && ls "$pre"/*.xz > /dev/null 2>&1; then  # a folder packed by tools/prebuilt.sh
  bash tools/prebuilt.sh unpack "$pre" /tmp/gpu-check-prebuilt && pre=/tmp/gpu-check-prebuilt
  [ -f "$pre/COMMIT" ] && echo "prebuilt: $(cat "$pre/COMMIT")" >> "$OUT/summary.log"
fi
if [ -n "$pre" ] && "$pre/moerun_gpu_tests" --gtest_list_tests > /dev/null 2>&1 &&
   ! ldd "$pre/cuda_moe_bench" 2>&1 | grep -q "not found"; then
  log "using prebuilt binaries from $pre"
  TESTS=$pre/moerun_gpu_tests
  BENCH=$pre/cuda_moe_bench
else
  [ -n "$pre" ] && log "prebuilt binaries do not run here: building"
  prefix=""
  [ -d .deps/devdeps ] && prefix="-DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps"
  log configure
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a $prefix \
    > "$OUT/build.log" 2>&1 || { log "configure FAILED"; tail -40 "$OUT/build.log"; exit 1; }
  log build
  cmake --build $B -j"$(nproc)" --target moerun_gpu_tests cuda_moe_bench >> "$OUT/build.log" 2>&1 || { log "build FAILED"; grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
fi
if command -v cuobjdump > /dev/null; then
  n=$(cuobjdump --dump-sass "$TESTS" 2>/dev/null | grep -c HGMMA)
  echo "SASS: $n HGMMA instructions in the test binary (CUTLASS sm90 engine)" | tee -a "$OUT/summary.log"
fi
log gpu tests
"$TESTS" --gtest_output=json:$OUT/gpu_tests.json > "$OUT/tests.log" 2>&1; status "gpu tests" $?
grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]|Failure|error" "$OUT/tests.log" | head -40 | tee -a "$OUT/summary.log"
if [ "${GPU_CHECK_SKIP_CPU:-0}" != 1 ]; then
  log cpu tests
  CPU_TESTS=$B/tests/moerun_tests
  if [ "$TESTS" != "$B/tests/moerun_gpu_tests" ] && [ -x "$pre/moerun_tests" ]; then
    CPU_TESTS=$pre/moerun_tests
  else
    cmake --build $B -j"$(nproc)" >> "$OUT/build.log" 2>&1 || { log "full build (CPU suite) FAILED"; failed+=("cpu build"); }
  fi
  timeout 150 "$CPU_TESTS" --gtest_brief=1 >> "$OUT/tests.log" 2>&1; status "cpu tests" $?
  grep -E "^\[  (PASSED|FAILED)|tests ran" "$OUT/tests.log" | tail -5 | tee -a "$OUT/summary.log"
fi
# (with prebuilt binaries there is no build here to add the CPU bench to: xeon-bench would configure
# and build the whole library with CUDA within its limit. GPU_CHECK_SKIP_XEON=0 asks for it anyway.)
skip_xeon=${GPU_CHECK_SKIP_XEON:-0}
[ "$TESTS" != "$B/tests/moerun_gpu_tests" ] && skip_xeon=${GPU_CHECK_SKIP_XEON:-1}
if [ "$skip_xeon" != 1 ]; then
  log xeon cpu bench
  # (the limit is above the sum of xeon-bench's own step limits, 365 s, plus its build)
  timeout 420 bash tools/xeon-bench.sh $B "$OUT/xeon" > "$OUT/xeon-bench.out" 2>&1
  status "xeon bench" $?
fi
log sanitizer
for run in ${GPU_CHECK_SANITIZERS:-memcheck racecheck racecheck-m64}; do
  # memcheck: every small case, the CUTLASS engine included (CudaCutlass.Small*). racecheck: the
  # routing and the own mma.sync kernels, once with the default variant rule and once with the tile
  # kernel forced (racecheck-m64), since the rule now sends larger small cases to CUTLASS.
  tool=${run%%-*}
  filt='*SmallHot*:*SmallGrouped*:*MZero*:*SmallGptOss*:*SmallShared*:*SmallSplitK*'
  [ $tool = memcheck ] && filt='*Small*:*MZero*:*Graph*'
  filt=${GPU_CHECK_SANITIZER_FILTER:-$filt}
  force=""; [ $run = racecheck-m64 ] && force=mma-tile-m64
  # (memcheck: 300 s; the engine test alone takes 65-90 s unchecked, its host reference included)
  lim=200; [ $tool = memcheck ] && lim=300
  # (each run's own log, so that a run cut short shows no summary rather than the previous run's)
  MOERUN_CUDA_GEMM=$force timeout $lim compute-sanitizer --tool $tool --error-exitcode 9 "$TESTS" --gtest_filter="$filt" \
    > "$OUT/sanitizer-$run.log" 2>&1
  status "compute-sanitizer $run" $?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer-$run.log" | tail -1 | tee -a "$OUT/summary.log"
done
if [ "${GPU_CHECK_SKIP_BENCH:-0}" != 1 ]; then
  q=""; [ "${GPU_CHECK_QUICK:-0}" = 1 ] && q="--quick"
  # The card's clocks, power and throttle reasons every 100 ms while the sweep runs (compute-bound rows
  # move with them).
  # (TZ=UTC: clocks.py reads the timestamps as UTC, as the bench's unix_s are)
  TZ=UTC nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 100 > "$OUT/smi.csv" 2>&1 &
  smi=$!
  log torch baseline
  PYTHONUNBUFFERED=1 timeout 200 python3 bench/cuda/torch_baseline.py --json "$OUT/torch.json" $q ${TORCH_ARGS:-} > "$OUT/bench.log" 2>&1
  status torch $?
  # (torch_baseline.py writes its JSON after every shape; none at all: the sweep runs without it)
  torch_arg=()
  [ -s "$OUT/torch.json" ] && torch_arg=(--torch "$OUT/torch.json")
  log moerun bench
  timeout 330 "$BENCH" --json "$OUT/bench.json" "${torch_arg[@]}" $q ${BENCH_ARGS:-} >> "$OUT/bench.log" 2>&1
  status bench $?
  kill $smi 2> /dev/null
  cat "$OUT/bench.log"
fi
log done
if [ ${#failed[@]} -eq 0 ]; then
  echo "gpu-check: every step passed" >> "$OUT/summary.log"
else
  echo "gpu-check: FAILED: $(IFS=';'; echo "${failed[*]}")" >> "$OUT/summary.log"
fi
cat "$OUT/summary.log"
# The device tool brings back at most 8 files: with GPU_CHECK_PACK=1 (default) what this run wrote
# also goes into gpu-check.tgz and only that, summary.log, bench.json and tests.log stay loose.
if [ "${GPU_CHECK_PACK:-1}" = 1 ]; then
  mine=()
  while IFS= read -r f; do
    grep -qxF -- "$f" <<< "$preexisting" || mine+=("$f")
  done < <(ls -A "$OUT")
  tmp=$(mktemp /tmp/gpu-check.XXXXXX.tgz)
  if [ ${#mine[@]} -gt 0 ] && tar czf "$tmp" -C "$OUT" -- "${mine[@]}" 2> /dev/null; then
    for f in "${mine[@]}"; do
      case "$f" in summary.log | bench.json | tests.log) ;; *) rm -rf -- "${OUT:?}/$f" ;; esac
    done
    mv "$tmp" "$OUT/gpu-check.tgz"
  fi
fi
[ ${#failed[@]} -eq 0 ]
