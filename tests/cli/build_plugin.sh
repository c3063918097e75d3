#!/usr/bin/env bash
# Installs moerun into <build>/_install and builds examples/plugin against it with find_package(moerun),
# six times: as shipped, pretending to be built against ABI version 2, with an init that refuses, with
# one that throws, with a forward that throws, and claiming cuda_graph_safe (for the refusal tests).
set -euo pipefail
src=$1 build=$2
cmake --install "$build" --prefix "$build/_install" >/dev/null
for abi in "" 2; do
  out="$build/plugin-example${abi:+-abi$abi}"
  cmake -S "$src/examples/plugin" -B "$out" -DCMAKE_PREFIX_PATH="$build/_install" -DEXAMPLE_ABI_OVERRIDE="$abi" >/dev/null
  cmake --build "$out" >/dev/null
done
out="$build/plugin-example-refuses"
cmake -S "$src/examples/plugin" -B "$out" -DCMAKE_PREFIX_PATH="$build/_install" \
  -DEXAMPLE_INIT_REFUSES="no device for example-scalar" >/dev/null
cmake --build "$out" >/dev/null
out="$build/plugin-example-throws"
cmake -S "$src/examples/plugin" -B "$out" -DCMAKE_PREFIX_PATH="$build/_install" \
  -DEXAMPLE_INIT_THROWS="boom from init" >/dev/null
cmake --build "$out" >/dev/null
out="$build/plugin-example-forward-throws"
cmake -S "$src/examples/plugin" -B "$out" -DCMAKE_PREFIX_PATH="$build/_install" \
  -DEXAMPLE_FORWARD_THROWS="boom from forward" >/dev/null
cmake --build "$out" >/dev/null
out="$build/plugin-example-graph-safe"
cmake -S "$src/examples/plugin" -B "$out" -DCMAKE_PREFIX_PATH="$build/_install" -DEXAMPLE_GRAPH_SAFE=ON >/dev/null
cmake --build "$out" >/dev/null
ls "$build"/plugin-example*/libmoerun_example_plugin*.so
