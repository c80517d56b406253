#!/bin/bash
# Ran in session 36 (H100; docs/PERF.md "Session 36"): N lost again (one-block 4.00-4.04 against A's 3.44, 128 heads 9.34
# against 8.90-8.95), so the patch named below was not applied and is gone (in git history at 29ee08e).
# Session 34's open question, for the next device call. run_t34 (H100) ran 3a6c822, whose producers all took 32-bit shared
# addresses: its 16-head persistent kernel ran at nvcc's speed (3.010 / 2.972 ms against nvcc's cubins 2.996 / 3.013, the
# old NVRTC code 3.27 / 3.26 in run_t32), but its one-block form 4.034 ms (the old code 3.442 in run_t32) and 128 heads 9.366
# (nvcc's 8.322 in the same run, the old code 8.741 in run_t32), although the SASS of every gather loop was nvcc's length. So
# the tree after it keeps the 32-bit form for the persistent grid only; every other kernel is byte for byte the old code
# (A). Is the rest the code or the run? The three caches in one run, alternated: N (3a6c822's sources through NVRTC: the
# 32-bit form everywhere), A (d2fb902's through NVRTC: what this tree runs outside the persistent grid), B (d2fb902's,
# nvcc's cubins); each through MLAJIT_KERNELS_DIR (build_t33/kernels_n, kernels_old) so the keys match. If N's one-block and
# 128-head times equal A's or beat them here, give those kernels the 32-bit form too: `git apply
# tools/dev/mqa/patches/all32_producers.patch` (session 35: every sm_90a producer through mj90::cp_async_16_at; its 27 sm_90a
# cubins' .text is byte for byte N's, checked on the CPU, so N's numbers here are that patch's, and session 34's closing call
# on 3a6c822 covered the same code: suite, sanitizers, soak).
# Caches missing on this machine: tools/dev/mqa/prep_t35.sh rebuilds them from git.
# No library build: carries build/mlajit-bench from the CPU machine (Debian 12, glibc 2.36; the device's glibc is newer).
# carry ["build/mlajit-bench", "tools/dev/mqa/build_t33", "tools/dev/mqa/build_t32", ".devdeps"]; ~2 minutes.
# Last, the same A / B question for dense MHA at 128 heads and masked MHA at 16 heads (8k).
source "$(dirname "$0")/run_common.sh"
trap 'tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs' EXIT
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee $OUT/logs/gpu.txt
D=tools/dev/mqa/build_t33
rm -rf /tmp/cacheN /tmp/cacheA /tmp/cacheB
cp -r $D/N /tmp/cacheN; cp -r $D/B /tmp/cacheB; cp -r tools/dev/mqa/build_t32/A /tmp/cacheA
envof() { if [ $1 = N ]; then echo "MLAJIT_KERNELS_DIR=$PWD/$D/kernels_n"; else echo "MLAJIT_KERNELS_DIR=$PWD/$D/kernels_old"; fi; }
run() {  # run CACHE HEADS [env...]   (OPS: the bench's --ops, default mqa)
  local c=$1 h=$2; shift 2; local log=lib${OPS:-mqa}${h}_${c}_$(date +%s%N | cut -c8-13)
  env $(envof $c) "$@" MLAJIT_OFFLINE=1 MLAJIT_CACHE_DIR=/tmp/cache$c timeout 60 build/mlajit-bench --s-q 8192 --topk 2048 \
    --ops ${OPS:-mqa} --heads $h --reps 20 > $OUT/logs/$log.log 2>&1
  echo "$c h$h $* rc $? $(el): $(grep -E "^(mqa|mha|masked) |ERROR|error" $OUT/logs/$log.log | head -2 | cut -c1-80)"
}
for c in N A B N A B; do run $c 128; done
for c in N A B N A B; do run $c 16 MLAJIT_MQA_PERSIST=0; done
for c in N A B; do run $c 16; done
# Dense and masked MHA (mha_fwd_sm90): does NVRTC's code cost there too? B holds nvcc's cubins of those kernels as well.
for c in A B A B; do OPS=mha run $c 128; done
for c in A B A B; do OPS=masked run $c 16; done
