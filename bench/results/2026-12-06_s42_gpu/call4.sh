#!/usr/bin/env bash
# Session 42, device call 4: the final binaries (COMMIT), asked for as nvidia-h200: on an H200, the
# headline sweep against the stronger torch baseline; on an H100, the suite alone (the sweep on that
# kind already ran in call 2). Binaries in build-prebuilt-s42/ (carry ["build-prebuilt-s42"]).
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=/tmp/s42bin
mkdir -p $B && cp build-prebuilt-s42/COMMIT $B/ && python3 -c "
import lzma, pathlib, sys
for f in pathlib.Path('build-prebuilt-s42').glob('*.xz'):
    (pathlib.Path(sys.argv[1]) / f.stem).write_bytes(lzma.decompress(f.read_bytes()))" $B
chmod +x $B/*
T0=$(date +%s)
t() { echo "($(( $(date +%s) - T0 )) s)"; }
{ cat $B/COMMIT; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } > $OUT/summary.txt
timeout 300 $B/moerun_gpu_tests --gtest_output=json:$OUT/gpu_tests.json > $OUT/tests.log 2>&1
echo "gpu tests rc=$? $(t)" >> $OUT/summary.txt
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/tests.log >> $OUT/summary.txt
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 200 > "$OUT/smi.csv" 2>&1 &
  smi=$!
  PYTHONUNBUFFERED=1 timeout 200 python3 bench/cuda/torch_baseline.py --json $OUT/torch.json > $OUT/bench.log 2>&1
  echo "torch rc=$? $(t)" >> $OUT/summary.txt
  timeout 200 $B/cuda_moe_bench --json $OUT/bench.json --torch $OUT/torch.json >> $OUT/bench.log 2>&1
  echo "bench rc=$? $(t)" >> $OUT/summary.txt
  timeout 100 $B/cuda_moe_bench --ms 1 --no-forced --ab none --layers 8 --json $OUT/layers.json > $OUT/layers.log 2>&1
  echo "layers rc=$? $(t)" >> $OUT/summary.txt
  kill $smi 2>/dev/null
fi
cat $OUT/summary.txt
