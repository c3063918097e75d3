#!/usr/bin/env bash
# Builds cutlass_tune (one object per schedule, in parallel) into ${1:-build-tune}. Run from anywhere.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${1:-$root/build-tune}
mkdir -p "$out"
flags="-std=c++20 -O3 -DNDEBUG --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -I$root/src -I$root/include -isystem $root/.deps/cutlass/include"
pids=()
for n in ${TUNE_CONFIGS:-0 1 2 3 4 5 6 7 8 9 10}; do
  nvcc $flags -DTUNE_CONFIG=$n -c "$root/bench/cuda/tune/tune_kernel.cu" -o "$out/tune_kernel_$n.o" &
  pids+=($!)
done
nvcc $flags -c "$root/src/backends/cuda/kernels/sorted_passes.cu" -o "$out/sorted_passes.o" &
pids+=($!)
nvcc $flags -c "$root/bench/cuda/tune/tune_main.cu" -o "$out/tune_main.o" &
pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
nvcc -gencode=arch=compute_90a,code=sm_90a "$out"/*.o -o "$out/cutlass_tune"
echo "built $out/cutlass_tune"
