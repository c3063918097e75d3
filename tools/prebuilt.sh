#!/usr/bin/env bash
# Binaries built here for a device call, carried to the GPU machine in a packed folder.
#
#   tools/prebuilt.sh pack [BUILD_DIR] [DIR]   build moerun_gpu_tests, cuda_moe_bench, moerun_tests and
#                                              moerun in BUILD_DIR (default build), strip and xz each into DIR
#                                              (default build-prebuilt, git-ignored) with a COMMIT stamp
#   tools/prebuilt.sh pack-cpu [BUILD_DIR] [DIR]
#                                              the same for the CPU side on the GPU host (cpu_moe_bench,
#                                              cpu_kernel_bench and moerun_tests, default DIR
#                                              build-prebuilt-cpu) with this
#                                              machine's libdnnl.so.2 and libOpenCL.so.1 beside them
#   tools/prebuilt.sh unpack DIR DEST          the binaries of DIR, runnable, in DEST (a pack-cpu DIR needs
#                                              LD_LIBRARY_PATH=DEST: the GPU host lacks Debian's oneDNN)
#
# WHY: the device tool carries at most 64 MiB with the working tree (about 19 MiB of it tracked files),
# and the four binaries are about 250 MiB unstripped. Stripped and xz-compressed they fit. Unpacking
# uses python's lzma: the GPU machine's image has python3 but not always the xz tool. tools/gpu-check.sh
# unpacks such a folder itself when GPU_CHECK_PREBUILT names one, so a call is
#   GPU_CHECK_PREBUILT=build-prebuilt tools/gpu-check.sh        (carry ["build-prebuilt"])
set -euo pipefail
cd "$(dirname "$0")/.."
bins=(tests/moerun_gpu_tests bench/cuda_moe_bench tests/moerun_tests moerun)
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

case "${1:-}" in
  pack | pack-cpu)
    build=${2:-build}
    if [ "$1" = pack-cpu ]; then
      dir=${3:-build-prebuilt-cpu}
      bins=(bench/cpu_moe_bench bench/cpu_kernel_bench tests/moerun_tests)
      targets=(cpu_moe_bench cpu_kernel_bench moerun_tests)
    else
      dir=${3:-build-prebuilt}
      targets=(moerun_gpu_tests cuda_moe_bench moerun_tests moerun_cli)
    fi
    # Built first, so that the binaries are the tree's and the stamp below is theirs.
    log=$(mktemp)
    cmake --build "$build" --target "${targets[@]}" > "$log" 2>&1 ||
      { grep -E "error|FAILED" "$log" | head -20 >&2; echo "prebuilt: building in $build failed (cmake --build $build)" >&2; exit 1; }
    rm -f "$log"
    for b in "${bins[@]}"; do
      [ -x "$build/$b" ] || { echo "prebuilt: $build/$b is missing$([ "$1" = pack ] && echo ' (a build without CUDA?)')" >&2; exit 1; }
    done
    libs=()
    if [ "$1" = pack-cpu ]; then  # the shared libraries cpu_moe_bench links that the GPU host lacks
      for l in libdnnl.so.2 libOpenCL.so.1; do
        deps=$(ldd "$build/bench/cpu_moe_bench") || { echo "prebuilt: ldd $build/bench/cpu_moe_bench failed" >&2; exit 1; }
        p=$(awk -v l=$l '$1 == l && $3 != "not" { print $3 }' <<< "$deps")
        if [ -z "$p" ] || [ ! -f "$p" ]; then
          grep -q "^[[:space:]]*$l " <<< "$deps" && echo "prebuilt: $l is not found here (ldd)" >&2 ||
            echo "prebuilt: $build/bench/cpu_moe_bench does not link $l (built without oneDNN?)" >&2
          exit 1
        fi
        libs+=("$p")
      done
    fi
    # Packed into a new folder that replaces DIR only when complete: a pack cut short must not leave
    # DIR holding some new binaries under the previous commit's stamp.
    tmp="$dir.part"
    rm -rf "$tmp" && mkdir -p "$tmp"
    for b in "${bins[@]}"; do
      name=$(basename "$b")
      strip -o "$tmp/$name" "$build/$b" && xz -T2 -6 -f "$tmp/$name" || { echo "prebuilt: packing $b failed" >&2; exit 1; }
    done
    for l in "${libs[@]}"; do
      cp -L "$l" "$tmp/" && xz -T2 -6 -f "$tmp/$(basename "$l")" || { echo "prebuilt: packing $l failed" >&2; exit 1; }
    done
    # The commit the last build saw (git describe --dirty, written at every build of the bench drivers);
    # the tree's own state now may differ from what was built.
    stamp=$(sed -n 's/^#define MOERUN_BUILD_COMMIT "\(.*\)"$/\1/p' "$build/bench_stamp/build_stamp.hpp" 2> /dev/null || true)
    [ -n "$stamp" ] || stamp="unknown (no $build/bench_stamp/build_stamp.hpp)"
    echo "built from $stamp, packed $(date -u +%FT%TZ)" > "$tmp/COMMIT"
    rm -rf "$dir" && mv "$tmp" "$dir"
    du -ch "$dir"/*.xz | tail -1 | sed "s|total|in $dir ($stamp)|"
    ;;
  unpack)
    [ $# -eq 3 ] || usage
    dir=$2
    dest=$3
    ls "$dir"/*.xz > /dev/null 2>&1 || { echo "prebuilt: no .xz binaries in $dir" >&2; exit 1; }
    mkdir -p "$dest"
    python3 - "$dir" "$dest" << 'EOF'
import lzma, pathlib, sys
src, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for f in sorted(src.glob("*.xz")):
    out = dest / f.stem
    out.write_bytes(lzma.decompress(f.read_bytes()))
    out.chmod(0o755)
EOF
    if [ -f "$dir/COMMIT" ]; then cp "$dir/COMMIT" "$dest/"; fi
    ;;
  *) usage ;;
esac
