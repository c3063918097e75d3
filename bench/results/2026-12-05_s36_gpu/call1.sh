# Session 36, call 1: the one-token rows three times (separate processes), each with the layer stack
# (--layers 8). Binaries built on the dev machine and carried in build-prebuilt-main/ (COMMIT says which).
B=build-prebuilt-main
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $OUT/smi.txt
for r in 1 2 3; do
  $B/cuda_moe_bench --ms 1 --no-forced --ab none --layers 8 --json $OUT/bench$r.json > $OUT/bench$r.log 2>&1
  echo "run $r rc=$?" >> $OUT/summary.txt
done
grep -h "cuda-graph-expert" $OUT/bench*.log >> $OUT/summary.txt
cat $OUT/summary.txt
