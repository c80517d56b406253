#!/bin/bash
# The key-set build with batched loads (configs_t18.h, session 24) against the previous build (build_t17, same run) at 16
# and 128 heads, 8k paged: whole kernels, gather alone, fixed cost (DEV_SKIP 5); harness checks on both tiers; memcheck;
# the library built beside it: its sparse GPU tests (both tiers, FP8, contract, one call), racecheck / memcheck of the small
# sparse shapes, mlajit-bench at 16 / 128 heads.
# Prebuilt: CFG_FILE=configs_t18.h BUILD=build_t18 bash build.sh (and build_t17 from configs_t17.h, the code before);
# carry ["tools/dev/mqa/build_t18", "tools/dev/mqa/build_t17", ".devdeps"].   run: OUT=$OUT bash tools/dev/mqa/run_t18.sh
source "$(dirname "$0")/run_common.sh"  # repository root, $OUT/logs, t0, el
bash tools/dev/mqa/lib_build.sh $OUT/logs &
bpid=$!
N=tools/dev/mqa/build_t18/harness; O=tools/dev/mqa/build_t17/harness
export MLAJIT_CACHE_DIR=/tmp/mlajit-t18-cache
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 120 $N --no-bench --configs h16sm90t,h64sm90,h64sm90f8,h64n64s2,h16n32s2,h16n32s2f8 --log $OUT/logs/check.log > /dev/null 2>&1; echo "check rc $? $(el)"
grep -E "checks" $OUT/logs/check.log; grep -E "FAIL" $OUT/logs/check.log | cut -c1-160 | sort | uniq -c | head
b() { timeout 90 $1 --no-check --paged --bench-s 8192 --bench-heads $2 --bench-configs $3 --reps 5 --log $OUT/logs/$4.log > /dev/null 2>&1
      echo "$4 rc $? $(el)"; sed -n '/^config/,$p' $OUT/logs/$4.log | grep -v '^config'; }
echo "config            heads        ms      TFLOP/s  TFLOP/s valid  gather TB/s check"
b $O 16 h16sm90t,h16sm90tz5 old16
b $N 16 h16sm90t,h16sm90tg4,h16sm90tz5,h16n32s2f8 new16
b $O 128 h64sm90,h64sm90z5 old128
b $N 128 h64sm90,h64sm90go,h64sm90z5,h64sm90f8 new128
for c in h16sm90t h64sm90 h16n32s2; do
  timeout 40 compute-sanitizer --tool memcheck --print-limit 5 $N --configs $c --sanitize > $OUT/logs/san_memcheck_$c.log 2>&1
  echo "memcheck $c rc $? : $(grep -E 'ERROR SUMMARY|checks' $OUT/logs/san_memcheck_$c.log | tr '\n' ' ') $(el)"
done
wait $bpid; echo "library build rc $? $(el)"; grep -E "error" -A4 $OUT/logs/build.log | head -10
timeout 200 build-gpu/mlajit_gpu_tests -tc="*sparse MQA*,*agree on DSA*,*mla_prefill gives the DSA*,*mla_prefill takes the engine*,*chunked*,*fp8 cache, the sparse path*" > $OUT/logs/gpu_tests.log 2>&1
echo "gpu tests rc $? $(el)"; grep -E "ERROR|FAILED|CRASH|test cases|assertions" $OUT/logs/gpu_tests.log | head -8
for tool in racecheck memcheck; do
  timeout 100 compute-sanitizer --tool $tool --print-limit 5 build-gpu/mlajit_gpu_tests -tc="*small shapes: sparse MQA*" > $OUT/logs/lib_$tool.log 2>&1
  echo "library $tool rc $? : $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test cases' $OUT/logs/lib_$tool.log | tr '\n' ' ') $(el)"
done
for h in 16 128; do
  timeout 40 build-gpu/mlajit-bench --ops mqa --heads $h --s-q 8192 --topk 2048 --reps 10 > $OUT/logs/lib_bench_h$h.csv 2> $OUT/logs/lib_bench_h$h.err
  echo "library bench $h heads rc $?"; cut -d, -f3-9,13 $OUT/logs/lib_bench_h$h.csv
done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
