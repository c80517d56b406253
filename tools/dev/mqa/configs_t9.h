// Session 21's second call (build.sh CFG_FILE=configs_t9.h): where the FP8 keys-as-M kernel's time goes. "g4" (DEV_SKIP 4):
// the producer's gather alone (math warpgroups release each tile as it lands), FP8 rows (656 bytes) and bf16 rows (1152);
// beside them the FP8 kernel at 2 and 4 slots and the bf16 kernel. Format: configs.h.
#define MQA_CONFIGS(X)                              \
    X(h16sm90t8g4, 16, 64, 4, -1, -1, -1, 4, 1) \
    X(h16sm90t8s2g4, 16, 64, 2, -1, -1, -1, 4, 1) \
    X(h16sm90tg4, 16, 64, 2, -1, -1, -1, 4, 0)  \
    X(h16sm90t8, 16, 64, 4, -1, -1, -1, 0, 1)   \
    X(h16sm90t8s2, 16, 64, 2, -1, -1, -1, 0, 1) \
    X(h16sm90t8go, 16, 64, 4, -1, -1, -1, 1, 1) \
    X(h16sm90t, 16, 64, 2, -1, -1, -1, 0, 0)    \
    X(h16sm90tgo, 16, 64, 2, -1, -1, -1, 1, 0)
