#!/usr/bin/env bash
# One device call: build cuda_moe_bench and record a per-kernel time breakdown with Nsight Compute for
# a few (shape, M) cases, so the time of each pass of the forward (routing, alignment, gather, GEMMs,
# activation, combine) can be read off. Output: $OUT/prof_<shape>_<M>.csv and a printed table.
#   PROFILE_CASES="qwen3-30b-a3b:1 deepseek-v3:8192" tools/gpu-profile.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
B=${PROFILE_BUILD:-build-gpu}
if [ ! -x $B/bench/cuda_moe_bench ]; then
  prefix=""
  [ -d .deps/devdeps ] && prefix="-DCMAKE_PREFIX_PATH=$PWD/.deps/devdeps"
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a $prefix \
    > "$OUT/profile_build.log" 2>&1 || { echo "configure FAILED"; tail -30 "$OUT/profile_build.log"; exit 1; }
  cmake --build $B -j16 --target cuda_moe_bench >> "$OUT/profile_build.log" 2>&1 ||
    { echo "build FAILED"; grep -E "error" "$OUT/profile_build.log" | head -30; exit 1; }
fi
# Nsight Compute (the device has no Nsight Systems): each kernel of one forward timed alone (ncu
# serializes kernels and flushes caches, at base clocks), enough to see which pass costs what.
for c in ${PROFILE_CASES:-qwen3-30b-a3b:1 qwen3-30b-a3b:8192 deepseek-v3:8192 mixtral-8x7b:1024}; do
  shape=${c%%:*}; m=${c##*:}
  echo "== $shape M=$m"
  # (MOERUN_CUDA_STREAM_TUNE=0: the decode tiling tune that runner creation runs for large layers would
  # otherwise be the first kernels the launch count takes)
  MOERUN_CUDA_STREAM_TUNE=0 timeout 120 ncu --metrics gpu__time_duration.sum --csv -k "regex:routing|align|grouped|combine|gather|activation|device_kernel|fill_group" \
    --launch-skip ${PROFILE_SKIP:-0} --launch-count ${PROFILE_COUNT:-12} \
    $B/bench/cuda_moe_bench --no-forced --shapes "$shape" --ms "$m" 2>/dev/null > "$OUT/prof_${shape}_$m.csv"
  python3 - "$OUT/prof_${shape}_$m.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
if not rows: sys.exit("no ncu rows")
h = rows[0]; ik, iv, iu = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
for r in rows[1:]:
    print(f"{float(r[iv].replace(',', '')) * scale.get(r[iu], 1.0):10.2f} us  {r[ik][:110]}")
PY
done
