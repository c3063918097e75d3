#!/usr/bin/env bash
# Session 10, call 3: the final code: CLI/q8 tests at AMX; one-token bf16 / 4-bit ratios with the weight
# copies rotated (2 and 16 threads); the xeon-bench pass at 2 threads (headline rows, int8 rows included).
#   run: bash .old/s10_call3.sh > $OUT/run.out 2>&1; cat $OUT/r/steps.log   carry: [".deps", ".old"]
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
git log --oneline | head -1 | tee -a $O/steps.log
log configure+build
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-xeon -j16 >> $O/build.log 2>&1 || { log BUILD FAILED; grep -E "error" -A3 $O/build.log | head -40 | tee -a $O/steps.log; exit 1; }
log "tests: q8, int8, CLI"
(cd build-xeon && timeout 120 ctest -j8 -R "Q8|Int8|int8|explain|cli_|Formats|Spec" > $O/ctest.log 2>&1); log "ctest rc=$?"
grep -E "tests passed|tests failed|\(Failed\)" $O/ctest.log | tee -a $O/steps.log
B=build-xeon/bench/cpu_moe_bench
F=bf16,mxfp4,nvfp4,mxfp4+int8-token-group,nvfp4+int8-token-group
for th in 2 16; do for i in 1 2 3; do
  [ $th = 16 ] && [ $i = 3 ] && continue
  log "M=1 formats, $th threads, round $i"
  timeout 120 $B --threads $th --quick --only qwen3-30b-a3b --formats $F --m 1 --budget 0.4 --json $O/m1_${th}t_$i.json > $O/m1_${th}t_$i.log 2>&1
  grep -E "^qwen3.* cpu/.*M=1 " $O/m1_${th}t_$i.log | awk '{print $2, $3, $4, $5, $6, $7, $NF}' | tee -a $O/steps.log
  grep -E "copies" $O/m1_${th}t_$i.log | head -5 >> $O/steps.log
done; done
log "xeon-bench, 2 threads"
OUT=$O/xb XEON_BENCH_THREADS=2 XEON_BENCH_SWEEP= XEON_BENCH_LIMIT=250 timeout 300 bash tools/xeon-bench.sh build-xeon $O/xb > $O/xb.out 2>&1
tail -4 $O/xb/xeon-bench.log | tee -a $O/steps.log
log done
