#!/bin/bash
# Final device call for the sparse MQA work: the library's GPU tests of sparse MQA (both tiers) built in the
# background while the harness checks, times and sanitizes the kernels (run_device.sh). Logs under $OUT.
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT/lib
prefix=(); [ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF "${prefix[@]}" > $OUT/lib/configure.log 2>&1 &&
  nice cmake --build build-gpu -j 12 --target mlajit_gpu_tests > $OUT/lib/build.log 2>&1; echo $? > $OUT/lib/build.rc ) &
bpid=$!
OUT=$OUT bash tools/dev/mqa/run_device.sh 2>&1 | tail -${HARNESS_TAIL:-40}
wait $bpid
if [ "$(cat $OUT/lib/build.rc 2>/dev/null)" != 0 ]; then grep -E "error" -A4 $OUT/lib/build.log | head -30; tail -5 $OUT/lib/configure.log; echo "library build failed"; exit 1; fi
export MLAJIT_CACHE_DIR=/tmp/mlajit-mqa-cache
timeout ${TEST_TIMEOUT:-150} build-gpu/mlajit_gpu_tests -tc="${TESTS:-*sparse MQA*}" > $OUT/lib/gpu_tests.log 2>&1
echo "library GPU tests (sparse MQA, both tiers) rc $?"
grep -E "ERROR|FAILED|test cases|assertions" $OUT/lib/gpu_tests.log | head -30
