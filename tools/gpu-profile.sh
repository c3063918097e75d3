#!/usr/bin/env bash
# One device call: build cuda_moe_bench and record a per-kernel time breakdown with Nsight Systems for
# a few (shape, M) cases, so the time of each pass of the forward (routing, alignment, gather, GEMMs,
# activation, combine) can be read off. Output: $OUT/prof_<shape>_<M>.txt (cuda_gpu_kern_sum).
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
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
[ -n "$NSYS" ] || { echo "no nsys on this machine"; exit 2; }
for c in ${PROFILE_CASES:-qwen3-30b-a3b:1 qwen3-30b-a3b:8192 deepseek-v3:8192 mixtral-8x7b:1024}; do
  shape=${c%%:*}; m=${c##*:}
  "$NSYS" profile --trace=cuda --cuda-graph-trace=node -f true -o "$OUT/p_${shape}_$m" \
    $B/bench/cuda_moe_bench --no-forced --shapes "$shape" --ms "$m" > "$OUT/prof_${shape}_$m.log" 2>&1
  "$NSYS" stats --report cuda_gpu_kern_sum --format csv "$OUT/p_${shape}_$m.nsys-rep" > "$OUT/prof_${shape}_$m.txt" 2>&1
  rm -f "$OUT/p_${shape}_$m.nsys-rep" "$OUT/p_${shape}_$m.sqlite"
  echo "== $shape M=$m"; grep -E "^ *[0-9]" "$OUT/prof_${shape}_$m.txt" | head -3 >/dev/null
  python3 - "$OUT/prof_${shape}_$m.txt" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 8]
hdr = rows[0]; rows = rows[1:]
i_t, i_n, i_avg, i_name = hdr.index("Total Time (ns)"), hdr.index("Instances"), hdr.index("Avg (ns)"), hdr.index("Name")
for r in rows[:14]:
    print(f"{float(r[i_t])/1e6:9.3f} ms total {int(r[i_n]):6d} x {float(r[i_avg])/1e3:9.2f} us  {r[i_name][:110]}")
PY
done
