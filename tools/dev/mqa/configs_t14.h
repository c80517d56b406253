// Session 22's second call (build.sh CFG_FILE=configs_t14.h): Nsight Compute on the keys-as-M kernel at 16 heads (8k,
// paged): the shipped alternate-tile schedule, its gather alone (DEV_SKIP 4), its math alone (DEV_SKIP 3), and the split
// schedule (lock-step), to see what the two parts contend for when they run together. Format: configs.h.
// The split schedule's tag (h16sm90tk1) is gone with its switch (commit 87c0ad8, removed after session 22's first call).
#define MQA_CONFIGS(X)                              \
    X(h16sm90t, 16, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16sm90tg4, 16, 64, 2, -1, -1, -1, 4, 0)      \
    X(h16sm90tm3, 16, 64, 2, -1, -1, -1, 3, 0)
