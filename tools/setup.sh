#!/usr/bin/env bash
# Installs every Debian 12 package dhp needs to build, test and run the demo.
# Idempotent: packages already present are skipped; safe to run again.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git curl ca-certificates python3 python3-yaml python3-venv
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev libgrpc-dev
  libsqlite3-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libjemalloc-dev
  libboost-dev libboost-system-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libtorch-dev libopenblas0-pthread libgloo-dev
  libpng-dev libturbojpeg0-dev libpcre2-dev libicu-dev prometheus-cpp-dev
  libssl-dev openssl clang-14 libclang-rt-14-dev libyaml-dev
  bazel-bootstrap prometheus python3-yaml
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# prometheus starts a system service on install; dhp's tests run their own.
$SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
echo "setup: done"
