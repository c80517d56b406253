// Session 22's first call (build.sh CFG_FILE=configs_t13.h): the keys-as-M kernel's split schedule (both warpgroups on every
// tile: "tk1" lock-step, "tk2" with O^T of tile t in flight while S^T of t + 1 issues) against the alternate-tile schedule
// (shipped) at 16 and 32 heads, the 64-head kernel at 32, and the split schedule's math alone (DEV_SKIP 3). Format: configs.h.
// The switch (MJ_MQA90T_SPLIT, build.sh tags *sm90tk1* / *sm90tk2*) was removed after the call (slower, docs/PERF.md "The split
// schedule"): rebuilding this list needs kernels_src and build.sh from commit 87c0ad8.
#define MQA_CONFIGS(X)                              \
    X(h16sm90t, 16, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16sm90tk1, 16, 64, 2, -1, -1, -1, 0, 0)      \
    X(h16sm90tk2, 16, 64, 2, -1, -1, -1, 0, 0)      \
    X(h16sm90tk2m, 16, 64, 2, -1, -1, -1, 3, 0)     \
    X(h32sm90t, 32, 64, 2, -1, -1, -1, 0, 0)        \
    X(h32sm90tk1, 32, 64, 2, -1, -1, -1, 0, 0)      \
    X(h32sm90tk2, 32, 64, 2, -1, -1, -1, 0, 0)      \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)
