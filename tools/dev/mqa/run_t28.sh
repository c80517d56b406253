#!/bin/bash
# Ran in session 30 (docs/PERF.md "Session 30"); per2 / per2m (MJ_MQA90T_STREAMS=2) were removed after it: rebuild at 5a4e269.
# Session 30: the persistent grid's development switches (configs_t28.h): per2 (two producer streams, prepared in session 29 as
# run_t27.sh, folded in here), perm (warpgroup 0 merges alone, warpgroup 1 goes on: MJ_MQA90T_MERGE=1) and per2m (both), against
# the committed persistent form (per) and one block a token, 16 heads. Checks with MQA_PERSIST_BLOCKS=3 (each must give the
# one-block form's bits: "same bits"), memcheck / racecheck / synccheck of per2m and racecheck of perm (2 blocks), then 8k timing
# whole and gather alone (g4), twice. About two minutes.
# carry ["tools/dev/mqa/build_t28", ".devdeps"] (rebuild: cd tools/dev/mqa && CFG_FILE=configs_t28.h BUILD=build_t28 bash build.sh).
# Predicted (H100, 8k, 16 heads, kernel alone): per 3.00 (session 29), per2 toward 2.8, perm a little under per, per2m the
# lowest, toward the first persistent form's 2.76 or below.
source "$(dirname "$0")/run_common.sh"
H=tools/dev/mqa/build_t28/harness
trap 'tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
MQA_PERSIST_BLOCKS=3 timeout 100 $H --no-bench --configs h16sm90t_pre,h16sm90tper_pre,h16sm90tper2_pre,h16sm90tperm_pre,h16sm90tper2m_pre \
  --log $OUT/logs/check.log > /dev/null 2>&1
echo "check rc $? $(el)"; grep -E "checks" $OUT/logs/check.log; grep -E "FAIL|DIFFER" $OUT/logs/check.log | cut -c1-160 | sort | uniq -c | head
for c in per per2 perm per2m; do
  echo "$c: $(grep -c "h16sm90t${c}_pre PASS.*same bits" $OUT/logs/check.log) checks with the same bits, $(grep -c "h16sm90t${c}_pre PASS" $OUT/logs/check.log) passed"
done
for run in "memcheck per2m" "racecheck per2m" "synccheck per2m" "racecheck perm"; do
  set -- $run
  MQA_PERSIST_BLOCKS=2 timeout 40 compute-sanitizer --tool $1 --print-limit 4 $H --configs h16sm90t${2}_pre --sanitize > $OUT/logs/$1_$2.log 2>&1
  echo "$1 h16sm90t${2}_pre rc $? : $(grep -E 'SUMMARY' $OUT/logs/$1_$2.log) $(el)"
  grep -o "in [a-z0-9_.]*:[0-9]*" $OUT/logs/$1_$2.log | sort | uniq -c | head -4
done
for rep in 1 2; do
  timeout 75 $H --no-check --paged --bench-s 8192 --bench-heads 16 \
    --bench-configs h16sm90t_pre,h16sm90tper_pre,h16sm90tper2_pre,h16sm90tperm_pre,h16sm90tper2m_pre,h16sm90tg4_pre,h16sm90tperg4_pre,h16sm90tper2g4_pre \
    --reps 5 --log $OUT/logs/b16_$rep.log > /dev/null 2>&1
  echo "b16 ($rep) rc $? $(el)"; sed -n '/^config/,$p' $OUT/logs/b16_$rep.log
done
