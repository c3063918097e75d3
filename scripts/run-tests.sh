#!/usr/bin/env bash
# The whole test suite, as `make test` runs it (and CI, through .ci/run):
#   1. ctest on the release build (unit, conformance, plugin, `moerun check`; GPU tests skip without a GPU)
#   2. the CPU tests again under ASan + UBSan (clang)
#   3. each libFuzzer target for a short run from its seed corpus
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
JOBS=${2:-2}
FUZZ_SECONDS=${MOERUN_FUZZ_SECONDS:-20}

echo "== [1/3] tests (release build: $BUILD)"
ctest --test-dir "$BUILD" --output-on-failure -j"$JOBS"

echo "== [2/3] tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DMOERUN_CUDA=OFF -DMOERUN_BENCH=OFF -DMOERUN_SANITIZE=address,undefined >/dev/null
cmake --build build-asan -j"$JOBS" --target moerun_tests moerun_alloc_tests moerun_cli module_pattern_probe
# Everything but the launch matrix, which step 1 ran (it repeats the conformance runs at scale).
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$JOBS" -E 'check_matrix'

echo "== [3/3] fuzzing: ${FUZZ_SECONDS}s per target (build-fuzz)"
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DMOERUN_CUDA=OFF -DMOERUN_BENCH=OFF -DMOERUN_TESTS=ON -DMOERUN_FUZZ=ON -DMOERUN_SANITIZE=address,undefined >/dev/null
for corpus in tests/fuzz/corpus/*/; do
  name=fuzz_$(basename "$corpus")
  cmake --build build-fuzz -j"$JOBS" --target "$name" >/dev/null
  scratch=$(mktemp -d)
  echo "-- $name (${FUZZ_SECONDS}s)"
  ./build-fuzz/tests/"$name" -max_total_time="$FUZZ_SECONDS" -print_final_stats=0 "$scratch" "$corpus" 2>&1 | tail -n 2
  rm -rf "$scratch"
done
echo "== all test stages passed"
