#!/usr/bin/env bash
# Session 12, call 7 (H200 host's Xeon): the CPU tests at AMX and both allocation tests on 8ccb09f; the
# measured VDPBF16PS / FMA rate with the 16-chain probe.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
D=$PWD/.deps/devdeps
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$D > $O/build.log 2>&1
cmake --build build-xeon -j16 --target moerun_tests moerun_alloc_tests >> $O/build.log 2>&1 || { echo BUILD FAILED; grep error -A3 $O/build.log | head -30; exit 1; }
for i in 1 2 3; do build-xeon/tests/moerun_tests --gtest_filter='CpuKernels.ReportsDetectedIsa' 2>&1 | grep -E "cpu backend ISA|FAILED"; done | tee $O/rate.log
timeout 150 build-xeon/tests/moerun_tests --gtest_filter='Cpu*' --gtest_brief=1 2>&1 | tail -2 | tee $O/tests.log
timeout 60 build-xeon/tests/moerun_alloc_tests 2>&1 | grep -E "OK|FAILED|Which|routing|\] M=" | tee -a $O/tests.log
