#!/usr/bin/env bash
# session 7, call 5: qwen3 / gpt-oss M=1 side by side, four rounds: down-weight L2 prefetch (0 / end) x fused combine (0 / 1).
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv | tee -a $O/steps.log
log build
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-gpu -j16 --target moerun_gpu_tests cuda_moe_bench >> $O/build.log 2>&1 || { grep -E " error|Error" $O/build.log | head; exit 1; }
log tests
build-gpu/tests/moerun_gpu_tests --gtest_filter='*OneToken*:*Graph*' --gtest_brief=1 > $O/tests.log 2>&1; echo "tests rc=$?" | tee -a $O/steps.log
log "A/B"
for i in 1 2 3 4; do for pf in 0 end; do for fc in 0 1; do
  MOERUN_CUDA_DOWN_PREFETCH=$pf MOERUN_CUDA_FUSED_COMBINE=$fc timeout 40 build-gpu/bench/cuda_moe_bench --ms 1 --no-forced --shapes qwen3-30b-a3b,gpt-oss-120b-silu > $O/ab_${pf}_${fc}_$i.log 2>&1
  grep -E "cuda-graph" $O/ab_${pf}_${fc}_$i.log | sed "s/^/pf=$pf fc=$fc r$i /" >> $O/steps.log
done; done; done
log done
