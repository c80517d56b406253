#!/bin/bash
# Schedule 2's device call (sparse MQA sm90, MJ_MQA90_SCHED=2; docs/perf_mqa_notes.md "Hopper tier v5"). Prebuilt
# harness carried (on the CPU machine: CFG_FILE=configs_s5.h bash tools/dev/mqa/build.sh; carry
# ["tools/dev/mqa/build", ".devdeps"]). While the library builds in the background (GPU tests + mlajit-bench):
# every harness check case on schedules 1 and 2 (float64 reference, bit-identical reruns), the 8k paged bench at
# 128 / 64 heads (both schedules, the math alone, the gather alone), the contiguous and
# the scattered padding, racecheck + synccheck on schedule 2. Then the library's sparse MQA and one-call GPU tests
# with schedule 2 compiled in through the runtime's own NVRTC path (MLAJIT_NVRTC_FLAGS=-DMJ_MQA90_SCHED=2: a
# separate cache key), and mlajit-bench's sparse MQA cells on both schedules. Logs under $OUT, tables last.
#   run: cd <repo> && OUT=$OUT bash tools/dev/mqa/run_s5.sh      (about 6-8 minutes)
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT/lib
prefix=(); [ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF "${prefix[@]}" > $OUT/lib/configure.log 2>&1 &&
  nice cmake --build build-gpu -j 12 --target mlajit_gpu_tests mlajit-bench > $OUT/lib/build.log 2>&1; echo $? > $OUT/lib/build.rc ) &
bpid=$!
( cd tools/dev/mqa && CHECK_CONFIGS=h64sm90,h64sm90w2,h64sm90w2e BENCH_HEADS=128,64 \
  BENCH_CONFIGS=h64sm90,h64sm90w2,h64sm90w2e,h64sm90mo,h64sm90w2mo,h64sm90w2go CONTIG_CONFIGS=h64sm90,h64sm90w2 \
  CONTIG_HEADS=128,64 SAN_CONFIGS=h64sm90w2,h64sm90w2e SAN_TOOLS="racecheck synccheck" SAN_T=60 CHECK_T=100 BENCH_T=100 \
  OUT=$OUT bash run_s4.sh > $OUT/harness.txt 2>&1 )
wait $bpid
if [ "$(cat $OUT/lib/build.rc 2>/dev/null)" != 0 ]; then grep -E "error" -A4 $OUT/lib/build.log | head -30; echo "library build failed"; cat $OUT/harness.txt; exit 1; fi
for sched in 1 2; do
  export MLAJIT_CACHE_DIR=/tmp/mlajit-s5-cache MLAJIT_NVRTC_FLAGS="-DMJ_MQA90_SCHED=$sched"
  if [ $sched = 2 ]; then
    timeout 150 build-gpu/mlajit_gpu_tests -tc="*sparse MQA*,*sparse request*,*sparse path*" > $OUT/lib/gpu_tests_s2.log 2>&1
    echo "library GPU tests, schedule 2: rc $? $(grep -E 'test cases|assertions' $OUT/lib/gpu_tests_s2.log | tr '\n' ' ')"
    grep -E "ERROR|FAILED" $OUT/lib/gpu_tests_s2.log | head -10
  fi
  timeout 100 build-gpu/mlajit-bench --ops mqa --heads 128 64 --s-q 8192 --topk 2048 --reps 20 --csv $OUT/lib/bench_s$sched.csv > $OUT/lib/bench_s$sched.log 2>&1
  echo "mlajit-bench sparse MQA, schedule $sched: rc $?"; cat $OUT/lib/bench_s$sched.csv
done
cat $OUT/harness.txt
