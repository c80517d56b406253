// Stop 14's FP8 list (helper fp8, tools/dev/mqa/run_f8h.sh; format: configs.h): the runtime's bf16 kernels (Hopper
// tier, and the portable 16 x 32 the runtime picks at 16 heads), the shipped FP8 kernels (register-staged Hopper,
// portable 16 x 32), the staged FP8 producer, and the staged producer helped by warpgroup 1 ("sth":
// MJ_MQA90_F8HELP), also with its codes stored unconverted (DEV_SKIP 2, timing only).
#define MQA_CONFIGS(X)                              \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)         \
    X(h16n32s2, 16, 32, 2, -1, -1, -1, 0, 0)        \
    X(h64sm90f8, 64, 64, 2, -1, -1, -1, 0, 1)       \
    X(h64sm90f8st, 64, 64, 2, -1, -1, -1, 0, 1)     \
    X(h64sm90f8sth, 64, 64, 2, -1, -1, -1, 0, 1)    \
    X(h64sm90f8sthnc, 64, 64, 2, -1, -1, -1, 2, 1)  \
    X(h16n32s2f8, 16, 32, 2, -1, -1, -1, 0, 1)
