#!/usr/bin/env bash
# Session 10, call 5: the whole CPU suite at the AMX level on the final tree (8d9f796).
#   run: bash .old/s10_call5.sh > $OUT/run.out 2>&1; cat $OUT/r/steps.log   carry: [".deps", ".old"]
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
log configure+build
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-xeon -j16 >> $O/build.log 2>&1 || { log BUILD FAILED; grep -E "error" -A3 $O/build.log | head -40 | tee -a $O/steps.log; exit 1; }
grep -c "warning" $O/build.log | sed 's/^/build warnings: /' | tee -a $O/steps.log
log "tests (the CPU suite at the detected level)"
(cd build-xeon && timeout 330 ctest -j8 --output-on-failure > $O/ctest.log 2>&1); log "ctest rc=$?"
grep -E "tests passed|tests failed" $O/ctest.log | tee -a $O/steps.log
grep -E "\(Failed\)|\(Timeout\)" $O/ctest.log | head -20 | tee -a $O/steps.log
grep -B2 -A12 "Failure$\|FAILED  \]" $O/ctest.log | head -60 >> $O/steps.log
grep -E "^planned|mismatch" $O/ctest.log | head -5 | tee -a $O/steps.log
log done
