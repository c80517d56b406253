#!/bin/bash
# Session 25, second call (issue 16): the FP8 keys-as-M kernel as shipped (8 producer warps of 8 rows, 512 threads, registers
# 104 / 152) at 16 heads against the bf16 kernel and the portable FP8 tile; checks, sanitizers; the library with it as the
# runtime's FP8 pick at <= 16 heads (the one call keeps gathering): sparse / FP8 GPU tests, racecheck, mlajit-bench --ops mqa.
# Prebuilt: CFG_FILE=configs_t21.h BUILD=build_t21 bash build.sh; carry ["tools/dev/mqa/build_t21", ".devdeps"].
source "$(dirname "$0")/run_common.sh"  # repository root, $OUT/logs, t0, el
bash tools/dev/mqa/lib_build.sh $OUT/logs &
bpid=$!
N=tools/dev/mqa/build_t21/harness
export MLAJIT_CACHE_DIR=/tmp/mlajit-t21-cache
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 $N --no-bench --configs h16sm90t,h16sm90t8,h16n32s2f8 --log $OUT/logs/check.log > /dev/null 2>&1; echo "check rc $? $(el)"
grep -E "checks" $OUT/logs/check.log; grep -E "FAIL" $OUT/logs/check.log | cut -c1-160 | sort | uniq -c | head
timeout 100 $N --no-check --paged --bench-s 8192 --bench-heads 16 --bench-configs h16sm90t,h16sm90t8,h16sm90t8g4,h16n32s2f8 --reps 5 --log $OUT/logs/b16.log > /dev/null 2>&1
echo "b16 rc $? $(el)"; sed -n '/^config/,$p' $OUT/logs/b16.log
for tool in memcheck racecheck synccheck initcheck; do
  timeout 60 compute-sanitizer --tool $tool --print-limit 5 $N --configs h16sm90t8 --sanitize > $OUT/logs/san_${tool}.log 2>&1
  echo "$tool h16sm90t8 rc $? : $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|checks' $OUT/logs/san_${tool}.log | tr '\n' ' ') $(el)"
done
wait $bpid; echo "library build rc $? $(el)"; grep -E "error" -A4 $OUT/logs/build.log | head -10
timeout 200 build-gpu/mlajit_gpu_tests -tc="*sparse MQA*,*fp8*,*agree on DSA*,*mla_prefill gives the DSA*,*chunked*" > $OUT/logs/gpu_tests.log 2>&1
echo "gpu tests rc $? $(el)"; grep -E "ERROR|FAILED|CRASH|test cases|assertions" $OUT/logs/gpu_tests.log | head -8
timeout 90 compute-sanitizer --tool racecheck --print-limit 5 build-gpu/mlajit_gpu_tests -tc="*small shapes: fp8*" > $OUT/logs/lib_racecheck.log 2>&1
echo "library racecheck rc $? : $(grep -E 'RACECHECK SUMMARY|test cases' $OUT/logs/lib_racecheck.log | tr '\n' ' ') $(el)"
timeout 60 build-gpu/mlajit-bench --ops mqa --heads 16 --s-q 8192 --topk 2048 --reps 10 > $OUT/logs/lib_bench_h16.csv 2> $OUT/logs/lib_bench_h16.err
echo "library bench rc $?"; cut -d, -f3-9,13 $OUT/logs/lib_bench_h16.csv
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
