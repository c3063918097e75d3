#!/usr/bin/env bash
# Session 44, device call 1 (carry ["build-prebuilt"], binaries of build-prebuilt/COMMIT):
# 1. the CPU suite on the GPU machine's host, whole (session 43's calls lost it to a SIGKILL: the
#    512 GiB bad_alloc test where vm.overcommit_memory = 1; it now skips there), with its AMX levels,
#    and `moerun verify` of cpu at the amx level and capped at avx512-bf16;
# 2. the GPU suite, `moerun verify` of cuda and cublas, memcheck and racecheck on small cases;
# 3. the sweep against the torch pipeline (same routing, eager and graph-replayed);
# 4. the A/B of the wgmma engine's weight copies with an L2 evict-first policy (MOERUN_CUDA_WEIGHT_L2=first)
#    against the rule, alternated call by call, in two processes.
# Logs in one archive (the device tool brings back a few files).
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=/tmp/s44bin
bash tools/prebuilt.sh unpack build-prebuilt $B || exit 1
T0=$(date +%s)
t() { echo "($(( $(date +%s) - T0 )) s)"; }
{ cat $B/COMMIT; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  echo "vm.overcommit_memory = $(cat /proc/sys/vm/overcommit_memory)"; lscpu | grep -E "Model name|^CPU\(s\)"
  echo "cpu flags: $(grep -o -w -E 'amx_bf16|amx_tile|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"; } > $OUT/summary.txt
timeout 150 $B/moerun_tests --gtest_brief=1 > $OUT/cpu_tests.log 2>&1
echo "cpu tests rc=$? $(t)" >> $OUT/summary.txt
grep -E "tests ran|PASSED  \]|FAILED  \]|SKIPPED \]" $OUT/cpu_tests.log | head -20 >> $OUT/summary.txt
for isa in amx avx512-bf16; do
  MOERUN_CPU_ISA=$isa timeout 60 $B/moerun verify --backend cpu --cases 300 --seed 44 > $OUT/verify_cpu_$isa.log 2>&1
  echo "verify cpu $isa rc=$? $(t): $(tail -1 $OUT/verify_cpu_$isa.log)" >> $OUT/summary.txt
done
timeout 170 $B/moerun_gpu_tests --gtest_output=json:$OUT/gpu_tests.json > $OUT/tests.log 2>&1
echo "gpu tests rc=$? $(t)" >> $OUT/summary.txt
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.log >> $OUT/summary.txt
for be in cuda cublas; do
  timeout 60 $B/moerun verify --backend $be --cases 40 --seed 44 > $OUT/verify_$be.log 2>&1
  echo "verify $be rc=$? $(t): $(tail -1 $OUT/verify_$be.log)" >> $OUT/summary.txt
done
filt='*RouterFromWeights*:CudaRouting.*:CudaLaunch.*:*SmallNaN*:*SmallGrouped*:*GraphReplay*:*EvictFirst*'
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $B/moerun_gpu_tests --gtest_filter="$filt" > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? $(t): $(grep 'ERROR SUMMARY' $OUT/memcheck.log | tail -1)" >> $OUT/summary.txt
TZ=UTC nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 200 > "$OUT/smi.csv" 2>&1 &
smi=$!
PYTHONUNBUFFERED=1 timeout 90 python3 bench/cuda/torch_baseline.py --json $OUT/torch.json > $OUT/bench.log 2>&1
echo "torch rc=$? $(t)" >> $OUT/summary.txt
torch_arg=()
[ -s $OUT/torch.json ] && torch_arg=(--torch $OUT/torch.json)
timeout 80 $B/cuda_moe_bench --json $OUT/bench.json "${torch_arg[@]}" >> $OUT/bench.log 2>&1
echo "bench rc=$? $(t)" >> $OUT/summary.txt
for r in 1 2; do
  timeout 70 $B/cuda_moe_bench --ms 128,1024,8192 --no-forced --layers 0 --ab env:MOERUN_CUDA_WEIGHT_L2=first \
    --json $OUT/ab_l2_$r.json > $OUT/ab_l2_$r.log 2>&1
  echo "ab l2 $r rc=$? $(t)" >> $OUT/summary.txt
done
kill $smi 2>/dev/null
grep -E "warning|MISMATCH|no CUDA graph" $OUT/bench.log | head -5 >> $OUT/summary.txt
cat $OUT/summary.txt
(cd $OUT && tar czf logs.tgz gpu_tests.json cpu_tests.log tests.log verify_*.log memcheck.log bench.log ab_l2_*.log \
  && rm -f gpu_tests.json cpu_tests.log tests.log verify_*.log memcheck.log bench.log ab_l2_*.log)
