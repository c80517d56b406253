// The key-set build with batched loads (session 24): the whole kernels and their fixed cost (DEV_SKIP 5) at 16 heads
// (keys-as-M kernel) and 128 heads (64-head kernel), the gather alone at both, the FP8 64-head kernel, and the
// portable kernels (which build the same set) for the checks. Format: configs.h.
#define MQA_CONFIGS(X)                              \
    X(h16sm90t, 16, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16sm90tg4, 16, 64, 2, -1, -1, -1, 4, 0)      \
    X(h16sm90tz5, 16, 64, 2, -1, -1, -1, 5, 0)      \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)         \
    X(h64sm90go, 64, 64, 2, -1, -1, -1, 1, 0)       \
    X(h64sm90z5, 64, 64, 2, -1, -1, -1, 5, 0)       \
    X(h64sm90f8, 64, 64, 2, -1, -1, -1, 0, 1)       \
    X(h64n64s2, 64, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16n32s2, 16, 32, 2, -1, -1, -1, 0, 0)        \
    X(h16n32s2f8, 16, 32, 2, -1, -1, -1, 0, 1)
