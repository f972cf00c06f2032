#!/usr/bin/env bash
# Installs what cann-train needs (Debian packages, only those missing), then configures and
# builds it with CMake + Ninja into build/. Safe to run again: it installs and rebuilds only
# what changed.
#
#   scripts/setup.sh              release build in build/
#   BUILD_DIR=... CMAKE_ARGS=... scripts/setup.sh   another build directory or options
#   EXTRA_PACKAGES="..." scripts/setup.sh          also install these Debian packages
#   BUILD_TARGETS=all scripts/setup.sh             build everything (tests, benchmarks), not
#                                                  only the cann-train binary that `run` needs
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config
  libgloo-dev libopenblas-dev libopenblas-openmp-dev libyaml-cpp-dev nlohmann-json3-dev
  libcli11-dev libcpp-httplib-dev libhiredis-dev redis-server googletest libgtest-dev
  libbenchmark-dev fortunes iproute2 libssl-dev openssl libdnnl-dev ocl-icd-opencl-dev
  prometheus chromium
)
# More packages for one caller (scripts/test.sh adds the PyTorch the reference test needs).
# shellcheck disable=SC2206
packages+=(${EXTRA_PACKAGES:-})

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

build_dir=${BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
# shellcheck disable=SC2086
cmake --build "$build_dir" --target ${BUILD_TARGETS:-cann-train}
