#!/bin/bash
# The library's Release build for a device call (run from the repository root): configure build-gpu (headers a bare GPU
# machine lacks from .devdeps, when carried) and build the targets, logs configure.log / build.log into LOGDIR; the exit
# status is the build's. The run scripts start it in the background while the harness runs:
#   bash tools/dev/mqa/lib_build.sh $OUT & bpid=$!        (JOBS, default 12; targets default mlajit_gpu_tests mlajit-bench)
LOGDIR=$1; shift
targets=("$@"); [ ${#targets[@]} = 0 ] && targets=(mlajit_gpu_tests mlajit-bench)
prefix=(); [ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF "${prefix[@]}" > "$LOGDIR/configure.log" 2>&1 &&
  cmake --build build-gpu -j "${JOBS:-12}" --target "${targets[@]}" > "$LOGDIR/build.log" 2>&1
