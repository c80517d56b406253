#!/bin/bash
# The Hopper producers' row lookups a tile ahead (configs_t16.h; "ra1" = MJ_MQA_ROW_AHEAD 1, development switch) against the
# shipped in-place lookups at 16 heads (keys-as-M kernel) and 128 heads (64-head kernel), 8k paged, whole and gather alone;
# harness checks and memcheck of the new form; the library built beside it, its sparse MQA / one-call GPU tests and
# mlajit-bench at 16 / 128 heads with the switch compiled in (MLAJIT_NVRTC_FLAGS). Written in session 23, run in session 24
# (no faster; docs/PERF.md); the switch was removed after that, so the ra1 configs no longer build.
# Prebuilt: CFG_FILE=configs_t16.h BUILD=build_t16 bash build.sh;
# carry ["tools/dev/mqa/build_t16", ".devdeps"].
#   run: OUT=$OUT bash tools/dev/mqa/run_t16.sh      (about 3 minutes)
source "$(dirname "$0")/run_common.sh"  # repository root, $OUT/logs, t0, el
bash tools/dev/mqa/lib_build.sh $OUT/logs &
bpid=$!
H=tools/dev/mqa/build_t16/harness
export MLAJIT_CACHE_DIR=/tmp/mlajit-t16-cache
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 90 $H --no-bench --configs h16sm90t,h16sm90tra1,h64sm90,h64sm90ra1 --log $OUT/logs/check.log > /dev/null 2>&1; echo "check rc $? $(el)"
grep -E "checks" $OUT/logs/check.log; grep -E "FAIL" $OUT/logs/check.log | cut -c1-160 | sort | uniq -c | head
timeout 60 $H --no-check --paged --bench-s 8192 --bench-heads 16 --bench-configs h16sm90t,h16sm90tra1,h16sm90tg4,h16sm90tg4ra1 --reps 5 --log $OUT/logs/bench16.log > /dev/null 2>&1
echo "bench 16 rc $? $(el)"; sed -n '/^config/,$p' $OUT/logs/bench16.log
timeout 60 $H --no-check --paged --bench-s 8192 --bench-heads 128 --bench-configs h64sm90,h64sm90ra1,h64sm90go,h64sm90gora1 --reps 5 --log $OUT/logs/bench128.log > /dev/null 2>&1
echo "bench 128 rc $? $(el)"; sed -n '/^config/,$p' $OUT/logs/bench128.log
for c in h16sm90tra1 h64sm90ra1; do
  timeout 40 compute-sanitizer --tool memcheck --print-limit 5 $H --configs $c --sanitize > $OUT/logs/san_memcheck_$c.log 2>&1
  echo "memcheck $c rc $? : $(grep -E 'ERROR SUMMARY|checks' $OUT/logs/san_memcheck_$c.log | tr '\n' ' ') $(el)"
done
wait $bpid; echo "library build rc $? $(el)"; grep -E "error" -A4 $OUT/logs/build.log | head -10
MLAJIT_NVRTC_FLAGS=-DMJ_MQA_ROW_AHEAD=1 timeout 120 build-gpu/mlajit_gpu_tests \
  -tc="*sparse MQA over heads*,*sparse MQA contract*,*NaN or inf in sparse MQA*,*agree on DSA*,*small shapes: sparse MQA*,*mla_prefill gives the DSA*,*mla_prefill takes the engine*,*chunked*" > $OUT/logs/gpu_tests.log 2>&1
echo "gpu tests rc $? $(el)"; grep -E "ERROR|FAILED|CRASH|test cases|assertions" $OUT/logs/gpu_tests.log | head -8
for h in 16 128; do
  for ra in 0 1; do
    MLAJIT_NVRTC_FLAGS=-DMJ_MQA_ROW_AHEAD=$ra timeout 40 build-gpu/mlajit-bench --ops mqa --heads $h --s-q 8192 --topk 2048 --reps 10 > $OUT/logs/lib_bench_h${h}_ra$ra.csv 2> $OUT/logs/lib_bench_h${h}_ra$ra.err
    echo "library bench $h heads, row lookups ahead $ra, rc $?"; cut -d, -f3-9,13 $OUT/logs/lib_bench_h${h}_ra$ra.csv
  done
done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
