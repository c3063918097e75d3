#!/usr/bin/env bash
# Session 12, call 2 (H200 host's Xeon): the q15 cut (4 now) against 2 at the AMX and AVX512-BF16 levels;
# bf16 tiles prefetching the next block pair (MOERUN_CPU_AMX_PREFETCH_PAIRS=1); the streaming prefetch
# distance at 4-16 tokens per expert; the bf16 profile at M = 256 / 1024; then the CPU suite.
#   run: bash .old/s12_call2.sh > $OUT/run.out 2>&1; cat $OUT/r/steps.log   carry: [".deps", ".old"]
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
T0=$(date +%s); log() { echo "== $* (+$(( $(date +%s) - T0 )) s)" | tee -a $O/steps.log; }
pack() { tar czf $OUT/results.tgz -C $O . ; }
trap pack EXIT
log configure+build
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_BENCH=ON -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps > $O/build.log 2>&1
cmake --build build-xeon -j16 >> $O/build.log 2>&1 || { log BUILD FAILED; grep -E "error" -A3 $O/build.log | head -40 | tee -a $O/steps.log; exit 1; }
B=build-xeon/bench/cpu_moe_bench
show() { grep -E "^(qwen3|deepseek|gpt)" $1 | awk '{print $1, $2, $3, $4, $6, $7}' | tee -a $O/steps.log; }
log "q15 cut 4 against MOERUN_CPU_Q15=2, AMX level, 2 threads"
timeout 80 $B --threads 2 --no-onednn --only qwen3-30b-a3b --formats mxfp4,nvfp4 --m 32,48,64,96 --budget 0.4 \
  --compare-env MOERUN_CPU_Q15=2 --json $O/cut_amx_qwen3.json > $O/cut_amx_qwen3.log 2>&1; show $O/cut_amx_qwen3.log
timeout 60 $B --threads 2 --no-onednn --only gpt-oss-20b --formats mxfp4 --m 16,24,32,48 --budget 0.4 \
  --compare-env MOERUN_CPU_Q15=2 --json $O/cut_amx_gptoss.json > $O/cut_amx_gptoss.log 2>&1; show $O/cut_amx_gptoss.log
log "q15 cut 4 against 2 and 8, AVX512-BF16 level (MOERUN_CPU_ISA=avx512-bf16), 2 threads"
for c in 2 8; do
  MOERUN_CPU_ISA=avx512-bf16 timeout 60 $B --threads 2 --no-onednn --only qwen3-30b-a3b --formats mxfp4 --m 32,48,64,96 --budget 0.4 \
    --compare-env MOERUN_CPU_Q15=$c --json $O/cut_bf16lvl_$c.json > $O/cut_bf16lvl_$c.log 2>&1; show $O/cut_bf16lvl_$c.log
done
log "bf16 tiles: prefetch the next block pair (L2) against 4 KiB ahead, 2 threads"
timeout 120 $B --threads 2 --no-onednn --only qwen3-30b-a3b,deepseek-v2-lite --formats bf16 --m 256,1024 --budget 0.8 \
  --compare-env MOERUN_CPU_AMX_PREFETCH_PAIRS=1 --json $O/pairs_2t.json > $O/pairs_2t.log 2>&1
grep -E "^(limits|amx)" $O/pairs_2t.log | tee -a $O/steps.log; show $O/pairs_2t.log
log "bf16 streaming prefetch 16 KiB against 4 KiB, 2 threads"
timeout 60 $B --threads 2 --no-onednn --only qwen3-30b-a3b --formats bf16 --m 64,256 --budget 0.5 \
  --compare-env MOERUN_CPU_PREFETCH=16384 --json $O/pf16k_2t.json > $O/pf16k_2t.log 2>&1; show $O/pf16k_2t.log
log "profile bf16 qwen3 M=256,1024, 2 threads"
MOERUN_CPU_PROFILE=1 timeout 60 $B --threads 2 --no-onednn --only qwen3-30b-a3b --formats bf16 --m 256,1024 --budget 0.5 > $O/prof.log 2>&1
grep -E "moerun cpu profile|wall:|busy|^qwen3" $O/prof.log | tee -a $O/steps.log
log "tests (the CPU suite at the detected level)"
(cd build-xeon && timeout 200 ctest -j12 --output-on-failure > $O/ctest.log 2>&1); log "ctest rc=$?"
grep -E "tests passed|tests failed" $O/ctest.log | tee -a $O/steps.log
grep -E "\(Failed\)|\(Timeout\)" $O/ctest.log | head -20 | tee -a $O/steps.log
log done
