#!/usr/bin/env bash
# Sets up the machine (Debian packages), builds with warnings as errors, runs every test suite and checks
# the installed package.
# GPU suites run where a GPU and driver exist and skip themselves, saying so, elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
build="${MLAJIT_BUILD_DIR:-build}"
ctest --test-dir "$build" --output-on-failure
# The Python binding's and custom ops' tests (plain unittest; the torch cases skip themselves without
# torch, the GPU cases without a GPU).
python3 -m unittest discover tools/python/tests
# The installed package as users consume it: a fresh, relocated prefix; examples/ built against it with
# find_package and with pkg-config, and run (seconds: it installs the build above, nothing is rebuilt).
bash tools/check_install.sh
