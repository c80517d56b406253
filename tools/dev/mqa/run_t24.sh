#!/bin/bash
# Next session's first call (prepared in session 26, not yet run): (1) what limits the FP8 keys-as-M kernel with the pre-pass
# (configs_t24.h: whole, producer alone, unconverted, without wgmma, the register producer, bf16; checks first; Nsight Compute
# on the FP8 and bf16 kernels); (2) the soak's coverage fix (tests/gpu/test_soak_gpu.cpp: the coverage calls run their three
# sizes on the paged cache too, after session 26's closing call loaded a kernel after warm-up): a 60 s soak whose
# "kernel modules loaded after warm-up" must be 0, and its coverage count (17 in session 26) should now hold every kernel.
# Prebuilt: CFG_FILE=configs_t24.h BUILD=build_t24 bash build.sh. carry ["tools/dev/mqa/build_t24", ".devdeps"]; timeout 420.
source "$(dirname "$0")/run_common.sh"  # repository root, $OUT/logs, t0, el
bash tools/dev/mqa/lib_build.sh $OUT/logs mlajit_gpu_tests & bpid=$!
H=tools/dev/mqa/build_t24/harness
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
timeout 60 $H --no-bench --configs h16sm90t_pre,h16sm90t8_pre,h16sm90t8s0_pre --log $OUT/logs/check.log > /dev/null 2>&1
echo "check rc $? $(el)"; grep -E "checks" $OUT/logs/check.log; grep -E "FAIL" $OUT/logs/check.log | cut -c1-160 | sort | uniq -c | head
timeout 80 $H --no-check --paged --bench-s 8192 --bench-heads 16 \
  --bench-configs h16sm90t_pre,h16sm90t8_pre,h16sm90t8g4_pre,h16sm90t8raw_pre,h16sm90t8k1_pre,h16sm90t8s0_pre --reps 5 \
  --log $OUT/logs/b16.log > /dev/null 2>&1; echo "b16 rc $? $(el)"
for c in h16sm90t8_pre h16sm90t_pre; do bash tools/dev/mqa/ncu_profile.sh $H $c 16 $OUT/logs/ncu_$c.txt 90; echo "$(el)"; done
wait $bpid; echo "library build rc $? $(el)"; grep -E "error" -A4 $OUT/logs/build.log | head -10
MLAJIT_SOAK_SECONDS=60 MLAJIT_SOAK_CSV=$OUT/logs/soak.csv MLAJIT_CACHE_DIR=/tmp/t24-soak timeout 150 build-gpu/mlajit_gpu_tests \
  '--test-case=gpu soak*' > $OUT/logs/soak.log 2>&1
echo "soak rc $? $(el)"; grep -E "kernel modules|ERROR|test cases|FIGURE soak:" $OUT/logs/soak.log | cut -c1-240
echo "== harness summary $(cat $OUT/logs/gpu.txt)"; sed -n '/^config/,$p' $OUT/logs/b16.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
