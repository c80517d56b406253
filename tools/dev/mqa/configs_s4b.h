// Task S4's second device call (build.sh CFG_FILE=configs_s4b.h): the bf16 Hopper kernel and its split slot
// release ("sp"), the FP8 Hopper kernel as the runtime builds it (the register-staged producer) and with the raw
// rows staged in shared memory ("f8st": index and block-table loads a tile ahead, two copy groups a tile),
// timing-only variants of the latter (DEV_SKIP 1: no wgmma, 2: codes unconverted), the portable 16 x 32 tiles.
// Format: configs.h.
#define MQA_CONFIGS(X)                              \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)     \
    X(h64sm90sp, 64, 64, 2, -1, -1, -1, 0, 0)   \
    X(h64sm90f8, 64, 64, 2, -1, -1, -1, 0, 1)   \
    X(h64sm90f8st, 64, 64, 2, -1, -1, -1, 0, 1) \
    X(h64sm90f8stsk, 64, 64, 2, -1, -1, -1, 1, 1)\
    X(h64sm90f8stnc, 64, 64, 2, -1, -1, -1, 2, 1)\
    X(h16n32s2, 16, 32, 2, -1, -1, -1, 0, 0)    \
    X(h16n32s2f8, 16, 32, 2, -1, -1, -1, 0, 1)
