#!/usr/bin/env bash
# Builds .deps/devdeps: header-only copies of fmt, nlohmann-json and CLI11 and the googletest sources,
# with small CMake package configs (tools/devdeps/cmake), taken from this machine's Debian packages.
# The device machine has no package access; tools/gpu-check.sh finds them through CMAKE_PREFIX_PATH
# when the device call carries `.deps`.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install-deps.sh
out=.deps/devdeps
rm -rf "$out" && mkdir -p "$out/include" "$out/lib" "$out/src"
cp -r /usr/include/fmt /usr/include/nlohmann /usr/include/CLI "$out/include/"
cp -r /usr/src/googletest "$out/src/"
cp -r tools/devdeps/cmake "$out/lib/"
du -sh "$out"
