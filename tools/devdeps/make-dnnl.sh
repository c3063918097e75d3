#!/usr/bin/env bash
# Builds .deps/dnnl.tar.xz: oneDNN from this machine's Debian packages (libdnnl2, libdnnl-dev) plus the
# OpenCL ICD loader libdnnl.so.2 links against (ocl-icd-libopencl1), for cpu_moe_bench's oneDNN baseline on
# the device machine (no network, no oneDNN). Layout inside the archive:
#   dnnl/include/oneapi/dnnl/*.h{,pp} (+ the top-level dnnl*.h compatibility headers)
#   dnnl/lib/libdnnl.so.2.6, libdnnl.so.2, libdnnl.so, libOpenCL.so.1.0.0, libOpenCL.so.1
#   dnnl/VERSION (the packages' versions), dnnl/copyright/* (their licences)
# Debian's CMake package config is left out: it requires OpenCL headers (find_package(OpenCL REQUIRED));
# bench/CMakeLists.txt imports the library from this layout itself.
# Only the archive is written (about 9 MB; the folder would be 41 MB, and the device call carries
# `.deps` within 64 MiB): bench/CMakeLists.txt unpacks it into the build folder when the system has no
# oneDNN. Usage: bash tools/devdeps/make-dnnl.sh [--keep-folder DIR] (also leave the folder at DIR).
set -euo pipefail
cd "$(dirname "$0")/../.."
keep=""
[ "${1:-}" = --keep-folder ] && keep=${2:?--keep-folder needs a folder}
pkgs=(libdnnl2 libdnnl-dev ocl-icd-libopencl1)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "make-dnnl: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
d=$tmp/dnnl
mkdir -p "$d/include" "$d/lib" "$d/copyright"
# Files as the packages list them (dpkg -L), so nothing else in /usr slips in.
while read -r f; do
  case "$f" in
    /usr/include/*.h|/usr/include/*.hpp)
      rel=${f#/usr/include/}; mkdir -p "$d/include/$(dirname "$rel")"; cp -a "$f" "$d/include/$rel" ;;
    */lib/*/libdnnl.so*|*/lib/*/libOpenCL.so.1*)
      cp -a "$f" "$d/lib/" ;;
  esac
done < <(dpkg -L "${pkgs[@]}")
for p in "${pkgs[@]}"; do
  [ -f "/usr/share/doc/$p/copyright" ] && cp "/usr/share/doc/$p/copyright" "$d/copyright/$p"
  dpkg-query -W -f='${Package} ${Version} ${Architecture}\n' "$p" >> "$d/VERSION"
done
# the needed chain: libdnnl.so -> libdnnl.so.2 -> libdnnl.so.2.6 and libOpenCL.so.1 -> libOpenCL.so.1.0.0
for f in libdnnl.so libdnnl.so.2 libdnnl.so.2.6 libOpenCL.so.1; do
  [ -e "$d/lib/$f" ] || { echo "make-dnnl: $f missing from the packages' files" >&2; exit 1; }
done
[ -f "$d/include/oneapi/dnnl/dnnl.hpp" ] || { echo "make-dnnl: oneapi/dnnl/dnnl.hpp missing" >&2; exit 1; }

mkdir -p .deps
tar -C "$tmp" -cf - dnnl | xz -T2 -9 > .deps/dnnl.tar.xz.part
mv .deps/dnnl.tar.xz.part .deps/dnnl.tar.xz
if [ -n "$keep" ]; then rm -rf "$keep" && mkdir -p "$(dirname "$keep")" && cp -a "$d" "$keep"; fi
echo "make-dnnl: $(du -sh "$d" | cut -f1) unpacked -> .deps/dnnl.tar.xz $(du -sh .deps/dnnl.tar.xz | cut -f1)"
cat "$d/VERSION"
[ -d .deps/dnnl ] && echo "make-dnnl: note: .deps/dnnl (a folder) exists and would be carried too; remove it" >&2
echo "make-dnnl: .deps now $(du -sh .deps | cut -f1) (the device call carries at most 64 MiB)"
