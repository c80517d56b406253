// Session 23 (build.sh CFG_FILE=configs_t15.h): the 64-head kernel's schedule 1 on 32-key tiles in four ring slots
// ("n32": the same ring bytes as two 64-key slots; three slots in flight while one is computed) against the shipped
// 64-key, two-slot form, each with its math alone (DEV_SKIP 3, "mo") and its gather with the barriers alone (DEV_SKIP 1,
// "go"), at 64 and 128 heads; "np": n32 with P handed over by bar.arrive (MJ_MQA90_PSYNC 0: warpgroup 0 may run a tile
// ahead); "w2n32": schedule 2 (tile pairs, each warpgroup computing S of its own tile) on 32-key tiles, a pair's two slots
// computed while the next pair's two land, with its math alone ("mo"). Format: configs.h.
// The 32-key forms were removed after the call (slower, docs/PERF.md "32-key tiles in four slots"): rebuilding this list
// needs kernels_src and tools/dev/mqa (build.sh, kernel_cfg90.cu) from commit 6949765.
#define MQA_CONFIGS(X)                                \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)           \
    X(h64sm90n32, 64, 32, 4, -1, -1, -1, 0, 0)        \
    X(h64sm90n32np, 64, 32, 4, -1, -1, -1, 0, 0)      \
    X(h64sm90w2n32, 64, 32, 4, -1, -1, -1, 0, 0)      \
    X(h64sm90w2n32mo, 64, 32, 4, -1, -1, -1, 3, 0)    \
    X(h64sm90mo, 64, 64, 2, -1, -1, -1, 3, 0)         \
    X(h64sm90n32mo, 64, 32, 4, -1, -1, -1, 3, 0)      \
    X(h64sm90go, 64, 64, 2, -1, -1, -1, 1, 0)         \
    X(h64sm90n32go, 64, 32, 4, -1, -1, -1, 1, 0)
