// Task S4's config list (build.sh CFG_FILE=configs_s4.h): the bf16 Hopper kernel (schedule 1) and its late
// hand-over variant ("lh": warpgroup 1's P V of t queued behind S of t + 1); the FP8 Hopper kernel with the raw
// rows staged in shared memory (schedule 1), its late hand-over variant, the register-staged FP8 producer it
// replaces ("f8r", schedule 0); timing-only variants (DEV_SKIP 1: no wgmma, 2: FP8 codes unconverted); the
// portable 16 x 32 tiles the runtime picks at 16 heads. Format: configs.h. (Call 1 ran these tags under their
// earlier names h64sm90f8, f8lh, f8sk, f8nc, when the staged producer was the default and had its first form.)
#define MQA_CONFIGS(X)                              \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)     \
    X(h64sm90lh, 64, 64, 2, -1, -1, -1, 0, 0)   \
    X(h64sm90skip, 64, 64, 2, -1, -1, -1, 1, 0) \
    X(h64sm90f8st, 64, 64, 2, -1, -1, -1, 0, 1) \
    X(h64sm90f8stlh, 64, 64, 2, -1, -1, -1, 0, 1)\
    X(h64sm90f8r, 64, 64, 2, -1, -1, -1, 0, 1)  \
    X(h64sm90f8stsk, 64, 64, 2, -1, -1, -1, 1, 1)\
    X(h64sm90f8stnc, 64, 64, 2, -1, -1, -1, 2, 1)\
    X(h16n32s2, 16, 32, 2, -1, -1, -1, 0, 0)    \
    X(h16n32s2f8, 16, 32, 2, -1, -1, -1, 0, 1)
