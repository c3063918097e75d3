#!/usr/bin/env bash
# Session 8, call 4: the quads (this tree) against main (.old/main-src), qwen3 M = 1 and 256 and gpt-oss-20b
# M = 1, three alternations of the two binaries, and the kernel bench once more.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
P="-DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps -DMOERUN_CUDA=OFF"
ln -sfn $PWD/.deps .old/main-src/.deps
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON $P > $O/build.log 2>&1
cmake -S .old/main-src -B build-main -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON $P > $O/build-main.log 2>&1
cmake --build build-xeon -j16 --target cpu_moe_bench >> $O/build.log 2>&1 || { grep -E " error|Error:" $O/build.log | head; exit 1; }
cmake --build build-main -j16 --target cpu_moe_bench >> $O/build-main.log 2>&1 || { grep -E " error|Error:" $O/build-main.log | head; exit 1; }
log built
for i in 1 2 3; do for v in main xeon; do
  log "layer $v $i"
  timeout 80 build-$v/bench/cpu_moe_bench --threads 2 --only qwen3-30b-a3b --m 1,256 --budget 0.25 --json $O/layer_${v}_$i.json > $O/layer_${v}_$i.log 2>&1
  timeout 40 build-$v/bench/cpu_moe_bench --threads 2 --only gpt-oss-20b --m 1 --budget 0.25 --json $O/layer_gptoss_${v}_$i.json >> $O/layer_${v}_$i.log 2>&1
  grep -E "^(qwen3|gpt)" $O/layer_${v}_$i.log | grep -E " cpu/" | grep "th=2" | tee -a $O/steps.log
done; done
log done
