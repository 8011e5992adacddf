#!/bin/sh
# Prints the Debian packages that own the shared libraries the given binaries link directly
# (their DT_NEEDED entries), one per line; apt pulls in the rest as their dependencies.
# Used by the Dockerfile's build stage to give the runtime stage no -dev packages.
set -eu
for bin in "$@"; do
  for name in $(readelf -d "$bin" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
    ldd "$bin" | awk -v n="$name" '$1 == n && $3 ~ /^\// {print $3}'
  done
done | sort -u | while read -r lib; do
  real=$(readlink -f "$lib")
  # Merged /usr: dpkg knows a file under either /usr/lib or /lib.
  dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}"
done | cut -d: -f1 | sort -u
