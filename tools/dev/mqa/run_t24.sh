#!/bin/bash
# Session 27: cut to the harness (device time short): the soak moved to the closing call, ncu on the FP8 kernel only.
# Next session's first call (prepared in session 26, not yet run): (1) what limits the FP8 keys-as-M kernel with the pre-pass
# (configs_t24.h: whole, producer alone, unconverted, without wgmma, the register producer, bf16; checks first; Nsight Compute
# on the FP8 and bf16 kernels); (2) the soak's coverage fix (tests/gpu/test_soak_gpu.cpp: the coverage calls run their three
# sizes on the paged cache too, after session 26's closing call loaded a kernel after warm-up): a 60 s soak whose
# "kernel modules loaded after warm-up" must be 0, and its coverage count (17 in session 26) should now hold every kernel.
# (3) racecheck tries on the bf16 keys-as-M kernel's epilogue (session 27; configs z5, e1, e2).
# Prebuilt: CFG_FILE=configs_t24.h BUILD=build_t24 bash build.sh. carry ["tools/dev/mqa/build_t24", ".devdeps"]; timeout 420.
source "$(dirname "$0")/run_common.sh"  # repository root, $OUT/logs, t0, el
H=tools/dev/mqa/build_t24/harness
phase=${1:-all}  # checks (checks, racecheck), bench (timing, Nsight Compute, the archive) or all
if [ $phase != bench ]; then
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
timeout 60 $H --no-bench --configs h16sm90t_pre,h16sm90t8_pre,h16sm90t8s0_pre,h16sm90te3_pre --log $OUT/logs/check.log > /dev/null 2>&1
echo "check rc $? $(el)"; grep -E "checks" $OUT/logs/check.log; grep -E "FAIL" $OUT/logs/check.log | cut -c1-160 | sort | uniq -c | head
# racecheck on the bf16 kernel's epilogue family (docs/RELIABILITY.md row 139): shipped, no tiles, reconverged, own barrier ids
for c in h16sm90t_pre h16sm90tz5_pre h16sm90te1_pre h16sm90te2_pre h16sm90te3_pre; do
  timeout 40 compute-sanitizer --tool racecheck --print-limit 4 $H --configs $c --sanitize > $OUT/logs/race_$c.log 2>&1
  echo "racecheck $c rc $? : $(grep -E 'RACECHECK SUMMARY' $OUT/logs/race_$c.log) $(grep -c 'Race reported' $OUT/logs/race_$c.log) $(el)"
  grep -o "Race reported between [A-Za-z]* access at [^ ]*\|in [a-z0-9_.]*:[0-9]*" $OUT/logs/race_$c.log | sort | uniq -c | head -6
done
fi
[ $phase = checks ] && exit 0
timeout 80 $H --no-check --paged --bench-s 8192 --bench-heads 16 \
  --bench-configs h16sm90t_pre,h16sm90te3_pre,h16sm90t8_pre,h16sm90t8g4_pre,h16sm90t8raw_pre,h16sm90t8k1_pre,h16sm90t8s0_pre --reps 5 \
  --log $OUT/logs/b16.log > /dev/null 2>&1; echo "b16 rc $? $(el)"
[ "${NCU:-1}" = 1 ] && for c in h16sm90t8_pre; do bash tools/dev/mqa/ncu_profile.sh $H $c 16 $OUT/logs/ncu_$c.txt 90; echo "$(el)"; done
echo "== harness summary $(cat $OUT/logs/gpu.txt)"; sed -n '/^config/,$p' $OUT/logs/b16.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
