#!/usr/bin/env bash
# Session 42, device call 2: the torch baseline with both ways of counting rows per expert timed (bincount,
# which syncs with the host, and a scatter_add that does not; each row keeps the faster), then the sweep
# against it, on call 1's binaries (build-prebuilt-s42/, carry ["build-prebuilt-s42"]).
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
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 200 > "$OUT/smi.csv" 2>&1 &
smi=$!
PYTHONUNBUFFERED=1 timeout 200 python3 bench/cuda/torch_baseline.py --json $OUT/torch.json > $OUT/bench.log 2>&1
echo "torch rc=$? $(t)" >> $OUT/summary.txt
timeout 200 $B/cuda_moe_bench --json $OUT/bench.json --torch $OUT/torch.json >> $OUT/bench.log 2>&1
echo "bench rc=$? $(t)" >> $OUT/summary.txt
kill $smi 2>/dev/null
grep "^torch" $OUT/bench.log >> $OUT/summary.txt
cat $OUT/summary.txt
