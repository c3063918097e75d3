#!/bin/bash
# alternating A/B: base (05a7c36) vs new, 3 rounds
cd /tmp/ab37
for r in 1 2 3; do
  for v in base new; do
    ./${v}_bench --m 1,4,16,64 --no-onednn --budget 0.4 --json ./${v}_r$r.json > ./${v}_r$r.log 2>&1
  done
done
echo done > ./DONE
