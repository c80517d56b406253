#!/bin/bash
# Prepared in sessions 26-28, run in session 28 (H100; logs docs/bench/2026-12-06_h100_mqa_t24/). Two phases (argument; default
# both):
#   checks: harness checks of the bf16 and FP8 keys-as-M kernels with the pre-pass's list (also covers set_key reading
#           rq.kept), the persistent grid and the 64-head kernel's schedules; memcheck of the persistent grid; racecheck side by
#           side on the bf16 kernel's epilogue family (docs/RELIABILITY.md section 4): shipped, no tiles (z5) (the tries e1-e3
#           were measured and removed: e3 is the kernel's code since);
#   bench:  16 heads, 8k paged: the FP8 forms with the pre-pass (whole, producer alone, unconverted, without wgmma, the
#           register producer) against bf16 and the persistent grid (whole and gather alone); 128 heads: the 64-head kernel's
#           schedules 1 and 2 with the list (whole, math alone, gather alone); Nsight Compute on the FP8 kernel and the
#           64-head kernel at 128 heads (NCU=0 skips it); the archive.
# The closing call (tools/device/closing_call.sh) can run beside `checks`:
#   (bash tools/dev/mqa/run_t24.sh checks > $OUT/t24_checks.txt 2>&1) & OUT=$OUT/closing bash tools/device/closing_call.sh
# Prebuilt: CFG_FILE=configs_t24.h BUILD=build_t24 bash build.sh. carry ["tools/dev/mqa/build_t24", ".devdeps"]; timeout 420.
source "$(dirname "$0")/run_common.sh"  # repository root, $OUT/logs, t0, el
H=tools/dev/mqa/build_t24/harness
phase=${1:-all}  # checks (checks, racecheck), bench (timing, Nsight Compute, the archive) or all
if [ $phase != bench ]; then
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
timeout 100 $H --no-bench --configs h16sm90t_pre,h16sm90tper_pre,h16sm90t8_pre,h16sm90t8s0_pre,h64sm90_pre,h64sm90w2_pre,h64sm90w2e_pre --log $OUT/logs/check.log > /dev/null 2>&1
echo "check rc $? $(el)"; grep -E "checks" $OUT/logs/check.log; grep -E "FAIL" $OUT/logs/check.log | cut -c1-160 | sort | uniq -c | head
timeout 60 compute-sanitizer --tool memcheck $H --configs h16sm90tper_pre --sanitize > $OUT/logs/memcheck_tper.log 2>&1
echo "memcheck h16sm90tper_pre (persistent grid) rc $? : $(grep -E 'ERROR SUMMARY' $OUT/logs/memcheck_tper.log) $(el)"
# racecheck on the bf16 kernel's epilogue family (docs/RELIABILITY.md row 139): shipped, no tiles, reconverged, own barrier ids
for c in h16sm90t_pre h16sm90tz5_pre; do
  timeout 40 compute-sanitizer --tool racecheck --print-limit 4 $H --configs $c --sanitize > $OUT/logs/race_$c.log 2>&1
  echo "racecheck $c rc $? : $(grep -E 'RACECHECK SUMMARY' $OUT/logs/race_$c.log) $(grep -c 'Race reported' $OUT/logs/race_$c.log) $(el)"
  grep -o "Race reported between [A-Za-z]* access at [^ ]*\|in [a-z0-9_.]*:[0-9]*" $OUT/logs/race_$c.log | sort | uniq -c | head -6
done
fi
[ $phase = checks ] && exit 0
[ -f $OUT/logs/gpu.txt ] || nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader > $OUT/logs/gpu.txt
timeout 80 $H --no-check --paged --bench-s 8192 --bench-heads 16 \
  --bench-configs h16sm90t_pre,h16sm90tper_pre,h16sm90tg4_pre,h16sm90tperg4_pre,h16sm90t8_pre,h16sm90t8g4_pre,h16sm90t8raw_pre,h16sm90t8k1_pre,h16sm90t8s0_pre --reps 5 \
  --log $OUT/logs/b16.log > /dev/null 2>&1; echo "b16 rc $? $(el)"
timeout 90 $H --no-check --paged --bench-s 8192 --bench-heads 128 \
  --bench-configs h64sm90_pre,h64sm90w2_pre,h64sm90w2e_pre,h64sm90mo_pre,h64sm90go_pre,h64sm90w2mo_pre,h64sm90w2go_pre --reps 5 \
  --log $OUT/logs/b128.log > /dev/null 2>&1; echo "b128 rc $? $(el)"
if [ "${NCU:-1}" = 1 ]; then  # the FP8 16-head kernel, and the 64-head kernel at 128 heads (L2 hit rate, stalls; session 28)
  for ch in h16sm90t8_pre:16 h64sm90_pre:128; do c=${ch%:*}; bash tools/dev/mqa/ncu_profile.sh $H $c ${ch#*:} $OUT/logs/ncu_$c.txt 90; echo "$(el)"; done
fi
echo "== harness summary $(cat $OUT/logs/gpu.txt)"; sed -n '/^config/,$p' $OUT/logs/b16.log; sed -n '/^config/,$p' $OUT/logs/b128.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
