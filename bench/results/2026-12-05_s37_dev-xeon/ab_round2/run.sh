#!/bin/bash
cd /tmp/ab37b
for r in 1 2 3; do
  for v in base new; do
    ./${v}_bench --only deepseek-v2-lite,gpt-oss-20b,mixtral-8x7b --m 1,4,16,64 --no-onednn --budget 0.4 --json ./${v}_r${r}a.json > ./${v}_r${r}a.log 2>&1
    ./${v}_bench --only qwen3-30b-a3b --formats bf16,fp8-block,mxfp4 --m 1,16,64 --no-onednn --budget 0.4 --json ./${v}_r${r}b.json > ./${v}_r${r}b.log 2>&1
  done
done
echo done > ./DONE
