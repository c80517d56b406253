#!/usr/bin/env bash
# Sets up the machine (Debian packages), builds with warnings as errors, runs every test suite.
# GPU suites run where a GPU and driver exist and skip themselves, saying so, elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
build="${MLAJIT_BUILD_DIR:-build}"
ctest --test-dir "$build" --output-on-failure
# The Python binding's tests (plain unittest; its GPU cases skip themselves without torch and a GPU).
python3 -m unittest discover tools/python/tests
