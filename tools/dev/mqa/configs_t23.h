// Session 26, second call (issues 13 and 16): the keys-as-M kernel on both caches with and without the key-set pre-pass
// (_pre), the FP8 cache's producer as now shipped (the raw ring, 16 warps). Format: configs.h.
#define MQA_CONFIGS(X)                              \
    X(h16sm90t, 16, 64, 2, -1, -1, -1, 0, 0)        \
    X(h16sm90t_pre, 16, 64, 2, -1, -1, -1, 0, 0)    \
    X(h16sm90t8, 16, 64, 2, -1, -1, -1, 0, 1)       \
    X(h16sm90t8_pre, 16, 64, 2, -1, -1, -1, 0, 1)   \
    X(h64sm90, 64, 64, 2, -1, -1, -1, 0, 0)         \
    X(h64sm90_pre, 64, 64, 2, -1, -1, -1, 0, 0)
