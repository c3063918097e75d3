#!/usr/bin/env bash
# Session 43, device call 3: the CPU suite on the GPU machine's Xeon host (AMX levels included), with the
# binaries of call 2, leaving out ApiBoundary.RandomWeightsTooLargeForMemoryThrowBadAlloc: calls 1 and
# 2 lost the whole suite to a SIGKILL, which is what the OOM killer does where 512 GiB is granted
# (vm.overcommit_memory = 1); the test now skips there (the fix is not in these binaries).
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=/tmp/s43bin
bash tools/prebuilt.sh unpack build-prebuilt $B || exit 1
{ cat $B/COMMIT; echo "vm.overcommit_memory = $(cat /proc/sys/vm/overcommit_memory)"; lscpu | grep -E "Model name|^CPU\(s\)"; grep -o -w -E 'amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' '; echo; } > $OUT/summary.txt
timeout 200 $B/moerun_tests --gtest_filter=-ApiBoundary.RandomWeightsTooLargeForMemoryThrowBadAlloc > $OUT/cpu_tests.log 2>&1
echo "cpu tests rc=$?" >> $OUT/summary.txt
grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED  \]|tests ran|cpu backend ISA" $OUT/cpu_tests.log >> $OUT/summary.txt
cat $OUT/summary.txt
