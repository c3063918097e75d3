#!/bin/bash
cd /tmp/ab37c
for r in 1 2 3; do
  for v in base new t4; do
    ./${v}_bench --only gpt-oss-20b,mixtral-8x7b --formats bf16 --m 16,64 --no-onednn --budget 0.5 --json ./${v}_r${r}a.json > ./${v}_r${r}a.log 2>&1
    ./${v}_bench --only qwen3-30b-a3b --formats fp8-block,mxfp4 --m 16,64 --no-onednn --budget 0.5 --json ./${v}_r${r}b.json > ./${v}_r${r}b.log 2>&1
  done
done
echo done > ./DONE
