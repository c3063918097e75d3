#!/usr/bin/env bash
# Session 45, device call 1 (carry ["build-prebuilt", "build-prebuilt-before", "build-prebuilt-cpu"]).
# GPU side, binaries of build-prebuilt/COMMIT (main plus session 44's two tail-split patches):
# 1. the row-order test on main's kernel (build-prebuilt-before: main plus only the test): expected to FAIL;
# 2. the GPU suite with the fix, `moerun verify` of cuda and cublas, memcheck and racecheck on the split tests;
# 3. the sweep against the torch pipeline with the fix (the tail split now splits whole groups);
# 4. the M >= 1024 rows with the tail split alternated against none (MOERUN_CUDA_KSPLIT=1), two processes.
# CPU side on the host's Xeon (AMX-BF16), cpu_moe_bench of build-prebuilt-cpu with Debian's oneDNN:
# 5. bf16 stream runs of 16 blocks alternated against the rule (the Zen 4 lead of session 44), 2 threads;
# 6. every row at 2 threads (issue 4's headline form), in the time left.
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=/tmp/s45bin
bash tools/prebuilt.sh unpack build-prebuilt $B || exit 1
T0=$(date +%s)
t() { echo "($(( $(date +%s) - T0 )) s)"; }
left() { echo $(( 560 - ($(date +%s) - T0) )); }
{ cat $B/COMMIT; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  lscpu | grep -E "Model name|^CPU\(s\)"; echo "load: $(cat /proc/loadavg)"; } > $OUT/summary.txt
if [ -d build-prebuilt-before ]; then
  bash tools/prebuilt.sh unpack build-prebuilt-before /tmp/s45before > /dev/null || exit 1
  timeout 60 /tmp/s45before/moerun_gpu_tests --gtest_filter='CudaLaunch.TailSplitDoesNotDependOnTheRowOrder' > $OUT/before.log 2>&1
  echo "main's kernel, row-order test rc=$? (1 expected) $(t): $(grep -E 'outputs that depend|Which is|differ' $OUT/before.log | head -4 | tr '\n' ' ')" >> $OUT/summary.txt
fi
timeout 170 $B/moerun_gpu_tests --gtest_output=json:$OUT/gpu_tests.json > $OUT/tests.log 2>&1
echo "gpu tests rc=$? $(t)" >> $OUT/summary.txt
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.log >> $OUT/summary.txt
for be in cuda cublas; do
  timeout 60 $B/moerun verify --backend $be --cases 40 --seed 45 > $OUT/verify_$be.log 2>&1
  echo "verify $be rc=$? $(t): $(tail -1 $OUT/verify_$be.log)" >> $OUT/summary.txt
done
filt='*TailSplit*:*Repeated*:CudaLaunch.SplitK*'
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/moerun_gpu_tests --gtest_filter="$filt" > $OUT/memcheck.log 2>&1
echo "memcheck rc=$? $(t): $(grep 'ERROR SUMMARY' $OUT/memcheck.log | tail -1)" >> $OUT/summary.txt
timeout 40 compute-sanitizer --tool racecheck --error-exitcode 9 $B/moerun_gpu_tests --gtest_filter='*TailSplit*' > $OUT/racecheck.log 2>&1
echo "racecheck rc=$? $(t): $(grep 'RACECHECK SUMMARY' $OUT/racecheck.log | tail -1)" >> $OUT/summary.txt
PYTHONUNBUFFERED=1 timeout 90 python3 bench/cuda/torch_baseline.py --json $OUT/torch.json > $OUT/bench.log 2>&1
echo "torch rc=$? $(t)" >> $OUT/summary.txt
torch_arg=()
[ -s $OUT/torch.json ] && torch_arg=(--torch $OUT/torch.json)
timeout 80 $B/cuda_moe_bench --json $OUT/bench.json "${torch_arg[@]}" >> $OUT/bench.log 2>&1
echo "bench rc=$? $(t)" >> $OUT/summary.txt
grep -E "warning|MISMATCH|no CUDA graph" $OUT/bench.log | head -5 >> $OUT/summary.txt
for r in 1 2; do
  timeout 60 $B/cuda_moe_bench --ms 1024,8192 --no-forced --layers 0 --ab env:MOERUN_CUDA_KSPLIT=1 \
    --json $OUT/ab_ksplit_$r.json > $OUT/ab_ksplit_$r.log 2>&1
  echo "ab ksplit $r rc=$? $(t)" >> $OUT/summary.txt
done
(cd $OUT && tar czf logs.tgz gpu_tests.json tests.log verify_*.log memcheck.log racecheck.log bench.log ab_ksplit_*.log \
  $(ls before.log 2>/dev/null) && rm -f gpu_tests.json tests.log verify_*.log memcheck.log racecheck.log bench.log ab_ksplit_*.log before.log)
# CPU side
C=/tmp/s45cpu
if [ -d build-prebuilt-cpu ] && bash tools/prebuilt.sh unpack build-prebuilt-cpu $C > /dev/null; then
  export LD_LIBRARY_PATH=$C${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  { cat $C/COMMIT; echo "flags: $(grep -o -w -E 'amx_bf16|amx_tile|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    echo "load: $(cat /proc/loadavg)"; ldd $C/cpu_moe_bench | grep -E "dnnl|OpenCL|not found"; } >> $OUT/summary.txt
  timeout $(( $(left) > 150 ? 150 : $(left) )) $C/cpu_moe_bench --threads 2 --budget 0.2 --only qwen3-30b-a3b,deepseek-v2-lite,gpt-oss-20b \
    --m 16,64,256,1024 --formats bf16 --no-onednn --compare-env MOERUN_CPU_STREAM_RUN=16 \
    --json $OUT/cpu_stream16.json > $OUT/cpu_stream16.log 2>&1
  echo "cpu stream-run 16 A/B rc=$? $(t)" >> $OUT/summary.txt
  timeout $(left) $C/cpu_moe_bench --threads 2 --budget 0.3 --json $OUT/cpu_2t.json > $OUT/cpu_2t.log 2>&1
  echo "cpu every row, 2 threads rc=$? $(t)" >> $OUT/summary.txt
  for j in cpu_stream16 cpu_2t; do
    [ -s $OUT/$j.json ] && python3 bench/cpu/table.py $OUT/$j.json > $OUT/$j.md 2>&1
  done
fi
cat $OUT/summary.txt
