#!/usr/bin/env bash
# Installs everything, builds, and runs the whole test suite: the release build's tests (all
# labels), then the bad-input suites again under AddressSanitizer and UndefinedBehaviorSanitizer.
# It also installs Debian's PyTorch, so that the engine is checked against the plain-PyTorch
# reference of the Hugging Face families (tests/reference/hf_reference.py).
set -euo pipefail
cd "$(dirname "$0")/.."

EXTRA_PACKAGES=python3-torch BUILD_TARGETS=all scripts/setup.sh
ctest --test-dir build --output-on-failure --timeout 600 -j2

BUILD_TARGETS=all BUILD_DIR=build-asan CMAKE_ARGS="-DCANN_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCANN_BUILD_BENCH=OFF" \
  scripts/setup.sh
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure --timeout 600 -j2
