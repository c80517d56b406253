// Session 26 (issue 16): the FP8 keys-as-M kernel's producers at 16 heads: as shipped (register producer, 8 warps x 8 rows),
// its loads row by row (sm90t8rp, MJ_MQA90T8_ROWPIPE), and the raw-ring producer (sparse_mqa/sm90_f8_staged.cuh,
// MJ_MQA90T8_STAGE) with 8 warps of 8 rows (sm90t8s8) or 16 of 4 (sm90t8s16); g4 = the producer alone (DEV_SKIP 4), r = codes
// stored unconverted (DEV_SKIP 2). The 64-head FP8 kernel with the shared register producer (duplicates D1). Format: configs.h.
// After the call the row-by-row form (rp, slower: 5.69 against 5.55 ms) was removed; its tags now build the shipped kernel.
#define MQA_CONFIGS(X)                              \
    X(h16sm90t, 16, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16sm90t8, 16, 64, 2, -1, -1, -1, 0, 1)       \
    X(h16sm90t8g4, 16, 64, 2, -1, -1, -1, 4, 1)     \
    X(h16sm90t8rp, 16, 64, 2, -1, -1, -1, 0, 1)     \
    X(h16sm90t8rpg4, 16, 64, 2, -1, -1, -1, 4, 1)   \
    X(h16sm90t8s8, 16, 64, 2, -1, -1, -1, 0, 1)     \
    X(h16sm90t8s8g4, 16, 64, 2, -1, -1, -1, 4, 1)   \
    X(h16sm90t8s8r, 16, 64, 2, -1, -1, -1, 2, 1)    \
    X(h16sm90t8s16, 16, 64, 2, -1, -1, -1, 0, 1)    \
    X(h16sm90t8s16g4, 16, 64, 2, -1, -1, -1, 4, 1)  \
    X(h64sm90f8, 64, 64, 2, -1, -1, -1, 0, 1)
