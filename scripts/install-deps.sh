#!/usr/bin/env bash
# Installs what moerun needs to build and test on a fresh Debian machine, by package name, and only
# what is missing (so a second run is fast). Also unpacks CUTLASS's headers from the PyPI wheel
# `nvidia-cutlass` into .deps/cutlass when nvcc is present (the CUDA backend's GEMM mainloops).
set -euo pipefail
cd "$(dirname "$0")/.."

CUTLASS_VERSION=4.2.0.0
pkgs=(build-essential cmake ninja-build pkg-config git python3 python3-pip unzip
      libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev libfmt-dev
      libdnnl-dev clang libclang-rt-dev libomp-dev)
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "moerun: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# NumPy for the independent Hugging Face cross-check (tests/hf/hf_layers.py): Debian's package where
# python3 is the system's (Debian 12 refuses pip installs into it: EXTERNALLY-MANAGED), else pip (a
# virtual environment or pyenv interpreter on PATH, which does not see Debian's packages).
if ! python3 -c 'import numpy' 2>/dev/null; then
  if [ "$(command -v python3)" = /usr/bin/python3 ]; then
    echo "moerun: installing python3-numpy"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-numpy >/dev/null
  else
    python3 -m pip install -q --disable-pip-version-check numpy
  fi
fi

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  if [ ! -f .deps/cutlass/include/cutlass/cutlass.h ]; then
    echo "moerun: fetching CUTLASS ${CUTLASS_VERSION} headers (PyPI nvidia-cutlass)"
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps "nvidia-cutlass==${CUTLASS_VERSION}" -d "$tmp"
    mkdir -p .deps/cutlass
    unzip -q -o "$tmp"/nvidia_cutlass-*.whl 'cutlass_library/source/include/*' -d "$tmp/x"
    rm -rf .deps/cutlass/include && mv "$tmp/x/cutlass_library/source/include" .deps/cutlass/include
    echo "${CUTLASS_VERSION}" > .deps/cutlass/VERSION
    rm -rf "$tmp"
  fi
fi
