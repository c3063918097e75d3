#!/bin/bash
# alternating A/B: base (0392c27, session start) vs new (5516d30), 3 rounds; JSON into this folder
# binaries: /tmp/ab38/{base,new}_bench (cpu_moe_bench of each commit, Release, no CUDA)
D=$(cd "$(dirname "$0")" && pwd)
cd /tmp/ab38
for r in 1 2 3; do
  for v in base new; do
    ./${v}_bench --m 1,4,16,64 --no-onednn --budget 0.4 --json "$D/${v}_r$r.json" > "$D/${v}_r$r.log" 2>&1
  done
done
echo done > "$D/DONE"
