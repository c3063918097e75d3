#!/usr/bin/env bash
# Session 46, device call 1 (carry ["build-prebuilt", "build-prebuilt-cpu"]), binaries of 16bd295 plus
# this session's working tree (build-prebuilt/COMMIT):
# GPU: 1. the suite (the wgmma kernel's three expert searches now one helper, wgmma_group_of: the
#         kernel's code changed, not its logic); `moerun verify` of cuda and cublas;
#      2. compute-sanitizer memcheck on the wgmma engine's tests (paired, 128-column, tail split, split K,
#         every MMA variant, 64-row tiles), racecheck on the tail split;
#      3. the sweep against the torch pipeline (the headline's form).
# CPU, the host's Xeon (AMX-BF16):
#      4. the CPU kernel tests there (the fp8 byte-shuffle decoder among them);
#      5. MOERUN_CPU_FP8_LOW_SHUFFLE=1 alternated call by call with the rule: fp8-block, one token,
#         2 threads (two processes) and 4;
#      6. issue 4's one-token fp8-block ratio with and without it, processes alternated.
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=/tmp/s46bin
C=/tmp/s46cpu
bash tools/prebuilt.sh unpack build-prebuilt $B || exit 1
T0=$(date +%s)
t() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { echo $(( 560 - ($(date +%s) - T0) )); }
S=$OUT/summary.txt
{ cat $B/COMMIT; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  lscpu | grep -E "Model name|^CPU\(s\)"; echo "load: $(cat /proc/loadavg)"; } > $S
L=$OUT/logs; mkdir -p $L
timeout 170 $B/moerun_gpu_tests --gtest_output=json:$L/gpu_tests.json > $L/tests.log 2>&1
echo "gpu tests rc=$? $(t)" >> $S
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $L/tests.log >> $S
for be in cuda cublas; do
  timeout 60 $B/moerun verify --backend $be --cases 40 --seed 46 > $L/verify_$be.log 2>&1
  echo "verify $be rc=$? $(t): $(grep -E 'passed|repeatable' $L/verify_$be.log | tail -2 | tr '\n' ' ')" >> $S
done
filt='*PairedMatchesUnpaired*:*128ColumnBlocks*:*TailSplit*:*SplitK*:*Blocks8EveryMma*:*TileM64*:CudaLaunch.WgmmaTail*'
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/moerun_gpu_tests --gtest_filter="$filt" > $L/memcheck.log 2>&1
echo "memcheck rc=$? $(t): $(grep 'ERROR SUMMARY' $L/memcheck.log | tail -1) $(grep -E '^\[  PASSED' $L/memcheck.log)" >> $S
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 $B/moerun_gpu_tests --gtest_filter='*TailSplit*:*PairedMatchesUnpaired*' > $L/racecheck.log 2>&1
echo "racecheck rc=$? $(t): $(grep 'RACECHECK SUMMARY' $L/racecheck.log | tail -1)" >> $S
PYTHONUNBUFFERED=1 timeout 90 python3 bench/cuda/torch_baseline.py --json $OUT/torch.json > $L/bench.log 2>&1
echo "torch rc=$? $(t)" >> $S
torch_arg=()
[ -s $OUT/torch.json ] && torch_arg=(--torch $OUT/torch.json)
timeout 90 $B/cuda_moe_bench --json $OUT/bench.json "${torch_arg[@]}" >> $L/bench.log 2>&1
echo "bench rc=$? $(t)" >> $S
grep -E "warning|MISMATCH|no CUDA graph" $L/bench.log | head -5 >> $S
python3 bench/cuda/table.py $OUT/bench.json cuda-graph-expert > $OUT/table.md 2>&1
# CPU side
if bash tools/prebuilt.sh unpack build-prebuilt-cpu $C > /dev/null; then
  export LD_LIBRARY_PATH=$C${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  { cat $C/COMMIT; echo "flags: $(grep -o -w -E 'amx_bf16|amx_tile|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    echo "load: $(cat /proc/loadavg)"; } >> $S
  timeout 90 $B/moerun_tests --gtest_filter='CpuKernels.*' > $L/cpu_kernel_tests.log 2>&1
  echo "cpu kernel tests rc=$? $(t): $(grep -E '^\[  (PASSED|FAILED)|SKIPPED \] [0-9]' $L/cpu_kernel_tests.log | tr '\n' ' ')" >> $S
  for th in 2 2 4; do
    timeout $(( $(left) > 70 ? 70 : $(left) )) $C/cpu_moe_bench --threads $th --only qwen3-30b-a3b --m 1 --formats fp8-block \
      --no-onednn --compare-env MOERUN_CPU_FP8_LOW_SHUFFLE=1 --budget 5 --json $OUT/shuffle_ab_${th}t_$SECONDS.json > $L/shuffle_ab_${th}t_$SECONDS.log 2>&1
    echo "shuffle A/B, $th threads rc=$? $(t)" >> $S
  done
  for r in 1 2; do
    for v in 0 1; do
      [ $(left) -gt 30 ] || break 2
      MOERUN_CPU_FP8_LOW_SHUFFLE=$v timeout 40 $C/cpu_moe_bench --threads 2 --decode-ratios --formats fp8-block --budget 10 \
        > $L/ratio_v${v}_r$r.log 2>&1
      echo "decode ratio shuffle=$v round $r rc=$? $(t): $(grep 'faster than bf16' $L/ratio_v${v}_r$r.log | cut -c1-140)" >> $S
    done
  done
  for j in $OUT/shuffle_ab_*.json; do
    python3 -c "
import json,sys
j=json.load(open(sys.argv[1]))
for r in j['rows']:
    if 'cpu_speedup_vs_alt' in r: print(sys.argv[1].split('/')[-1], 'shuffle over the rule:', round(1/r['cpu_speedup_vs_alt'],4) if r['cpu_speedup_vs_alt'] else None, {k: round(v,4) for k,v in r.items() if k.startswith('speedup_alt')})
" $j >> $S 2>&1
  done
fi
(cd $OUT && tar czf logs.tgz logs && rm -rf logs)
cat $S
