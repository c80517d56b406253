// Session 21's fourth call (build.sh CFG_FILE=configs_t11.h): the bf16 rows' gather alone (DEV_SKIP 4) by 16-byte cp.async
// (the kernel's producer) against one cp.async.bulk a row ("tb", MJ_MQA90T_BULK), beside the FP8 rows' both forms and the
// whole bf16 kernel. Format: configs.h.
#define MQA_CONFIGS(X)                                \
    X(h16sm90tbg4, 16, 64, 2, -1, -1, -1, 4, 0)     \
    X(h16sm90tg4, 16, 64, 2, -1, -1, -1, 4, 0)      \
    X(h16sm90t8bs2g4, 16, 64, 2, -1, -1, -1, 4, 1)  \
    X(h16sm90t8s2g4, 16, 64, 2, -1, -1, -1, 4, 1)   \
    X(h16sm90t, 16, 64, 2, -1, -1, -1, 0, 0)
