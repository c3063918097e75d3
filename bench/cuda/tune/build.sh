#!/usr/bin/env bash
# Builds cutlass_tune (one object per schedule, in parallel) into ${1:-build-tune}. Run from anywhere.
# TUNE_CONFIGS="0 6": only those schedules. TUNE_PASSES_ONLY=1: no CUTLASS schedule at all, only the
# gather / activation / combine passes (a build of seconds). TUNE_PASSES_SRC=<file>: compile the passes
# from that file instead of src/.../sorted_passes.cu (an older version, to time two side by side).
# Schedules 11-14 are the own wgmma grouped GEMM (src/.../wgmma_grouped.cuh), one object for all; the
# first schedule built is the reference the others' outputs are checked against.
# TUNE_DECODE_PROBE=1: build decode_probe instead (the one-token chains, bench/cuda/tune/decode_probe.cu).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${1:-$root/build-tune}
mkdir -p "$out"
rm -f "$out"/*.o
flags="-std=c++20 -O3 -DNDEBUG --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -I$root/src -I$root/include -isystem $root/.deps/cutlass/include"
pids=()
if [ "${TUNE_DECODE_PROBE:-0}" = 1 ]; then
  k=$root/src/backends/cuda/kernels
  for src in "$root/bench/cuda/tune/decode_probe.cu" "$k/routing.cu" "$k/grouped_gemm_bf16.cu"; do
    nvcc $flags -c "$src" -o "$out/probe_$(basename "$src" .cu).o" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  nvcc -gencode=arch=compute_90a,code=sm_90a "$out"/probe_*.o -o "$out/decode_probe"
  echo "built $out/decode_probe"
  exit 0
fi
main_flags=""
if [ "${TUNE_PASSES_ONLY:-0}" = 1 ]; then
  main_flags="-DTUNE_PASSES_ONLY"
else
  own=0
  for n in ${TUNE_CONFIGS:-0 1 2 3 4 5 6 7 8 9 10 11}; do
    if [ "$n" -ge 11 ]; then own=1; continue; fi
    nvcc $flags -DTUNE_CONFIG=$n -c "$root/bench/cuda/tune/tune_kernel.cu" -o "$out/tune_kernel_$n.o" &
    pids+=($!)
  done
  if [ "$own" = 1 ]; then  # schedules 11-14: the own wgmma grouped GEMM
    nvcc $flags -Xptxas -v -c "$root/bench/cuda/tune/wgmma_grouped.cu" -o "$out/wgmma_grouped.o" 2> "$out/wgmma_grouped.ptxas" &
    pids+=($!)
  fi
fi
passes=${TUNE_PASSES_SRC:-$root/src/backends/cuda/kernels/sorted_passes.cu}
nvcc $flags -I"$root/src/backends/cuda/kernels" -c "$passes" -o "$out/sorted_passes.o" &
pids+=($!)
nvcc $flags $main_flags -c "$root/bench/cuda/tune/tune_main.cu" -o "$out/tune_main.o" &
pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
nvcc -gencode=arch=compute_90a,code=sm_90a "$out"/*.o -o "$out/cutlass_tune"
echo "built $out/cutlass_tune"
