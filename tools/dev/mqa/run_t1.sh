#!/bin/bash
# Session 20's device call: (1) the keys-as-M Hopper kernel for 16 / 32 heads (sparse_mqa/sm90_t.cuh) against float64
# on every check case, the 8k paged bench at 16 and 32 heads beside the 64-head Hopper kernel and the portable 16 x 32
# tile, its parts (math alone, gather alone), compute-sanitizer; prebuilt harness: CFG_FILE=configs_t1.h BUILD=build_t1
# bash tools/dev/mqa/build.sh on the CPU machine, carry ["tools/dev/mqa/build_t1", ".devdeps"]; (2) issue 15's host cost,
# tools/bench/host_cost_repeat.sh; between them the library's sparse MQA GPU tests and mlajit-bench at 16 / 32 heads
# (the library builds in the background during (1)). Logs under $OUT.
#   run: OUT=$OUT bash tools/dev/mqa/run_t1.sh      (about 8 minutes)
cd "$(dirname "$0")/../../.."
OUT=${OUT:-/tmp/mqa_out}; mkdir -p $OUT/hc
prefix=(); [ -d .devdeps/include ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.devdeps")
# The library (Release, with the GPU tests, the benchmark and the torch ops) builds in the background during (1).
( cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAJIT_WERROR=OFF -DMLAJIT_TORCH_OPS=AUTO \
    -DPython3_EXECUTABLE="$(command -v python3)" "${prefix[@]}" > $OUT/hc/configure0.log 2>&1 &&
  targets=(mlajit mlajit-host-cost mlajit_gpu_tests mlajit-bench) && { grep -q "building libmlajit_torch.so" $OUT/hc/configure0.log && targets+=(mlajit_torch); true; } &&
  nice cmake --build build-gpu -j 12 --target "${targets[@]}" > $OUT/hc/build0.log 2>&1 ) &
bpid=$!
cd tools/dev/mqa
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
t0=$(date +%s)
H=./build_t1/harness
timeout ${CHECK_T:-100} $H --no-bench --configs ${CHECK_CONFIGS:-h16sm90t,h32sm90t,h16sm90t56,h32sm90t48} --log $OUT/check.log > /dev/null 2>&1
echo "check rc $? ($(( $(date +%s) - t0 )) s)"; grep -E "FAIL|checks" $OUT/check.log | head -20
timeout ${BENCH_T:-150} $H --no-check --paged --bench-s 8192 --bench-heads 16,32 --bench-configs ${BENCH_CONFIGS:-h16sm90t,h16sm90t56,h32sm90t,h32sm90t48,h16sm90tmo,h16sm90t56mo,h16sm90tgo,h32sm90tmo,h64sm90,h16n32s2} \
  --reps ${REPS:-5} --log $OUT/bench.log > /dev/null 2>&1; echo "bench rc $? ($(( $(date +%s) - t0 )) s)"
timeout ${BENCH_T:-150} $H --no-check --scatter --bench-s 8192 --bench-heads 16,32 --bench-configs h16sm90t,h16sm90t56,h32sm90t,h32sm90t48,h64sm90 \
  --reps ${REPS:-5} --log $OUT/bench_scatter.log > /dev/null 2>&1; echo "bench scatter rc $? ($(( $(date +%s) - t0 )) s)"
if command -v compute-sanitizer > /dev/null; then
  for tool in ${SAN_TOOLS:-racecheck synccheck memcheck}; do
    timeout ${SAN_T:-40} compute-sanitizer --tool $tool --print-limit 5 $H --configs h16sm90t,h16sm90t56,h32sm90t48 --sanitize > $OUT/san_$tool.log 2>&1
    echo "sanitizer $tool rc $? : $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|checks' $OUT/san_$tool.log | tr '\n' ' ') ($(( $(date +%s) - t0 )) s)"
  done
fi
cd ../../..
wait $bpid; echo "library build rc $? ($(( $(date +%s) - t0 )) s)"; grep -E "error" -A4 $OUT/hc/build0.log | head -20
export MLAJIT_CACHE_DIR=/tmp/mlajit-t1-cache
# (2) the library's sparse MQA GPU tests (the runtime now picks the keys-as-M kernel at <= 32 heads on sm_90a)
timeout ${TESTS_T:-150} build-gpu/mlajit_gpu_tests -tc="*sparse*,*MQA*,*mla_prefill*,*agree*" > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? ($(( $(date +%s) - t0 )) s)"; grep -E "ERROR|FAILED|test cases|assertions" $OUT/gpu_tests.log | head -20
timeout 90 build-gpu/mlajit-bench --ops mqa --heads 16,32 --s-q 8192 --topk 2048 --reps 10 > $OUT/lib_bench.csv 2> $OUT/lib_bench.err
echo "library bench rc $?"; cat $OUT/lib_bench.csv
# (3) issue 15's host cost, HC_N runs
if [ "${HOST_COST:-1}" = 1 ]; then
  MLAJIT_BUILD_DIR=build-gpu OUT=$OUT/hc timeout ${HC_T:-200} bash tools/bench/host_cost_repeat.sh ${HC_N:-3} > $OUT/hc/repeat.txt 2>&1; echo "host cost rc $?"
  cat $OUT/hc/repeat.txt
fi
for f in $OUT/bench.log $OUT/bench_scatter.log; do [ -f $f ] && { grep -E "FAIL|copy ceiling" $f | head -5; sed -n '/^config/,$p' $f; }; done
