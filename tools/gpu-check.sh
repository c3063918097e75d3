#!/usr/bin/env bash
# One device call: build (cmake, -j16, sm_90a), GPU tests, the CPU suite, compute-sanitizer memcheck
# and racecheck on small cases, then the benchmark sweep (torch baseline first). Logs and JSON go to
# $OUT (default ./out). Set GPU_CHECK_QUICK=1 for a short benchmark, GPU_CHECK_SKIP_BENCH=1 to skip it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
B=build-gpu
log() { echo "== $*" | tee -a "$OUT/summary.log"; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; lscpu | grep -E 'Model name|Flags'; nvcc --version | tail -1; } > "$OUT/summary.log" 2>&1
prefix=""
[ -d .deps/devdeps ] && prefix="-DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps"
log configure
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a $prefix \
  > "$OUT/build.log" 2>&1 || { log "configure FAILED"; tail -40 "$OUT/build.log"; exit 1; }
log build
cmake --build $B -j16 --target moerun_gpu_tests cuda_moe_bench >> "$OUT/build.log" 2>&1 || { log "build FAILED"; grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
cmake --build $B -j16 >> "$OUT/build.log" 2>&1 || log "full build (CPU suite) FAILED"
log gpu tests
$B/tests/moerun_gpu_tests --gtest_output=json:$OUT/gpu_tests.json > "$OUT/tests.log" 2>&1; echo "gpu tests rc=$?" | tee -a "$OUT/summary.log"
grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]|Failure|error" "$OUT/tests.log" | head -40 | tee -a "$OUT/summary.log"
log cpu tests
timeout 150 $B/tests/moerun_tests --gtest_brief=1 >> "$OUT/tests.log" 2>&1; echo "cpu tests rc=$?" | tee -a "$OUT/summary.log"
grep -E "^\[  (PASSED|FAILED)|tests ran" "$OUT/tests.log" | tail -5 | tee -a "$OUT/summary.log"
log sanitizer
for tool in memcheck racecheck; do
  filt='*SmallHot*:*SmallGrouped*:*MZero*:*SmallGptOss*:*SmallShared*'
  [ $tool = memcheck ] && filt='*Small*:*MZero*:*Graph*'
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $B/tests/moerun_gpu_tests --gtest_filter="$filt" \
    >> "$OUT/sanitizer.log" 2>&1
  echo "compute-sanitizer $tool rc=$?" | tee -a "$OUT/summary.log"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer.log" | tail -2 | tee -a "$OUT/summary.log"
done
if [ "${GPU_CHECK_SKIP_BENCH:-0}" != 1 ]; then
  q=""; [ "${GPU_CHECK_QUICK:-0}" = 1 ] && q="--quick"
  log torch baseline
  PYTHONUNBUFFERED=1 timeout 200 python3 bench/cuda/torch_baseline.py --json "$OUT/torch.json" $q > "$OUT/bench.log" 2>&1
  log moerun bench
  timeout 330 $B/bench/cuda_moe_bench --json "$OUT/bench.json" --torch "$OUT/torch.json" $q >> "$OUT/bench.log" 2>&1
  echo "bench rc=$?" | tee -a "$OUT/summary.log"
  cat "$OUT/bench.log"
fi
cat "$OUT/summary.log"
