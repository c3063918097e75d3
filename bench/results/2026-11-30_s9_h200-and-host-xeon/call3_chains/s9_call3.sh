#!/usr/bin/env bash
# Session 9, call 3: the chains probe (.old/s9_chains_probe.cpp), one thread, twice.
set -uo pipefail
cd "$(dirname "$0")/.."
g++ -O3 -march=sapphirerapids -std=c++20 .old/s9_chains_probe.cpp -o /tmp/cprobe || exit 1
taskset -c 2 /tmp/cprobe; taskset -c 5 /tmp/cprobe
