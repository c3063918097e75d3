#!/usr/bin/env bash
# Session 12, call 6 (H200 host's Xeon): the VDPBF16PS / FMA issue rate the backend measures here (it
# decides the AVX512-BF16 level's cut), a few times; the CPU tests at AMX and the allocation test.
set -uo pipefail
cd "$(dirname "$0")/.."
O=$OUT/r; mkdir -p $O
D=$PWD/.deps/devdeps
cmake -S . -B build-xeon -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOERUN_CUDA=OFF -DCMAKE_PREFIX_PATH=$D > $O/build.log 2>&1
cmake --build build-xeon -j16 --target moerun_tests moerun_alloc_tests >> $O/build.log 2>&1 || { echo BUILD FAILED; grep error -A3 $O/build.log | head -30; exit 1; }
for i in 1 2 3 4 5; do build-xeon/tests/moerun_tests --gtest_filter='CpuKernels.ReportsDetectedIsa:CpuKernels.Bf16Dot*' 2>&1 | grep -E "cpu backend ISA|FAILED" ; done | tee $O/rate.log
timeout 150 build-xeon/tests/moerun_tests --gtest_filter='Cpu*' --gtest_brief=1 2>&1 | tail -2 | tee $O/tests.log
timeout 60 build-xeon/tests/moerun_alloc_tests 2>&1 | tail -1 | tee -a $O/tests.log
