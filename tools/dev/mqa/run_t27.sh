#!/bin/bash
# Prepared in session 29, not yet run: the persistent grid's producer in two streams (per2, MJ_MQA90T_STREAMS=2: warps 0-1
# gather every token's even tiles into slot 0, warps 2-3 its odd tiles into slot 1) against the committed persistent form (per)
# and one block a token, 16 heads (configs_t27.h). Checks with MQA_PERSIST_BLOCKS=3 (per2 must give per's bits: "same bits"),
# memcheck / racecheck of per2 (2 blocks), then 8k timing whole and gather alone (g4), twice. About a minute.
# carry ["tools/dev/mqa/build_t27", ".devdeps"] (rebuild: cd tools/dev/mqa && CFG_FILE=configs_t27.h BUILD=build_t27 bash build.sh).
# Predicted: per2 toward the first persistent form's 2.76 ms (session 28), per 3.00, one block a token 3.09 (session 29, H100).
source "$(dirname "$0")/run_common.sh"
H=tools/dev/mqa/build_t27/harness
trap 'tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
MQA_PERSIST_BLOCKS=3 timeout 80 $H --no-bench --configs h16sm90t_pre,h16sm90tper_pre,h16sm90tper2_pre --log $OUT/logs/check.log > /dev/null 2>&1
echo "check rc $? $(el)"; grep -E "checks" $OUT/logs/check.log; grep -E "FAIL|DIFFER" $OUT/logs/check.log | cut -c1-160 | sort | uniq -c | head
grep -c "h16sm90tper2_pre PASS.*same bits" $OUT/logs/check.log | sed 's/^/per2 checks with the same bits: /'
for tool in memcheck racecheck; do
  MQA_PERSIST_BLOCKS=2 timeout 40 compute-sanitizer --tool $tool --print-limit 4 $H --configs h16sm90tper2_pre --sanitize > $OUT/logs/${tool}_per2.log 2>&1
  echo "$tool h16sm90tper2_pre rc $? : $(grep -E 'SUMMARY' $OUT/logs/${tool}_per2.log) $(el)"
  grep -o "in [a-z0-9_.]*:[0-9]*" $OUT/logs/${tool}_per2.log | sort | uniq -c | head -4
done
for rep in 1 2; do
  timeout 60 $H --no-check --paged --bench-s 8192 --bench-heads 16 \
    --bench-configs h16sm90t_pre,h16sm90tper_pre,h16sm90tper2_pre,h16sm90tg4_pre,h16sm90tperg4_pre,h16sm90tper2g4_pre --reps 5 \
    --log $OUT/logs/b16_$rep.log > /dev/null 2>&1
  echo "b16 ($rep) rc $? $(el)"; sed -n '/^config/,$p' $OUT/logs/b16_$rep.log
done
