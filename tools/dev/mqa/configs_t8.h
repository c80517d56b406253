// Session 21's config list (build.sh CFG_FILE=configs_t8.h): the keys-as-M Hopper kernel on the FP8 cache
// (sparse_mqa/sm90_t_fp8.cuh, "sm90t" with KV_FP8 1): 4 slots (runtime candidate), 2 and 5 slots, the integer code
// conversion ("t8i"), its math alone ("mo", DEV_SKIP 3) and gather alone ("go", DEV_SKIP 1); beside them the bf16
// keys-as-M kernel (shipped, and "tpin": O^T's rescale pinned), and the portable FP8 16 x 32 tile (the runtime's FP8
// pick at 16 heads before). Format: configs.h.
#define MQA_CONFIGS(X)                              \
    X(h16sm90t8, 16, 64, 4, -1, -1, -1, 0, 1)   \
    X(h16sm90t8s2, 16, 64, 2, -1, -1, -1, 0, 1) \
    X(h16sm90t8s5, 16, 64, 5, -1, -1, -1, 0, 1) \
    X(h16sm90t8i, 16, 64, 4, -1, -1, -1, 0, 1)  \
    X(h16sm90t8mo, 16, 64, 4, -1, -1, -1, 3, 1) \
    X(h16sm90t8go, 16, 64, 4, -1, -1, -1, 1, 1) \
    X(h16sm90t, 16, 64, 2, -1, -1, -1, 0, 0)    \
    X(h16sm90tpin, 16, 64, 2, -1, -1, -1, 0, 0) \
    X(h16n32s2f8, 16, 32, 2, -1, -1, -1, 0, 1)  \
    X(h16n32s2, 16, 32, 2, -1, -1, -1, 0, 0)
