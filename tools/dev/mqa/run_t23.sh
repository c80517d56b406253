#!/bin/bash
# Session 26, second call (issues 13, 16): the library with the key-set pre-pass wired in (the op's optional workspace, the
# one call's own) and the FP8 raw-ring producer as the runtime's pick at <= 16 heads: its GPU tests (sparse MQA on both
# tiers, FP8, one call; every sparse case re-run with a workspace and compared bit for bit), mlajit-bench sparse MQA with
# and without the workspace at 16-128 heads, the FP8 one call against the engine's way; the harness (configs_t23.h): the
# keys-as-M kernel on both caches with and without the pre-pass, checks, racecheck of the FP8 kernel.
# Prebuilt: CFG_FILE=configs_t23.h BUILD=build_t23 bash build.sh. carry ["tools/dev/mqa/build_t23", ".devdeps"]; timeout 480.
source "$(dirname "$0")/run_common.sh"  # repository root, $OUT/logs, t0, el
bash tools/dev/mqa/lib_build.sh $OUT/logs & bpid=$!
N=tools/dev/mqa/build_t23/harness
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
timeout 90 $N --no-bench --log $OUT/logs/check.log > /dev/null 2>&1; echo "check rc $? $(el)"
grep -E "checks" $OUT/logs/check.log; grep -E "FAIL" $OUT/logs/check.log | cut -c1-160 | sort | uniq -c | head
echo "pre configs: $(grep -c 'same bits' $OUT/logs/check.log) bit-identical, $(grep -c 'list ok' $OUT/logs/check.log) lists ok, $(grep -cE 'list BAD|DIFFER' $OUT/logs/check.log) bad"
timeout 60 $N --no-check --paged --bench-s 8192 --bench-heads 16 --bench-configs h16sm90t,h16sm90t_pre,h16sm90t8,h16sm90t8_pre --reps 5 --log $OUT/logs/b16.log > /dev/null 2>&1
echo "b16 rc $? $(el)"
timeout 60 compute-sanitizer --tool racecheck --print-limit 5 $N --configs h16sm90t8 --sanitize > $OUT/logs/san_racecheck_h16sm90t8.log 2>&1
echo "racecheck h16sm90t8 rc $? : $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|checks' $OUT/logs/san_racecheck_h16sm90t8.log | tr '\n' ' ') $(el)"
wait $bpid; echo "library build rc $? $(el)"; grep -E "error" -A4 $OUT/logs/build.log | head -10
export MLAJIT_CACHE_DIR=/tmp/mlajit-t23-cache
timeout 240 build-gpu/mlajit_gpu_tests -tc="*sparse MQA*,*fp8*,*agree on DSA*,*mla_prefill*,*chunked*" > $OUT/logs/gpu_tests.log 2>&1
echo "gpu tests rc $? $(el)"; grep -E "ERROR|FAILED|CRASH|test cases|assertions|differ" $OUT/logs/gpu_tests.log | head -12
timeout 100 build-gpu/mlajit-bench --ops mqa,mqa-nows --heads 16,32,64,128 --s-q 8192 --topk 2048 --reps 10 > $OUT/logs/lib_mqa.csv 2> $OUT/logs/lib_mqa.err
echo "library bench rc $? $(el)"; cut -d, -f3-9,13 $OUT/logs/lib_mqa.csv
timeout 100 build-gpu/mlajit-bench --kv fp8 --heads 16 --batch 8 --s-q 1024 --s-k 33792 --reps 10 > $OUT/logs/lib_fp8.csv 2> $OUT/logs/lib_fp8.err
echo "library fp8 bench rc $? $(el)"; cat $OUT/logs/lib_fp8.csv | cut -c1-200
echo "== harness summary $(cat $OUT/logs/gpu.txt)"; sed -n '/^config/,$p' $OUT/logs/b16.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
