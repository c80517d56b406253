#!/bin/bash
# On the CPU machine, before a run_t37 call: rebuilds what it carries and git ignores, where this machine lacks it:
#   tools/dev/mqa/build_t37: the harness (configs_t37.h), and 710580a's mlajit-bench / mlajit-warmup (mlajit-bench-710580a,
#     mlajit-warmup-710580a), built in a worktree: run_t36's caches were keyed before the 64-head spec's PERSIST parameter,
#     and only a bench of that time looks their keys up;
#   run_t36's caches (build_t33, build_t32/A) through prep_t35.sh with 710580a's warmup.
# The run also carries build/mlajit-bench from this tree (cmake --build build), for the library's MLAJIT_MQA_PERSIST64 rows.
# A few minutes where everything is missing (the worktree build), seconds otherwise.
set -euo pipefail
cd "$(dirname "$0")/../../.."
B=tools/dev/mqa/build_t37
[ -x $B/harness ] || (cd tools/dev/mqa && CFG_FILE=configs_t37.h BUILD=build_t37 bash build.sh)
if [ ! -x $B/mlajit-bench-710580a ] || [ ! -x $B/mlajit-warmup-710580a ]; then
  wt=$(mktemp -d)
  git worktree add -q "$wt" 710580a
  cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build "$wt/build" -j"$(nproc)" --target mlajit-bench mlajit-warmup > /dev/null
  cp "$wt/build/mlajit-bench" $B/mlajit-bench-710580a
  cp "$wt/build/mlajit-warmup" $B/mlajit-warmup-710580a
  git worktree remove --force "$wt"
fi
if [ ! -d tools/dev/mqa/build_t33/N ] || [ ! -d tools/dev/mqa/build_t32/A ]; then
  WARMUP=$B/mlajit-warmup-710580a bash tools/dev/mqa/prep_t35.sh
fi
ls -la $B/harness $B/mlajit-bench-710580a $B/mlajit-warmup-710580a
