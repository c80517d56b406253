// Session 21's third call (build.sh CFG_FILE=configs_t10.h): the FP8 rows' gather alone ("g4", DEV_SKIP 4) by cp.async of
// 16 bytes (as the kernel) against one cp.async.bulk a row ("t8b", MJ_MQA90T8_BULK), 4 and 2 slots; bf16 rows beside.
// Format: configs.h.
#define MQA_CONFIGS(X)                                \
    X(h16sm90t8bg4, 16, 64, 4, -1, -1, -1, 4, 1)    \
    X(h16sm90t8bs2g4, 16, 64, 2, -1, -1, -1, 4, 1)  \
    X(h16sm90t8bs5g4, 16, 64, 5, -1, -1, -1, 4, 1)  \
    X(h16sm90t8g4, 16, 64, 4, -1, -1, -1, 4, 1)     \
    X(h16sm90tg4, 16, 64, 2, -1, -1, -1, 4, 0)      \
    X(h16sm90t8, 16, 64, 4, -1, -1, -1, 0, 1)
